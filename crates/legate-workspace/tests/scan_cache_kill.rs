//! The scan verdict cache's writer killed with SIGKILL: a real child process (this test binary
//! again) makes cached copies of a project in a loop, saying after each that its cache was
//! written, and dies by SIGKILL in three ways, in turn:
//! - sent at a random moment of its loop, after a save;
//! - sent just after the cache's directory shows a write begin (which lands in the write
//!   itself only when this process gets a core in time: on an idle machine, mostly);
//! - sent by itself, from a `SIGXFSZ` handler, when its write reaches a random byte (its
//!   file size limit): a write cut at a known place, whatever the machine's load.
//!
//! After each death the cache file must be a whole one (the old or the new, never a cut one),
//! the next copy must succeed with every verdict right, and the only temporary files are the
//! killed writers' (one at most each), swept once stale. Every cut temporary file the deaths
//! left, put in the cache's place, must be refused.

#![allow(clippy::unwrap_used, clippy::expect_used)]
// The child's `SIGXFSZ` handler.
#![allow(unsafe_code)]

mod common;
#[path = "common/settled.rs"]
mod settled;

use common::Fixture;
use legate_workspace::*;
use rustix::fs::inotify;
use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
use settled::{leak, settle};
use std::collections::hash_map::RandomState;
use std::fs;
use std::hash::BuildHasher;
use std::io::{BufRead, BufReader, Read, Write};
use std::mem::MaybeUninit;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant, SystemTime};

/// Set in the child: the project, Legate's home, and (when its write is to be cut) the file
/// size at which it kills itself.
const PROJECT: &str = "LEGATE_TEST_SCAN_CACHE_KILL_PROJECT";
const HOME: &str = "LEGATE_TEST_SCAN_CACHE_KILL_HOME";
const CUT_AT: &str = "LEGATE_TEST_SCAN_CACHE_KILL_CUT_AT";
/// What the child prints after each copy (its cache written).
const SAVED: &str = "SAVED ";
/// Files under `bulk/`, copied once, their verdicts rewritten by every later save (on paths
/// of 3 kB, so that the cache file is about 2 MB and its write takes a while).
const BULK: usize = 600;
/// Clean files under `hot/`, which the child copies again and again; `hot/leak.txt` besides
/// holds a credential.
const HOT: usize = 8;
const LEAK: &str = "hot/leak.txt";
/// Deaths: a third of each kind.
const ROUNDS: usize = 12;
/// The smallest cut: above any file the copy writes but the cache.
const MIN_CUT: u64 = 4096;
/// The longest wait for anything the child does.
const BOUND: Duration = Duration::from_secs(120);

/// Directory `n` under `bulk/`, sixteen levels of long names deep: the longer a path, the
/// larger its verdict's entry.
fn deep(n: usize) -> String {
    let level = format!("{n}{}", "d".repeat(200));
    format!("bulk/{}", vec![level; 16].join("/"))
}

fn state(home: &Path) -> PathBuf {
    home.join("scan-verdicts")
}

/// A cached copy of the project's `include` path, as task `name`.
fn copy_in(project: &Path, home: &Path, name: &str, include: &str) -> CopyReport {
    let limits = CopyLimits::default();
    let secrets = SecretPatterns::default();
    let sel = select(project, &[include.to_string()], &secrets, &limits).unwrap();
    let cache = ScanCache::open(&state(home), &sel.root, &secrets);
    make_copy_cached(&sel, &home.join("copies").join(name), &limits, Some(&cache)).unwrap()
}

/// `SIGXFSZ`'s handler in the child: the write that passed the limit was cut there; die.
extern "C" fn kill_self(_: libc::c_int) {
    // SAFETY: kill(2) and getpid(2) are async-signal-safe and touch no memory of ours.
    unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
}

/// The child's half: does nothing unless started by the test below. Copies `hot/` until
/// killed (or until the parent is gone: its end of stdin closed).
#[test]
fn cache_writer() {
    let (Some(project), Some(home)) = (std::env::var_os(PROJECT), std::env::var_os(HOME)) else {
        return;
    };
    std::thread::spawn(|| {
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
        std::process::exit(0);
    });
    if let Some(at) = std::env::var_os(CUT_AT) {
        let at: u64 = at.to_str().unwrap().parse().unwrap();
        // SAFETY: the handler only calls kill(2) (see above).
        let old =
            unsafe { libc::signal(libc::SIGXFSZ, kill_self as *const () as libc::sighandler_t) };
        assert_ne!(old, libc::SIG_ERR);
        let limit = Rlimit {
            current: Some(at),
            maximum: getrlimit(Resource::Fsize).maximum,
        };
        setrlimit(Resource::Fsize, limit).unwrap();
    }
    let (project, home) = (PathBuf::from(project), PathBuf::from(home));
    let mut out = std::io::stdout();
    for i in 0..100_000 {
        let name = format!("w{}-{i}", std::process::id());
        let r = copy_in(&project, &home, &name, "hot");
        fs::remove_dir_all(&r.copy_directory).unwrap();
        writeln!(out, "{SAVED}{i}").unwrap();
        out.flush().unwrap();
    }
}

/// The child, its stdout read line by line on a thread; killed and reaped on drop.
struct Writer {
    child: Child,
    lines: Receiver<String>,
}

impl Writer {
    /// The child, killing itself when a file it writes reaches `cut_at` bytes when given.
    fn start(f: &Fixture, cut_at: Option<u64>) -> Self {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args(["--exact", "cache_writer", "--nocapture", "--test-threads=1"])
            .env(PROJECT, &f.project)
            .env(HOME, &f.home)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if let Some(at) = cut_at {
            cmd.env(CUT_AT, at.to_string());
        }
        let mut child = cmd.spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self { child, lines }
    }

    /// Waits for the child's next saved cache (`false`: it ended instead).
    fn saved(&mut self) -> bool {
        let deadline = Instant::now() + BOUND;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.starts_with(SAVED) => return true,
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout) => panic!("the writer saved nothing in {BOUND:?}"),
                Err(RecvTimeoutError::Disconnected) => return false,
            }
        }
    }

    /// Waits until `dir` shows a write begin (a file created or written in it), then
    /// `delay` more. It spins rather than sleeps: a waiter woken from a sleep can come too
    /// late, when the write it waited for is over.
    fn writing(&mut self, dir: &Path, delay: Duration) {
        let fd =
            inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK).unwrap();
        inotify::add_watch(
            &fd,
            dir,
            inotify::WatchFlags::CREATE | inotify::WatchFlags::MODIFY,
        )
        .unwrap();
        let mut buf = [MaybeUninit::uninit(); 4096];
        let mut events = inotify::Reader::new(&fd, &mut buf);
        let deadline = Instant::now() + BOUND;
        for spin in 0u64.. {
            match events.next() {
                Ok(_) => break,
                Err(rustix::io::Errno::AGAIN) => {}
                Err(e) => panic!("inotify: {e}"),
            }
            if spin % 4096 == 0 {
                assert!(Instant::now() < deadline, "the writer wrote nothing");
                assert!(self.child.try_wait().unwrap().is_none(), "the writer ended");
            }
        }
        let t = Instant::now();
        while t.elapsed() < delay {
            std::hint::spin_loop();
        }
    }

    /// Kills the child (unless it is dead already) and reaps it: it must have died by
    /// SIGKILL.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let status = self.child.wait().unwrap();
        assert_eq!(status.signal(), Some(libc::SIGKILL), "{status}");
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A small generator, seeded at random (the seed printed, for a rerun's sake).
struct Rng(u64);

impl Rng {
    fn new() -> Self {
        let seed = RandomState::new().hash_one(SystemTime::now()) | 1;
        eprintln!("seed {seed}");
        Self(seed)
    }

    /// A number in `0..n`.
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

/// The project's one cache directory.
fn cache_dir(f: &Fixture) -> PathBuf {
    let dirs: Vec<PathBuf> = fs::read_dir(state(&f.home))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    dirs[0].clone()
}

/// The temporary files in the cache's directory and their sizes; anything else there but
/// the cache file fails the test.
fn temporaries(dir: &Path) -> Vec<(PathBuf, u64)> {
    let mut temps = Vec::new();
    for e in fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().into_string().unwrap();
        if name.starts_with(".verdicts.tmp-") {
            temps.push((e.path(), e.metadata().unwrap().len()));
        } else {
            assert_eq!(
                name, "verdicts",
                "an unexpected file in the cache's directory"
            );
        }
    }
    temps
}

/// How many verdicts a cache opened now holds (0: absent or refused).
fn verdicts(f: &Fixture) -> usize {
    let root = fs::canonicalize(&f.project).unwrap();
    ScanCache::open(&state(&f.home), &root, &SecretPatterns::default()).len()
}

/// A copy of `hot/` with the cache: it succeeds, holds every clean file as the project does,
/// leaves the credential out, and trusts every verdict when the cache was whole, none when
/// not.
fn check_copy(f: &Fixture, name: &str, whole: bool) {
    let r = copy_in(&f.project, &f.home, name, "hot");
    assert_eq!(r.included_files, HOT, "{r:?}");
    let blocked: Vec<(&str, &str)> = r
        .blocked_files
        .iter()
        .map(|b| (b.path.as_str(), b.reason.as_str()))
        .collect();
    assert_eq!(blocked, [(LEAK, "SECRET_CONTENT")], "{r:?}");
    assert!(!r.copy_directory.join(LEAK).exists());
    for i in 0..HOT {
        let p = format!("hot/f{i}.txt");
        assert_eq!(
            fs::read(r.copy_directory.join(&p)).unwrap(),
            fs::read(f.project.join(&p)).unwrap()
        );
    }
    let expected = if whole { (0, HOT + 1) } else { (HOT + 1, 0) };
    assert_eq!((r.scanned_files, r.trusted_files), expected, "{r:?}");
}

#[test]
fn a_cache_writer_killed_at_any_moment_leaves_a_whole_cache_or_the_old_one() {
    let texts: Vec<(String, Vec<u8>)> = (0..BULK)
        .map(|i| (format!("{}/f{i}.txt", deep(i % 4)), format!("bulk {i}\n")))
        .chain((0..HOT).map(|i| (format!("hot/f{i}.txt"), format!("hot {i}\n"))))
        .chain([(LEAK.to_string(), format!("key = {}\n", leak()))])
        .map(|(p, t)| (p, t.into_bytes()))
        .collect();
    let files: Vec<(&str, &[u8])> = texts
        .iter()
        .map(|(p, b)| (p.as_str(), b.as_slice()))
        .collect();
    let f = Fixture::new(&files);
    f.commit_all();
    settle(&f.project);
    // Every file's verdict recorded: every later save writes the same entries.
    let first = copy_in(&f.project, &f.home, "bulk", "bulk");
    assert_eq!((first.scanned_files, first.included_files), (BULK, BULK));
    check_copy(&f, "seed", false);
    let all = BULK + HOT + 1;
    assert_eq!(verdicts(&f), all);
    let dir = cache_dir(&f);
    let whole_len = fs::metadata(dir.join("verdicts")).unwrap().len();

    let mut rng = Rng::new();
    let mut left_by = [0; 3];
    let mut seen = Vec::new();
    let mut cuts = Vec::new();
    for round in 0..ROUNDS {
        let kind = round % 3;
        let mut cut_at = None;
        match kind {
            0 => {
                // Anywhere in the loop: a random part of one copy's time after a save.
                let mut w = Writer::start(&f, None);
                assert!(w.saved(), "the writer ended");
                let t = Instant::now();
                assert!(w.saved(), "the writer ended");
                let period = t.elapsed().as_micros() as u64;
                std::thread::sleep(Duration::from_micros(rng.below(period)));
                w.kill();
            }
            1 => {
                // Just after a write in the cache's directory begins.
                let mut w = Writer::start(&f, None);
                assert!(w.saved(), "the writer ended");
                w.writing(&dir, Duration::from_micros(rng.below(300)));
                w.kill();
            }
            _ => {
                // At a random byte of its first write of the cache.
                let at = MIN_CUT + rng.below(whole_len - MIN_CUT);
                let mut w = Writer::start(&f, Some(at));
                assert!(
                    !w.saved(),
                    "a cache of {whole_len} bytes saved under a limit of {at}"
                );
                w.kill();
                cut_at = Some(at);
            }
        }

        // The dead writer's temporary file, if it left one: of bounded size; a cut one kept
        // to be tried in the cache's place below.
        let temps = temporaries(&dir);
        assert!(
            temps.len() <= round + 1,
            "{temps:?} after {} deaths",
            round + 1
        );
        assert!(temps.iter().all(|(_, len)| *len <= whole_len), "{temps:?}");
        for (t, len) in temps.iter().filter(|t| !seen.contains(*t)) {
            left_by[kind] += 1;
            if *len < whole_len {
                cuts.push(fs::read(t).unwrap());
            }
        }
        // The cache file is the old one or the new one, and the next copy trusts it.
        let held = verdicts(&f);
        let len = fs::metadata(dir.join("verdicts")).map_or(0, |m| m.len());
        let whole = held == all;
        check_copy(&f, &format!("after{round}"), whole);
        assert!(
            whole,
            "round {round}: the cache file left is not a whole one ({held} verdicts, {len} bytes)"
        );
        // The cut write was the temporary file's.
        if let Some(at) = cut_at {
            assert!(temps.iter().any(|(_, len)| *len == at), "{at}: {temps:?}");
        }
        // That copy's write left no temporary file (it may have swept stale ones).
        seen = temporaries(&dir);
        assert!(seen.iter().all(|t| temps.contains(t)), "{seen:?}");
    }
    eprintln!("temporary files left by deaths anywhere, in the write, at a byte: {left_by:?}");
    assert!(cuts.len() >= ROUNDS / 3, "{} cut files", cuts.len());

    // The files the last copy did not select kept their verdicts through every death.
    let r = copy_in(&f.project, &f.home, "bulk-again", "bulk");
    assert_eq!((r.scanned_files, r.trusted_files), (0, BULK), "{r:?}");
    assert_eq!(r.included_files, BULK);

    // Each cut file a killed writer left, in the cache's place, is refused: every file is
    // read and scanned again, the credential still left out.
    let good = fs::read(dir.join("verdicts")).unwrap();
    for (i, bytes) in cuts.iter().enumerate() {
        fs::write(dir.join("verdicts"), bytes).unwrap();
        assert_eq!(verdicts(&f), 0, "a cut cache file of {} bytes", bytes.len());
        check_copy(&f, &format!("cut{i}"), false);
    }
    fs::write(dir.join("verdicts"), &good).unwrap();

    // Stale, they are swept by the next write, and nothing else is left.
    let stale = SystemTime::now() - Duration::from_secs(600);
    for (t, _) in temporaries(&dir) {
        fs::File::options()
            .write(true)
            .open(&t)
            .unwrap()
            .set_modified(stale)
            .unwrap();
    }
    check_copy(&f, "swept", true);
    assert_eq!(temporaries(&dir), Vec::new());
}
