//! Copies that are snapshots of the project's base, on a btrfs image on a loop device: a
//! later copy of an unchanged project reads and makes no file, holds exactly the project's
//! selection, shares its blocks, and is its own (the agent's writes reach neither the base
//! nor another copy); any change to a file, to the rules or to the selection makes the base
//! again; a file too recent to trust leaves it without a manifest; a base too old, damaged,
//! or swept while copies are made is never handed out. (A `kill -9` while a base is made:
//! `base_kill.rs`.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "common/base_fixture.rs"]
mod base_fixture;
mod common;
#[path = "common/reflink_fs.rs"]
mod reflink_fs;
#[path = "common/settled.rs"]
mod settled;

use base_fixture::*;
use common::{files_under, write};
use legate_workspace::*;
use reflink_fs::ReflinkFs;
use settled::{leak, settle};
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

#[test]
fn a_later_copy_of_an_unchanged_project_is_a_snapshot_that_reads_nothing() {
    let Some(fs_) = ReflinkFs::mount_btrfs(512) else {
        return;
    };
    let f = project_in(fs_.path(), 40);
    let (first, _) = copy(&f, "t1");
    assert!(first.snapshot, "{first:?}");
    assert!(first.scanned_files > 0, "the base was made: {first:?}");
    assert!(base_of(&f).join("manifest").is_file());
    let before = fs_.free_bytes();
    let (second, baseline) = copy(&f, "t2");
    let used = before.saturating_sub(fs_.free_bytes());
    assert!(second.snapshot, "{second:?}");
    assert_eq!(second.scanned_files, 0, "{second:?}");
    assert_eq!(second.trusted_files, 43, "{second:?}");
    assert_eq!(second.included_files, first.included_files);
    assert_eq!(second.bytes, first.bytes);
    assert_eq!(second.blocked_files, first.blocked_files);
    assert_eq!(second.blocked_files.len(), 1, "{second:?}");
    assert_eq!(second.blocked_files[0].path, "config/leak.txt");
    assert_ne!(second.copy_directory, first.copy_directory);
    assert_eq!(
        second.copy_directory,
        fs::canonicalize(f.home.join("copies/t2")).unwrap()
    );
    holds_the_project(&second.copy_directory, &f.project, &["config/leak.txt"]);
    // A snapshot takes no data: far less than the 4 MiB file it holds.
    assert!(used < 2 * 1024 * 1024, "the second copy took {used} bytes");
    // Private, as any copy.
    let mode = fs::metadata(&second.copy_directory).unwrap().mode() & 0o777;
    assert_eq!(mode, 0o700);
    // The baseline knows the copy as unchanged without reading it, and sees the agent's
    // change, which reaches neither the first copy nor the base.
    assert!(look(&baseline).files.is_empty());
    fs::write(second.copy_directory.join("src/f001.txt"), b"the agent's\n").unwrap();
    fs::write(second.copy_directory.join("new.txt"), b"new\n").unwrap();
    let p = look(&baseline);
    let mut changed: Vec<&str> = p.files.iter().map(|c| c.path.as_str()).collect();
    changed.sort();
    assert_eq!(changed, ["new.txt", "src/f001.txt"]);
    holds_the_project(&first.copy_directory, &f.project, &["config/leak.txt"]);
    holds_the_project(&base_of(&f).join("tree"), &f.project, &["config/leak.txt"]);
    // The baseline's own configuration names its copy (git wrote the base's there).
    let top = Command::new("git")
        .arg("--git-dir")
        .arg(baseline.git_dir())
        .args(["rev-parse", "--show-toplevel"])
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&top.stdout).trim(),
        second.copy_directory.to_str().unwrap()
    );
    let (third, b3) = copy(&f, "t3");
    assert_eq!(third.scanned_files, 0);
    holds_the_project(&third.copy_directory, &f.project, &["config/leak.txt"]);
    assert!(look(&b3).files.is_empty());
    // A stamp of a snapshot copy is taken (the copy and its baseline are two subvolumes,
    // two devices, one clock), and moves with a write.
    let s1 = copy_stamp(&b3, 100_000).unwrap();
    settle(&third.copy_directory);
    let s1b = copy_stamp(&b3, 100_000).unwrap().expect("a stamp");
    fs::write(third.copy_directory.join("src/f002.txt"), b"x").unwrap();
    settle(&third.copy_directory);
    let s2 = copy_stamp(&b3, 100_000).unwrap().expect("a stamp");
    assert_ne!(s1b, s2);
    drop(s1);
}

#[test]
fn any_change_to_a_file_makes_the_base_again() {
    let Some(fs_) = ReflinkFs::mount_btrfs(512) else {
        return;
    };
    let f = project_in(fs_.path(), 10);
    copy(&f, "t1");
    // The same size, the same mtime set back: only the ctime says it changed.
    let path = f.project.join("src/f003.txt");
    let old = fs::metadata(&path).unwrap();
    let mut bytes = fs::read(&path).unwrap();
    bytes[0] = b'Z';
    fs::write(&path, &bytes).unwrap();
    let times = [rustix::fs::Timestamps {
        last_access: rustix::fs::Timespec {
            tv_sec: old.atime(),
            tv_nsec: old.atime_nsec() as _,
        },
        last_modification: rustix::fs::Timespec {
            tv_sec: old.mtime(),
            tv_nsec: old.mtime_nsec() as _,
        },
    }];
    rustix::fs::utimensat(
        rustix::fs::CWD,
        &path,
        &times[0],
        rustix::fs::AtFlags::empty(),
    )
    .unwrap();
    let (r2, _) = copy(&f, "t2");
    assert!(r2.scanned_files > 0, "made again: {r2:?}");
    assert_eq!(
        fs::read(r2.copy_directory.join("src/f003.txt")).unwrap(),
        bytes
    );
    // A credential written into a file is found by the base made again.
    fs::write(f.project.join("src/f004.txt"), format!("k={}\n", leak())).unwrap();
    let (r3, _) = copy(&f, "t3");
    let blocked: Vec<&str> = r3.blocked_files.iter().map(|b| b.path.as_str()).collect();
    assert_eq!(blocked, ["config/leak.txt", "src/f004.txt"]);
    assert!(!r3.copy_directory.join("src/f004.txt").exists());
    // A file added, then one removed.
    write(&f.project, "added.txt", b"added\n");
    let (r4, _) = copy(&f, "t4");
    assert!(r4.copy_directory.join("added.txt").is_file());
    fs::remove_file(f.project.join("added.txt")).unwrap();
    let (r5, _) = copy(&f, "t5");
    assert!(!r5.copy_directory.join("added.txt").exists());
    holds_the_project(
        &r5.copy_directory,
        &f.project,
        &["config/leak.txt", "src/f004.txt"],
    );
    // Settled, the next copy is a snapshot again.
    settle(&f.project);
    copy(&f, "t6");
    let (r7, _) = copy(&f, "t7");
    assert_eq!(r7.scanned_files, 0, "{r7:?}");
    // Other rules (an exclusion) make it again, with the file left out.
    let secrets = SecretPatterns::new(&["src/f005.txt".to_string()], &[]).unwrap();
    let r8 = copy_with(&f.project, &f.home, "t8", &secrets);
    assert!(r8.scanned_files > 0 || r8.trusted_files > 0);
    assert!(!r8.copy_directory.join("src/f005.txt").exists(), "{r8:?}");
    let r9 = copy(&f, "t9").0;
    assert!(r9.copy_directory.join("src/f005.txt").exists(), "{r9:?}");
}

#[test]
fn a_file_too_recent_to_trust_leaves_the_base_without_a_manifest() {
    let Some(fs_) = ReflinkFs::mount_btrfs(512) else {
        return;
    };
    let f = project_in(fs_.path(), 5);
    write(&f.project, "src/f001.txt", b"just now\n");
    let (r1, _) = copy(&f, "t1");
    assert!(r1.snapshot);
    assert!(!base_of(&f).join("manifest").exists());
    // Written again within the same tick as the first copy read it: the next copy must not
    // take the base for the project.
    write(&f.project, "src/f001.txt", b"and now\n");
    let (r2, _) = copy(&f, "t2");
    assert!(r2.scanned_files > 0, "{r2:?}");
    assert_eq!(
        fs::read(r2.copy_directory.join("src/f001.txt")).unwrap(),
        b"and now\n"
    );
}

#[test]
fn copies_made_at_once_each_hold_the_project() {
    let Some(fs_) = ReflinkFs::mount_btrfs(512) else {
        return;
    };
    let f = project_in(fs_.path(), 30);
    std::thread::scope(|s| {
        for i in 0..4 {
            let f = &f;
            s.spawn(move || {
                let (r, b) = copy(f, &format!("t{i}"));
                holds_the_project(&r.copy_directory, &f.project, &["config/leak.txt"]);
                assert!(look(&b).files.is_empty());
            });
        }
    });
    let made = fs::read_dir(base_of(&f)).unwrap().count();
    assert_eq!(made, 4, "tree, baseline, manifest and lock only");
}

#[test]
fn a_snapshot_copy_is_removed_as_a_directory_and_unused_bases_are_pruned() {
    let Some(fs_) = ReflinkFs::mount_btrfs(512) else {
        return;
    };
    let f = project_in(fs_.path(), 5);
    let (r1, _) = copy(&f, "t1");
    let (r2, _) = copy(&f, "t2");
    for (r, name) in [(&r1, "t1"), (&r2, "t2")] {
        for parent in ["copies", "baselines"] {
            let parent = f.home.join(parent);
            assert!(remove_owned_dir(&f.home, &parent, &parent.join(name)).unwrap());
        }
        assert!(!r.copy_directory.exists());
    }
    let bases = f.home.join("bases");
    // In use (its lock held): kept, whatever its age.
    let lock = fs::OpenOptions::new()
        .write(true)
        .open(base_of(&f).join("lock"))
        .unwrap();
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive).unwrap();
    assert_eq!(prune_bases(&bases, Duration::ZERO), 0);
    drop(lock);
    assert_eq!(
        prune_bases(&bases, Duration::from_secs(3600)),
        0,
        "used just now"
    );
    assert_eq!(prune_bases(&bases, Duration::ZERO), 1);
    assert!(!base_of(&f).exists());
    let (r3, _) = copy(&f, "t3");
    holds_the_project(&r3.copy_directory, &f.project, &["config/leak.txt"]);
}

#[test]
fn elsewhere_a_copy_is_made_as_before() {
    let f = project_in(&std::env::temp_dir(), 5);
    let on_btrfs = fs::metadata(&f.project).is_ok()
        && rustix::fs::statfs(&f.project).is_ok_and(|s| s.f_type as u64 == 0x9123_683E);
    if on_btrfs {
        eprintln!("skipped: the temporary directory is on btrfs");
        return;
    }
    let (r, b) = copy(&f, "t1");
    assert!(!r.snapshot);
    assert!(!f.home.join("bases").read_dir().unwrap().any(|_| true));
    holds_the_project(&r.copy_directory, &f.project, &["config/leak.txt"]);
    assert!(look(&b).files.is_empty());
}

#[test]
fn a_base_is_made_again_once_it_is_old_and_a_damaged_one_is_not_handed_out() {
    let Some(fs_) = ReflinkFs::mount_btrfs(512) else {
        return;
    };
    let f = project_in(fs_.path(), 5);
    copy(&f, "t1");
    // A mark only the base's own copy has: a later copy that carries it is its snapshot.
    let base = base_of(&f);
    fs::write(base.join("tree/mark"), b"").unwrap();
    let (r2, _) = copy(&f, "t2");
    assert!(r2.copy_directory.join("mark").exists());
    // Made more than three days ago: made again (its baseline borrows the project's git
    // objects, which gc may prune two weeks after they became unreachable).
    let manifest = base.join("manifest");
    let text = fs::read_to_string(&manifest).unwrap();
    let made = regex::Regex::new(r#""made":\d+"#).unwrap();
    assert!(made.is_match(&text), "{text}");
    let old = (std::time::SystemTime::now() - Duration::from_secs(3 * 24 * 3600 + 60))
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    fs::write(
        &manifest,
        made.replace(&text, format!(r#""made":{old}"#).as_str())
            .as_ref(),
    )
    .unwrap();
    let (r3, _) = copy(&f, "t3");
    assert!(!r3.copy_directory.join("mark").exists(), "{r3:?}");
    // Made "tomorrow" (the clock set back since): as good as old.
    fs::write(base.join("tree/mark"), b"").unwrap();
    let text = fs::read_to_string(&manifest).unwrap();
    let tomorrow = old + 4 * 24 * 3600 + 24 * 3600;
    let moved = made.replace(&text, format!(r#""made":{tomorrow}"#).as_str());
    fs::write(&manifest, moved.as_ref()).unwrap();
    let (r3b, _) = copy(&f, "t3b");
    assert!(!r3b.copy_directory.join("mark").exists(), "{r3b:?}");
    holds_the_project(&r3.copy_directory, &f.project, &["config/leak.txt"]);
    // Its copy gone (a home copied as plain directories, a subvolume removed by hand): the
    // manifest matches, the snapshot fails, and the base is made again.
    fs::write(base.join("tree/mark"), b"").unwrap();
    fs::remove_dir_all(base.join("tree")).unwrap();
    fs::create_dir(base.join("tree")).unwrap();
    let (r4, b4) = copy(&f, "t4");
    holds_the_project(&r4.copy_directory, &f.project, &["config/leak.txt"]);
    assert!(look(&b4).files.is_empty());
    // A baseline directory already there is refused, and left as it was; the base is not
    // made again for it (its mark stays).
    fs::write(base.join("tree/mark"), b"").unwrap();
    fs::create_dir_all(f.home.join("baselines/t5")).unwrap();
    fs::write(f.home.join("baselines/t5/kept"), b"").unwrap();
    let limits = CopyLimits::default();
    let secrets = SecretPatterns::default();
    let sel = select(&f.project, &[], &secrets, &limits).unwrap();
    let cache = ScanCache::open(&f.home.join("scan-verdicts"), &sel.root, &secrets);
    let refused = make_copy_with_base(
        &sel,
        &f.home.join("copies/t5"),
        &f.home.join("baselines/t5"),
        &limits,
        &cache,
        &f.home.join("bases"),
    );
    assert!(refused.is_err());
    assert!(f.home.join("baselines/t5/kept").exists());
    assert!(!f.home.join("copies/t5").exists());
    assert!(base.join("tree/mark").exists());
}

#[test]
fn a_mode_changed_while_the_base_was_made_is_not_handed_out_as_before() {
    use std::os::unix::fs::PermissionsExt;
    let Some(fs_) = ReflinkFs::mount_btrfs(512) else {
        return;
    };
    let f = project_in(fs_.path(), 5);
    let limits = CopyLimits::default();
    let secrets = SecretPatterns::default();
    // Measured as 0644, made executable, and settled before the copy reads it: the copy has
    // the mode the selection saw, and its recorded state the new one.
    let sel = select(&f.project, &[], &secrets, &limits).unwrap();
    let file = f.project.join("src/f000.txt");
    fs::set_permissions(&file, fs::Permissions::from_mode(0o755)).unwrap();
    settle(&f.project);
    let cache = ScanCache::open(&f.home.join("scan-verdicts"), &sel.root, &secrets);
    make_copy_with_base(
        &sel,
        &f.home.join("copies/t1"),
        &f.home.join("baselines/t1"),
        &limits,
        &cache,
        &f.home.join("bases"),
    )
    .unwrap();
    let (r2, _) = copy(&f, "t2");
    let mode = fs::metadata(r2.copy_directory.join("src/f000.txt"))
        .unwrap()
        .mode();
    assert_eq!(
        mode & 0o100,
        0o100,
        "the copy lost the executable bit: {mode:o}"
    );
}

#[test]
fn copies_made_while_bases_are_swept_each_hold_the_project() {
    let Some(fs_) = ReflinkFs::mount_btrfs(512) else {
        return;
    };
    let f = project_in(fs_.path(), 20);
    let done = std::sync::atomic::AtomicBool::new(false);
    let bases = f.home.join("bases");
    std::thread::scope(|s| {
        let copiers: Vec<_> = (0..4)
            .map(|t| {
                let f = &f;
                s.spawn(move || {
                    for i in 0..10 {
                        let (r, b) = copy(f, &format!("c{t}-{i}"));
                        holds_the_project(&r.copy_directory, &f.project, &["config/leak.txt"]);
                        assert!(look(&b).files.is_empty());
                    }
                })
            })
            .collect();
        let sweeper = s.spawn(|| {
            let mut swept = 0;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                swept += prune_bases(&bases, Duration::ZERO);
            }
            swept
        });
        // Every copier's end first (a failed one too), so that the sweep always stops.
        let ended: Vec<_> = copiers.into_iter().map(|c| c.join()).collect();
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        let swept = sweeper.join().unwrap();
        eprintln!("{swept} bases swept while copies were made");
        for e in ended {
            if let Err(panic) = e {
                std::panic::resume_unwind(panic);
            }
        }
    });
}

#[test]
fn a_sweep_that_cannot_finish_leaves_no_base_a_copy_would_take() {
    let Some(fs_) = ReflinkFs::mount_btrfs(512) else {
        return;
    };
    let f = project_in(fs_.path(), 5);
    copy(&f, "t1");
    let stuck = base_of(&f).join("tree/src/f001.txt");
    let chattr = |flag: &str, p: &Path| {
        assert!(
            Command::new("chattr")
                .arg(flag)
                .arg(p)
                .status()
                .unwrap()
                .success()
        );
    };
    chattr("+i", &stuck);
    let bases = f.home.join("bases");
    assert_eq!(prune_bases(&bases, Duration::ZERO), 0, "the removal failed");
    let (r, b) = copy(&f, "t2");
    holds_the_project(&r.copy_directory, &f.project, &["config/leak.txt"]);
    assert!(look(&b).files.is_empty());
    // What was left is removed by a later sweep, once it can be.
    let left: Vec<PathBuf> = fs::read_dir(&bases)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(".removed-")
        })
        .collect();
    assert_eq!(left.len(), 1, "{left:?}");
    chattr("-i", &left[0].join("tree/src/f001.txt"));
    prune_bases(&bases, Duration::from_secs(3600));
    assert!(!left[0].exists());
}

#[test]
fn a_home_whose_path_is_not_utf8_gets_snapshots_too() {
    use std::os::unix::ffi::OsStrExt;
    let Some(fs_) = ReflinkFs::mount_btrfs(512) else {
        return;
    };
    let f = project_in(fs_.path(), 5);
    let home = fs_.path().join(std::ffi::OsStr::from_bytes(b"home-\xff"));
    copy_with(&f.project, &home, "t1", &SecretPatterns::default());
    let (r, b) = copy_full(&f.project, &home, "t2", &SecretPatterns::default());
    assert!(r.snapshot && r.scanned_files == 0, "{r:?}");
    holds_the_project(&r.copy_directory, &f.project, &["config/leak.txt"]);
    assert!(look(&b).files.is_empty());
}

#[test]
fn a_base_that_cannot_be_made_leaves_the_copy_made_in_full() {
    let Some(fs_) = ReflinkFs::mount_btrfs(512) else {
        return;
    };
    let f = project_in(fs_.path(), 5);
    // Where the base would go, a file: no base can be made there.
    fs::create_dir_all(f.home.join("bases")).unwrap();
    fs::write(base_of(&f), b"not a base").unwrap();
    let (r, b) = copy(&f, "t1");
    assert!(!r.snapshot, "{r:?}");
    holds_the_project(&r.copy_directory, &f.project, &["config/leak.txt"]);
    assert!(look(&b).files.is_empty());
    assert_eq!(fs::read(base_of(&f)).unwrap(), b"not a base");
}

#[test]
fn a_selection_that_fails_leaves_nothing_of_the_snapshots_taken_beside_it() {
    let Some(fs_) = ReflinkFs::mount_btrfs(512) else {
        return;
    };
    let f = project_in(fs_.path(), 5);
    copy(&f, "t1");
    assert!(base_of(&f).join("manifest").is_file());
    // The base is snapshotted while the selection runs; the selection then fails (an include
    // path that matches no file): both snapshots are removed, the base is kept.
    let err = try_copy(
        &f.project,
        &f.home,
        "t2",
        &SecretPatterns::default(),
        &["missing"],
    )
    .unwrap_err();
    assert_eq!(err.code, legate_core::ErrorCode::InvalidIncludePath);
    assert!(!f.home.join("copies/t2").exists());
    assert!(!f.home.join("baselines/t2").exists());
    assert!(base_of(&f).join("manifest").is_file());
    // An include path that narrows the selection: the base does not hold it, its snapshots
    // are removed, and the copy holds the narrower selection.
    let (r, _) = try_copy(
        &f.project,
        &f.home,
        "t3",
        &SecretPatterns::default(),
        &["src/"],
    )
    .unwrap();
    assert_eq!(files_under(&r.copy_directory).len(), 5, "{r:?}");
    assert!(!r.copy_directory.join("data/big.bin").exists());
}
