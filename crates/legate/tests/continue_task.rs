//! `continue` of a task cut by a restart, from the binary's fronts: a `legate run` killed
//! mid-turn (SIGKILL) on the scripted agent, then `legate continue` on the command line (the
//! continuation resumes the agent's session, once; a kept copy is continued in place; a copy
//! removed with its task is refused, nothing started), and `continue` over MCP with the
//! official Python `mcp` SDK client (tests/mcp/continue_flow.py) against `legate mcp`, and
//! as an MCP task (the Tasks extension, over raw JSON-RPC: tests/mcp/continue_tasks_flow.py).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_frontkit::cli::{CliHome, scripted_config, task_id, text};
use legate_frontkit::poll::until;
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

const LEGATE: &str = env!("CARGO_BIN_EXE_legate");

fn fixture(extra: &str) -> CliHome {
    let env = CliHome::with_config(LEGATE, &scripted_config(extra))
        .env_remove("LEGATE_KEEP_INTERRUPTED_COPIES");
    env.make_project(&[("src/lib.txt", "hello\n")]);
    env
}

/// Runs `legate run --agent scripted [workspace] !hang`, waits until its agent session is
/// recorded, kills that `legate` with SIGKILL and waits until the next command reads the task
/// as cut. Returns the cut task.
fn cut_a_turn(env: &CliHome, workspace: &[&str]) -> Value {
    let mut args = vec!["run", "--agent", "scripted"];
    args.extend_from_slice(workspace);
    args.push("!hang");
    let mut child = env.spawn_silent(&args);
    let id = env.wait_for_state("working", Duration::from_secs(60));
    until(Duration::from_secs(30), "the session is recorded", || {
        env.show(&id)["sessionId"].as_str().map(str::to_owned)
    });
    child.kill().unwrap(); // SIGKILL, mid-turn.
    child.wait().unwrap();
    let cut = until(Duration::from_secs(30), "the task settled", || {
        let task = env.show(&id);
        (task["state"] != "working").then_some(task)
    });
    assert_eq!(cut["state"], "failed", "{cut}");
    assert_eq!(cut["error"]["code"], "SERVER_RESTARTED", "{cut}");
    cut
}

fn continued(env: &CliHome, id: &str) -> Value {
    let out = env.run(&["continue", id]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("continuing task"),
        "{}",
        text(&out)
    );
    env.show(&task_id(&out))
}

fn refused(env: &CliHome, id: &str, code: &str) {
    let before = env.tasks_json().len();
    let out = env.run(&["continue", id]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(code),
        "{code}: {}",
        text(&out)
    );
    assert_eq!(
        env.tasks_json().len(),
        before,
        "a refused continue stored a task"
    );
}

#[test]
fn legate_continue_resumes_a_cut_turn_in_its_session_once() {
    let env = fixture("");
    let cut = cut_a_turn(&env, &[]);
    let cut_id = cut["id"].as_str().unwrap();
    // The restart alone started nothing.
    assert_eq!(env.tasks_json().len(), 1);

    let next = continued(&env, &cut_id[..8]);
    assert_eq!(next["state"], "completed", "{next}");
    assert_eq!(next["controls"]["continuedFrom"], cut_id, "{next}");
    assert_eq!(next["contextId"], cut["contextId"]);
    assert_eq!(next["sessionId"], cut["sessionId"]);
    let events = env.events(next["id"].as_str().unwrap());
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "notice" && e["detail"]["event"] == "continued"),
        "{events:?}"
    );
    // Twice: the same continuation.
    let again = continued(&env, cut_id);
    assert_eq!(again["id"], next["id"]);
    assert_eq!(env.tasks_json().len(), 2);
    // A completed task, an unknown one.
    refused(&env, next["id"].as_str().unwrap(), "TASK_NOT_CONTINUABLE");
    refused(&env, "ffffffff", "TASK_NOT_FOUND");
}

#[test]
fn a_kept_copy_is_continued_in_place_and_a_removed_one_is_refused() {
    let env = fixture("[copies]\nkeep_interrupted_copies = true\n");
    let project = env.project().to_string_lossy().into_owned();
    let cut = cut_a_turn(&env, &["--copy", &project]);
    let cut_id = cut["id"].as_str().unwrap();
    assert!(env.copy(cut_id).is_dir());
    let next = continued(&env, cut_id);
    assert_eq!(next["state"], "completed", "{next}");
    assert_eq!(next["workspace"], "copy");
    assert_eq!(next["root"], cut["root"], "not the same copy");

    // Without keep_interrupted_copies the first turn's copy went with it.
    let env = fixture("");
    let project = env.project().to_string_lossy().into_owned();
    let cut = cut_a_turn(&env, &["--copy", &project]);
    let cut_id = cut["id"].as_str().unwrap();
    assert!(!env.copy(cut_id).exists());
    refused(&env, cut_id, "COPY_CLOSED");
}

/// Cuts a turn and runs `tests/mcp/<script>` with the binary and the cut task's id; its
/// report and the home, or `None` when Python is missing (the test skips).
fn script_on_a_cut_turn(script: &str) -> Option<(CliHome, String, Value)> {
    let python = legate_testkit::python("mcp")?;
    let env = fixture("").env("LEGATE_LOG", "warn");
    let cut = cut_a_turn(&env, &[]);
    let cut_id = cut["id"].as_str().unwrap().to_owned();
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/mcp")
        .join(script);
    let report = env.script_report(python, &script, &[LEGATE.as_ref(), cut_id.as_ref()]);
    Some((env, cut_id, report))
}

#[test]
fn continue_over_mcp_with_the_python_sdk() {
    let Some((_, _, report)) = script_on_a_cut_turn("continue_flow.py") else {
        return;
    };
    assert_eq!(report["before"], 1, "{report}");
    assert_eq!(report["after"], 2, "{report}");
    assert_eq!(report["same"], true, "{report}");
    assert_eq!(report["state"], "completed", "{report}");
    assert_eq!(report["sessionId"], report["cutSessionId"], "{report}");
    let sessions = report["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 1, "{report}");
    assert_eq!(sessions[0]["resumed"], true, "{report}");
    assert_eq!(report["notices"], 1, "{report}");
    assert_eq!(report["refusals"]["completed"], "TASK_NOT_CONTINUABLE");
    assert_eq!(report["refusals"]["unknown"], "TASK_NOT_FOUND");
    assert_eq!(report["refusals"]["extra"], "INVALID_INPUT");
}

#[test]
fn continue_as_an_mcp_task() {
    let Some((env, cut_id, report)) = script_on_a_cut_turn("continue_tasks_flow.py") else {
        return;
    };
    // The task is the continuation itself: the one task the store holds besides the cut one.
    assert_eq!(env.tasks_json().len(), 2, "{report}");
    let next = env.show(report["taskId"].as_str().unwrap());
    assert_eq!(next["controls"]["continuedFrom"], cut_id, "{next}");
    assert_eq!(next["state"], "completed", "{next}");
    assert_eq!(report["outcome"], "completed", "{report}");
    // Twice, and without the extension: the same continuation.
    assert_eq!(report["again"], report["taskId"], "{report}");
    assert_eq!(report["plain"], report["taskId"], "{report}");
    assert_eq!(report["notContinuable"], "TASK_NOT_CONTINUABLE", "{report}");
}
