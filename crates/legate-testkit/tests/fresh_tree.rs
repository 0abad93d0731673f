//! `test` in a fresh tree of the patch: what an agent planted in its copy, ignored by git and
//! so never part of the patch (a stale build output, a cache), passes a test run in the copy
//! and not one run `fresh`; the patch's own files are all there; the copy is left as it was.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_core::{ErrorCode, TaskState};
use legate_engine::{
    Check, CheckKind, Criterion, Review, SubmitRequest, TestCommand, TestRun, Verdict,
    WorkspaceRequest,
};
use legate_testkit::EngineHarness;

fn exists(path: &str) -> TestCommand {
    TestCommand {
        executable: "test".into(),
        args: vec!["-f".into(), path.into()],
    }
}

fn run(command: TestCommand, fresh: bool) -> TestRun {
    TestRun {
        command,
        timeout: None,
        selection: None,
        fresh,
    }
}

/// Runs `prompt` as a copy task over the harness's project with `criteria`, and returns its
/// id once it completed.
async fn copy_task(h: &EngineHarness, prompt: &str, criteria: Vec<Criterion>) -> String {
    let mut req = SubmitRequest::new(prompt);
    req.workspace = WorkspaceRequest::Copy {
        source: h.project(),
        include_paths: vec![],
        criteria,
    };
    let done = h.run(req).await;
    assert_eq!(done.state, TaskState::Completed, "{:?}", done.error);
    done.id.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planted_ignored_file_passes_in_the_copy_and_not_in_a_fresh_tree() {
    let h = EngineHarness::builder()
        .project(&[("a.txt", "alpha\n")])
        .start();
    // The agent changes a tracked file, adds one, and plants an ignored "build output".
    let id = copy_task(
        &h,
        "write .gitignore: gen/\nwrite b.txt: new\nwrite gen/passed: planted",
        vec![],
    )
    .await;
    let preview = h.engine.reviews().preview(&id).await.unwrap();
    let sha = preview.patch.sha256.clone();
    assert!(
        !preview
            .patch
            .files
            .iter()
            .any(|f| f.path.starts_with("gen/")),
        "an ignored file is not the patch's"
    );
    let reviews = h.engine.reviews();

    // In the copy, the planted file makes the test pass.
    let (in_copy, _) = reviews
        .test_retrying(&id, &sha, run(exists("gen/passed"), false), 0)
        .await
        .unwrap();
    assert!(in_copy.passed, "{in_copy:?}");
    assert!(!in_copy.fresh);

    // In a fresh tree of the patch it is not there: the test fails, and says where it ran.
    let (fresh, _) = reviews
        .test_retrying(&id, &sha, run(exists("gen/passed"), true), 0)
        .await
        .unwrap();
    assert!(!fresh.passed, "{fresh:?}");
    assert!(fresh.fresh);
    // Confined as a run in the copy is.
    assert_eq!(fresh.confinement, in_copy.confinement);
    assert_eq!(fresh.network, in_copy.network);
    assert_eq!(fresh.error.as_ref().unwrap().code, ErrorCode::TestFailed);
    assert_eq!(fresh.sha256_before, sha);

    // The patch's own files are all in the fresh tree, the project's unchanged ones too.
    for file in ["b.txt", "a.txt", ".gitignore"] {
        let (e, _) = reviews
            .test_retrying(&id, &sha, run(exists(file), true), 0)
            .await
            .unwrap();
        assert!(e.passed && e.fresh, "{file}: {e:?}");
    }
    // A command that writes a tracked file in its fresh tree changed what it tested.
    let writes = TestCommand {
        executable: "sh".into(),
        args: vec!["-c".into(), "echo rewritten > b.txt".into()],
    };
    let (e, _) = reviews
        .test_retrying(&id, &sha, run(writes, true), 0)
        .await
        .unwrap();
    assert!(!e.passed, "{e:?}");
    assert_eq!(e.error.unwrap().code, ErrorCode::TestChangedPatch);
    // The fresh tree is gone and the copy is as the agent left it; the patch unchanged.
    let copy = h.engine.reviews().preview(&id).await.unwrap();
    assert_eq!(copy.patch.sha256, sha);
    let baseline_dirs: Vec<_> = std::fs::read_dir(h.home().join("baselines"))
        .unwrap()
        .flat_map(|d| std::fs::read_dir(d.unwrap().path()).unwrap())
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("fresh-"))
        .collect();
    assert!(baseline_dirs.is_empty(), "{baseline_dirs:?}");
    // A stale sha256 is refused before anything runs, fresh or not.
    let stale = reviews
        .test_retrying(&id, &"0".repeat(64), run(exists("b.txt"), true), 0)
        .await
        .unwrap_err();
    assert_eq!(stale.code, ErrorCode::PatchChanged);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_fresh_tests_needs_a_fresh_run_among_the_passing_ones() {
    let h = EngineHarness::builder()
        .project(&[("a.txt", "alpha\n")])
        .config(|c| c.review.require_fresh_tests = true)
        .start();
    let beta = Criterion {
        id: "beta".into(),
        description: "a.txt says beta".into(),
        check: Some(Check {
            kind: CheckKind::FileContains,
            path: "a.txt".into(),
            text: Some("beta".into()),
        }),
    };
    let id = copy_task(&h, "replace a.txt: alpha => beta", vec![beta]).await;
    let reviews = h.engine.reviews();
    let sha = reviews.preview(&id).await.unwrap().patch.sha256;
    let verified = reviews
        .verify(
            &id,
            &sha,
            vec![Review {
                criterion_id: "beta".into(),
                verdict: Verdict::Passed,
                path: "a.txt".into(),
                line: 1,
                quote: "beta".into(),
                explanation: "replaced".into(),
            }],
        )
        .await
        .unwrap();
    assert!(verified.passed, "{verified:?}");
    let grep = TestCommand {
        executable: "grep".into(),
        args: vec!["-q".into(), "beta".into(), "a.txt".into()],
    };
    // A passing run in the copy is not enough.
    let (in_copy, _) = reviews
        .test_retrying(&id, &sha, run(grep.clone(), false), 0)
        .await
        .unwrap();
    assert!(in_copy.passed);
    let refused = reviews.integrate(&id, Some(&sha), None).await.unwrap_err();
    assert_eq!(refused.code, ErrorCode::VerificationRequired);
    assert!(refused.message.contains("fresh"), "{}", refused.message);
    // The same command passing fresh is.
    let (fresh, _) = reviews
        .test_retrying(&id, &sha, run(grep, true), 0)
        .await
        .unwrap();
    assert!(fresh.passed && fresh.fresh, "{fresh:?}");
    reviews.integrate(&id, Some(&sha), None).await.unwrap();
    assert_eq!(
        std::fs::read_to_string(h.project().join("a.txt")).unwrap(),
        "beta\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_failure_is_not_cleared_by_the_same_command_passing_in_the_copy() {
    let h = EngineHarness::builder()
        .project(&[("a.txt", "alpha\n")])
        .start();
    let id = copy_task(
        &h,
        "replace a.txt: alpha => beta\nwrite .gitignore: gen/\nwrite gen/passed: planted",
        vec![],
    )
    .await;
    let reviews = h.engine.reviews();
    let sha = reviews.preview(&id).await.unwrap().patch.sha256;
    assert!(reviews.verify(&id, &sha, vec![]).await.unwrap().passed);
    // Fails fresh (the planted file is not the patch's), then passes in the copy.
    let planted = exists("gen/passed");
    let (failed, _) = reviews
        .test_retrying(&id, &sha, run(planted.clone(), true), 0)
        .await
        .unwrap();
    assert!(!failed.passed);
    let (passed, _) = reviews
        .test_retrying(&id, &sha, run(planted, false), 0)
        .await
        .unwrap();
    assert!(passed.passed);
    let refused = reviews.integrate(&id, Some(&sha), None).await.unwrap_err();
    assert_eq!(refused.code, ErrorCode::VerificationRequired);
    assert!(
        refused.message.contains(&format!("test #{}", failed.id)),
        "{}",
        refused.message
    );
    assert_eq!(
        std::fs::read_to_string(h.project().join("a.txt")).unwrap(),
        "alpha\n"
    );
}
