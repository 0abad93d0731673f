//! Test doubles for Legate that speak the real wire protocols on real pipes.
//!
//! This crate owns `legate-scripted-agent`, a binary that *is* revisor
//! ([`legate_revisor`]) served on stdio, plus faults for testing how Legate copes with
//! broken agents. It is for tests only: nothing in the product may depend on it, and it
//! must never be shipped or run against a real project (`!write-outside` writes without
//! asking, on purpose).
//!
//! It also owns a scripted model server ([`model_server`]) that plays Anthropic, OpenAI and
//! Gemini on 127.0.0.1, so the real adapters can be tested offline (feature `real-adapters`).
//!
//! It also owns `fake-agy` ([`fake_agy`]): the Antigravity CLI's headless interface (version,
//! help, models, NDJSON runs, resume, cumulative usage, faults), for the agy driver's tests.
//!
//! It also owns the one engine harness ([`harness`]): `EngineHarness::builder().agent(..)
//! .config(|c| ..).start()` gives a real engine in a temporary home with the scripted agent
//! or `fake-agy`, and waits that follow a task's events; and [`procs`], which waits for agent
//! processes to exit through pidfds. Every suite that drives an engine builds it there.
//!
//! It also owns the test supervisors ([`supervisors`]): `AskCommands` sends every command to
//! the approval queue, for suites about approvals.
//!
//! It also owns a remote agent on a real socket ([`relay`]): a server on 127.0.0.1 whose tasks
//! outlive the Legate process that started them, and a backend that re-attaches to them after
//! a restart, for the engine's adoption tests.
//!
//! # Faults chosen at start: `LEGATE_TESTKIT_FAULT`
//!
//! | value | behaviour |
//! |---|---|
//! | unset or empty | serve revisor normally |
//! | `exit-at-start` | exit with code 3 before reading anything |
//! | `garbage-at-start` | write [`GARBAGE_LINE`] (not JSON) to stdout, then serve normally |
//! | `hang-initialize` | never answer anything (not even `initialize`); keep reading stdin, exit 0 at its end |
//! | `auth-prompt` | serve normally, but answer every `session/prompt` with JSON-RPC error [`AUTH_ERROR_CODE`] ("Authentication required"), as Claude's adapter does when it is not logged in |
//! | `hostile-session-id` | serve normally, but every session id the agent sends ends with [`hostile_session_suffix`] (a terminal escape, a newline and 100 000 bytes), which it strips again from what the client sends |
//! | anything else | print an error to stderr and exit 2 |
//!
//! # Its `agentInfo`: `LEGATE_TESTKIT_AGENT_INFO`
//!
//! `<name> <version>` (split at the last space) replaces revisor's own `agentInfo` in the
//! `initialize` answer, so a test can play an adapter at a version of its choosing.
//!
//! # Directives in a prompt
//!
//! A prompt line starting with `!` and one of these verbs (case-insensitive) is handled by
//! the test kit, not by revisor (see [`directives`]); every other line is revisor's
//! instruction language.
//!
//! | line | behaviour |
//! |---|---|
//! | `!exit <code>` | send one `agent_message_chunk` ([`directives::EXIT_CHUNK`]) and exit the process with `code` (1 if missing or not a number), mid-turn |
//! | `!hang` | never answer the prompt |
//! | `!garbage` | write [`directives::MALFORMED_LINE`] (malformed JSON-RPC, not even JSON) to stdout, then go on |
//! | `!not-jsonrpc [N]` | write N (default 1) lines of JSON that are not JSON-RPC Legate can take, taken in turn from [`directives::NOT_JSONRPC_LINES`] (`{"hello":"world"}`, `[1,2,3]`, a `session/update` with params that do not fit), then go on |
//! | `!unknown-response` | write a response with id [`directives::UNKNOWN_RESPONSE_ID`], which answers no request, and never answer the prompt (as if its answer went out under the wrong id) |
//! | `!chunks <N> [R]` | send N `agent_message_chunk`s of about 40 bytes, each stamped with its creation time, as fast as possible or paced at R per second, then end the turn `end_turn` (no answer) |
//! | `!write-outside <abs path>` | write [`directives::OUTSIDE_CONTENT`] to that file directly, without asking; report "written" or "failed: …" in a message chunk |
//! | `!write-inside <rel path>` | write [`directives::OUTSIDE_CONTENT`] to that path beneath the working directory directly, without asking (a read-only task's agent changing its workspace behind the supervisor's back); report "written" or "failed: …" |
//! | `!stderr <text>` | write the text as a line to stderr |
//! | `!fail-tool <title>` | a tool call (kind `execute`, the title given) that fails without asking, as Codex reports a failed command: `in_progress`, then `failed` with [`directives::FAILED_TOOL_TEXT`]; the turn goes on (and ends `end_turn`) |
//! | `!pending-tools <N>` | announce N tool calls (kind `read`, status `pending`) that never end, at most 100 000 |
//! | `!stop <reason>` | end the turn now with this ACP stop reason (`end_turn`, `max_tokens`, `max_turn_requests`, `refusal`, `cancelled`), skipping the rest and the answer |
//! | `!flip <N> <outside file> <outside dir> [hold µs]` | the symlink race against Legate's file service ([`flip`]): a thread flips `flip.txt` and `flipdir` in the working directory N times between the agent's own file or directory, a symlink to the outside file or directory, and nothing, while the directive sends `fs/write_text_file` and `fs/read_text_file` about them; the report quotes every read that returned someone else's content |
//! | `!usage <in> <out>` | the prompt's answer carries `usage` (`inputTokens` in, `outputTokens` out, their total), which revisor never reports |
//! | `!say <text>` | send the text (`\n` escapes) as a message chunk: an answer that says anything, with no tool call |
//! | `!as <tag> <directive>` | perform the directive (a line such as `!say …` or `!stop end_turn`) only when the agent was started with [`directives::TAG_ENV`] set to `tag`; skip it otherwise, so that one prompt (a comparison's, sent alike to every target) has each agent answer its own way |
//! | `!history` | answer with this session's earlier prompts, from the [session store](sessions) ([`directives::HISTORY_HEAD`] and their count, then one `history: <prompt>` line each) |
//!
//! With [`directives::HANG_ON_ENV`] (`LEGATE_TESTKIT_HANG_ON`) set, a prompt line that begins
//! with its value is performed as `!hang`: a prompt Legate writes itself (a peer message's
//! turn) can be left unanswered too.
//!
//! # As a supervising agent: `LEGATE_TESTKIT_JUDGE`
//!
//! Unset, the agent answers Legate's judge prompt as revisor does (allow reads, deny the
//! rest). Set, it answers with the verdict chosen ([`judge`]): `allow`, `deny`, `garbage`
//! (text that is no JSON), `extra` (a JSON object with a field the schema does not have),
//! `hang` (never answers), or `tool` (asks permission for an edit first, then answers
//! `allow` only if that request was refused). An allowed or denied answer's reason names how
//! many entries the agent's working directory holds, so a test sees it judged in an empty
//! one.
//!
//! # Sessions kept on disk: `LEGATE_TESTKIT_SESSIONS`
//!
//! With `LEGATE_TESTKIT_SESSIONS=resume,close,list` (any of them), the agent announces those
//! ACP lifecycle methods in `initialize` and honours them from a store in its `$HOME`
//! ([`sessions`]), so a new process can resume a session an earlier one opened, and records
//! each lifecycle call in the store's log for tests to read.
//!
//! Stdout goes through a [pump](mod@pump): revisor writes into an in-process pipe and the pump
//! copies accumulated bytes to the real stdout in large writes, which keeps `!chunks` cheap,
//! and injects raw lines only between whole protocol lines, before whatever revisor wrote
//! after the directive (so they reach Legate within the turn).
//!
//! # Finding the binary from a test
//!
//! Cargo gives a binary's path only to the integration tests of its own package:
//! tests in `crates/legate-testkit/tests/` use `env!("CARGO_BIN_EXE_legate-scripted-agent")`.
//! Tests in other crates cannot name it at compile time. They can use [`find_scripted_agent`],
//! which honours `LEGATE_SCRIPTED_AGENT` and otherwise looks next to the running test's own
//! target directory; the binary must have been built first
//! (`cargo build -p legate-testkit --bin legate-scripted-agent`, which a plain
//! `cargo test --workspace` also does).

pub mod cluster;
pub mod directives;
pub mod fake_agy;
pub mod flip;
pub mod harness;
pub mod hostile_remote;
pub mod judge;
pub mod killed_child;
pub mod model_server;
pub mod node;
pub mod otlp;
pub mod procs;
pub mod pump;
pub mod python;
pub mod raw_http;
pub mod relay;
pub mod sessions;
pub mod supervisors;
pub mod terminal;
pub mod tls;

use std::path::PathBuf;
use std::sync::Arc;

use legate_revisor::RevisorOptions;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};

use crate::directives::ScriptedDirectives;
pub use crate::harness::{EngineHarness, HarnessBuilder, TestAgent};
pub use crate::node::{REQUIRE_NODE_ENV, node_modules, node_required};
use crate::pump::{PumpEnd, pump};
pub use crate::python::{REQUIRE_PYTHON_ENV, python, python_required};

/// The environment variable that picks a [`Fault`].
pub const FAULT_ENV: &str = "LEGATE_TESTKIT_FAULT";
/// The environment variable that sets the `agentInfo` `initialize` announces, as
/// `<name> <version>` (`@agentclientprotocol/codex-acp 2.7.0`): playing another adapter.
pub const AGENT_INFO_ENV: &str = "LEGATE_TESTKIT_AGENT_INFO";
/// The environment variable that delays the scripted agent's start by this many milliseconds
/// (at most 60 000) before it reads anything: an adapter that takes long to start (a real one
/// loads its runtime and its SDK first).
pub const START_DELAY_ENV: &str = "LEGATE_TESTKIT_START_DELAY_MS";
/// The environment variable [`find_scripted_agent`] honours first.
pub const AGENT_PATH_ENV: &str = "LEGATE_SCRIPTED_AGENT";
/// The binary's name.
pub const AGENT_BIN: &str = "legate-scripted-agent";
/// The line `garbage-at-start` writes before serving.
pub const GARBAGE_LINE: &str = "legate-scripted-agent: this line is not JSON";
/// The exit code of `exit-at-start`.
pub const EXIT_AT_START_CODE: i32 = 3;
/// The JSON-RPC error code `auth-prompt` answers prompts with (ACP's "authentication required").
pub const AUTH_ERROR_CODE: i64 = -32000;

/// A fault chosen at start through [`FAULT_ENV`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Serve normally.
    None,
    /// Exit 3 before reading anything.
    ExitAtStart,
    /// Write a non-JSON line, then serve normally.
    GarbageAtStart,
    /// Read stdin forever, answer nothing.
    HangInitialize,
    /// Serve normally, but answer every prompt with [`AUTH_ERROR_CODE`].
    AuthPrompt,
    /// Serve normally, with session ids ending in [`hostile_session_suffix`].
    HostileSessionId,
}

/// What `hostile-session-id` appends to each session id: an OSC escape that retitles a
/// terminal, a newline forging a log line, then 100 000 bytes.
#[must_use]
pub fn hostile_session_suffix() -> String {
    format!("\u{1b}]0;owned\u{7}\nforged line {}", "x".repeat(100_000))
}

impl Fault {
    /// Parses a [`FAULT_ENV`] value; an empty value is [`Fault::None`].
    ///
    /// # Errors
    /// The unknown value.
    pub fn parse(value: &str) -> Result<Self, String> {
        match value.trim() {
            "" => Ok(Self::None),
            "exit-at-start" => Ok(Self::ExitAtStart),
            "garbage-at-start" => Ok(Self::GarbageAtStart),
            "hang-initialize" => Ok(Self::HangInitialize),
            "auth-prompt" => Ok(Self::AuthPrompt),
            "hostile-session-id" => Ok(Self::HostileSessionId),
            other => Err(format!("unknown {FAULT_ENV} value {other:?}")),
        }
    }

    /// The fault named by the environment.
    ///
    /// # Errors
    /// An unknown value.
    pub fn from_env() -> Result<Self, String> {
        Self::parse(&std::env::var(FAULT_ENV).unwrap_or_default())
    }
}

/// Runs the scripted agent on this process's stdin/stdout and returns the exit code the
/// process should end with. Call [`std::process::exit`] with it rather than returning from
/// `main`: the stdin reader thread cannot be cancelled, so dropping the runtime could hang.
pub async fn run(fault: Fault) -> i32 {
    if let Some(ms) = std::env::var(START_DELAY_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
    {
        tokio::time::sleep(std::time::Duration::from_millis(ms.min(60_000))).await;
    }
    match fault {
        Fault::ExitAtStart => return EXIT_AT_START_CODE,
        Fault::HangInitialize => {
            let _ = tokio::io::copy(&mut tokio::io::stdin(), &mut tokio::io::sink()).await;
            return 0;
        }
        Fault::GarbageAtStart => {
            let mut stdout = tokio::io::stdout();
            let written = async {
                stdout.write_all(GARBAGE_LINE.as_bytes()).await?;
                stdout.write_all(b"\n").await?;
                stdout.flush().await
            };
            if let Err(error) = written.await {
                eprintln!("{AGENT_BIN}: cannot write to stdout: {error}");
                return 1;
            }
        }
        Fault::None | Fault::AuthPrompt | Fault::HostileSessionId => {}
    }

    let (inject, injections) = mpsc::unbounded_channel();
    let (agent_out, mut pump_in) = tokio::io::duplex(256 * 1024);
    let input: Box<dyn tokio::io::AsyncRead + Send + Unpin> = if fault == Fault::AuthPrompt {
        let (filtered, agent_in) = tokio::io::duplex(256 * 1024);
        tokio::spawn(refuse_prompts(tokio::io::stdin(), filtered, inject.clone()));
        Box::new(agent_in)
    } else if fault == Fault::HostileSessionId {
        let encoded = serde_json::to_string(&hostile_session_suffix()).unwrap_or_default();
        let encoded = encoded.trim_matches('"').to_owned();
        let (filtered, agent_in) = tokio::io::duplex(256 * 1024);
        let strip = encoded.clone();
        tokio::spawn(rewrite_lines(tokio::io::stdin(), filtered, move |line| {
            line.replace(&strip, "")
        }));
        let (rewritten, new_pump_in) = tokio::io::duplex(256 * 1024);
        tokio::spawn(rewrite_lines(pump_in, rewritten, move |line| {
            lengthen_session_ids(&line, &encoded)
        }));
        pump_in = new_pump_in;
        Box::new(agent_in)
    } else {
        Box::new(tokio::io::stdin())
    };
    let sessions = match sessions::DiskSessions::from_env() {
        Ok(sessions) => sessions.map(Arc::new),
        Err(error) => {
            eprintln!("{AGENT_BIN}: {error}");
            return 2;
        }
    };
    let judge = match judge::JudgeAnswer::from_env() {
        Ok(judge) => judge,
        Err(error) => {
            eprintln!("{AGENT_BIN}: {error}");
            return 2;
        }
    };
    let options = RevisorOptions {
        directive: Some(Arc::new(
            ScriptedDirectives::new(inject)
                .with_sessions(sessions.clone())
                .with_judge(judge)
                .with_hang_on(std::env::var(directives::HANG_ON_ENV).ok()),
        )),
        agent_info: agent_info_from_env(),
        sessions: sessions.map(|s| s as Arc<dyn legate_revisor::SessionHook>),
    };
    let serve = legate_revisor::serve_with(input.compat(), agent_out.compat_write(), options);
    let pumping = pump(pump_in, injections, tokio::io::stdout());
    tokio::pin!(serve);
    tokio::pin!(pumping);
    let mut served: Option<Result<(), agent_client_protocol::Error>> = None;
    loop {
        tokio::select! {
            result = &mut serve, if served.is_none() => served = Some(result),
            end = &mut pumping => {
                return match end {
                    Ok(PumpEnd::Exit(code)) => code,
                    Ok(PumpEnd::Drained) => match served {
                        Some(Err(error)) => {
                            eprintln!("{AGENT_BIN}: {error}");
                            1
                        }
                        _ => 0,
                    },
                    Err(error) => {
                        eprintln!("{AGENT_BIN}: stdout: {error}");
                        1
                    }
                };
            }
        }
    }
}

/// [`AGENT_INFO_ENV`] as `(name, version)`: the text before its last space, and after it.
pub fn agent_info_from_env() -> Option<(String, String)> {
    let value = std::env::var(AGENT_INFO_ENV).ok()?;
    let (name, version) = value.trim().rsplit_once(' ')?;
    Some((name.trim().to_string(), version.to_string()))
}

/// `auth-prompt`: copies the client's lines to revisor, except `session/prompt` requests,
/// which are answered with [`AUTH_ERROR_CODE`] through the pump instead.
async fn refuse_prompts(
    from: impl tokio::io::AsyncRead + Unpin,
    mut to: impl tokio::io::AsyncWrite + Unpin,
    inject: mpsc::UnboundedSender<pump::Injection>,
) {
    use tokio::io::AsyncBufReadExt;
    let mut lines = tokio::io::BufReader::new(from).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let request: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
        if request["method"] == "session/prompt" {
            let answer = serde_json::json!({
                "jsonrpc": "2.0",
                "id": request["id"],
                "error": {"code": AUTH_ERROR_CODE, "message": "Authentication required"},
            });
            let _ = inject.send(pump::Injection::Line(answer.to_string()));
            continue;
        }
        let written = async {
            to.write_all(line.as_bytes()).await?;
            to.write_all(b"\n").await?;
            to.flush().await
        };
        if written.await.is_err() {
            return;
        }
    }
}

/// `hostile-session-id`: copies lines from `from` to `to`, each passed through `edit`.
async fn rewrite_lines(
    from: impl tokio::io::AsyncRead + Unpin,
    mut to: impl tokio::io::AsyncWrite + Unpin,
    edit: impl Fn(String) -> String,
) {
    use tokio::io::AsyncBufReadExt;
    let mut lines = tokio::io::BufReader::new(from).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let line = edit(line);
        let written = async {
            to.write_all(line.as_bytes()).await?;
            to.write_all(b"\n").await?;
            to.flush().await
        };
        if written.await.is_err() {
            return;
        }
    }
}

/// Appends `encoded` (JSON string content) to every revisor session id (`"revisor-…"`) in
/// `line`.
fn lengthen_session_ids(line: &str, encoded: &str) -> String {
    const START: &str = "\"revisor-";
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(at) = rest.find(START) {
        let (head, tail) = rest.split_at(at + START.len());
        out.push_str(head);
        let end = tail.find('"').unwrap_or(tail.len());
        out.push_str(&tail[..end]);
        out.push_str(encoded);
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

/// Best effort: where `legate-scripted-agent` was built, for tests outside this crate.
///
/// Looks at `$LEGATE_SCRIPTED_AGENT`, then in the directory of the running executable and
/// its parent (a test binary lives in `target/<profile>/deps/`, binaries in
/// `target/<profile>/`). Returns `None` when the binary is not there (build it first).
#[must_use]
pub fn find_scripted_agent() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(AGENT_PATH_ENV) {
        let path = PathBuf::from(path);
        return path.is_file().then_some(path);
    }
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    [Some(dir), dir.parent()]
        .into_iter()
        .flatten()
        .map(|dir| dir.join(AGENT_BIN))
        .find(|candidate| candidate.is_file())
}

/// The environment variable [`find_legate`] honours first.
pub const LEGATE_PATH_ENV: &str = "LEGATE_BIN";

/// The `legate` binary, for suites of this crate that need a second Legate process (the
/// CLI answering an approval, a server to refuse a token). Looks at `$LEGATE_BIN`, then
/// beside the running test as [`find_scripted_agent`] does; `None` when it is not built
/// (`cargo build -p legate`, which `cargo test --workspace` also does).
#[must_use]
pub fn find_legate() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(LEGATE_PATH_ENV) {
        let path = PathBuf::from(path);
        return path.is_file().then_some(path);
    }
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    [Some(dir), dir.parent()]
        .into_iter()
        .flatten()
        .map(|dir| dir.join("legate"))
        .find(|candidate| candidate.is_file())
}

/// Runs `git -C dir args…` for a test fixture (a project to copy, a commit), with no global
/// configuration and a fixed identity; its stdout. Panics with git's stderr when it fails:
/// a fixture that cannot be made is a broken test, not a result.
pub fn git(dir: &std::path::Path, args: &[&str]) -> String {
    let out = match std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@t")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@t")
        .output()
    {
        Ok(out) => out,
        Err(e) => panic!("could not run git: {e}"),
    };
    if !out.status.success() {
        panic!(
            "git {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A `sleep 30` leading a process group of its own (killed when dropped), with its group id:
/// the agent process that "could not be shown gone" with which cleanup tests block a
/// workspace. Must be called inside a Tokio runtime.
pub fn sleeping_group() -> (tokio::process::Child, i32) {
    let child = match tokio::process::Command::new("sleep")
        .arg("30")
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
    {
        Ok(c) => c,
        Err(e) => panic!("could not start sleep: {e}"),
    };
    let pgid = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .unwrap_or(0);
    (child, pgid)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn faults_parse() {
        assert_eq!(Fault::parse("").unwrap(), Fault::None);
        assert_eq!(Fault::parse("exit-at-start").unwrap(), Fault::ExitAtStart);
        assert_eq!(
            Fault::parse("garbage-at-start").unwrap(),
            Fault::GarbageAtStart
        );
        assert_eq!(
            Fault::parse("hang-initialize").unwrap(),
            Fault::HangInitialize
        );
        assert_eq!(Fault::parse("auth-prompt").unwrap(), Fault::AuthPrompt);
        assert!(Fault::parse("explode").is_err());
    }
}
