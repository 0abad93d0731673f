//! A foreign A2A agent behind Legate: a small server of our own written against the official
//! Python SDK (`a2a-sdk`'s request handler, task store and Starlette routes;
//! `tests/python/foreign_a2a_agent.py`), started by the test from the pinned environment
//! `legate_testkit::python` provisions. It is not a Legate, so it is `unsupervised`: a task that
//! only reads completes through Legate, its `input-required` is a question the local task waits
//! on, and a write task is `AGENT_UNSUPERVISED` unless the agent says
//! `allow_unsupervised = true`. A wrong token and a vanished server end with their own codes. Skipped, saying so, when `python3` is missing, except in CI.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use legate_frontkit::cli::{CliHome, text};
use serde_json::Value;

const LEGATE: &str = env!("CARGO_BIN_EXE_legate");

const TOKEN: &str = "foreign-agent-test-token";
const TOKEN_ENV: &str = "LEGATE_FOREIGN_TOKEN";

/// The foreign agent's process; it stops when its stdin closes (on drop).
struct Foreign {
    child: Child,
    url: String,
}

impl Foreign {
    fn start() -> Option<Foreign> {
        let python = legate_testkit::python("a2a.server.routes, uvicorn, starlette")?;
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/foreign_a2a_agent.py");
        let mut child = Command::new(python)
            .arg(script)
            .arg(TOKEN)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let line = lines
            .next()
            .expect("the foreign agent exited before listening")
            .unwrap();
        let url = line
            .strip_prefix("listening ")
            .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
            .to_owned();
        std::thread::spawn(move || for _ in lines {});
        Some(Foreign { child, url })
    }

    fn stop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

impl Drop for Foreign {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A front home whose agents point at `url`: `foreign` (strict), `lenient`
/// (`allow_unsupervised = true`) and `stranger` (a wrong token); its commands carry the token.
fn front_home(url: &str) -> CliHome {
    let card = format!("{url}/.well-known/agent-card.json");
    CliHome::with_config(
        LEGATE,
        &format!(
            "[agents.foreign]\nkind = \"a2a\"\nurl = \"{card}\"\ntoken_env = \"{TOKEN_ENV}\"\n\n\
             [agents.lenient]\nkind = \"a2a\"\nurl = \"{card}\"\ntoken_env = \"{TOKEN_ENV}\"\nallow_unsupervised = true\n\n\
             [agents.stranger]\nkind = \"a2a\"\nurl = \"{card}\"\ntoken_env = \"LEGATE_WRONG_TOKEN\"\n"
        ),
    )
    .env("LEGATE_LOG", "warn")
    .env(TOKEN_ENV, TOKEN)
    .env("LEGATE_WRONG_TOKEN", "not-the-token")
}

/// The newest task of the home, as `legate tasks --json` lists it.
fn newest(home: &CliHome) -> Value {
    home.tasks_json().into_iter().next().expect("no task")
}

#[test]
fn a_task_through_legate_to_a_python_sdk_agent_completes_and_writes_need_consent() {
    let Some(mut foreign) = Foreign::start() else {
        return;
    };
    let home = front_home(&foreign.url);

    // The card is read and shown: its name, its skill, reachable.
    let agents = home.run(&["agents", "--json"]);
    assert!(agents.status.success(), "{}", text(&agents));
    let listed = String::from_utf8_lossy(&agents.stdout);
    assert!(listed.contains("Foreign Echo"), "{listed}");
    assert!(listed.contains("skill: Echo"), "{listed}");

    // A task that only reads runs on the foreign agent and ends with its answer.
    let run = home.run(&["run", "--agent", "foreign", "--read-only", "say hello"]);
    assert!(run.status.success(), "{}", text(&run));
    assert!(
        String::from_utf8_lossy(&run.stdout).contains("foreign agent received: say hello"),
        "{}",
        text(&run)
    );
    let task = newest(&home);
    assert_eq!(task["state"], "completed", "{task}");
    assert!(task["remote"]["taskId"].as_str().is_some(), "{task}");

    // The remote's input-required is a question the local task waits on, the question shown.
    let ask = home.run(&[
        "run",
        "--agent",
        "foreign",
        "--read-only",
        "!ask about a file",
    ]);
    let asked = newest(&home);
    assert_eq!(asked["state"], "input-required", "{}", text(&ask));
    assert!(
        asked.to_string().contains("which file do you mean?"),
        "{asked}"
    );

    // A write task: refused, since nobody supervises what that agent does with it.
    let write = home.run(&["run", "--agent", "foreign", "write a.txt: hi"]);
    assert!(!write.status.success(), "{}", text(&write));
    assert!(
        text(&write).contains("AGENT_UNSUPERVISED"),
        "{}",
        text(&write)
    );
    // Unless the configuration accepts that for this agent.
    let lenient = home.run(&["run", "--agent", "lenient", "write a.txt: hi"]);
    assert!(lenient.status.success(), "{}", text(&lenient));
    assert_eq!(newest(&home)["state"], "completed");

    // A wrong token is REMOTE_UNAUTHENTICATED, not a generic failure.
    let stranger = home.run(&["run", "--agent", "stranger", "--read-only", "say hello"]);
    assert!(!stranger.status.success(), "{}", text(&stranger));
    assert!(
        text(&stranger).contains("REMOTE_UNAUTHENTICATED"),
        "{}",
        text(&stranger)
    );

    // A server that is gone is REMOTE_UNREACHABLE.
    foreign.stop();
    let gone = home.run(&["run", "--agent", "foreign", "--read-only", "say hello"]);
    assert!(!gone.status.success(), "{}", text(&gone));
    assert!(
        text(&gone).contains("REMOTE_UNREACHABLE"),
        "{}",
        text(&gone)
    );
}
