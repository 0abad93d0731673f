//! One git process from start to proven end: a time bound, its own process group, the group
//! stopped when the bound passes, and the end proven before the operation answers.
//!
//! This module owns the bound ([`GitBounds`], process-wide, set once by the embedding
//! program), the run itself, and the marker that blocks a copy whose git could not be shown
//! gone. A run ends in one of three ways: git exits and its pipes close (its output is
//! returned); the bound passes (or the run's watch says stop: its error is the answer), the group is asked to stop (`SIGTERM`), then killed
//! (`SIGKILL`) after a grace window, and its end is proven (the exit reaped, both pipes
//! closed, the group empty: an `INTERNAL` error saying git was stopped); or that proof never
//! comes, because something holds git's pipes open outside its group, or the group cannot be
//! emptied (`GIT_CLEANUP_UNVERIFIED`). In the last case our ends of the pipes are let go (the
//! threads reading them end when the last holder closes them), and, for git on a private
//! baseline, a marker in the baseline directory blocks the copy: no turn, preview, test,
//! integration or discard uses it until a person removes the marker (see
//! `docs/troubleshooting.md`).
//!
//! It must never claim a cleanup it did not prove, signal any group but the one it started,
//! or run git through a shell.

use legate_core::proc_stat::ProcStat;
use legate_core::{Error, ErrorCode};
use rustix::process::{Pid, Signal, kill_process_group, test_kill_process_group};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{PoisonError, RwLock};
use std::time::{Duration, Instant};

/// The name of the marker file in a baseline directory whose git could not be shown gone.
pub const CLEANUP_MARKER: &str = "git-cleanup-unverified";

/// How git is started and how long one git process may take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitBounds {
    /// The git executable (a bare name is looked up on `PATH`).
    pub program: PathBuf,
    /// How long one git process may run before its group is stopped.
    pub time_limit: Duration,
    /// How long each stop step (`SIGTERM`, then `SIGKILL`) waits for the proof of the end.
    pub grace: Duration,
}

impl Default for GitBounds {
    fn default() -> Self {
        Self {
            program: PathBuf::from("git"),
            time_limit: Duration::from_secs(600),
            grace: Duration::from_secs(5),
        }
    }
}

static BOUNDS: RwLock<Option<GitBounds>> = RwLock::new(None);

/// Sets the bounds every later git run uses (the program embedding this crate calls it once,
/// from its configuration).
pub fn set_git_bounds(bounds: GitBounds) {
    *BOUNDS.write().unwrap_or_else(PoisonError::into_inner) = Some(bounds);
}

/// The bounds git runs use now.
pub fn git_bounds() -> GitBounds {
    BOUNDS
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
        .unwrap_or_default()
}

/// `program` as git is started: a bare name found on `path` (the `PATH` the child keeps) is
/// given as the absolute path the child's own lookup would take, so that the standard
/// library starts it with `posix_spawn` (a child that shares the engine's memory until it
/// runs git) instead of `fork`, whose copy of a large engine's page tables was the largest
/// single cost of starting git (issue 33). Anything less certain (a name with a `/`, no
/// `PATH`, a relative or empty entry before a match, no executable file on it) is left as
/// it was, for the child to look up itself as before.
pub(crate) fn spawnable(program: &Path, path: Option<&std::ffi::OsStr>) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let bare = program.components().count() == 1 && !program.as_os_str().is_empty();
    let (true, Some(path)) = (bare && program.is_relative(), path) else {
        return program.to_path_buf();
    };
    for dir in std::env::split_paths(path) {
        if !dir.is_absolute() {
            return program.to_path_buf();
        }
        let candidate = dir.join(program);
        if std::fs::metadata(&candidate)
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        {
            return candidate;
        }
    }
    program.to_path_buf()
}

/// What a finished git process gave.
pub(crate) struct Finished {
    pub(crate) status: ExitStatus,
    pub(crate) stdout: Vec<u8>,
    pub(crate) stderr: Vec<u8>,
}

/// One end a run waits for.
enum End {
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
    Exit(std::io::Result<ExitStatus>),
}

/// What has arrived so far.
#[derive(Default)]
struct Ends {
    stdout: Option<Vec<u8>>,
    stderr: Option<Vec<u8>>,
    exit: Option<std::io::Result<ExitStatus>>,
}

impl Ends {
    fn complete(&self) -> bool {
        self.stdout.is_some() && self.stderr.is_some() && self.exit.is_some()
    }

    /// Takes what arrives until every end is in or `until` passes; whether all are in.
    fn collect(&mut self, rx: &Receiver<End>, until: Instant) -> bool {
        while !self.complete() {
            let left = until.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(End::Stdout(b)) => self.stdout = Some(b),
                Ok(End::Stderr(b)) => self.stderr = Some(b),
                Ok(End::Exit(s)) => self.exit = Some(s),
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => return false,
            }
        }
        true
    }
}

/// How often a watched run asks its watch whether to stop.
const WATCH_EVERY: Duration = Duration::from_millis(20);

/// What a watch says of a run going on: `Some(error)` stops it (its group stopped and its
/// end proven, as past the bound) and the run answers that error.
pub(crate) type Watch<'a> = &'a dyn Fn() -> Option<Error>;

/// Runs `cmd` (git, with `input` on stdin) in its own process group within the bounds,
/// asking `watch`, when given, every [`WATCH_EVERY`] whether to stop git before it ends.
/// `what` names the command in errors; `baseline` is the baseline directory to block when
/// the end cannot be proven.
pub(crate) fn run_watched(
    mut cmd: Command,
    input: Option<&[u8]>,
    what: &str,
    baseline: Option<&Path>,
    watch: Option<Watch<'_>>,
) -> Result<Finished, Error> {
    use std::os::unix::process::CommandExt;
    let bounds = git_bounds();
    cmd.process_group(0)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| {
        Error::caused_by(
            ErrorCode::Internal,
            "git could not be started (is it installed?)",
            e,
        )
    })?;
    let group = Pid::from_raw(child.id() as i32);
    let (tx, rx) = mpsc::channel();
    if let (Some(bytes), Some(mut stdin)) = (input, child.stdin.take()) {
        let bytes = bytes.to_vec();
        std::thread::spawn(move || {
            let _ = stdin.write_all(&bytes);
        });
    }
    if let Some(out) = child.stdout.take() {
        read_to_end(out, tx.clone(), End::Stdout);
    }
    if let Some(err) = child.stderr.take() {
        read_to_end(err, tx.clone(), End::Stderr);
    }
    std::thread::spawn(move || {
        let _ = tx.send(End::Exit(child.wait()));
    });
    let mut ends = Ends::default();
    let deadline = Instant::now() + bounds.time_limit;
    let mut stopped_by = None;
    let collected = loop {
        let Some(watch) = watch else {
            break ends.collect(&rx, deadline);
        };
        if ends.collect(&rx, deadline.min(Instant::now() + WATCH_EVERY)) {
            break true;
        }
        if let Some(error) = watch() {
            stopped_by = Some(error);
            break false;
        }
        if Instant::now() >= deadline {
            break false;
        }
    };
    if collected {
        let status = ends
            .exit
            .take()
            .unwrap_or_else(|| Err(std::io::ErrorKind::Other.into()));
        let status = status
            .map_err(|e| Error::caused_by(ErrorCode::Internal, format!("git {what} failed"), e))?;
        return Ok(Finished {
            status,
            stdout: ends.stdout.take().unwrap_or_default(),
            stderr: ends.stderr.take().unwrap_or_default(),
        });
    }
    // The bound passed: ask the group to stop, then kill it, and prove the end.
    let mut proven = false;
    for signal in [Signal::TERM, Signal::KILL] {
        if let Some(g) = group {
            let _ = kill_process_group(g, signal);
        }
        let until = Instant::now() + bounds.grace;
        if ends.collect(&rx, until) && group_empty(group, until) {
            proven = true;
            break;
        }
    }
    let secs = bounds.time_limit.as_secs_f64();
    if proven {
        return Err(stopped_by.unwrap_or_else(|| {
            Error::internal(format!(
                "git {what} did not finish within {secs}s and was stopped"
            ))
        }));
    }
    // Our ends of the pipes go with `rx`'s senders when their holders close them; nothing
    // more is read from them.
    drop(rx);
    let pgid = group.map(|g| g.as_raw_nonzero().get()).unwrap_or(0);
    let blocked = baseline.map(|dir| block(dir, what, pgid));
    let tail = match blocked {
        Some(Ok(marker)) => format!(
            "; the copy is blocked until the marker {} is removed",
            marker.display()
        ),
        Some(Err(_)) => "; the copy's marker could not be written, do not use the copy".into(),
        None => String::new(),
    };
    let why = match &stopped_by {
        Some(error) => format!("was stopped ({})", error.message),
        None => format!("did not finish within {secs}s"),
    };
    Err(Error::new(
        ErrorCode::GitCleanupUnverified,
        format!(
            "git {what} {why} and its end could not be proven after it was stopped (process group {pgid} or a process holding its output remains){tail}"
        ),
    ))
}

/// Reads `pipe` to its end on a thread of its own and sends what it read as `end`.
fn read_to_end(
    mut pipe: impl Read + Send + 'static,
    tx: mpsc::Sender<End>,
    end: fn(Vec<u8>) -> End,
) {
    std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = pipe.read_to_end(&mut b);
        let _ = tx.send(end(b));
    });
}

/// Whether the group is empty by `until`: no process of it is left but zombies (a killed
/// child re-parented to a slow reaper holds nothing). Read from `/proc`; where that cannot be
/// read, any process the group can still be signalled in counts.
fn group_empty(group: Option<Pid>, until: Instant) -> bool {
    let Some(g) = group else {
        return true;
    };
    loop {
        let live = match live_in_group(g.as_raw_nonzero().get()) {
            Some(n) => n > 0,
            None => test_kill_process_group(g).is_ok(),
        };
        if !live {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// How many processes of group `pgid` are not zombies, from `/proc/<pid>/stat`; `None` when
/// `/proc` cannot be read.
fn live_in_group(pgid: i32) -> Option<usize> {
    let mut n = 0;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        if !entry
            .file_name()
            .as_encoded_bytes()
            .iter()
            .all(u8::is_ascii_digit)
        {
            continue;
        }
        if std::fs::read(entry.path().join("stat"))
            .ok()
            .and_then(|line| ProcStat::parse(&line))
            .is_some_and(|stat| stat.pgrp == pgid && stat.is_alive())
        {
            n += 1;
        }
    }
    Some(n)
}

/// Writes the marker blocking the copy of the baseline `dir`; returns its path.
fn block(dir: &Path, what: &str, pgid: i32) -> std::io::Result<PathBuf> {
    let marker = dir.join(CLEANUP_MARKER);
    std::fs::write(
        &marker,
        format!("git {what} (process group {pgid}) could not be shown gone\n"),
    )?;
    Ok(marker)
}

/// `GIT_CLEANUP_UNVERIFIED` when the baseline directory `dir` carries the marker.
pub(crate) fn check_unblocked(dir: &Path) -> Result<(), Error> {
    let marker = dir.join(CLEANUP_MARKER);
    if std::fs::symlink_metadata(&marker).is_ok() {
        return Err(Error::new(
            ErrorCode::GitCleanupUnverified,
            format!(
                "a git process of this copy could not be shown gone, so the copy is blocked (no turn, preview, test, integration or discard); end the process group {} names, then remove that file",
                marker.display()
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::spawnable;
    use std::ffi::OsString;
    use std::os::unix::fs::PermissionsExt;
    use std::path::Path;

    fn file(dir: &Path, name: &str, mode: u32) {
        let p = dir.join(name);
        std::fs::write(&p, b"#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    fn path(dirs: &[&Path]) -> OsString {
        std::env::join_paths(dirs).unwrap()
    }

    #[test]
    fn a_bare_name_is_the_first_executable_file_on_path_as_the_child_would_find_it() {
        let (a, b, c) = (
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
        );
        file(a.path(), "git", 0o644);
        std::fs::create_dir(b.path().join("git")).unwrap();
        file(c.path(), "git", 0o755);
        let on = path(&[a.path(), b.path(), c.path()]);
        assert_eq!(spawnable(Path::new("git"), Some(&on)), c.path().join("git"));
    }

    #[test]
    fn anything_less_certain_is_left_for_the_child_to_look_up() {
        let a = tempfile::tempdir().unwrap();
        file(a.path(), "git", 0o755);
        let git = Path::new("git");
        // A relative entry before the match: the child's lookup decides, as before.
        let relative = path(&[Path::new("bin"), a.path()]);
        assert_eq!(spawnable(git, Some(&relative)), git);
        assert_eq!(spawnable(git, Some(&path(&[Path::new(""), a.path()]))), git);
        assert_eq!(spawnable(git, None), git);
        // Not on it at all.
        let empty = tempfile::tempdir().unwrap();
        assert_eq!(spawnable(git, Some(&path(&[empty.path()]))), git);
        // A name with a slash is never looked up.
        let on = path(&[a.path()]);
        for named in ["./git", "sub/git", "/usr/bin/git"] {
            assert_eq!(spawnable(Path::new(named), Some(&on)), Path::new(named));
        }
    }
}
