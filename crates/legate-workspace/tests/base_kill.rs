//! A `kill -9` of a process making a project's base, on a btrfs image: a real child (this
//! test binary again) makes bases under two sets of rules in turn until killed, at a random
//! moment or the moment a manifest is renamed in; after each death the next copy must hold
//! the project exactly, and only the base's own files are left.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "common/base_fixture.rs"]
mod base_fixture;
mod common;
#[path = "common/reflink_fs.rs"]
mod reflink_fs;
#[path = "common/settled.rs"]
mod settled;

use base_fixture::*;
use legate_workspace::*;
use reflink_fs::ReflinkFs;
use settled::settle;
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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
