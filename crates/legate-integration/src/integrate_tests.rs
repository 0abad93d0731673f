//! Tests of `integrate`: clean runs, a failure injected at every operation, changed
//! originals, links, and the journal left for recovery.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use std::collections::BTreeMap;

/// Real operations, failing at the `fail_at`-th call (1-based); `fill` writes half the
/// bytes before failing, like a full disk.
struct Faulty {
    fail_at: usize,
    calls: usize,
}

impl Faulty {
    fn tick(&mut self) -> io::Result<()> {
        self.calls += 1;
        if self.calls == self.fail_at {
            Err(io::Error::other("injected failure"))
        } else {
            Ok(())
        }
    }
}

impl Ops for Faulty {
    fn create_temp(&mut self, path: &Path) -> io::Result<()> {
        self.tick()?;
        RealOps.create_temp(path)
    }
    fn fill(&mut self, path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
        if let Err(e) = self.tick() {
            fs::write(path, &bytes[..bytes.len() / 2])?;
            return Err(e);
        }
        RealOps.fill(path, bytes, mode)
    }
    fn rename(&mut self, from: &Path, to: &Path) -> io::Result<()> {
        self.tick()?;
        RealOps.rename(from, to)
    }
    fn sync(&mut self, paths: &[&Path]) -> io::Result<()> {
        self.tick()?;
        RealOps.sync(paths)
    }
    fn create_dir(&mut self, path: &Path) -> io::Result<()> {
        self.tick()?;
        RealOps.create_dir(path)
    }
    fn remove_file(&mut self, path: &Path) -> io::Result<()> {
        self.tick()?;
        RealOps.remove_file(path)
    }
}

/// The journal directory of the fixture's task, outside its project.
fn journal_dir(root: &Path) -> PathBuf {
    root.parent().unwrap().join("home/run/integrations/t1")
}

/// Integrates and finishes the journal, as the engine does once it recorded the result.
fn go_with(root: &Path, changes: &[Change], ops: &mut dyn Ops) -> Result<Integrated, Error> {
    let pending = integrate_with(
        root,
        changes,
        &journal_dir(root),
        serde_json::json!({}),
        ops,
    )?;
    let done = pending.integrated.clone();
    pending.finish();
    assert!(!journal_dir(root).exists());
    Ok(done)
}

fn go(root: &Path, changes: &[Change]) -> Result<Integrated, Error> {
    go_with(root, changes, &mut RealOps)
}

/// Every entry under `root`: path → (mode, bytes) for files, mode for directories.
fn snapshot(root: &Path) -> BTreeMap<String, (u32, Option<Vec<u8>>)> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, (u32, Option<Vec<u8>>)>) {
        for e in fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            let m = fs::symlink_metadata(&p).unwrap();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            if m.is_dir() {
                out.insert(rel, (m.permissions().mode(), None));
                walk(root, &p, out);
            } else {
                out.insert(rel, (m.permissions().mode(), Some(fs::read(&p).unwrap())));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

fn fixture() -> (tempfile::TempDir, PathBuf, Vec<Change>) {
    let tmp = tempfile::tempdir().unwrap();
    let root = fs::canonicalize(tmp.path()).unwrap().join("project");
    fs::create_dir_all(root.join("src")).unwrap();
    fs::write(root.join("src/a.rs"), "fn a() {}\n").unwrap();
    // Set-id bits a rollback must put back and new content must never get.
    fs::set_permissions(root.join("src/a.rs"), fs::Permissions::from_mode(0o6640)).unwrap();
    fs::write(root.join("b.txt"), "b\r\nline\r\n").unwrap();
    fs::set_permissions(root.join("b.txt"), fs::Permissions::from_mode(0o644)).unwrap();
    fs::write(root.join("gone.txt"), "bye\n").unwrap();
    fs::write(root.join("bom.txt"), "\u{feff}x\n").unwrap();
    let changes = vec![
        Change {
            path: "b.txt".into(),
            status: ChangeStatus::M,
            baseline: Some(b"b\r\nline\r\n".to_vec()),
            result: Some(b"B\r\nline\r\n".to_vec()),
            // Made executable: a rollback restores the original's mode, not this one.
            mode: Some(0o755),
        },
        Change {
            path: "bom.txt".into(),
            status: ChangeStatus::M,
            baseline: Some("\u{feff}x\n".into()),
            result: Some(b"y\n".to_vec()),
            mode: Some(0o644),
        },
        Change {
            path: "gone.txt".into(),
            status: ChangeStatus::D,
            baseline: Some(b"bye\n".to_vec()),
            result: None,
            mode: None,
        },
        Change {
            path: "new/deep/c.sh".into(),
            status: ChangeStatus::A,
            baseline: None,
            result: Some(b"#!/bin/sh\n".to_vec()),
            mode: Some(0o755),
        },
        Change {
            path: "src/a.rs".into(),
            status: ChangeStatus::M,
            baseline: Some(b"fn a() {}\n".to_vec()),
            result: Some(b"fn a() { 1 }\n".to_vec()),
            mode: Some(0o644),
        },
    ];
    (tmp, root, changes)
}

/// A patch that makes a file executable, or no longer executable, is applied as such (and
/// with nothing else of the original's mode changed); integration said it was integrated and
/// left the mode as it was (issue 29, finding 8).
#[test]
fn a_mode_change_is_applied() {
    let tmp = tempfile::tempdir().unwrap();
    let root = fs::canonicalize(tmp.path()).unwrap().join("project");
    fs::create_dir_all(&root).unwrap();
    fs::write(root.join("run.sh"), "#!/bin/sh\n").unwrap();
    fs::set_permissions(root.join("run.sh"), fs::Permissions::from_mode(0o640)).unwrap();
    fs::write(root.join("tool"), "x\n").unwrap();
    fs::set_permissions(root.join("tool"), fs::Permissions::from_mode(0o755)).unwrap();
    let same = |path: &str, bytes: &[u8], mode: u32| Change {
        path: path.into(),
        status: ChangeStatus::M,
        baseline: Some(bytes.to_vec()),
        result: Some(bytes.to_vec()),
        mode: Some(mode),
    };
    let changes = vec![
        same("run.sh", b"#!/bin/sh\n", 0o755),
        same("tool", b"x\n", 0o644),
    ];
    let r = go(&root, &changes).unwrap();
    assert_eq!(r.files.len(), 2);
    let mode = |p: &str| fs::metadata(root.join(p)).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode("run.sh"), 0o750, "executable where it was readable");
    assert_eq!(mode("tool"), 0o644);
}

#[test]
fn a_clean_integration_writes_everything_and_keeps_modes() {
    let (_t, root, changes) = fixture();
    let r = go(&root, &changes).unwrap();
    assert_eq!(r.files.len(), 5);
    assert_eq!(r.restored_byte_order_marks, ["bom.txt"]);
    assert!(r.leftover_files.is_empty());
    assert_eq!(fs::read(root.join("b.txt")).unwrap(), b"B\r\nline\r\n");
    assert_eq!(
        fs::read(root.join("bom.txt")).unwrap(),
        "\u{feff}y\n".as_bytes()
    );
    assert!(!root.join("gone.txt").exists());
    assert_eq!(
        fs::read(root.join("new/deep/c.sh")).unwrap(),
        b"#!/bin/sh\n"
    );
    let mode = |p: &str| fs::metadata(root.join(p)).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode("src/a.rs"), 0o640, "the set-id bits are dropped");
    assert_eq!(mode("b.txt"), 0o755);
    assert_eq!(mode("new/deep/c.sh"), 0o755);
    let names: Vec<_> = fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names.iter().all(|n| !n.starts_with(".legate-")),
        "{names:?}"
    );
}

#[test]
fn a_write_failing_at_each_position_leaves_the_original_byte_identical() {
    // Count the operations of a clean run first.
    let (_t, root, changes) = fixture();
    let mut counting = Faulty {
        fail_at: usize::MAX,
        calls: 0,
    };
    go_with(&root, &changes, &mut counting).unwrap();
    let total = counting.calls;
    // The last operations remove set-aside files; a failure there is a leftover, not a
    // rollback, and is tested below.
    let removals = changes
        .iter()
        .filter(|c| c.status == ChangeStatus::D)
        .count();
    assert!(total > 10, "{total}");
    for fail_at in 1..=total - removals {
        let (_t, root, changes) = fixture();
        let before = snapshot(&root);
        let mut ops = Faulty { fail_at, calls: 0 };
        let err = go_with(&root, &changes, &mut ops).unwrap_err();
        assert_eq!(err.code, ErrorCode::IntegrationFailed, "at {fail_at}");
        assert!(err.message.contains("put back"), "{}", err.message);
        assert_eq!(snapshot(&root), before, "failure at operation {fail_at}");
    }
    // A removal that fails leaves the set-aside file listed, and the integration done.
    let (_t, root, changes) = fixture();
    let mut ops = Faulty {
        fail_at: total,
        calls: 0,
    };
    let r = go_with(&root, &changes, &mut ops).unwrap();
    assert_eq!(r.leftover_files.len(), 1);
    assert!(r.leftover_files[0].starts_with(".legate-") && r.leftover_files[0].ends_with("-2.del"));
    assert!(root.join(&r.leftover_files[0]).exists());
}

#[test]
fn a_changed_original_is_source_changed_and_untouched() {
    let (_t, root, changes) = fixture();
    fs::write(root.join("src/a.rs"), "fn a() { edited by hand }\n").unwrap();
    let before = snapshot(&root);
    let err = go(&root, &changes).unwrap_err();
    assert_eq!(err.code, ErrorCode::SourceChanged);
    assert_eq!(snapshot(&root), before);
    let (_t, root, changes) = fixture();
    fs::create_dir_all(root.join("new/deep")).unwrap();
    fs::write(root.join("new/deep/c.sh"), "mine").unwrap();
    assert_eq!(
        go(&root, &changes).unwrap_err().code,
        ErrorCode::SourceChanged
    );
}

#[test]
fn symlinks_in_the_original_are_never_followed() {
    let (_t, root, changes) = fixture();
    let outside = tempfile::tempdir().unwrap();
    fs::write(outside.path().join("a.rs"), "fn a() {}\n").unwrap();
    fs::remove_dir_all(root.join("src")).unwrap();
    std::os::unix::fs::symlink(outside.path(), root.join("src")).unwrap();
    let err = go(&root, &changes).unwrap_err();
    assert_eq!(err.code, ErrorCode::UnsafePath);
    assert_eq!(
        fs::read(outside.path().join("a.rs")).unwrap(),
        b"fn a() {}\n"
    );
    let (_t, root, changes) = fixture();
    fs::remove_file(root.join("b.txt")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("a.rs"), root.join("b.txt")).unwrap();
    assert_eq!(go(&root, &changes).unwrap_err().code, ErrorCode::UnsafePath);
    let bad = Change {
        path: "../escape".into(),
        ..changes[3].clone()
    };
    assert_eq!(go(&root, &[bad]).unwrap_err().code, ErrorCode::UnsafePath);
}

#[test]
fn a_line_ending_change_touches_nothing() {
    let (_t, root, mut changes) = fixture();
    changes[0].result = Some(b"B\nline\n".to_vec());
    let before = snapshot(&root);
    let err = go(&root, &changes).unwrap_err();
    assert_eq!(err.code, ErrorCode::LineEndingsChanged);
    assert_eq!(snapshot(&root), before);
}

/// Real operations until the `crash_at`-th call, which panics: the process "dies" there,
/// with no rollback of its own.
struct Crashing {
    crash_at: usize,
    calls: usize,
}

impl Crashing {
    fn tick(&mut self) {
        self.calls += 1;
        if self.calls == self.crash_at {
            panic!("crash");
        }
    }
}

impl Ops for Crashing {
    fn create_temp(&mut self, path: &Path) -> io::Result<()> {
        self.tick();
        RealOps.create_temp(path)
    }
    fn fill(&mut self, path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
        self.tick();
        RealOps.fill(path, bytes, mode)
    }
    fn rename(&mut self, from: &Path, to: &Path) -> io::Result<()> {
        self.tick();
        RealOps.rename(from, to)
    }
    fn sync(&mut self, paths: &[&Path]) -> io::Result<()> {
        self.tick();
        RealOps.sync(paths)
    }
    fn create_dir(&mut self, path: &Path) -> io::Result<()> {
        self.tick();
        RealOps.create_dir(path)
    }
    fn remove_file(&mut self, path: &Path) -> io::Result<()> {
        self.tick();
        RealOps.remove_file(path)
    }
}

#[test]
fn a_crash_at_each_operation_is_recovered_to_one_side_or_the_other() {
    let (_t, root, changes) = fixture();
    let before = snapshot(&root);
    let mut counting = Crashing {
        crash_at: usize::MAX,
        calls: 0,
    };
    go_with(&root, &changes, &mut counting).unwrap();
    let after = snapshot(&root);
    let total = counting.calls;
    let (mut forward, mut back) = (0, 0);
    for crash_at in 1..=total {
        let (_t, root, changes) = fixture();
        let dir = journal_dir(&root);
        let crashed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut ops = Crashing { crash_at, calls: 0 };
            // Not finished: the process died before the engine recorded anything.
            std::mem::forget(integrate_with(
                &root,
                &changes,
                &dir,
                serde_json::json!({"n": crash_at}),
                &mut ops,
            ));
        }));
        assert!(crashed.is_err(), "no crash at {crash_at}");
        let recovered = crate::recover_integrations(dir.parent().unwrap(), &|_, _, _| {
            crate::Standing::Unrecorded
        });
        assert_eq!(recovered.len(), 1, "at {crash_at}");
        let r = recovered.into_iter().next().unwrap().unwrap();
        assert_eq!(r.task, "t1");
        assert_eq!(r.meta["n"], crash_at);
        assert!(r.conflicts.is_empty(), "{:?}", r.conflicts);
        let now = snapshot(&root);
        match r.outcome {
            crate::Outcome::RolledForward => {
                forward += 1;
                assert_eq!(now, after, "rolled forward after a crash at {crash_at}");
            }
            crate::Outcome::RolledBack => {
                back += 1;
                assert_eq!(now, before, "rolled back after a crash at {crash_at}");
            }
        }
        r.finish();
        assert!(!dir.exists());
        assert!(
            crate::recover_integrations(dir.parent().unwrap(), &|_, _, _| {
                crate::Standing::Unrecorded
            })
            .is_empty()
        );
    }
    assert!(forward > 0 && back > 0, "{forward} forward, {back} back");
}

#[test]
fn recovery_rolls_back_when_a_file_was_edited_after_the_crash_and_keeps_the_edit() {
    let (_t, root, changes) = fixture();
    let dir = journal_dir(&root);
    // Crash just before the last rename: everything staged, most files in place.
    let mut counting = Crashing {
        crash_at: usize::MAX,
        calls: 0,
    };
    go_with(&root, &changes, &mut counting).unwrap();
    let (_t, root, changes) = fixture();
    let before = snapshot(&root);
    let crash_at = counting.calls - 2;
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut ops = Crashing { crash_at, calls: 0 };
        std::mem::forget(integrate_with(
            &root,
            &changes,
            &dir,
            serde_json::json!({}),
            &mut ops,
        ));
    }));
    // The user edits a file still staged (src/a.rs is last): forward cannot be exact.
    fs::write(root.join("src/a.rs"), "mine\n").unwrap();
    let r = crate::recover_integrations(dir.parent().unwrap(), &|_, _, _| {
        crate::Standing::Unrecorded
    })
    .pop()
    .unwrap()
    .unwrap();
    assert_eq!(r.outcome, crate::Outcome::RolledBack);
    assert_eq!(r.conflicts, ["src/a.rs"]);
    let mut expected = before.clone();
    expected.get_mut("src/a.rs").unwrap().1 = Some(b"mine\n".to_vec());
    assert_eq!(snapshot(&root), expected);
    r.finish();
}

#[test]
fn two_recoveries_at_once_never_both_recover_and_a_live_integration_is_left_alone() {
    let (_t, root, changes) = fixture();
    let dir = journal_dir(&root);
    let integrations = dir.parent().unwrap().to_path_buf();
    // A live integration (its journal held): recovery skips it.
    let live = integrate(&root, &changes, &dir, serde_json::json!({})).unwrap();
    let integrated = snapshot(&root);
    assert!(
        crate::recover_integrations(&integrations, &|_, _, _| crate::Standing::Unrecorded)
            .is_empty()
    );
    assert!(dir.join("journal").exists());
    // The process dies before finishing: eight recoveries race, one recovers.
    drop(live);
    let results: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|_| {
                s.spawn(|| {
                    crate::recover_integrations(&integrations, &|_, _, _| {
                        crate::Standing::Unrecorded
                    })
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut recovered: Vec<_> = results.into_iter().flatten().map(Result::unwrap).collect();
    assert_eq!(recovered.len(), 1);
    let r = recovered.pop().unwrap();
    assert_eq!(r.outcome, crate::Outcome::RolledForward);
    assert_eq!(snapshot(&root), integrated);
    r.finish();
    assert!(!dir.exists());
}

/// Swaps a directory of the project for a link to a directory outside it at the first
/// temporary file, as a second writer of the project (a shared-directory task's agent)
/// could between integration's check and its write.
struct Swapping {
    dir: PathBuf,
    outside: PathBuf,
    done: bool,
}

impl Ops for Swapping {
    fn create_temp(&mut self, path: &Path) -> io::Result<()> {
        if !self.done {
            self.done = true;
            fs::rename(&self.dir, self.dir.with_extension("moved")).unwrap();
            std::os::unix::fs::symlink(&self.outside, &self.dir).unwrap();
        }
        RealOps.create_temp(path)
    }
    fn fill(&mut self, path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
        RealOps.fill(path, bytes, mode)
    }
    fn rename(&mut self, from: &Path, to: &Path) -> io::Result<()> {
        RealOps.rename(from, to)
    }
    fn sync(&mut self, paths: &[&Path]) -> io::Result<()> {
        RealOps.sync(paths)
    }
    fn create_dir(&mut self, path: &Path) -> io::Result<()> {
        RealOps.create_dir(path)
    }
    fn remove_file(&mut self, path: &Path) -> io::Result<()> {
        RealOps.remove_file(path)
    }
}

/// A directory swapped for a link after the check: the write through it fails, nothing
/// lands outside the project, and the integration is put back. Before, the temporary file
/// was made and renamed through the link (`O_NOFOLLOW` guarded the last name only).
#[test]
fn a_directory_swapped_for_a_link_mid_integration_is_never_written_through() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().canonicalize().unwrap();
    let root = base.join("project");
    let outside = base.join("outside");
    fs::create_dir_all(root.join("cfg")).unwrap();
    fs::create_dir_all(&outside).unwrap();
    fs::write(root.join("cfg/kept.txt"), b"kept\n").unwrap();
    let changes = [Change {
        path: "cfg/new.txt".into(),
        status: ChangeStatus::A,
        baseline: None,
        result: Some(b"planted\n".to_vec()),
        mode: Some(0o644),
    }];
    let mut ops = Swapping {
        dir: root.join("cfg"),
        outside: outside.clone(),
        done: false,
    };
    let err = integrate_with(
        &root,
        &changes,
        &base.join("home/run/integrations/t1"),
        serde_json::Value::Null,
        &mut ops,
    )
    .unwrap_err();
    assert!(ops.done);
    assert_eq!(err.code, ErrorCode::IntegrationFailed, "{}", err.message);
    let planted: Vec<_> = fs::read_dir(&outside)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(
        planted.is_empty(),
        "written outside the project: {planted:?}"
    );
    assert_eq!(
        fs::read(root.join("cfg.moved/kept.txt")).unwrap(),
        b"kept\n"
    );
    assert!(!root.join("cfg.moved/new.txt").exists());
}
