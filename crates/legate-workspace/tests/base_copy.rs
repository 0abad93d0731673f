//! Copies that are snapshots of the project's base, on a btrfs image on a loop device: a
//! later copy of an unchanged project reads and makes no file, holds exactly the project's
//! selection, shares its blocks, and is its own (the agent's writes reach neither the base
//! nor another copy); any change to a file, to the rules or to the selection makes the base
//! again; a file too recent to trust leaves it without a manifest; a `kill -9` of a process
//! making it at any moment leaves nothing a later copy takes for a made base.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[path = "common/reflink_fs.rs"]
mod reflink_fs;
#[path = "common/settled.rs"]
mod settled;

use common::{Fixture, files_under, write};
use legate_review::preview;
use legate_workspace::*;
use reflink_fs::ReflinkFs;
use settled::{leak, settle};
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A copy as the engine makes it, with the project's verdict cache and bases, as task `name`.
fn copy_with(project: &Path, home: &Path, name: &str, secrets: &SecretPatterns) -> CopyReport {
    copy_full(project, home, name, secrets).0
}

fn copy_full(
    project: &Path,
    home: &Path,
    name: &str,
    secrets: &SecretPatterns,
) -> (CopyReport, Baseline) {
    let limits = CopyLimits::default();
    let sel = select(project, &[], secrets, &limits).unwrap();
    let cache = ScanCache::open(&home.join("scan-verdicts"), &sel.root, secrets);
    make_copy_with_base(
        &sel,
        &home.join("copies").join(name),
        &home.join("baselines").join(name),
        &limits,
        &cache,
        &home.join("bases"),
    )
    .unwrap()
}

fn copy(f: &Fixture, name: &str) -> (CopyReport, Baseline) {
    copy_full(&f.project, &f.home, name, &SecretPatterns::default())
}

/// Deterministic bytes of no credential shape.
fn filler(seed: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| b'a' + ((i * 7 + seed * 13) % 26) as u8)
        .collect()
}

/// A committed project on `dir`'s file system: `n` files under `src/`, 4 MiB of data, one
/// file holding a credential, one untracked file; settled.
fn project_in(dir: &Path, n: usize) -> Fixture {
    let texts: Vec<(String, Vec<u8>)> = (0..n)
        .map(|i| (format!("src/f{i:03}.txt"), filler(i, 100 + i)))
        .collect();
    let mut files: Vec<(&str, &[u8])> = texts
        .iter()
        .map(|(p, b)| (p.as_str(), b.as_slice()))
        .collect();
    let big = filler(7, 4 * 1024 * 1024);
    files.push(("data/big.bin", &big));
    let leaky = format!("key = {}\n", leak());
    files.push(("config/leak.txt", leaky.as_bytes()));
    let f = Fixture::new_in(dir, &files);
    f.commit_all();
    write(&f.project, "notes/untracked.txt", b"not committed yet\n");
    settle(&f.project);
    f
}

/// Every file of the copy holds the project's bytes, and the copy holds every file of the
/// project but `left_out` (and `.git`).
fn holds_the_project(copy: &Path, project: &Path, left_out: &[&str]) {
    let mut want = files_under(project);
    want.retain(|p| !left_out.contains(&p.as_str()));
    assert_eq!(files_under(copy), want, "the copy's files");
    for p in &want {
        assert_eq!(
            fs::read(copy.join(p)).unwrap(),
            fs::read(project.join(p)).unwrap(),
            "{p}"
        );
    }
}

/// The copy's preview (its change against its baseline).
fn look(b: &Baseline) -> legate_workspace::Preview {
    preview(b, &SecretPatterns::default(), &CopyLimits::default()).unwrap()
}

fn base_of(f: &Fixture) -> PathBuf {
    base_dir(
        &f.home.join("bases"),
        &fs::canonicalize(&f.project).unwrap(),
    )
}

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

/// Set in the child: the project and Legate's home.
const PROJECT: &str = "LEGATE_TEST_BASE_KILL_PROJECT";
const HOME: &str = "LEGATE_TEST_BASE_KILL_HOME";

/// The child's half: does nothing unless started by the test below. Copies the project
/// under two sets of rules in turn (one leaving `src/f001.txt` out), so that every copy
/// makes the base again and writes its manifest, until killed, saying after each copy that
/// it made one.
#[test]
fn base_maker() {
    let (Some(project), Some(home)) = (std::env::var_os(PROJECT), std::env::var_os(HOME)) else {
        return;
    };
    let (project, home) = (PathBuf::from(project), PathBuf::from(home));
    let mut out = std::io::stdout();
    let rules = [
        SecretPatterns::new(&["src/f001.txt".to_string()], &[]).unwrap(),
        SecretPatterns::default(),
    ];
    for i in 0..100_000 {
        let name = format!("k{}-{i}", std::process::id());
        copy_with(&project, &home, &name, &rules[i % 2]);
        writeln!(out, "MADE {i}").unwrap();
        out.flush().unwrap();
    }
}

/// Returns as soon as `name` is renamed into `dir` (`inotify`), or `child` ends.
fn renamed_in(dir: &Path, name: &str, child: &mut std::process::Child) {
    use rustix::fs::inotify;
    use std::mem::MaybeUninit;
    let fd = inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK).unwrap();
    inotify::add_watch(&fd, dir, inotify::WatchFlags::MOVED_TO).unwrap();
    let mut buf = [MaybeUninit::uninit(); 4096];
    let mut events = inotify::Reader::new(&fd, &mut buf);
    let deadline = Instant::now() + Duration::from_secs(120);
    for spin in 0u64.. {
        match events.next() {
            Ok(e)
                if e.file_name()
                    .is_some_and(|n| n.to_bytes() == name.as_bytes()) =>
            {
                return;
            }
            Ok(_) | Err(rustix::io::Errno::AGAIN) => {}
            Err(e) => panic!("inotify: {e}"),
        }
        if spin % 4096 == 0 {
            assert!(Instant::now() < deadline, "nothing was renamed in");
            if child.try_wait().unwrap().is_some() {
                return;
            }
        }
    }
}

#[test]
fn a_kill_while_the_base_is_made_leaves_nothing_a_later_copy_takes_for_it() {
    let Some(fs_) = ReflinkFs::mount_btrfs(768) else {
        return;
    };
    let f = project_in(fs_.path(), 300);
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as u64;
    for round in 0..8u64 {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "base_maker", "--nocapture", "--test-threads=1"])
            .env(PROJECT, &f.project)
            .env(HOME, &f.home)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        // At least one base made, then a kill somewhere in a later one.
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let line = lines.next().expect("the child ended").unwrap();
            if line.starts_with("MADE ") {
                break;
            }
            assert!(Instant::now() < deadline);
        }
        if round % 2 == 0 {
            // At a random moment of a later copy.
            let delay = (seed.wrapping_mul(round + 7) >> 3) % 300;
            std::thread::sleep(Duration::from_millis(delay));
        } else {
            // The moment the next manifest is renamed in: whatever follows it in the making
            // of a base is cut.
            renamed_in(&base_of(&f), "manifest", &mut child);
        }
        child.kill().unwrap();
        child.wait().unwrap();
        drop(lines);
        // What it left: a later copy holds the project as it is now, exactly.
        settle(&f.project);
        let (r, b) = copy(&f, &format!("after{round}"));
        holds_the_project(&r.copy_directory, &f.project, &["config/leak.txt"]);
        assert!(look(&b).files.is_empty(), "round {round}");
        let (again, _) = copy(&f, &format!("again{round}"));
        assert_eq!(again.scanned_files, 0, "round {round}: {again:?}");
        holds_the_project(&again.copy_directory, &f.project, &["config/leak.txt"]);
        let mut left: Vec<String> = fs::read_dir(base_of(&f))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            ["baseline", "lock", "manifest", "tree"],
            "round {round}"
        );
    }
}
