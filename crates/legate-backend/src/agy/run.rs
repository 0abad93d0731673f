//! One `agy` process: spawn, the prompt on stdin, stdout and stderr into events, stop, and
//! the check that its process group is gone.
//!
//! The process runs in the workspace root, in its own process group, with the filtered
//! environment plus `LEGATE_RUN=<marker>` (a fresh marker per run, `crate::cleanup`), confined
//! (Landlock, see `confine`), and dies with Legate. The prompt is written as one NDJSON line
//! and stdin is closed. To stop it (cancel, timeout, shutdown) its processes (the group, and
//! whatever carries the marker outside it) get `SIGINT`, then `SIGKILL` after the grace
//! period (3 s) if anything is left. What is left behind after the leader exited on its own
//! gets the same. A stopped leader that is not reaped within `REAP` (something traces it) is
//! left, and makes the cleanup unverified; so does a prompt's writer still blocked on a stdin
//! that something holds without reading it (the writer is given up). Then
//! the processes are observed once more, and the result is an event whose detail carries
//! `processCleanup.verified` and the signals actually sent. The prompt line and
//! every line agy writes go to the task's wire tap when it is tapped.

use super::models;
use super::ndjson::LineSplitter;
use super::translate::{Translator, truncate};
use crate::EventSink;
use crate::cleanup::{Cleanup, Processes};
use crate::spawn::AgentCommand;
use legate_core::{Error, ErrorCode, EventKind, Result, TapDirection, TapProtocol};
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::Child;
use tokio::sync::watch;
use tracing::{debug, info, warn};

/// At most this many stderr lines of one run become events.
const MAX_STDERR_EVENTS: usize = 200;
/// A stderr line is cut to this many bytes.
const MAX_STDERR_LINE: usize = 2 * 1024;
/// How many last stderr lines are kept for error messages.
const STDERR_TAIL: usize = 5;
/// How long the output readers may take to finish once the leader exited.
const DRAIN: Duration = Duration::from_secs(2);
/// How long the group is observed before cleanup is declared unverified.
const VERIFY: Duration = Duration::from_secs(1);
/// How long the leader may take to be reaped once it was stopped. A leader killed by
/// `SIGKILL` is reaped at once, unless a process of its own that Legate cannot find traces it
/// (`ptrace`): its exit is then told to that tracer first, and to Legate only when the tracer
/// lets it go, which a hostile one never does.
const REAP: Duration = Duration::from_secs(2);

/// What to run.
#[derive(Debug)]
pub(crate) struct RunSpec {
    pub(crate) exe: PathBuf,
    pub(crate) args: Vec<OsString>,
    pub(crate) env: Vec<(OsString, OsString)>,
    pub(crate) cwd: PathBuf,
    pub(crate) prompt: String,
    pub(crate) resumed: bool,
    pub(crate) kill_grace: Duration,
    /// The run's marker (`LEGATE_RUN`), which every process it starts inherits.
    pub(crate) marker: String,
    /// The ruleset applied between `fork` and `exec`; `None` runs it unconfined.
    pub(crate) confinement: Option<legate_confine::Prepared>,
    /// The run's network namespace's listener (taken from `confinement`) and the gate its
    /// proxy decides with: served from the spawn to the run's end.
    pub(crate) egress: Option<(legate_confine::EgressHandoff, Arc<dyn legate_egress::Gate>)>,
}

/// How a run ended.
#[derive(Debug)]
pub(crate) struct RunEnd {
    pub(crate) status: Option<ExitStatus>,
    pub(crate) translator: Translator,
    pub(crate) stderr_tail: Vec<String>,
    pub(crate) login_required: bool,
    pub(crate) stopped: bool,
    pub(crate) cleanup: Cleanup,
    pub(crate) processes: Processes,
    /// Writing the prompt to agy's stdin failed (`CLI_INPUT_FAILED`).
    pub(crate) input_error: Option<std::io::Error>,
    /// Reading agy's stdout failed (`AGY_IO_FAILED`).
    pub(crate) output_error: Option<std::io::Error>,
    /// agy said on stderr that it denied an MCP call for want of its own permission
    /// (`AGY_MCP_PERMISSION_REQUIRED`).
    pub(crate) mcp_permission_denied: bool,
}

#[derive(Debug, Default)]
struct StderrState {
    tail: Vec<String>,
    login_required: bool,
    mcp_permission_denied: bool,
}

fn spawn(spec: &RunSpec, confinement: Option<legate_confine::Prepared>) -> Result<Child> {
    AgentCommand::new(&spec.exe, &spec.args, &spec.cwd, spec.env.iter().cloned())
        .marker(&spec.marker)
        .spawn(confinement)
        .map_err(|e| {
            let code = match e.kind() {
                std::io::ErrorKind::NotFound => ErrorCode::AgyNotFound,
                std::io::ErrorKind::PermissionDenied => ErrorCode::AgyPermissionDenied,
                _ => ErrorCode::AgyProcessFailed,
            };
            let sentence = format!("agy ({}) could not be started", spec.exe.display());
            Error::quoting(code, sentence, e)
        })
}

/// Records one stream-json line agy wrote on the task's wire tap, when it is tapped.
fn tap_line(sink: &EventSink, line: &super::ndjson::Line) {
    if sink.taps() && !line.bytes.is_empty() {
        sink.tap(
            TapDirection::FromAgent,
            TapProtocol::Agy,
            &String::from_utf8_lossy(&line.bytes),
        );
    }
}

/// Runs `spec` to its end, reporting events on `sink`. `stop` turning `true` stops it.
pub(crate) async fn run(
    mut spec: RunSpec,
    sink: EventSink,
    mut stop: watch::Receiver<bool>,
) -> Result<RunEnd> {
    let confinement = spec.confinement.take();
    let mut child = spawn(&spec, confinement)?;
    let _egress = match spec.egress.take() {
        None => None,
        Some((handoff, gate)) => match crate::egress::Egress::start(handoff, gate) {
            Ok(egress) => Some(egress),
            Err(e) => {
                let _ = child.start_kill();
                return Err(Error::caused_by(
                    ErrorCode::AgyProcessFailed,
                    "agy's network namespace did not hand back its egress listener",
                    e,
                ));
            }
        },
    };
    let pgid = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .unwrap_or(0);
    let processes = Processes::new(pgid, Some(spec.marker.clone()));
    info!(pgid, cwd = %spec.cwd.display(), resumed = spec.resumed, "agy run started");
    let (Some(mut stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(Error::internal("the agy process's pipes were not set up"));
    };

    let line = serde_json::json!({"event": "user", "message": {"content": spec.prompt}});
    let line = line.to_string();
    sink.tap(TapDirection::ToAgent, TapProtocol::Agy, &line);
    let mut writer = tokio::spawn(async move {
        let mut bytes = line.into_bytes();
        bytes.push(b'\n');
        let r = async {
            stdin.write_all(&bytes).await?;
            stdin.flush().await?;
            stdin.shutdown().await
        }
        .await;
        drop(stdin);
        r.err()
    });

    let translator = Arc::new(Mutex::new(Translator::new(spec.resumed)));
    let out_sink = sink.clone();
    let out_tr = translator.clone();
    let read_error: Arc<Mutex<Option<std::io::Error>>> = Arc::default();
    let out_error = read_error.clone();
    let reader = tokio::spawn(async move {
        let mut stdout = stdout;
        let mut splitter = LineSplitter::default();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            // While the turn's reader is behind, agy waits on its pipe.
            out_sink.room().await;
            let n = match stdout.read(&mut buf).await {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) => {
                    warn!(error = %e, "agy stdout read failed");
                    *out_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                    break;
                }
            };
            let lines = splitter.push(&buf[..n]);
            let mut tr = out_tr.lock().unwrap_or_else(|p| p.into_inner());
            for l in &lines {
                tap_line(&out_sink, l);
                for e in tr.line(l) {
                    out_sink.send(e);
                }
            }
        }
        if let Some(l) = splitter.finish() {
            tap_line(&out_sink, &l);
            let mut tr = out_tr.lock().unwrap_or_else(|p| p.into_inner());
            for e in tr.line(&l) {
                out_sink.send(e);
            }
        }
    });

    let err_state = Arc::new(Mutex::new(StderrState::default()));
    let err_sink = sink.clone();
    let err_st = err_state.clone();
    let err_reader = tokio::spawn(async move {
        let mut lines = BufReader::new(stderr).split(b'\n');
        let mut sent = 0usize;
        let mut dropped = 0usize;
        while let Ok(Some(raw)) = lines.next_segment().await {
            let text = String::from_utf8_lossy(&raw);
            let text = truncate(text.trim_end_matches('\r'), MAX_STDERR_LINE);
            {
                let mut st = err_st.lock().unwrap_or_else(|p| p.into_inner());
                if models::is_login_phrase(&text) {
                    st.login_required = true;
                }
                if models::is_mcp_permission_denial(&text) {
                    st.mcp_permission_denied = true;
                }
                st.tail.push(text.clone());
                if st.tail.len() > STDERR_TAIL {
                    st.tail.remove(0);
                }
            }
            if sent < MAX_STDERR_EVENTS {
                sent += 1;
                err_sink.send(EventKind::Stderr { line: text });
            } else {
                dropped += 1;
            }
        }
        if dropped > 0 {
            err_sink.send(EventKind::Stderr {
                line: format!("… {dropped} more stderr line(s) not kept"),
            });
        }
    });

    let exited = tokio::select! {
        // A thread of the leader that asked Legate to trace it is reaped as it exits, or the
        // leader's own exit would never come.
        s = crate::held::reaped(pgid, child.wait()) => Some(s.ok()),
        r = stop.wait_for(|s| *s) => {
            drop(r);
            None
        }
    };
    let mut signals = Vec::new();
    let mut outside_group = 0;
    let mut held_by_hidden = false;
    let (status, mut stopped) = match exited {
        Some(status) => (status, false),
        None => {
            info!(pgid, "stopping the agy run");
            let (sent, outside) = processes.stop(spec.kill_grace).await;
            signals.extend(sent);
            outside_group = outside;
            match tokio::time::timeout(REAP, crate::held::reaped(pgid, child.wait())).await {
                Ok(status) => (status.ok(), true),
                Err(_) => {
                    warn!(
                        pgid,
                        "the stopped agy leader could not be reaped: something traces it"
                    );
                    held_by_hidden = true;
                    (None, true)
                }
            }
        }
    };
    let flagged = *stop.borrow();
    stopped |= flagged;

    // The leader is gone. Processes it left behind (in its group, or carrying its marker
    // after leaving the group) may hold the pipes open: give the readers a moment, then stop
    // whatever is left the same way.
    let mut reader = reader;
    let mut err_reader = err_reader;
    let drained = tokio::time::timeout(DRAIN, async {
        let _ = (&mut reader).await;
        let _ = (&mut err_reader).await;
    })
    .await
    .is_ok();
    if processes.alive() {
        warn!(pgid, "agy left processes behind; stopping them");
        let (sent, outside) = processes.stop(spec.kill_grace).await;
        for s in sent {
            if !signals.contains(&s) {
                signals.push(s);
            }
        }
        outside_group = outside_group.max(outside);
    }
    if !drained {
        let finished = tokio::time::timeout(VERIFY, async {
            let _ = (&mut reader).await;
            let _ = (&mut err_reader).await;
        })
        .await
        .is_ok();
        if !finished {
            reader.abort();
            err_reader.abort();
        }
    }
    // The prompt's writer ends when agy has read the prompt or its stdin is closed. One
    // still waiting now waits on a process that holds agy's stdin without reading it and
    // that was not found (the tracer above, or one that dropped its marker): it is given up,
    // and the cleanup is not verified.
    let input_error = match tokio::time::timeout(VERIFY, &mut writer).await {
        Ok(done) => done.ok().flatten(),
        Err(_) => {
            writer.abort();
            warn!(
                pgid,
                "agy's stdin is still held by a process that does not read it"
            );
            held_by_hidden = true;
            Some(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the prompt was still not read when the run ended",
            ))
        }
    };
    // A leader that could not be reaped, or a stdin still held, is held by a process Legate
    // did not find: cleanup is not verified, whatever the group looks like.
    let verified = processes.verify(VERIFY).await && !held_by_hidden;
    let cleanup = Cleanup {
        verified,
        pgid,
        stopped,
        signals,
        outside_group,
    };
    let translator = std::mem::take(&mut *translator.lock().unwrap_or_else(|p| p.into_inner()));
    let st = std::mem::take(&mut *err_state.lock().unwrap_or_else(|p| p.into_inner()));
    debug!(pgid, status = ?status, stopped, verified, "agy run ended");
    Ok(RunEnd {
        status,
        translator,
        stderr_tail: st.tail,
        login_required: st.login_required,
        stopped,
        cleanup,
        processes,
        input_error,
        output_error: read_error.lock().unwrap_or_else(|p| p.into_inner()).take(),
        mcp_permission_denied: st.mcp_permission_denied,
    })
}

#[cfg(test)]
#[path = "run_tests.rs"]
mod tests;
