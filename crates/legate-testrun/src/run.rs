//! Running a test command in a copy, and the evidence it leaves.
//!
//! This module owns executing one command (an executable and its arguments, never a shell)
//! with the copy as its working directory, a private scratch directory as `HOME` and
//! `TMPDIR`, a minimal environment, its own process group, a timeout after which the whole
//! group is killed, and bounded output. Whether the command changed the patch, and what the
//! evidence means for integration, is decided by the caller.
//!
//! Confinement is applied in exactly one place, [`confine`]: on Linux with Landlock, the
//! command may write only beneath the copy and the scratch directory (and to `/dev/null`),
//! and, where the kernel has Landlock's network rights (ABI 4), may neither bind nor connect
//! a TCP socket. The evidence says which held (`confinement: full|partial|none`,
//! `network: denied|not-enforced`); with `confinement = "required"` a kernel that enforces
//! nothing is `CONFINEMENT_UNAVAILABLE` and nothing runs. Like an agent, the command does
//! not see Legate's home (but for its copy and scratch directory), token files or
//! processes, and dies with Legate (`isolation` in the evidence). A test run under a confinement
//! selection ([`crate::TestConfinement`], module `confinement`) is confined by that module
//! instead: reads restricted too, its extra roots, network and child processes as selected,
//! output kept in characters. This module must never run a
//! command through a shell or leave a process of the test's group running after it returns.

use legate_confine::{Confinement, Requirement};
use legate_core::{Error, ErrorCode};
use serde::{Deserialize, Serialize};
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

/// The default bound on captured output, per stream, in bytes.
pub const DEFAULT_MAX_OUTPUT: usize = 4_000;
/// The default timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// Environment variables a test inherits (everything else is dropped).
const KEPT_ENV: &[&str] = &[
    "PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM", "USER", "LOGNAME",
];

/// A command: an executable and its arguments. No shell is involved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TestCommand {
    /// A name looked up on `PATH`, or a path (relative paths are relative to the copy).
    pub executable: String,
    /// The arguments, passed as they are.
    #[serde(default)]
    pub args: Vec<String>,
}

/// What running the command showed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TestRun {
    /// The exit code, when the command exited.
    pub exit_code: Option<i32>,
    /// The signal that ended it, when one did.
    pub signal: Option<i32>,
    /// Whether it ran past its timeout (and was killed).
    pub timed_out: bool,
    /// The start of its stdout (lossy UTF-8), at most the bound.
    pub stdout: String,
    /// The start of its stderr (lossy UTF-8), at most the bound.
    pub stderr: String,
    /// Whether either stream was longer than the bound.
    pub output_truncated: bool,
    /// Wall time, in milliseconds.
    pub duration_ms: u64,
    /// How much of the write confinement the kernel enforced: `full`, `partial`, `none`.
    pub confinement: String,
    /// Whether TCP was denied: `denied`, `not-enforced`; or, a selection granted it,
    /// `proxy` (its one way out was Legate's egress proxy, under the network policy) or
    /// `allowed` (no network namespace of its own: the host's network).
    pub network: String,
    /// Every connection the command asked Legate's proxy for (`network: proxy`), allowed or
    /// refused, in the order recorded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub connections: Vec<legate_core::ConnectionEvent>,
    /// Connections past the first 1,000, which are counted here and not kept.
    #[serde(default, skip_serializing_if = "legate_core::wire_skip::is_zero")]
    pub connections_not_kept: u64,
    /// What held of the command's isolation from Legate (hidden home, hidden processes,
    /// dies with Legate, capabilities dropped).
    #[serde(default)]
    pub isolation: legate_confine::IsolationReport,
    /// Whether reads were restricted to the system directories, copy, scratch and selected
    /// roots: `restricted`, or `open` (no selection, or no Landlock).
    pub reads: String,
    /// Whether child processes were refused: `allowed`, `denied-seccomp`, `not-enforced`.
    pub children: String,
    /// The kernel's Landlock ABI version (0: none).
    pub landlock_abi: u8,
}

/// Which confinement holds for a test, as the evidence states it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Confined {
    /// `full`, `partial` or `none`.
    pub confinement: &'static str,
    /// `denied` or `not-enforced`; for a selection granting the network, `proxy` or
    /// `allowed`.
    pub network: &'static str,
    /// What holds of its isolation from Legate.
    pub isolation: legate_confine::IsolationReport,
    /// `restricted` or `open`.
    pub reads: &'static str,
    /// `allowed`, `denied-seccomp` or `not-enforced`.
    pub children: &'static str,
    /// The kernel's Landlock ABI version (0: none).
    pub landlock_abi: u8,
}

impl TestRun {
    /// Whether the command exited 0 in time.
    pub fn passed(&self) -> bool {
        !self.timed_out && self.exit_code == Some(0)
    }
}

/// The one hook where kernel confinement of a test is applied. It receives the command
/// before it is spawned, the copy (the only project directory it may write) and the scratch
/// directory, and registers a Landlock ruleset under which the command may write only beneath
/// those two (and `/dev/null`) and may not bind or connect TCP sockets where the kernel can
/// refuse that. `hidden` (`$LEGATE_HOME`, token files) is out of its sight, but for the copy
/// and the scratch directory beneath it, and so are Legate's processes. It returns which
/// confinement will hold; with [`Requirement::Required`], a kernel that enforces nothing, or
/// a home that cannot be hidden, is `CONFINEMENT_UNAVAILABLE`.
pub fn confine(
    cmd: &mut Command,
    copy: &Path,
    scratch: &Path,
    requirement: Requirement,
    hidden: &[PathBuf],
) -> Result<(Confined, Option<legate_confine::LimitGroup>), Error> {
    let mut prepared = hidden
        .iter()
        .fold(Confinement::new(), |c, p| c.hide(p))
        .allow_write(copy)
        .allow_write(scratch)
        .without_terminals()
        .deny_network()
        .limit(legate_core::ProcessLimits::default())
        .prepare(requirement)?;
    let limits = prepared.take_limits();
    let confined = Confined {
        confinement: prepared.enforcement().as_str(),
        network: prepared.network().as_str(),
        isolation: prepared.isolation(),
        reads: "open",
        children: crate::confinement::children_allowed(),
        landlock_abi: Confinement::landlock_abi(),
    };
    legate_confine::confine_command(cmd, prepared);
    Ok((confined, limits))
}

/// Checks a command before anything runs: `INVALID_INPUT` for an empty executable or a NUL.
pub fn validate(command: &TestCommand) -> Result<(), Error> {
    if command.executable.trim().is_empty() {
        return Err(Error::invalid_input("the test command has no executable"));
    }
    if command.executable.contains('\0') || command.args.iter().any(|a| a.contains('\0')) {
        return Err(Error::invalid_input("the test command contains a NUL byte"));
    }
    if command.args.len() > 1000 {
        return Err(Error::invalid_input(
            "the test command has more than 1000 arguments",
        ));
    }
    Ok(())
}

/// Runs `command` in `copy` (see the module docs), confined as [`confine`] says, or under
/// `selected` when one was selected: confined as the `confinement` module says, and each
/// stream kept to the selection's `max_output_chars` characters (the byte bound `max_output`
/// no longer applies). A command that cannot be started is `TEST_FAILED` naming why; a
/// command that ran is `Ok`, whatever its exit.
///
/// When the selection grants the network and `egress` is given, the command's network
/// namespace holds a listener for Legate's egress proxy, served (with `egress.gate`) for as
/// long as the command runs and stopped when it ends; the command gets `egress.env`, and
/// every connection it asked for is in the run's `connections` (`network: proxy`). Without
/// `egress`, such a command has its namespace's loopback only. `egress` is ignored for a
/// selection without the network and without a selection.
#[allow(clippy::too_many_arguments)]
pub fn run_test_in(
    copy: &Path,
    scratch: &Path,
    command: &TestCommand,
    timeout: Duration,
    max_output: usize,
    requirement: Requirement,
    hidden: &[PathBuf],
    selected: Option<&crate::TestConfinement>,
    egress: Option<&crate::TestEgress>,
) -> Result<TestRun, Error> {
    validate(command)?;
    // A character is at most 4 bytes of UTF-8 (a lossy replacement 3): this many bytes
    // always hold the characters kept.
    let max_output = match selected {
        Some(s) => s.max_output_chars.saturating_mul(4).saturating_add(4),
        None => max_output,
    };
    let mut cmd = Command::new(&command.executable);
    cmd.args(&command.args)
        .current_dir(copy)
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    for k in KEPT_ENV {
        if let Some(v) = std::env::var_os(k) {
            cmd.env(k, v);
        }
    }
    cmd.env("HOME", scratch).env("TMPDIR", scratch);
    // `_limits` holds the command's process and memory limits until it is over.
    let (confined, handoff, _limits) = match selected {
        Some(s) => crate::confinement::confine_selected(
            &mut cmd,
            copy,
            scratch,
            requirement,
            hidden,
            s,
            egress.is_some(),
        )?,
        None => {
            let (confined, limits) = confine(&mut cmd, copy, scratch, requirement, hidden)?;
            (confined, None, limits)
        }
    };
    let egress = egress.filter(|_| handoff.is_some());
    if let Some(e) = egress {
        cmd.envs(e.env.iter().map(|(k, v)| (k, v)));
    }
    let started = Instant::now();
    let mut child = cmd.spawn().map_err(|e| {
        Error::caused_by(
            ErrorCode::TestFailed,
            format!("{} could not be started", command.executable),
            e,
        )
    })?;
    let pgid = i32::try_from(child.id()).unwrap_or(0);
    // The proxy serves the namespace from now until the command ended.
    let serving = match (handoff, egress) {
        (Some(handoff), Some(e)) => {
            match crate::egress::Serving::start(handoff, Arc::clone(&e.gate)) {
                Ok(serving) => Some(serving),
                Err(error) => {
                    crate::sys::kill_group(pgid);
                    crate::exit::killed(pgid);
                    return Err(Error::new(
                        ErrorCode::TestFailed,
                        format!(
                            "the test's network namespace did not hand back its egress listener: {error}"
                        ),
                    ));
                }
            }
        }
        _ => None,
    };
    let (tx, rx) = mpsc::channel();
    for (stream, pipe) in [
        (
            0u8,
            child
                .stdout
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
        ),
        (
            1u8,
            child
                .stderr
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
        ),
    ] {
        let tx = tx.clone();
        if let Some(mut pipe) = pipe {
            std::thread::spawn(move || {
                let mut kept = Vec::new();
                let mut total = 0usize;
                let mut buf = [0u8; 8192];
                while let Ok(n) = pipe.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    total += n;
                    let room = max_output.saturating_sub(kept.len());
                    kept.extend_from_slice(&buf[..n.min(room)]);
                }
                let _ = tx.send((stream, kept, total > max_output));
            });
        }
    }
    drop(tx);
    // The leader is waited for by its pid from here on (`exit`), never through `child`.
    let ended = crate::exit::await_exit(pgid, started + timeout)
        .map_err(|e| Error::caused_by(ErrorCode::Internal, "the test could not be awaited", e))?;
    let (status, timed_out) = (ended.status, ended.timed_out);
    // Whatever the leader did, nothing of its group outlived the test: `await_exit` killed
    // the group, and the leader by its pid, before it reaped the leader.
    let duration_ms = started.elapsed().as_millis() as u64;
    // Nor does its proxy: its connections are recorded, then it stops.
    let (connections, connections_not_kept) = serving
        .map(crate::egress::Serving::finish)
        .unwrap_or_default();
    let (mut stdout, mut stderr, mut truncated) = (Vec::new(), Vec::new(), false);
    let drain_until = Instant::now() + Duration::from_secs(2);
    for _ in 0..2 {
        let left = drain_until.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok((0, kept, t)) => {
                stdout = kept;
                truncated |= t;
            }
            Ok((_, kept, t)) => {
                stderr = kept;
                truncated |= t;
            }
            Err(_) => break,
        }
    }
    let (mut stdout, mut stderr) = (lossy(stdout), lossy(stderr));
    if let Some(s) = selected {
        // Both cuts run: `|` does not short-circuit.
        truncated |= crate::confinement::truncate_chars(&mut stdout, s.max_output_chars)
            | crate::confinement::truncate_chars(&mut stderr, s.max_output_chars);
    }
    Ok(TestRun {
        exit_code: status.and_then(|s| s.code()),
        signal: status.and_then(|s| s.signal()),
        timed_out,
        stdout,
        stderr,
        output_truncated: truncated,
        duration_ms,
        confinement: confined.confinement.to_string(),
        network: confined.network.to_string(),
        connections,
        connections_not_kept,
        isolation: confined.isolation,
        reads: confined.reads.to_string(),
        children: confined.children.to_string(),
        landlock_abi: confined.landlock_abi,
    })
}

fn lossy(bytes: Vec<u8>) -> String {
    match String::from_utf8(bytes) {
        Ok(s) => s,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(exe: &str, args: &[&str]) -> TestCommand {
        TestCommand {
            executable: exe.into(),
            args: args.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// A test's two directories: the copy it runs in and its scratch home.
    struct Dirs {
        copy: tempfile::TempDir,
        scratch: tempfile::TempDir,
    }

    impl Dirs {
        fn new() -> Self {
            Self {
                copy: tempfile::tempdir().unwrap(),
                scratch: tempfile::tempdir().unwrap(),
            }
        }

        /// Runs `command` in the copy, confined as `requirement` says, no paths hidden.
        fn run_with(
            &self,
            command: &TestCommand,
            timeout: Duration,
            max_output: usize,
            requirement: Requirement,
        ) -> Result<TestRun, Error> {
            let (copy, scratch) = (self.copy.path(), self.scratch.path());
            run_test_in(
                copy,
                scratch,
                command,
                timeout,
                max_output,
                requirement,
                &[],
                None,
                None,
            )
        }

        /// Runs `command` in the copy, best-effort confined, no paths hidden.
        fn run(
            &self,
            command: &TestCommand,
            timeout: Duration,
            max_output: usize,
        ) -> Result<TestRun, Error> {
            self.run_with(command, timeout, max_output, Requirement::BestEffort)
        }

        /// Runs `script` with `sh -c`, best-effort confined, no paths hidden.
        fn run_sh(
            &self,
            script: &str,
            timeout: Duration,
            max_output: usize,
        ) -> Result<TestRun, Error> {
            self.run(&cmd("sh", &["-c", script]), timeout, max_output)
        }
    }

    #[test]
    fn a_command_runs_in_the_copy_without_a_shell() {
        let dirs = Dirs::new();
        std::fs::write(dirs.copy.path().join("f.txt"), "hello\n").unwrap();
        let r = dirs
            .run(
                &cmd("cat", &["f.txt", "$HOME"]),
                Duration::from_secs(10),
                100,
            )
            .unwrap();
        assert_eq!(
            r.exit_code,
            Some(1),
            "$HOME is a literal file name: no shell"
        );
        assert_eq!(r.stdout, "hello\n");
        assert!(r.stderr.contains("$HOME"), "{}", r.stderr);
        assert_eq!(r.confinement, Confinement::probe().as_str());
        assert!(!r.passed());
        let env = dirs
            .run(&cmd("env", &[]), Duration::from_secs(10), 10_000)
            .unwrap();
        assert!(env.passed());
        assert!(
            env.stdout
                .contains(&format!("HOME={}", dirs.scratch.path().display()))
        );
    }

    #[test]
    fn the_timeout_kills_the_whole_group_and_output_is_bounded() {
        let dirs = Dirs::new();
        let marker = dirs.copy.path().join("survived");
        // The marker would come after the timeout (2 s), which leaves a slow start time to
        // write the first 1,000 bytes.
        let script = format!(
            "(sleep 3; touch {}) & yes | head -c 100000; sleep 30",
            marker.display()
        );
        let r = dirs.run_sh(&script, Duration::from_secs(2), 1000).unwrap();
        assert!(r.timed_out);
        assert!(r.output_truncated);
        assert_eq!(r.stdout.len(), 1000);
        std::thread::sleep(Duration::from_millis(1500));
        assert!(!marker.exists(), "a child of the test outlived it");
    }

    #[test]
    fn a_missing_executable_is_test_failed() {
        let dirs = Dirs::new();
        let err = dirs
            .run_with(
                &cmd("no-such-program-legate", &[]),
                Duration::from_secs(1),
                10,
                Requirement::BestEffort,
            )
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::TestFailed);
        assert!(validate(&cmd(" ", &[])).is_err());
    }

    #[test]
    fn writes_outside_the_copy_and_scratch_are_refused() {
        let dirs = Dirs::new();
        let outside = tempfile::tempdir().unwrap();
        let target = outside.path().join("escaped");
        let script = format!(
            "touch in-copy && touch \"$HOME/in-scratch\" && echo ok > /dev/null && touch '{}'",
            target.display()
        );
        let r = dirs.run_sh(&script, Duration::from_secs(10), 1000).unwrap();
        let enforcement = Confinement::probe();
        eprintln!(
            "landlock: confinement {}, stderr {:?}",
            enforcement.as_str(),
            r.stderr
        );
        assert_eq!(r.confinement, enforcement.as_str());
        assert!(dirs.copy.path().join("in-copy").exists(), "{}", r.stderr);
        assert!(
            dirs.scratch.path().join("in-scratch").exists(),
            "{}",
            r.stderr
        );
        if enforcement == legate_confine::Enforcement::None {
            assert!(r.passed(), "unconfined: the write succeeds");
            assert!(target.exists());
        } else {
            assert!(!r.passed());
            assert!(!target.exists(), "a confined test wrote outside the copy");
            // EACCES (Landlock) or EROFS (the sealed namespace's read-only mounts, checked
            // first where namespaces are allowed), as the kernel reports it.
            let said = |code: i32| {
                let e = std::io::Error::from_raw_os_error(code).to_string();
                e.split(" (os error").next().unwrap_or_default().to_string()
            };
            assert!(
                r.stderr.contains(&said(libc::EACCES)) || r.stderr.contains(&said(libc::EROFS)),
                "{}",
                r.stderr
            );
        }
    }

    #[test]
    fn tcp_connections_are_refused_where_landlock_has_network_rules() {
        let dirs = Dirs::new();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let script = format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected");
        let r = dirs
            .run(
                &cmd("bash", &["-c", &script]),
                Duration::from_secs(10),
                1000,
            )
            .unwrap();
        let network = Confinement::probe_network();
        let abi4 = network == legate_confine::Network::Denied
            && Confinement::probe() != legate_confine::Enforcement::None;
        eprintln!(
            "landlock ABI >= 4: {abi4}; evidence network {}, exit {:?}, stderr {:?}",
            r.network, r.exit_code, r.stderr
        );
        let accepted = listener.accept().is_ok();
        if abi4 {
            assert_eq!(r.network, "denied");
            assert!(!r.passed(), "the connection should have been refused");
            assert!(!r.stdout.contains("connected"));
            assert!(!accepted, "the listener saw a connection");
        } else {
            assert_eq!(r.network, "not-enforced");
            assert!(r.passed(), "{}", r.stderr);
            assert!(accepted);
        }
    }

    #[test]
    fn required_confinement_runs_confined_or_not_at_all() {
        let dirs = Dirs::new();
        let r = dirs.run_with(
            &cmd("true", &[]),
            Duration::from_secs(10),
            10,
            Requirement::Required,
        );
        match Confinement::probe() {
            legate_confine::Enforcement::None => {
                assert_eq!(r.unwrap_err().code, ErrorCode::ConfinementUnavailable)
            }
            e => assert_eq!(r.unwrap().confinement, e.as_str()),
        }
    }
}
