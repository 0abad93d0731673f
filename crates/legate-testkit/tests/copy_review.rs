//! The engine's review pipeline over a real copy: approval modes, patch reads bound to the
//! sha256, client-reported tests, required tests, and the retention sweep.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use async_trait::async_trait;
use legate_core::{ErrorCode, TaskState};
use legate_engine::{
    ApprovalMode, Check, CheckKind, Confirmation, ConfirmationRequest, Confirmer, Criterion,
    EngineConfig, PatchRead, ReportedTest, Review, SubmitRequest, TestCommand, Verdict,
    WorkspaceRequest,
};
use legate_testkit::EngineHarness;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// An engine whose default agent is the scripted agent, over a git project holding
/// `a.txt` ("alpha").
fn harness(tune: impl FnOnce(&mut EngineConfig) + 'static) -> EngineHarness {
    EngineHarness::builder()
        .project(&[("a.txt", "alpha\n")])
        .config(tune)
        .start()
}

fn criteria() -> Vec<Criterion> {
    vec![Criterion {
        id: "beta".into(),
        description: "a.txt says beta".into(),
        check: Some(Check {
            kind: CheckKind::FileContains,
            path: "a.txt".into(),
            text: Some("beta".into()),
        }),
    }]
}

fn review() -> Vec<Review> {
    vec![Review {
        criterion_id: "beta".into(),
        verdict: Verdict::Passed,
        path: "a.txt".into(),
        line: 1,
        quote: "beta".into(),
        explanation: "replaced".into(),
    }]
}

/// Runs a copy task that changes a.txt, verifies it, and returns its id and patch sha256.
async fn verified_task(h: &EngineHarness) -> (String, String) {
    verified_task_of(h, "replace a.txt: alpha => beta").await
}

/// [`verified_task`] for `prompt`, which changes a.txt among what else it does.
async fn verified_task_of(h: &EngineHarness, prompt: &str) -> (String, String) {
    let mut req = SubmitRequest::new(prompt);
    req.workspace = WorkspaceRequest::Copy {
        source: h.project(),
        include_paths: vec![],
        criteria: criteria(),
    };
    let done = h.run(req).await;
    assert_eq!(done.state, TaskState::Completed, "{:?}", done.error);
    let id = done.id.to_string();
    let preview = h.engine.reviews().preview(&id).await.unwrap();
    let sha = preview.patch.sha256.clone();
    let v = h
        .engine
        .reviews()
        .verify(&id, &sha, review())
        .await
        .unwrap();
    assert!(v.passed, "{v:?}");
    (id, sha)
}

struct Fixed {
    answer: Confirmation,
    asked: AtomicUsize,
}

#[async_trait]
impl Confirmer for Fixed {
    async fn confirm(&self, r: &ConfirmationRequest) -> Confirmation {
        assert_eq!(r.files.len(), 1);
        self.asked.fetch_add(1, Ordering::SeqCst);
        self.answer
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_mode_integrates_only_on_an_explicit_confirmed_accept() {
    let h = harness(|c| c.review.approval = ApprovalMode::Ask);
    let (id, sha) = verified_task(&h).await;
    let original = h.project().join("a.txt");
    let err = h
        .engine
        .reviews()
        .integrate(&id, Some(&sha), None)
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::IntegrationDeclined);
    for answer in [
        Confirmation::Decline,
        Confirmation::Cancel,
        Confirmation::Accept { confirm: false },
    ] {
        let confirmer = Fixed {
            answer,
            asked: AtomicUsize::new(0),
        };
        let err = h
            .engine
            .reviews()
            .integrate(&id, Some(&sha), Some(&confirmer))
            .await
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::IntegrationDeclined, "{answer:?}");
        assert_eq!(confirmer.asked.load(Ordering::SeqCst), 1);
        assert_eq!(std::fs::read_to_string(&original).unwrap(), "alpha\n");
    }
    let yes = Fixed {
        answer: Confirmation::Accept { confirm: true },
        asked: AtomicUsize::new(0),
    };
    let done = h
        .engine
        .reviews()
        .integrate(&id, Some(&sha), Some(&yes))
        .await
        .unwrap();
    assert_eq!(done.result.files, ["a.txt"]);
    assert_eq!(std::fs::read_to_string(&original).unwrap(), "beta\n");
    h.engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patch_reads_tests_and_the_sweep_follow_the_rules() {
    let h = harness(|c| {
        c.review.require_tests = true;
        c.review.retention = Duration::ZERO;
    });
    let (id, sha) = verified_task(&h).await;
    // Reads are bound to the sha256, by path or in chunks.
    let chunk = h
        .engine
        .reviews()
        .read_patch(
            &id,
            PatchRead {
                expected_sha256: sha.clone(),
                path: Some("a.txt".into()),
                offset: 0,
                limit: Some(20),
            },
        )
        .await
        .unwrap();
    assert!(chunk.has_more);
    assert_eq!(chunk.sha256, sha);
    let mut whole = String::new();
    let mut offset = 0;
    loop {
        let c = h
            .engine
            .reviews()
            .read_patch(
                &id,
                PatchRead {
                    expected_sha256: sha.clone(),
                    path: None,
                    offset,
                    limit: Some(50),
                },
            )
            .await
            .unwrap();
        whole.push_str(&c.text);
        offset = c.next_offset;
        if !c.has_more {
            break;
        }
    }
    assert_eq!(
        whole.as_bytes(),
        &h.engine
            .reviews()
            .patch(&id, Some(&sha))
            .await
            .unwrap()
            .patch[..]
    );
    let stale = h
        .engine
        .reviews()
        .read_patch(
            &id,
            PatchRead {
                expected_sha256: "0".repeat(64),
                ..PatchRead::default()
            },
        )
        .await
        .unwrap_err();
    assert_eq!(stale.code, ErrorCode::PatchChanged);

    // A client's report is recorded but is not observed evidence.
    let reported = h
        .engine
        .reviews()
        .record_test(
            &id,
            &sha,
            ReportedTest {
                command: TestCommand {
                    executable: "cargo".into(),
                    args: vec!["test".into()],
                },
                exit_code: 0,
                output: "ok".into(),
            },
        )
        .await
        .unwrap();
    assert_eq!(
        serde_json::to_value(reported.source).unwrap(),
        "client-reported"
    );
    let err = h
        .engine
        .reviews()
        .integrate(&id, Some(&sha), None)
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::VerificationRequired);
    assert!(err.message.contains("require_tests"), "{}", err.message);
    // An observed failing run blocks; a later passing run of the same command clears it.
    let grep = |text: &str| TestCommand {
        executable: "grep".into(),
        args: vec!["-q".into(), text.into(), "a.txt".into()],
    };
    // A timeout outside the engine's cap (the same for every front) runs nothing.
    let over = h.engine.config().fronts.test_timeout_max + Duration::from_secs(1);
    let recorded = h.engine.reviews().preview(&id).await.unwrap().tests.len();
    for t in [Duration::ZERO, over] {
        let err = h
            .engine
            .reviews()
            .test(&id, &sha, grep("beta"), Some(t))
            .await;
        assert_eq!(err.unwrap_err().code, ErrorCode::InvalidInput);
    }
    assert_eq!(
        h.engine.reviews().preview(&id).await.unwrap().tests.len(),
        recorded
    );
    let failed = h
        .engine
        .reviews()
        .test(&id, &sha, grep("alpha"), None)
        .await
        .unwrap();
    assert!(!failed.passed);
    assert_eq!(failed.error.unwrap().code, ErrorCode::TestFailed);
    let passed = h
        .engine
        .reviews()
        .test(&id, &sha, grep("beta"), None)
        .await
        .unwrap();
    assert!(passed.passed);
    assert_eq!(
        passed.confinement,
        legate_confine::Confinement::probe().as_str()
    );
    let err = h
        .engine
        .reviews()
        .integrate(&id, Some(&sha), None)
        .await
        .unwrap_err();
    assert!(
        err.message.contains("failed on this patch"),
        "{}",
        err.message
    );
    let again = h
        .engine
        .reviews()
        .test(&id, &sha, grep("alpha"), None)
        .await;
    assert!(!again.unwrap().passed);

    // Retention zero: the sweep removes the finished copy; later operations say so.
    let report = h.engine.reviews().cleanup().await.unwrap();
    assert_eq!(report.removed, std::slice::from_ref(&id));
    let err = h.engine.reviews().preview(&id).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::CopyUnavailable);
    h.engine.shutdown().await;
}

/// The engine sweeps as soon as it starts; a sweep asked for right after (what `legate cleanup`
/// does) reports what that first sweep removed, once, rather than finding nothing left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_sweep_at_start_removed_is_reported_by_the_next_sweep_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(dir.path()).unwrap();
    // The directories of a task the store does not know: an orphan.
    let orphan = "0123abcd-0000-4000-8000-000000000001";
    for parent in ["copies", "baselines"] {
        std::fs::create_dir_all(base.join("home").join(parent).join(orphan).join("x")).unwrap();
    }
    let engine = EngineHarness::builder().engine_in(&base);
    let gone = |parent: &str| !base.join("home").join(parent).join(orphan).exists();
    assert!(
        legate_testkit::harness::until_holds(Duration::from_secs(30), || gone("copies")
            && gone("baselines"))
        .await,
        "the sweep at start removes the orphan"
    );
    let report = engine.reviews().cleanup().await.unwrap();
    assert_eq!(
        report.orphans_removed,
        vec![orphan.to_string()],
        "{report:?}"
    );
    let again = engine.reviews().cleanup().await.unwrap();
    assert!(again.is_empty(), "reported once: {again:?}");
    engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_blocked_by_an_unverified_cleanup_is_not_verified_tested_or_integrated() {
    let h = harness(|_| {});
    let (id, sha) = verified_task(&h).await;
    let copy = h
        .engine
        .reviews()
        .preview(&id)
        .await
        .unwrap()
        .copy_directory;
    // An agent run in this copy left a process group that could not be shown gone.
    let (mut survivor, pgid) = legate_testkit::sleeping_group();
    let blocked = h.home().join("blocked");
    legate_backend::cleanup::block(
        &blocked,
        &std::fs::canonicalize(&copy).unwrap(),
        &legate_backend::cleanup::Processes::new(pgid, None),
    )
    .unwrap();
    let refused = |r: Result<(), legate_core::Error>| {
        assert_eq!(
            r.unwrap_err().code,
            ErrorCode::ProcessCleanupUnverified,
            "refused while the group lives"
        );
    };
    refused(
        h.engine
            .reviews()
            .verify(&id, &sha, review())
            .await
            .map(drop),
    );
    let grep = TestCommand {
        executable: "grep".into(),
        args: vec!["-q".into(), "beta".into(), "a.txt".into()],
    };
    refused(
        h.engine
            .reviews()
            .test(&id, &sha, grep.clone(), None)
            .await
            .map(drop),
    );
    refused(
        h.engine
            .reviews()
            .record_test(
                &id,
                &sha,
                ReportedTest {
                    command: grep.clone(),
                    exit_code: 0,
                    output: String::new(),
                },
            )
            .await
            .map(drop),
    );
    refused(
        h.engine
            .reviews()
            .integrate(&id, Some(&sha), None)
            .await
            .map(drop),
    );
    // Reading the patch stays allowed; the original is untouched.
    assert_eq!(
        h.engine
            .reviews()
            .patch(&id, Some(&sha))
            .await
            .unwrap()
            .sha256,
        sha
    );
    assert_eq!(
        std::fs::read_to_string(h.project().join("a.txt")).unwrap(),
        "alpha\n"
    );
    // Once the group is gone, the next operation lifts the mark.
    survivor.kill().await.unwrap();
    survivor.wait().await.unwrap();
    assert!(
        h.engine
            .reviews()
            .test(&id, &sha, grep, None)
            .await
            .unwrap()
            .passed
    );
    h.engine
        .reviews()
        .integrate(&id, Some(&sha), None)
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(h.project().join("a.txt")).unwrap(),
        "beta\n"
    );
    assert_eq!(std::fs::read_dir(&blocked).unwrap().count(), 0);
    h.engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_integration_a_crash_interrupted_is_rolled_forward_recorded_once_and_counts() {
    let h = harness(|_| {});
    let (id, sha) = verified_task(&h).await;
    let paths = h.engine.config().paths.clone();
    let journal = paths.run().join("integrations").join(&id);
    // The integrating process wrote everything and died before recording it: its journal
    // stays, unlocked.
    let change = legate_integration::Change {
        path: "a.txt".into(),
        status: legate_engine::ChangeStatus::M,
        baseline: Some(b"alpha\n".to_vec()),
        result: Some(b"beta\n".to_vec()),
        mode: Some(0o644),
    };
    let meta = serde_json::json!({"sha256": sha, "approval": "auto"});
    drop(legate_integration::integrate(&h.project(), &[change], &journal, meta).unwrap());
    assert!(journal.join("journal").exists());

    // The next command that opens the store finishes and records it, once. A command skips a
    // journal whose lock another process holds, and a child that another test of this binary
    // forks before it execs holds a copy of every descriptor open at the fork, the journal's
    // lock included: so the test opens again (a bounded retry) until it is finished, and each
    // open after the first must not record it again.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        legate_engine::Records::open(&paths).unwrap();
        if !journal.exists() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the journal was never finished"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let records = legate_engine::Records::open(&paths).unwrap();
    assert!(!journal.exists());
    assert_eq!(std::fs::read(h.project().join("a.txt")).unwrap(), b"beta\n");
    let task_id = legate_core::TaskId(id.clone());
    let record = records.review(&task_id).unwrap().unwrap();
    assert_eq!(record.recoveries.len(), 1, "{:?}", record.recoveries);
    let r = &record.recoveries[0];
    assert_eq!(r.outcome, legate_engine::Outcome::RolledForward);
    assert_eq!((r.files, r.sha256.as_str()), (1, sha.as_str()));
    assert_eq!(record.integration.as_ref().unwrap().sha256, sha);
    let events = records.events(&task_id, 0, 1000).unwrap();
    let recovered = events
        .iter()
        .filter(|e| {
            serde_json::to_string(&e.kind)
                .unwrap()
                .contains("copy.integration_recovered")
        })
        .count();
    assert_eq!(recovered, 1);
    // It counts as integrated.
    let err = h
        .engine
        .reviews()
        .integrate(&id, Some(&sha), None)
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::CopyUnavailable, "{err:?}");
    assert!(
        err.message.contains("already integrated"),
        "{}",
        err.message
    );
}

/// A journal no task owns (or whose root is not its task's project) is never recovered: the
/// engine asks the store before recovery touches anything, so a journal cannot aim recovery
/// at a directory of its choosing. It stays for a person to see.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_journal_no_task_owns_is_never_recovered() {
    let h = harness(|_| {});
    let paths = h.engine.config().paths.clone();
    let victim = h.base().join("elsewhere");
    std::fs::create_dir_all(&victim).unwrap();
    std::fs::write(victim.join(".bashrc"), b"precious\n").unwrap();
    let (id, _) = verified_task(&h).await;
    // One for no task at all, one for a real task but another root.
    for task in ["no-such-task", id.as_str()] {
        let dir = paths.run().join("integrations").join(task);
        std::fs::create_dir_all(&dir).unwrap();
        let intent = serde_json::json!({
            "version": 1, "id": "0123456789abcdef", "root": victim, "meta": {}, "dirs": [],
            "steps": [{"path": ".bashrc", "status": "D", "after": null,
                       "before": {"sha256": legate_workspace::sha256_hex(b"precious\n"), "mode": 0o644}}],
        });
        let body = serde_json::to_vec(&intent).unwrap();
        let mut bytes = body.clone();
        bytes.push(b'\n');
        bytes.extend_from_slice(legate_workspace::sha256_hex(&body).as_bytes());
        bytes.push(b'\n');
        std::fs::write(dir.join("journal"), bytes).unwrap();
        std::fs::write(dir.join("staged"), b"").unwrap();
    }
    legate_engine::Records::open(&paths).unwrap();
    assert_eq!(
        std::fs::read(victim.join(".bashrc")).unwrap(),
        b"precious\n"
    );
    for task in ["no-such-task", id.as_str()] {
        assert!(
            paths
                .run()
                .join("integrations")
                .join(task)
                .join("journal")
                .exists()
        );
    }
    h.engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_whose_git_could_not_be_shown_gone_is_refused_and_kept() {
    let h = harness(|_| {});
    let (id, sha) = verified_task(&h).await;
    // A git run of this copy could not be shown gone (see legate-workspace's git_cleanup
    // test for how the marker comes to be): its baseline carries the marker.
    let baseline = h.home().join("baselines").join(&id);
    assert!(baseline.is_dir(), "{}", baseline.display());
    std::fs::write(baseline.join(legate_workspace::CLEANUP_MARKER), "git add\n").unwrap();
    let refused = |r: Result<(), legate_core::Error>| {
        assert_eq!(r.unwrap_err().code, ErrorCode::GitCleanupUnverified);
    };
    let reviews = h.engine.reviews();
    refused(reviews.preview(&id).await.map(drop));
    refused(reviews.integrate(&id, Some(&sha), None).await.map(drop));
    refused(reviews.discard(&id).await.map(drop));
    // The sweep keeps it however old, and the original is untouched.
    let swept = reviews.cleanup().await.unwrap();
    assert!(!swept.removed.contains(&id), "{swept:?}");
    assert!(baseline.is_dir());
    assert_eq!(
        std::fs::read_to_string(h.project().join("a.txt")).unwrap(),
        "alpha\n"
    );
    // Removing the marker (once the process is ended) lifts the block.
    std::fs::remove_file(baseline.join(legate_workspace::CLEANUP_MARKER)).unwrap();
    reviews.integrate(&id, Some(&sha), None).await.unwrap();
    h.engine.shutdown().await;
}

/// A review operation whose caller stops waiting (a client gone, a request dropped) keeps the
/// copy's lock until its work ends: a test command still running in the copy holds it, so a
/// verification meanwhile is `COPY_BUSY`, not run beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_test_whose_caller_went_away_keeps_the_copy_until_its_command_ends() {
    let h = harness(|_| {});
    let (id, sha) = verified_task(&h).await;
    let copy = h.engine.reviews().preview(&id).await.unwrap();
    let started = copy.copy_directory.join("started");
    let command = TestCommand {
        executable: "sh".into(),
        args: vec!["-c".into(), "touch started && sleep 5".into()],
    };
    let engine = h.engine.clone();
    let (i, s) = (id.clone(), sha.clone());
    let running = tokio::spawn(async move { engine.reviews().test(&i, &s, command, None).await });
    // Wait for the command to run, then go away.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !started.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the test command never ran"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    running.abort();
    assert!(running.await.unwrap_err().is_cancelled());
    let err = h
        .engine
        .reviews()
        .verify(&id, &sha, review())
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::CopyBusy, "{}", err.message);
    // Let go once the command ended: the same verification then runs (and finds the file
    // the command made: the patch changed).
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        match h.engine.reviews().verify(&id, &sha, review()).await {
            Err(e) if e.code == ErrorCode::PatchChanged => break,
            Ok(v) => panic!("verified a patch the command changed: {v:?}"),
            Err(e) if e.code == ErrorCode::CopyBusy => {
                assert!(std::time::Instant::now() < deadline, "the copy stayed busy");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("{e}"),
        }
    }
    h.engine.shutdown().await;
}

/// A file the agent adds where the original project ignores it (a virtual environment whose
/// `.gitignore` ignores itself, so the copy never had it) is never integrated: what lands
/// there runs unreviewed, and no one is asked to approve what would be refused. The original
/// is left as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_addition_the_original_ignores_is_never_integrated() {
    let h = EngineHarness::builder()
        .project(&[("a.txt", "alpha\n"), (".venv/.gitignore", "*\n")])
        .config(|c| c.review.approval = ApprovalMode::Ask)
        .start();
    let (id, sha) = verified_task_of(
        &h,
        "replace a.txt: alpha => beta\nwrite .venv/lib/site-packages/zz.pth: import os",
    )
    .await;
    let preview = h.engine.reviews().preview(&id).await.unwrap();
    assert!(
        preview
            .patch
            .files
            .iter()
            .any(|f| f.path == ".venv/lib/site-packages/zz.pth"),
        "{:?}",
        preview.patch.files
    );
    // Refused before anyone is asked to approve it.
    let confirmer = Fixed {
        answer: Confirmation::Accept { confirm: true },
        asked: AtomicUsize::new(0),
    };
    let err = h
        .engine
        .reviews()
        .integrate(&id, Some(&sha), Some(&confirmer))
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::UnsafePath, "{}", err.message);
    assert_eq!(confirmer.asked.load(Ordering::SeqCst), 0);
    assert!(
        err.message.contains(".venv/lib/site-packages/zz.pth"),
        "{}",
        err.message
    );
    assert_eq!(
        std::fs::read_to_string(h.project().join("a.txt")).unwrap(),
        "alpha\n"
    );
    assert!(!h.project().join(".venv/lib").exists());
}
