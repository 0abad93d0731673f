//! Attacks on integration recovery: a symlinked project directory, a crash after the record was stored, and a journal aimed at a directory no task owns. Each failed before the fix.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_integration::{Change, Outcome, Standing, integrate, recover_integrations};
use legate_workspace::{ChangeStatus, sha256_hex};
use std::fs;
use std::path::Path;

const ID: &str = "0123456789abcdef";

fn write_journal(dir: &Path, intent: &serde_json::Value) {
    fs::create_dir_all(dir).unwrap();
    let body = serde_json::to_vec(intent).unwrap();
    let mut bytes = body.clone();
    bytes.push(b'\n');
    bytes.extend_from_slice(sha256_hex(&body).as_bytes());
    bytes.push(b'\n');
    fs::write(dir.join("journal"), bytes).unwrap();
}

/// A directory of the project that is a symlink to an outside directory: recovery's cleanup
/// (`remove_if_there` of the staged name, `remove_dir` of created directories) goes through
/// it and removes things outside the project (rollover.rs roll_back, plain `root.join`).
#[test]
fn recovery_never_removes_anything_through_a_symlinked_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let base = fs::canonicalize(tmp.path()).unwrap();
    let (root, outside, run) = (base.join("project"), base.join("outside"), base.join("run"));
    fs::create_dir_all(&root).unwrap();
    fs::create_dir_all(outside.join("empty")).unwrap();
    let bait = format!(".legate-{ID}-0.tmp");
    fs::write(outside.join(&bait), b"not the project's\n").unwrap();
    std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();
    write_journal(
        &run.join("t1"),
        &serde_json::json!({
            "version": 1, "id": ID, "root": root, "meta": {},
            "dirs": ["link/empty"],
            "steps": [{"path": "link/new.txt", "status": "A", "before": null,
                       "after": {"sha256": "a".repeat(64), "mode": 0o644}}],
        }),
    );
    for r in recover_integrations(&run, &|_, _, _| Standing::Unrecorded) {
        r.unwrap().finish();
    }
    assert!(
        outside.join(&bait).exists(),
        "a file outside the project was removed"
    );
    assert!(
        outside.join("empty").is_dir(),
        "a directory outside the project was removed"
    );
}

/// The engine stores the record ("integrated") and only then removes the journal
/// (review.rs:1122-1123). Killed in between, then the user edits one integrated file before the
/// next command: recovery rolls every other file back, and the engine, finding the journal
/// id recorded, removes the journal without a word (integration_recovery.rs:47-55): the
/// record says integrated, the project is neither the original nor the integration.
#[test]
fn an_integration_finished_before_the_crash_is_not_rolled_back_around_a_later_edit() {
    let tmp = tempfile::tempdir().unwrap();
    let base = fs::canonicalize(tmp.path()).unwrap();
    let (root, run) = (base.join("project"), base.join("run"));
    fs::create_dir_all(&root).unwrap();
    fs::write(root.join("a.txt"), b"a old\n").unwrap();
    fs::write(root.join("b.txt"), b"b old\n").unwrap();
    let m = |p: &str, old: &[u8], new: &[u8]| Change {
        path: p.into(),
        status: ChangeStatus::M,
        baseline: Some(old.to_vec()),
        result: Some(new.to_vec()),
        mode: None,
    };
    let changes = [
        m("a.txt", b"a old\n", b"a new\n"),
        m("b.txt", b"b old\n", b"b new\n"),
    ];
    let pending = integrate(&root, &changes, &run.join("t1"), serde_json::json!({})).unwrap();
    // The engine has stored the record here; kill -9 before `pending.finish()`.
    drop(pending);
    // The user goes on working on the integrated project.
    fs::write(root.join("a.txt"), b"a new, edited by the user\n").unwrap();
    // The engine finds the journal recorded, and says so before anything is touched.
    for r in recover_integrations(&run, &|_, _, _| Standing::Recorded) {
        let r = r.unwrap();
        assert_eq!(r.outcome, Outcome::RolledForward);
        r.finish();
    }
    assert_eq!(
        fs::read(root.join("a.txt")).unwrap(),
        b"a new, edited by the user\n"
    );
    let debris: Vec<_> = fs::read_dir(&root)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(".legate-"))
        .collect();
    assert!(debris.is_empty(), "{debris:?}");
    assert_eq!(
        fs::read(root.join("b.txt")).unwrap(),
        b"b new\n",
        "a recorded integration was undone"
    );
}

/// A journal's `root` is trusted as is (journal.rs `is_valid`: only "absolute"), and recovery
/// runs before the engine looks the task up (integration_recovery.rs:28 then :41), so a
/// journal for a task that does not even exist deletes files in any directory it names.
#[test]
fn a_journal_cannot_aim_recovery_at_a_directory_that_is_no_task_s_project() {
    let tmp = tempfile::tempdir().unwrap();
    let base = fs::canonicalize(tmp.path()).unwrap();
    let (victim, run) = (base.join("home-of-the-user"), base.join("run"));
    fs::create_dir_all(&victim).unwrap();
    fs::write(victim.join(".bashrc"), b"precious\n").unwrap();
    let dir = run.join("no-such-task");
    write_journal(
        &dir,
        &serde_json::json!({
            "version": 1, "id": ID, "root": victim, "meta": {}, "dirs": [],
            "steps": [{"path": ".bashrc", "status": "D", "after": null,
                       "before": {"sha256": sha256_hex(b"precious\n"), "mode": 0o644}}],
        }),
    );
    fs::write(dir.join("staged"), b"").unwrap();
    // The engine knows no such task: it says Foreign, and nothing is touched.
    assert!(recover_integrations(&run, &|_, _, _| Standing::Foreign).is_empty());
    assert!(
        dir.join("journal").exists(),
        "the journal stays for a person to see"
    );
    assert!(
        victim.join(".bashrc").exists(),
        "recovery deleted a file the journal aimed it at"
    );
}
