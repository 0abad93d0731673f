//! A hostile read-only turn against the read-only check, over a real engine, real copies and
//! the scripted agent: changes git cannot see (a path named `.git`), and a mode change on a
//! file an earlier write turn had already changed, must each end `READ_ONLY_VIOLATION`; and a
//! copy a read-only turn changed is never handed on.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_core::{ErrorCode, Task, TaskMode, TaskState};
use legate_engine::{ContinueRequest, HandoffRequest};
use legate_testkit::EngineHarness;
use std::os::unix::fs::PermissionsExt;

fn harness() -> EngineHarness {
    EngineHarness::builder()
        .project(&[("a.txt", "alpha\n")])
        .start()
}

async fn first(h: &EngineHarness, prompt: &str) -> Task {
    let req = h.on_copy(prompt);
    let done = h.run(req).await;
    assert_eq!(done.state, TaskState::Completed, "{:?}", done.error);
    done
}

fn violation(t: &Task, path: &str) {
    assert_eq!(t.state, TaskState::Failed, "{path}: {:?}", t.error);
    let err = t.error.as_ref().unwrap();
    assert_eq!(err.code, ErrorCode::ReadOnlyViolation, "{path}: {err:?}");
    assert!(err.message.contains(path), "{path}: {}", err.message);
}

/// Git never lists a path named `.git`: a planner (read-only, and not fingerprinted as a
/// reviewer is) that writes one (a gitfile at the copy's root, which would point a later
/// turn's git at a directory of its choosing, or a nested `.git` holding data) changed its
/// copy all the same. A reviewer doing the same is refused too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_role_that_writes_a_dot_git_entry_is_refused() {
    let h = harness();
    let t1 = first(&h, "write one.txt: one\\n\nwrite sub/keep.txt: k\\n").await;
    for role in ["planner", "reviewer"] {
        for path in [".git", "sub/.git"] {
            let ctx = h.engine.handoffs().context(t1.id.as_str()).await.unwrap();
            let t = h
                .engine
                .handoffs()
                .handoff(HandoffRequest {
                    source_task_id: t1.id.to_string(),
                    expected_context_sha256: ctx.context_sha256.clone(),
                    role: role.into(),
                    prompt: format!("plan\n!write-inside {path}"),
                    agent: None,
                    model: None,
                    decisions: vec![],
                    mode: None,
                    memory: None,
                    allowed_tools: None,
                    mcp_servers: None,
                })
                .await
                .unwrap();
            let t = h.wait(&t.id).await;
            let copy = h.engine.reviews().current_copy(t.id.as_str()).unwrap().root;
            assert!(copy.join(path).is_file(), "the {role} wrote {path}");
            assert_eq!(t.state, TaskState::Failed, "{role} {path}: {:?}", t.error);
            let err = t.error.as_ref().unwrap();
            assert_eq!(
                err.code,
                ErrorCode::ReadOnlyViolation,
                "{role} {path}: {err:?}"
            );
        }
    }
    h.engine.shutdown().await;
}

/// A read-only turn continuing a copy whose earlier write turn changed `run.sh` makes it
/// executable: the patch changes (a mode line), so the turn changed the copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_turn_that_chmods_an_already_changed_file_is_refused() {
    let h = harness();
    let one = first(&h, "write run.sh: echo hi\\n").await;
    let copy = h
        .engine
        .reviews()
        .current_copy(one.id.as_str())
        .unwrap()
        .root;
    let before = h
        .engine
        .reviews()
        .preview(one.id.as_str())
        .await
        .unwrap()
        .patch
        .sha256;
    let ask = h
        .engine
        .resume(ContinueRequest {
            context_id: one.context_id.clone(),
            prompt: "look at run.sh\n!chmod-inside 755 run.sh\n!stop end_turn".into(),
            mode: Some(TaskMode::ReadOnly),
            timeout: None,
        })
        .unwrap();
    let ask = h.wait(&ask.id).await;
    let mode = std::fs::metadata(copy.join("run.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o111, 0o111, "the agent made run.sh executable");
    let after = h
        .engine
        .reviews()
        .preview(ask.id.as_str())
        .await
        .unwrap()
        .patch
        .sha256;
    assert_ne!(before, after, "the mode change is in the patch");
    violation(&ask, "run.sh");
    h.engine.shutdown().await;
}

/// A reviewer's copy it changed (`READ_ONLY_VIOLATION`) takes no further turn; it must not
/// be handed off either, or its write rides into an implementer's patch and gets integrated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_a_read_only_turn_changed_cannot_be_handed_off() {
    let h = harness();
    let t1 = first(&h, "write one.txt: one\\n").await;
    let ctx = h.engine.handoffs().context(t1.id.as_str()).await.unwrap();
    let handoff = |from: &Task, sha: &str, role: &str, prompt: &str| HandoffRequest {
        source_task_id: from.id.to_string(),
        expected_context_sha256: sha.to_string(),
        role: role.into(),
        prompt: prompt.into(),
        agent: None,
        model: None,
        decisions: vec![],
        mode: None,
        memory: None,
        allowed_tools: None,
        mcp_servers: None,
    };
    let rev = h
        .engine
        .handoffs()
        .handoff(handoff(
            &t1,
            &ctx.context_sha256,
            "reviewer",
            "review\n!write-inside planted.txt\n!stop end_turn",
        ))
        .await
        .unwrap();
    let rev = h.wait(&rev.id).await;
    violation(&rev, "");
    // Whatever `context` says, no handoff starts from the changed copy.
    let sha = match h.engine.handoffs().context(rev.id.as_str()).await {
        Ok(c) => c.context_sha256,
        Err(e) => {
            assert_eq!(e.code, ErrorCode::ReadOnlyViolation, "{e:?}");
            return h.engine.shutdown().await;
        }
    };
    let refused = h
        .engine
        .handoffs()
        .handoff(handoff(&rev, &sha, "implementer", "write two.txt: two\\n"))
        .await;
    match refused {
        Err(e) => assert_eq!(e.code, ErrorCode::ReadOnlyViolation, "{e:?}"),
        Ok(imp) => {
            let imp = h.wait(&imp.id).await;
            let files: Vec<String> = h
                .engine
                .reviews()
                .preview(imp.id.as_str())
                .await
                .unwrap()
                .patch
                .files
                .iter()
                .map(|f| f.path.clone())
                .collect();
            panic!(
                "the handoff was accepted ({:?}); its patch: {files:?}",
                imp.state
            );
        }
    }
    h.engine.shutdown().await;
}

/// Both copies of a handoff hold the source's changes against the original: once one is
/// integrated, the other's patch (which adds the same file again) must not integrate over it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handoff_and_its_source_never_both_integrate() {
    let h = harness();
    let t1 = first(&h, "write one.txt: one\\n").await;
    let ctx = h.engine.handoffs().context(t1.id.as_str()).await.unwrap();
    let imp = h
        .engine
        .handoffs()
        .handoff(HandoffRequest {
            source_task_id: t1.id.to_string(),
            expected_context_sha256: ctx.context_sha256.clone(),
            role: "implementer".into(),
            prompt: "write two.txt: two\\n".into(),
            agent: None,
            model: None,
            decisions: vec![],
            mode: None,
            memory: None,
            allowed_tools: None,
            mcp_servers: None,
        })
        .await
        .unwrap();
    let imp = h.wait(&imp.id).await;
    assert_eq!(imp.state, TaskState::Completed, "{:?}", imp.error);
    for t in [&t1, &imp] {
        let sha = h
            .engine
            .reviews()
            .preview(t.id.as_str())
            .await
            .unwrap()
            .patch
            .sha256;
        h.engine
            .reviews()
            .verify(t.id.as_str(), &sha, Vec::new())
            .await
            .unwrap();
    }
    let sha1 = h
        .engine
        .reviews()
        .preview(t1.id.as_str())
        .await
        .unwrap()
        .patch
        .sha256;
    h.engine
        .reviews()
        .integrate(t1.id.as_str(), Some(&sha1), None)
        .await
        .unwrap();
    let sha2 = h
        .engine
        .reviews()
        .preview(imp.id.as_str())
        .await
        .unwrap()
        .patch
        .sha256;
    let second = h
        .engine
        .reviews()
        .integrate(imp.id.as_str(), Some(&sha2), None)
        .await;
    assert!(second.is_err(), "integrated twice: {second:?}");
    assert!(!h.project().join("two.txt").exists());
    h.engine.shutdown().await;
}
