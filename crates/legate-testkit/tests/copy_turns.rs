//! Continuing in one copy: a context's next turn (resume, send_message, deliver) works in the
//! copy its first turn made, the patch accumulates against the project as first copied,
//! review acts through the latest turn only, a copy integrated or discarded takes no new
//! turn (`COPY_CLOSED`), the fix loop's test is bound to the new sha256, and a read-only turn
//! is judged against the copy it found, not the baseline.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_core::{ErrorCode, EventKind, Task, TaskMode, TaskState};
use legate_engine::{
    ContinueRequest, CopyStatus, Delivery, Inbound, MessageRequest, Review, TestCommand,
};
use legate_testkit::EngineHarness;

/// An engine whose default agent is the scripted agent, over a git project holding `a.txt`.
fn harness() -> EngineHarness {
    EngineHarness::builder()
        .project(&[("a.txt", "alpha\n")])
        .start()
}

/// Runs the first turn of a copy context; returns it completed.
async fn first_turn(h: &EngineHarness, prompt: &str) -> Task {
    // Started by a local front: its next turns come through `resume`, `send_message` and
    // `next_turn` (an inbound message may not continue it, nor another front an inbound
    // caller's: `deliver.rs`).
    let req = h.on_copy(prompt);
    let done = h.run(req).await;
    assert_eq!(done.state, TaskState::Completed, "{:?}", done.error);
    done
}

fn resume(context: &str, prompt: &str, mode: Option<TaskMode>) -> ContinueRequest {
    ContinueRequest {
        context_id: context.into(),
        prompt: prompt.into(),
        mode,
        timeout: None,
    }
}

fn message(context: &str, id: &str, text: &str) -> MessageRequest {
    MessageRequest {
        context_id: context.into(),
        message_id: id.into(),
        text: text.into(),
        mode: None,
    }
}

fn changed(files: &[legate_engine::FileChange]) -> Vec<String> {
    let mut paths: Vec<String> = files.iter().map(|f| f.path.clone()).collect();
    paths.sort();
    paths
}

fn is_continued(e: &legate_core::Event) -> bool {
    matches!(&e.kind, EventKind::Notice { detail, .. } if detail["event"] == "copy.continued")
}

/// A verification of a patch that only adds files (no criteria: nothing to review).
fn no_reviews() -> Vec<Review> {
    Vec::new()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_turns_accumulate_in_one_copy_and_integrate_together() {
    let h = harness();
    let one = first_turn(&h, "write one.txt: first\\n").await;
    let v1 = {
        let sha = h
            .engine
            .reviews()
            .preview(one.id.as_str())
            .await
            .unwrap()
            .patch
            .sha256;
        h.engine
            .reviews()
            .verify(one.id.as_str(), &sha, no_reviews())
            .await
            .unwrap()
    };
    assert!(v1.passed, "{v1:?}");
    let two = h
        .engine
        .resume(resume(&one.context_id, "write two.txt: second\\n", None))
        .unwrap();
    assert_eq!(two.workspace, legate_core::WorkspaceKind::Copy);
    let two = h.wait(&two.id).await;
    assert_eq!(two.state, TaskState::Completed, "{:?}", two.error);
    // The same directory, and the patch holds both turns' files against the original.
    assert_eq!(two.root, one.root);
    assert!(h.events(&two.id).iter().any(is_continued));
    let copy = h.engine.reviews().current_copy(one.id.as_str()).unwrap();
    assert_eq!(
        (copy.task_id.clone(), copy.copy_id.clone(), copy.turns),
        (two.id.clone(), one.id.clone(), 2)
    );
    assert_eq!(copy.status, CopyStatus::Open);
    let preview = h.engine.reviews().preview(two.id.as_str()).await.unwrap();
    assert_eq!(changed(&preview.patch.files), ["one.txt", "two.txt"]);
    // The first turn's verification came along, bound to the first patch: stale now.
    assert!(preview.stale.is_some(), "{preview:?}");
    let sha = preview.patch.sha256.clone();
    let err = h
        .engine
        .reviews()
        .integrate(two.id.as_str(), Some(&sha), None)
        .await;
    assert_eq!(err.unwrap_err().code, ErrorCode::VerificationRequired);
    // The earlier turn never integrates (or reviews) its stale part of the copy.
    for err in [
        h.engine
            .reviews()
            .integrate(one.id.as_str(), None, None)
            .await
            .unwrap_err(),
        h.engine
            .reviews()
            .preview(one.id.as_str())
            .await
            .unwrap_err(),
        h.engine
            .reviews()
            .discard(one.id.as_str())
            .await
            .unwrap_err(),
    ] {
        assert_eq!(err.code, ErrorCode::CopyUnavailable);
        assert!(err.message.contains(two.id.as_str()), "{}", err.message);
    }
    let v2 = h
        .engine
        .reviews()
        .verify(two.id.as_str(), &sha, no_reviews())
        .await
        .unwrap();
    assert!(v2.passed, "{v2:?}");
    let done = h
        .engine
        .reviews()
        .integrate(two.id.as_str(), Some(&sha), None)
        .await
        .unwrap();
    assert_eq!(done.result.files, ["one.txt", "two.txt"]);
    let project = h.project();
    assert_eq!(
        std::fs::read_to_string(project.join("one.txt")).unwrap(),
        "first\n"
    );
    assert_eq!(
        std::fs::read_to_string(project.join("two.txt")).unwrap(),
        "second\n"
    );
    assert_eq!(
        h.engine
            .reviews()
            .current_copy(two.id.as_str())
            .unwrap()
            .status,
        CopyStatus::Integrated
    );

    // Integrated: every way of starting a turn is COPY_CLOSED and changes nothing.
    let before = h
        .engine
        .tasks(&legate_engine::TaskFilter {
            context_id: Some(one.context_id.clone()),
            ..Default::default()
        })
        .unwrap()
        .len();
    let ctx = one.context_id.clone();
    let refusals = [
        h.engine.resume(resume(&ctx, "write three.txt: x", None)),
        h.engine
            .send_message(message(&ctx, "m-closed", "write three.txt: x"))
            .map(|r| r.task),
        h.engine
            .messages()
            .next_turn(resume(&ctx, "write three.txt: x", None), None),
        h.engine
            .messages()
            .deliver(Inbound {
                agent: one.agent.clone(),
                context_id: Some(ctx.clone()),
                text: "write three.txt: x".into(),
                ..Inbound::default()
            })
            .map(|d| d.task),
    ];
    let codes: Vec<ErrorCode> = refusals.into_iter().map(|r| r.unwrap_err().code).collect();
    // The local fronts' ways meet the closed copy; an inbound message never reaches a
    // context another front started.
    assert_eq!(
        codes,
        [
            ErrorCode::CopyClosed,
            ErrorCode::CopyClosed,
            ErrorCode::CopyClosed,
            ErrorCode::InvalidInput
        ]
    );
    let after = h
        .engine
        .tasks(&legate_engine::TaskFilter {
            context_id: Some(ctx.clone()),
            ..Default::default()
        })
        .unwrap()
        .len();
    assert_eq!(before, after);
    // The refused message id was released: it names no task.
    assert!(!project.join("three.txt").exists());
    h.engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_into_a_running_copy_turn_is_queued_and_lands_in_the_same_copy() {
    let h = harness();
    let one = first_turn(&h, "write one.txt: first\\n").await;
    let ctx = one.context_id.clone();
    // A turn that hangs in the copy until canceled.
    let hanging = h.engine.resume(resume(&ctx, "!hang", None)).unwrap();
    h.until(&hanging.id, is_continued).await;
    h.wait_state(&hanging.id, TaskState::Working).await;
    // While it runs, nothing reviews the copy: not through it, not through the turn before.
    let sha = "0".repeat(64);
    for err in [
        h.engine
            .reviews()
            .preview(one.id.as_str())
            .await
            .unwrap_err(),
        h.engine
            .reviews()
            .verify(one.id.as_str(), &sha, no_reviews())
            .await
            .unwrap_err(),
        h.engine
            .reviews()
            .test(
                one.id.as_str(),
                &sha,
                TestCommand {
                    executable: "true".into(),
                    args: vec![],
                },
                None,
            )
            .await
            .unwrap_err(),
        h.engine
            .reviews()
            .integrate(one.id.as_str(), None, None)
            .await
            .unwrap_err(),
        h.engine
            .reviews()
            .discard(one.id.as_str())
            .await
            .unwrap_err(),
        h.engine
            .reviews()
            .integrate(hanging.id.as_str(), None, None)
            .await
            .unwrap_err(),
        h.engine
            .reviews()
            .discard(hanging.id.as_str())
            .await
            .unwrap_err(),
    ] {
        assert_eq!(err.code, ErrorCode::CopyBusy, "{err}");
    }
    // A message sent now waits for the running turn.
    let receipt = h
        .engine
        .send_message(message(&ctx, "m-1", "write two.txt: second\\n"))
        .unwrap();
    assert_eq!(receipt.delivery, Delivery::Queued);
    let queued = receipt.task;
    h.engine.cancel(hanging.id.as_str()).unwrap();
    let hanging = h.wait(&hanging.id).await;
    assert_eq!(hanging.state, TaskState::Canceled);
    let two = h.wait(&queued.id).await;
    assert_eq!(two.state, TaskState::Completed, "{:?}", two.error);
    assert_eq!(two.root, one.root);
    let copy = h.engine.reviews().current_copy(one.id.as_str()).unwrap();
    assert_eq!((copy.task_id, copy.turns), (two.id.clone(), 3));
    let preview = h.engine.reviews().preview(two.id.as_str()).await.unwrap();
    assert_eq!(changed(&preview.patch.files), ["one.txt", "two.txt"]);

    // Discarded: the copy is gone and takes no new turn.
    h.engine.reviews().discard(two.id.as_str()).await.unwrap();
    assert!(!one.root.as_ref().unwrap().exists());
    let err = h
        .engine
        .send_message(message(&ctx, "m-2", "write three.txt: x"))
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::CopyClosed);
    let err = h.engine.resume(resume(&ctx, "again", None)).unwrap_err();
    assert_eq!(err.code, ErrorCode::CopyClosed);
    h.engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fix_loop_tests_the_new_patch() {
    let h = harness();
    let one = first_turn(&h, "write ok.txt: no\\n").await;
    let grep = TestCommand {
        executable: "grep".into(),
        args: vec!["-q".into(), "yes".into(), "ok.txt".into()],
    };
    let sha1 = h
        .engine
        .reviews()
        .preview(one.id.as_str())
        .await
        .unwrap()
        .patch
        .sha256;
    let failed = h
        .engine
        .reviews()
        .test(one.id.as_str(), &sha1, grep.clone(), None)
        .await
        .unwrap();
    assert!(!failed.passed);
    assert_eq!(failed.error.unwrap().code, ErrorCode::TestFailed);
    // The caller asks for a fix; the same copy changes again.
    let fix = h
        .engine
        .send_message(message(
            &one.context_id,
            "fix-1",
            "replace ok.txt: no => yes",
        ))
        .unwrap()
        .task;
    let fix = h.wait(&fix.id).await;
    assert_eq!(fix.state, TaskState::Completed, "{:?}", fix.error);
    let preview = h.engine.reviews().preview(fix.id.as_str()).await.unwrap();
    let sha2 = preview.patch.sha256.clone();
    assert_ne!(sha1, sha2);
    assert_eq!(changed(&preview.patch.files), ["ok.txt"]);
    // The failing run is kept, stale: it was bound to the first patch.
    assert_eq!(preview.tests.len(), 1);
    assert!(preview.tests[0].stale);
    // The old sha256 is refused; a fresh run on the new one passes and is bound to it.
    let err = h
        .engine
        .reviews()
        .test(fix.id.as_str(), &sha1, grep.clone(), None)
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::PatchChanged);
    let passed = h
        .engine
        .reviews()
        .test(fix.id.as_str(), &sha2, grep, None)
        .await
        .unwrap();
    assert!(passed.passed, "{passed:?}");
    assert_eq!(
        (passed.id, passed.sha256_before.as_str()),
        (2, sha2.as_str())
    );
    h.engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_turn_answers_only_for_its_own_changes() {
    let h = harness();
    let one = first_turn(&h, "write one.txt: first\\n").await;
    let ctx = one.context_id.clone();
    // A read-only question in a copy that already has changes is not blamed for them.
    let ask = h
        .engine
        .resume(resume(
            &ctx,
            "what is in one.txt?",
            Some(TaskMode::ReadOnly),
        ))
        .unwrap();
    let ask = h.wait(&ask.id).await;
    assert_eq!(ask.state, TaskState::Completed, "{:?}", ask.error);
    let preview = h.engine.reviews().preview(ask.id.as_str()).await.unwrap();
    assert!(
        preview.read_only_violations.is_empty(),
        "{:?}",
        preview.read_only_violations
    );
    assert_eq!(changed(&preview.patch.files), ["one.txt"]);
    // The write turn before it integrates through it: a read-only turn that changed nothing
    // does not make the copy's patch read-only.
    let sha = preview.patch.sha256.clone();
    let v = h
        .engine
        .reviews()
        .verify(ask.id.as_str(), &sha, no_reviews())
        .await
        .unwrap();
    assert!(v.passed);

    // A read-only turn that does write into the copy (without asking) is caught, for its
    // own file only, and the copy then takes no further turn.
    let copy = h
        .engine
        .reviews()
        .current_copy(ask.id.as_str())
        .unwrap()
        .root;
    let sneak = h
        .engine
        .resume(resume(
            &ctx,
            &format!("!write-outside {}", copy.join("sneak.txt").display()),
            Some(TaskMode::ReadOnly),
        ))
        .unwrap();
    let sneak = h.wait(&sneak.id).await;
    let written = copy.join("sneak.txt").exists();
    if written {
        assert_eq!(sneak.state, TaskState::Failed);
        let err = sneak.error.clone().unwrap();
        assert_eq!(err.code, ErrorCode::ReadOnlyViolation);
        assert!(err.message.contains("sneak.txt"), "{}", err.message);
        assert!(!err.message.contains("one.txt"), "{}", err.message);
        let refused = h.engine.resume(resume(&ctx, "write x.txt: x", None));
        assert_eq!(refused.unwrap_err().code, ErrorCode::ReadOnlyViolation);
    } else {
        // The confinement stopped the write: the turn changed nothing and passes.
        assert_eq!(sneak.state, TaskState::Completed, "{:?}", sneak.error);
    }
    h.engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_canceled_in_the_queue_never_costs_the_copy_its_work() {
    let h = harness();
    let one = first_turn(&h, "write one.txt: first\\n").await;
    let ctx = one.context_id.clone();
    let hanging = h.engine.resume(resume(&ctx, "!hang", None)).unwrap();
    h.until(&hanging.id, is_continued).await;
    // A message queued behind the running turn, canceled before it enters the copy.
    let queued = h
        .engine
        .send_message(message(&ctx, "m-queued", "write two.txt: x"))
        .unwrap()
        .task;
    h.engine.cancel(queued.id.as_str()).unwrap();
    assert_eq!(h.wait(&queued.id).await.state, TaskState::Canceled);
    h.engine.cancel(hanging.id.as_str()).unwrap();
    assert_eq!(h.wait(&hanging.id).await.state, TaskState::Canceled);
    // The sweep judges the copy by the turn that last entered it (within retention), not
    // by the queued task that never did (which looks half made).
    let report = h.engine.reviews().cleanup().await.unwrap();
    assert!(report.removed.is_empty(), "{report:?}");
    assert!(one.root.as_ref().unwrap().join("one.txt").is_file());
    let copy = h.engine.reviews().current_copy(queued.id.as_str()).unwrap();
    assert_eq!(
        (copy.task_id, copy.status, copy.turns),
        (hanging.id.clone(), CopyStatus::Open, 2)
    );
    let next = h
        .engine
        .resume(resume(&ctx, "write two.txt: second\\n", None))
        .unwrap();
    let next = h.wait(&next.id).await;
    assert_eq!(next.state, TaskState::Completed, "{:?}", next.error);
    let preview = h.engine.reviews().preview(next.id.as_str()).await.unwrap();
    assert_eq!(changed(&preview.patch.files), ["one.txt", "two.txt"]);
    h.engine.shutdown().await;
}

/// A confirmer that says when it is asked, then waits for the test's answer.
struct Held {
    asked: tokio::sync::Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
    answer: tokio::sync::Mutex<Option<tokio::sync::oneshot::Receiver<()>>>,
}

#[async_trait::async_trait]
impl legate_engine::Confirmer for Held {
    async fn confirm(&self, _: &legate_engine::ConfirmationRequest) -> legate_engine::Confirmation {
        if let Some(tx) = self.asked.lock().await.take() {
            let _ = tx.send(());
        }
        if let Some(rx) = self.answer.lock().await.take() {
            let _ = rx.await;
        }
        legate_engine::Confirmation::Accept { confirm: true }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_submitted_while_its_copy_is_being_integrated_is_copy_closed_and_changes_nothing() {
    let h = EngineHarness::builder()
        .project(&[("a.txt", "alpha\n")])
        .config(|c| c.review.approval = legate_engine::ApprovalMode::Ask)
        .start();
    let one = first_turn(&h, "write one.txt: first\\n").await;
    let sha = h
        .engine
        .reviews()
        .preview(one.id.as_str())
        .await
        .unwrap()
        .patch
        .sha256;
    assert!(
        h.engine
            .reviews()
            .verify(one.id.as_str(), &sha, no_reviews())
            .await
            .unwrap()
            .passed
    );
    let (asked_tx, asked_rx) = tokio::sync::oneshot::channel();
    let (answer_tx, answer_rx) = tokio::sync::oneshot::channel();
    let held = std::sync::Arc::new(Held {
        asked: tokio::sync::Mutex::new(Some(asked_tx)),
        answer: tokio::sync::Mutex::new(Some(answer_rx)),
    });
    let (engine, id, confirmer) = (h.engine.clone(), one.id.to_string(), held.clone());
    let integrating = tokio::spawn(async move {
        engine
            .reviews()
            .integrate(&id, Some(&sha), Some(confirmer.as_ref()))
            .await
    });
    // The integration holds the copy's lock while it asks; the copy is still open, so the
    // next turn is accepted, and waits to enter.
    asked_rx.await.unwrap();
    let late = h
        .engine
        .resume(resume(&one.context_id, "write late.txt: x", None))
        .unwrap();
    answer_tx.send(()).unwrap();
    integrating.await.unwrap().unwrap();
    let late = h.wait(&late.id).await;
    assert_eq!(late.state, TaskState::Failed);
    assert_eq!(late.error.unwrap().code, ErrorCode::CopyClosed);
    // Neither the copy nor the project got the late turn's file.
    assert!(!one.root.as_ref().unwrap().join("late.txt").exists());
    assert!(!h.project().join("late.txt").exists());
    assert!(h.project().join("one.txt").is_file());
    h.engine.shutdown().await;
}

/// A context's next turn starts only once the previous turn's end is stored, and so after its
/// copy's patch was read (`settle`), never while it is still read: the first turn leaves a
/// copy of a few thousand new files, whose patch takes a while to read, and the message sent
/// meanwhile must not be `working` before the first task's end is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_turn_waits_until_the_previous_end_is_stored() {
    let h = EngineHarness::builder()
        .project(&[("a.txt", "alpha\n")])
        .config(|c| c.review.limits.max_changed_files = 10_000)
        .start();
    let first = h
        .engine
        .submit(h.on_copy("run i=0; while [ $i -lt 3000 ]; do echo $i > f$i.txt; i=$((i+1)); done"))
        .unwrap();
    let receipt = h
        .engine
        .send_message(message(&first.context_id, "m-next", "write next.txt: x"))
        .unwrap();
    assert_eq!(receipt.delivery, Delivery::Queued);
    let first = h.wait(&first.id).await;
    assert_eq!(first.state, TaskState::Completed, "{:?}", first.error);
    let next = h.wait(&receipt.task.id).await;
    assert_eq!(next.state, TaskState::Completed, "{:?}", next.error);
    let started = h
        .engine
        .events(&next.id, 0, 1000)
        .unwrap()
        .into_iter()
        .find(
            |e| matches!(&e.kind, EventKind::Status { state, .. } if *state == TaskState::Working),
        )
        .unwrap();
    assert!(
        started.at >= first.updated_at,
        "the next turn was working at {:?}, before the first turn's end was stored at {:?}",
        started.at,
        first.updated_at
    );
    let preview = h.engine.reviews().preview(next.id.as_str()).await.unwrap();
    assert_eq!(preview.patch.files.len(), 3001);
    h.engine.shutdown().await;
}
