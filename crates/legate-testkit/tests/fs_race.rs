//! The symlink race against Legate's file service (issue 11, finding 1): a hostile scripted
//! agent (`!flip`) flips a file and a directory inside its root between its own, a symlink to
//! an outside file or directory, and nothing, while it sends `fs/write_text_file` and
//! `fs/read_text_file`. 100 flips per trial, in sandbox, shared and copy workspaces.
//!
//! Nothing outside may change or be read: the outside file stays byte-identical, nothing
//! appears in the outside directory, and the outside file's unique canary is never in any
//! event or answer (the agent quotes every foreign read it got).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_core::{EventKind, TaskState};
use legate_engine::{SubmitRequest, WorkspaceRequest};
use legate_testkit::EngineHarness;
use legate_testkit::harness::make_project;
use std::path::PathBuf;
use std::time::Duration;

const FLIPS: usize = 100;
const TRIALS: usize = 5;

#[derive(Debug, Default)]
struct Escapes {
    /// The outside file no longer holds its canary.
    file_overwritten: usize,
    /// Entries that appeared in the outside directory.
    dir_entries: usize,
    /// Times the canary reached the agent (quoted in its report) or any event.
    canary_reads: usize,
}

impl Escapes {
    fn total(&self) -> usize {
        self.file_overwritten + self.dir_entries + self.canary_reads
    }
}

/// One trial: a fresh home, an outside file and directory, one `!flip` task.
async fn trial(kind: &str, n: usize) -> Escapes {
    let tmp = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(tmp.path()).unwrap();
    let outside = base.join("outside");
    std::fs::create_dir_all(outside.join("dir")).unwrap();
    let canary = format!(
        "canary-{}-{kind}-{n}-{}\n",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    std::fs::write(outside.join("secret"), &canary).unwrap();

    let mut req = SubmitRequest::new(format!(
        "!flip {FLIPS} {} {}",
        outside.join("secret").display(),
        outside.join("dir").display()
    ));
    req.workspace = match kind {
        "sandbox" => WorkspaceRequest::Sandbox,
        "shared" => {
            let shared: PathBuf = base.join("shared");
            std::fs::create_dir_all(&shared).unwrap();
            WorkspaceRequest::Shared(shared)
        }
        _ => {
            let project = base.join("project");
            make_project(&project, &[("a.txt", "alpha\n")]);
            WorkspaceRequest::Copy {
                source: project,
                include_paths: vec![],
                criteria: vec![],
            }
        }
    };
    // The engine's home is `<base>/home`.
    let engine = EngineHarness::builder().engine_in(&base);
    let task = engine.submit(req).unwrap();
    let done = tokio::time::timeout(Duration::from_secs(120), engine.wait(&task.id))
        .await
        .expect("the task ends")
        .unwrap();
    let events = engine.events(&task.id, 0, 1_000_000).unwrap();

    let canary_line = canary.trim_end();
    let mut seen = serde_json::to_string(&done).unwrap();
    let (mut allowed, mut refused) = (0, 0);
    for event in &events {
        seen.push_str(&serde_json::to_string(event).unwrap());
        if let EventKind::FsAccess { allowed: a, .. } = &event.kind {
            if *a {
                allowed += 1;
            } else {
                refused += 1;
            }
        }
    }
    let report: Vec<&str> = seen.matches("flip: ").collect();
    let escapes = Escapes {
        file_overwritten: usize::from(
            std::fs::read(outside.join("secret")).unwrap() != canary.as_bytes(),
        ),
        dir_entries: std::fs::read_dir(outside.join("dir")).unwrap().count(),
        canary_reads: seen.matches(canary_line).count(),
    };
    eprintln!(
        "{kind} trial {n}: {} ({:?}); fs events {allowed} allowed, {refused} refused; {escapes:?}",
        done.state,
        done.error.as_ref().map(|e| e.code)
    );
    // Not vacuous: the agent ran its race and Legate served some of it.
    assert!(!report.is_empty(), "{kind}: no !flip report in {seen}");
    assert!(seen.contains(&format!("flip: {FLIPS} flips")), "{kind}");
    assert!(
        allowed > 0 && refused > 0,
        "{kind}: {allowed} allowed, {refused} refused"
    );
    assert_eq!(done.state, TaskState::Completed, "{kind}: {:?}", done.error);
    escapes
}

async fn trials(kind: &str) {
    let mut total = Escapes::default();
    for n in 0..TRIALS {
        let e = trial(kind, n).await;
        total.file_overwritten += e.file_overwritten;
        total.dir_entries += e.dir_entries;
        total.canary_reads += e.canary_reads;
    }
    assert_eq!(
        total.total(),
        0,
        "{kind}: escapes over {TRIALS} trials: {total:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flipping_symlinks_never_redirects_the_file_service_in_a_sandbox() {
    trials("sandbox").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flipping_symlinks_never_redirects_the_file_service_in_a_shared_directory() {
    trials("shared").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flipping_symlinks_never_redirects_the_file_service_in_a_copy() {
    trials("copy").await;
}
