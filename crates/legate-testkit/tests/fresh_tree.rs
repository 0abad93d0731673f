//! `test` in a fresh tree of the patch: what an agent planted in its copy, ignored by git and
//! so never part of the patch (a stale build output, a cache), passes a test run in the copy
//! and not one run `fresh`; the patch's own files are all there; the copy is left as it was.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_core::{ErrorCode, TaskState};
use legate_engine::{SubmitRequest, TestCommand, TestRun, WorkspaceRequest};
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planted_ignored_file_passes_in_the_copy_and_not_in_a_fresh_tree() {
    let h = EngineHarness::builder()
        .project(&[("a.txt", "alpha\n")])
        .start();
    // The agent changes a tracked file, adds one, and plants an ignored "build output".
    let mut req =
        SubmitRequest::new("write .gitignore: gen/\nwrite b.txt: new\nwrite gen/passed: planted");
    req.workspace = WorkspaceRequest::Copy {
        source: h.project(),
        include_paths: vec![],
        criteria: vec![],
    };
    let done = h.run(req).await;
    assert_eq!(done.state, TaskState::Completed, "{:?}", done.error);
    let id = done.id.to_string();
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
