//! A resumed session after a restart, for each real adapter: turn 1 of a context runs in a
//! child Legate process (this test binary run again, `resume_child_engine`; the scripted
//! model answers with a word to remember), which is killed with SIGKILL while the agent's
//! session is pooled; then a new engine starts over the same `$LEGATE_HOME` and the same
//! agent state directory (what a restarted Legate finds) and runs turn 2 of the context.
//!
//! What the adapter announces in `initialize` decides what is asserted: with
//! `sessionCapabilities.resume` or `loadSession`, turn 2's `session` event continues turn 1's
//! session (`resumed: true`, the same id) and the model request of turn 2 carries turn 1's
//! answer (the conversation survived); with neither, turn 2 is a new session
//! (`resumed: false`) and a notice names the session that could not be continued. One
//! observed exception: gemini-cli 0.61.0 announces `loadSession` but records no message of an
//! ACP conversation in its chat file (the file holds only its header, also with no Legate in
//! between), so after a restart it refuses `session/load` ("Internal error"): for it the
//! refusal, the notice and a new session are asserted. And in the old set
//! (`LEGATE_ADAPTERS=old`), claude-agent-acp 0.23.1 answers `session/resume` in three ways
//! from one run to the next, by how much of turn 1 Claude Code had written to its transcript
//! when it was killed: the same session with turn 1's answer (seen on 2026-12-05); the same
//! session with the answer replaced by "No response requested." (seen on 2026-12-01); or a
//! refusal ("Resource not found", seen on 2026-12-05), then the notice and a new session.
//! For it, whichever came is asserted whole, but whether the answer survived is only
//! printed. The announcement is printed, so
//! `docs/backends/acp.md` can record it.
//!
//! This module only drives and observes; it decides nothing about Legate.

use super::{Adapter, Run, claude, codex, describe, direct, direct_env, engine_for, gemini};
use legate_core::{Event, EventKind, TaskState};
use legate_engine::{SubmitRequest, WorkspaceRequest};
use legate_testkit::model_server::{ModelServer, Step};
use serde_json::Value;
use std::io::BufRead;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// In the child: `<adapter>\n<base>\n<model server URL>`.
const CHILD_ENV: &str = "LEGATE_SUITE_RESUME_CHILD";
/// What the child prints, with the session id, once turn 1 is over.
const READY: &str = "resume-child-ready";
const CONTEXT: &str = "ctx-resume-after-restart";

fn adapter_named(name: &str) -> fn(&str) -> Adapter {
    match name {
        "claude" => claude,
        "codex" => codex,
        "gemini" => gemini,
        other => panic!("no adapter {other}"),
    }
}

/// Turn 1's scripted answer, which turn 2's model request must carry.
fn word(name: &str) -> String {
    format!("the word to remember is quince-{name}")
}

/// The session lifecycle an adapter announces in `initialize`.
#[derive(Debug, Clone, Copy)]
struct Announced {
    load: bool,
    resume: bool,
    close: bool,
    list: bool,
}

impl Announced {
    fn of(init: &Value) -> Self {
        let caps = &init["agentCapabilities"];
        let session = &caps["sessionCapabilities"];
        // A capability is announced by an object (ACP's `{}`); `null` or absent is not.
        Self {
            load: caps["loadSession"] == Value::Bool(true),
            resume: session["resume"].is_object(),
            close: session["close"].is_object(),
            list: session["list"].is_object(),
        }
    }
}

/// What `adapter` announces, asked directly in a scratch state directory.
async fn announced(adapter: &Adapter) -> (Announced, Value) {
    let scratch = tempfile::tempdir().unwrap();
    for (file, text) in &adapter.state_files {
        let p = scratch.path().join(file);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    let env = direct_env(adapter, scratch.path());
    let init = direct::initialize(&adapter.command, &adapter.args, &env, scratch.path()).await;
    (Announced::of(&init), init["agentInfo"].clone())
}

/// The session events: (session id, resumed).
fn sessions(events: &[Event]) -> Vec<(String, bool)> {
    legate_testkit::harness::session_events(events)
}

/// The notices saying the earlier session `id` could not be continued.
fn not_continued(events: &[Event], id: &str) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Notice { message, detail } if detail["sessionId"] == id => {
                Some(message.clone())
            }
            _ => None,
        })
        .collect()
}

/// In a child Legate: the adapter and base directory its parent test named in `var`
/// (`<adapter>\n<base>\n<model server URL>`).
fn child_spec(var: &str) -> (Adapter, PathBuf) {
    let spec = std::env::var(var)
        .unwrap_or_else(|_| panic!("{var} is set by the test that runs this child"));
    let mut parts = spec.lines();
    let (name, base, url) = (
        parts.next().unwrap(),
        PathBuf::from(parts.next().unwrap()),
        parts.next().unwrap(),
    );
    (adapter_named(name)(url), base)
}

/// The child Legate: runs turn 1 of the context, checks it, prints the session id, and waits
/// to be killed.
#[test]
#[ignore = "the Legate process *_resume_after_restart kill; run by them"]
fn resume_child_engine() {
    let (adapter, base) = child_spec(CHILD_ENV);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let engine = engine_for(&adapter, &base, &base.join("state"));
        let mut req = SubmitRequest::new("Do what the model says.");
        req.workspace = WorkspaceRequest::Sandbox;
        req.context_id = Some(CONTEXT.into());
        let task = engine.submit(req).unwrap();
        let task = tokio::time::timeout(Duration::from_secs(200), engine.wait(&task.id))
            .await
            .expect("turn 1 ends")
            .unwrap();
        let events = engine.events(&task.id, 0, 100_000).unwrap();
        assert_eq!(
            task.state,
            TaskState::Completed,
            "{}",
            describe(&task, &events)
        );
        assert!(
            task.result
                .as_ref()
                .unwrap()
                .text
                .contains(&word(adapter.name)),
            "{}",
            describe(&task, &events)
        );
        let id = task.session_id.clone().unwrap();
        assert_eq!(sessions(&events), [(id.clone(), false)]);
        println!("{READY} {id}");
        std::future::pending::<()>().await;
    });
}

/// Turn 1 in a child Legate, killed with SIGKILL once it is over; returns turn 1's session id
/// and the `Run` of a new engine over the same home.
async fn turn_one_then_kill(make: fn(&str) -> Adapter, name: &str) -> (Run, Adapter, String) {
    let server = ModelServer::start().unwrap();
    let adapter = make(&server.url());
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(dir.path()).unwrap();
    let state = base.join("state");
    for (file, text) in &adapter.state_files {
        let p = state.join(file);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    server.script(vec![Step::text(&word(name))]);
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "resume::resume_child_engine",
            "--ignored",
            "--nocapture",
        ])
        .env(
            CHILD_ENV,
            format!("{name}\n{}\n{}", base.display(), server.url()),
        )
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let id = stdout
        .lines()
        .map_while(Result::ok)
        .find_map(|line| line.strip_prefix(READY).map(|id| id.trim().to_string()))
        .expect("the child ran turn 1 (its failure is printed above)");
    child.kill().unwrap(); // SIGKILL: nothing of that Legate runs after this.
    child.wait().unwrap();

    let engine = engine_for(&adapter, &base, &state);
    let (shared, outside) = (base.join("shared"), base.join("outside"));
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    let run = Run {
        _dir: dir,
        engine,
        shared,
        outside,
        state,
        server,
        name: adapter.name,
        seen: Default::default(),
    };
    (run, adapter, id)
}

/// How turn 2 continues after the restart.
#[derive(Debug, PartialEq)]
enum After {
    /// The same session, through this method; the conversation survived.
    Continued(&'static str),
    /// The same session, through this method, with or without turn 1's answer
    /// (claude-agent-acp 0.23.1, see the module docs).
    ContinuedAnswerEither(&'static str),
    /// Continued or refused, from one run to the next (gemini-cli 0.61.0, see the module docs).
    ContinuedOrRefused(&'static str),
    /// Continued with or without turn 1's answer, or refused, from one run to the next
    /// (claude-agent-acp 0.23.1, see the module docs).
    AnyOf(&'static str),
    /// The agent refused this method: a notice, and a new session.
    Refused(&'static str),
    /// Nothing announced: a notice, and a new session.
    New,
}

fn expected(name: &str, announced: Announced) -> After {
    match (announced.resume, announced.load) {
        // claude-agent-acp 0.23.1 (Claude Code 2.1.83) resumes with or without turn 1's
        // answer, or refuses, by how much of its transcript it wrote before the kill (see
        // the module docs).
        (true, _) if name == "claude" && super::old() => After::AnyOf("session/resume"),
        (true, _) => After::Continued("session/resume"),
        // gemini-cli 0.61.0 keeps no messages of an ACP conversation (see the module docs).
        (false, true) if name == "gemini" => After::ContinuedOrRefused("session/load"),
        (false, true) => After::Continued("session/load"),
        (false, false) => After::New,
    }
}

async fn resume_after_restart(make: fn(&str) -> Adapter) {
    let started = Instant::now();
    let name = make("http://127.0.0.1:1").name;
    let (run, adapter, id) = turn_one_then_kill(make, name).await;
    let (announced, info) = announced(&adapter).await;
    let after = expected(name, announced);
    eprintln!(
        "{name}: {info} announces loadSession {}, session/resume {}, session/close {}, session/list {}",
        announced.load, announced.resume, announced.close, announced.list
    );

    // Turn 2 of the same context, in the new engine.
    let before = run.server.requests().len();
    let (second, events) = run
        .task_in(
            vec![Step::text("second answer")],
            WorkspaceRequest::Sandbox,
            Some(CONTEXT.into()),
        )
        .await;
    assert_eq!(
        second.state,
        TaskState::Completed,
        "{}",
        describe(&second, &events)
    );
    let got = sessions(&events);
    let carried = run.server.requests()[before..]
        .iter()
        .any(|r| r.body.to_string().contains(&word(name)));
    let notices = not_continued(&events, &id);
    let after = match after {
        After::ContinuedOrRefused(how) if got.first().is_some_and(|s| s.1) => After::Continued(how),
        After::ContinuedOrRefused(how) => After::Refused(how),
        After::AnyOf(how) if got.first().is_some_and(|s| s.1) => After::ContinuedAnswerEither(how),
        After::AnyOf(how) => After::Refused(how),
        other => other,
    };
    match after {
        After::Continued(_) | After::ContinuedAnswerEither(_) => {
            assert_eq!(got, [(id.clone(), true)], "{}", describe(&second, &events));
            assert_eq!(second.session_id.as_deref(), Some(id.as_str()));
            assert!(notices.is_empty(), "{notices:?}");
            if matches!(after, After::Continued(_)) {
                assert!(
                    carried,
                    "turn 2's model requests do not carry turn 1's answer: {}",
                    describe(&second, &events)
                );
            }
        }
        After::ContinuedOrRefused(_) | After::AnyOf(_) => unreachable!("decided above"),
        After::Refused(_) | After::New => {
            assert!(
                got.len() == 1 && !got[0].1 && got[0].0 != id,
                "{}",
                describe(&second, &events)
            );
            assert_eq!(notices.len(), 1, "{}", describe(&second, &events));
            if let After::Refused(how) = after {
                assert!(
                    notices[0].contains(&format!("refused `{how}`")),
                    "{notices:?}"
                );
            }
            assert!(!carried, "a new session carried turn 1's answer");
        }
    }
    eprintln!(
        "{name}: after a kill -9 of Legate, turn 2 {after:?} (session {id} -> {:?}, turn 1's answer in turn 2's model request: {carried}; notice: {notices:?}) in {:.1} s",
        got,
        started.elapsed().as_secs_f64()
    );
    run.engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_resume_after_restart() {
    resume_after_restart(claude).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_resume_after_restart() {
    resume_after_restart(codex).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_resume_after_restart() {
    resume_after_restart(gemini).await;
}

/// In the child of a `*_continue_after_restart` test: `<adapter>\n<base>\n<model server URL>`.
const CUT_CHILD_ENV: &str = "LEGATE_SUITE_CONTINUE_CHILD";
/// What that child prints, with the task and session ids, once turn 1 runs its tool.
const CUT_READY: &str = "continue-child-ready";
/// What the cut turn's shell command runs: long enough to be killed in.
const CUT_COMMAND: &str = "sleep 300";

/// The child Legate of a `continue` test: starts turn 1, whose model asks for a long shell
/// command, prints the task and session ids once the tool call is under way, and waits to be
/// killed mid-turn.
#[test]
#[ignore = "the Legate process a *_continue_after_restart test kills mid-turn; run by it"]
fn continue_child_engine() {
    let (adapter, base) = child_spec(CUT_CHILD_ENV);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let engine = engine_for(&adapter, &base, &base.join("state"));
        let mut req = SubmitRequest::new("Do what the model says.");
        req.workspace = WorkspaceRequest::Sandbox;
        req.context_id = Some(CONTEXT.into());
        let task = engine.submit(req).unwrap();
        let mut events = engine.subscribe(&task.id, 0);
        while let Some(e) = events.next().await.unwrap() {
            if matches!(e.kind, EventKind::ToolCall(_)) {
                break;
            }
        }
        let session = engine.task(task.id.as_str()).unwrap().session_id.unwrap();
        println!("{CUT_READY} {} {session}", task.id);
        std::future::pending::<()>().await;
    });
}

/// Turn 1 cut mid-tool by a `kill -9` of its Legate, then `continue` in a new engine: with
/// `session/resume` or `session/load` announced, the continuation resumes the same session,
/// its model request carries Legate's continue prompt, and it completes (codex-acp 2.6.0,
/// and claude-agent-acp 0.101.0 when its transcript already held the cut turn); an adapter
/// that then refuses to resume (claude-agent-acp 0.101.0 when the kill came before its
/// transcript held a message) fails it `CONTINUE_UNSUPPORTED` before its prompt; with
/// neither announced, it is `CONTINUE_UNSUPPORTED` and nothing starts.
async fn continue_after_restart(make: fn(&str) -> Adapter) {
    let name = make("http://127.0.0.1:1").name;
    let server = ModelServer::start().unwrap();
    let adapter = make(&server.url());
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(dir.path()).unwrap();
    let state = base.join("state");
    for (file, text) in &adapter.state_files {
        let p = state.join(file);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    server.script(vec![
        (adapter.shell)(CUT_COMMAND),
        Step::text("never reached"),
    ]);
    let spec = format!("{name}\n{}\n{}", base.display(), server.url());
    let ids = legate_testkit::killed_child::run_until_ready(
        "resume::continue_child_engine",
        &[(CUT_CHILD_ENV, spec.as_str())],
        CUT_READY,
        std::process::Stdio::inherit(),
    );
    let (cut_id, session) = ids.split_once(' ').unwrap();
    let engine = engine_for(&adapter, &base, &state);
    let cut = engine.task(cut_id).unwrap();
    assert_eq!(
        cut.error.as_ref().map(|e| e.code),
        Some(legate_core::ErrorCode::ServerRestarted),
        "{cut:?}"
    );
    let (announced, info) = announced(&adapter).await;
    eprintln!(
        "{name}: {info} announces loadSession {}, session/resume {}",
        announced.load, announced.resume
    );
    let before = server.requests().len();
    server.script(vec![Step::text("continued after the restart")]);
    if !announced.resume && !announced.load {
        let e = engine.continue_task(cut_id, None).unwrap_err();
        assert_eq!(e.code, legate_core::ErrorCode::ContinueUnsupported, "{e}");
        eprintln!("{name}: continue refused: {e}");
        engine.shutdown().await;
        return;
    }
    let next = engine.continue_task(cut_id, None).unwrap();
    let next = tokio::time::timeout(Duration::from_secs(200), engine.wait(&next.id))
        .await
        .expect("the continuation ends")
        .unwrap();
    let events = engine.events(&next.id, 0, 100_000).unwrap();
    let got = sessions(&events);
    let carried = server.requests()[before..].iter().any(|r| {
        r.body
            .to_string()
            .contains("was cut off before it finished")
    });
    eprintln!(
        "{name}: continue of a turn cut mid-tool: {:?} {:?}, sessions {got:?}, continue prompt in the model request: {carried}",
        next.state,
        next.error.as_ref().map(|e| e.code)
    );
    let told = describe(&next, &events);
    // claude-agent-acp 0.101.0 resumes the session when Claude Code had written the cut turn
    // to its transcript before the kill, and refuses `session/resume` ("Resource not found")
    // when the transcript held no message yet: a race with the kill, both seen on 2026-12-05
    // (docs/backends/acp.md). Each outcome is asserted whole.
    if name == "claude" && next.state == TaskState::Failed {
        // Refused: the continuation says so and fails before its prompt; nothing reaches the
        // model, and the context keeps the session.
        eprintln!("{name}: the adapter refused to resume the cut session");
        assert_eq!(
            next.error.as_ref().map(|e| e.code),
            Some(legate_core::ErrorCode::ContinueUnsupported)
        );
        assert_eq!(not_continued(&events, session).len(), 1, "{told}");
        assert!(!carried, "{told}");
        let contexts = engine.records().contexts(10).unwrap();
        assert_eq!(contexts[0].session_id.as_deref(), Some(session));
    } else {
        assert_eq!(next.state, TaskState::Completed, "{told}");
        assert_eq!(got, [(session.to_string(), true)], "{told}");
        assert!(carried, "{told}");
    }
    engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_continue_after_restart() {
    continue_after_restart(claude).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_continue_after_restart() {
    continue_after_restart(codex).await;
}
