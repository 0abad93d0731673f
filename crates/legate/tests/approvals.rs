//! The human channel from another process: an engine in this test process runs the scripted
//! agent, whose commands a test supervisor sends to the approval queue (`ask`); the real
//! `legate` binary, a separate process on the same home, lists them (`approvals --json`,
//! `approvals --follow` without a terminal), answers them (`approve`, `deny`) and reads the
//! audit (`audit --json`). Answering without a terminal needs the supervisor token; the
//! caller's token is refused. The supervising agent through the binary: no `run` on it and no
//! `model` for it (`AGENT_RESERVED`), and the directories of a question whose `legate` was
//! killed (`kill -9`) removed by the next one.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_core::{EventKind, TaskId, TaskState};
use legate_engine::SubmitRequest;
use legate_frontkit::AskCommands;
use legate_frontkit::cli::{CliHome, KillOnDrop, streams as text};
use legate_testkit::{EngineHarness, TestAgent};
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

const LEGATE: &str = env!("CARGO_BIN_EXE_legate");

fn harness() -> EngineHarness {
    EngineHarness::builder()
        .agent(TestAgent::scripted("agent"))
        .supervisor(Arc::new(AskCommands))
        .config(|c| c.approvals.deadline = Duration::from_secs(120))
        .start()
}

async fn awaiting(kit: &EngineHarness, task: &TaskId) -> String {
    let events = kit
        .until(task, |e| {
            matches!(&e.kind, EventKind::Notice { detail, .. } if detail["event"] == "awaiting_supervision")
        })
        .await;
    events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::Notice { detail, .. } if detail["event"] == "awaiting_supervision" => {
                detail["approvalId"].as_str().map(str::to_owned)
            }
            _ => None,
        })
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_process_lists_approves_denies_and_audits() {
    let kit = harness();
    let home = kit.home();
    // The binary on the engine's home, as a caller: no supervisor token.
    let cli = CliHome::at(LEGATE, &home)
        .env("LEGATE_LOG", "warn")
        .env_remove("LEGATE_SUPERVISOR_TOKEN");

    // `--follow` without a terminal: started before anything waits, it prints each request
    // as it arrives and answers nothing.
    let mut follow = KillOnDrop(
        cli.cmd(&["approvals", "--follow", "--json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let (lines_tx, lines_rx) = std::sync::mpsc::channel::<String>();
    let stdout = follow.0.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });

    let first = kit
        .engine
        .submit(SubmitRequest::new("run touch approved.txt"))
        .unwrap();
    let id = awaiting(&kit, &first.id).await;

    // The follower printed it, as JSON, and answered nothing.
    let printed = lines_rx.recv_timeout(Duration::from_secs(30)).unwrap();
    let printed: Value = serde_json::from_str(&printed).unwrap();
    assert_eq!(printed["id"], id.as_str(), "{printed}");
    assert_eq!(printed["state"], "pending");

    // `approvals --json`: one line, pending, with its deadline and the seconds left.
    let listed = cli.json_lines(&["approvals", "--json"]);
    assert_eq!(listed.len(), 1, "{listed:?}");
    let a = &listed[0];
    assert_eq!(a["id"], id.as_str());
    assert_eq!(a["taskId"], first.id.0.as_str());
    assert_eq!(a["agent"], "agent");
    assert_eq!(a["ruleId"], "ask-commands");
    assert_eq!(a["tool"]["kind"], "execute");
    assert_eq!(a["tool"]["command"][0], "touch");
    assert!(a["deadline"].as_i64().unwrap() > a["createdAt"].as_i64().unwrap());
    assert!(a["secondsLeft"].as_u64().unwrap() <= 120);
    // The text form shows the same approval with its time left.
    let (out, _) = text(&cli.run(&["approvals"]));
    assert!(out.contains(&id) && out.contains("s left"), "{out}");

    // Answering without a terminal and without the supervisor token: refused.
    let refused = cli.run(&["approve", &id]);
    assert!(!refused.status.success());
    let (_, err) = text(&refused);
    assert!(err.contains("UNAUTHORIZED"), "{err}");
    // With the caller's token in its place: refused, by name.
    std::fs::create_dir_all(&home).unwrap();
    let caller = "c".repeat(64);
    std::fs::write(home.join("mcp-token"), &caller).unwrap();
    let refused = cli.run_with(&["approve", &id], &[("LEGATE_SUPERVISOR_TOKEN", &caller)]);
    let (_, err) = text(&refused);
    assert!(!refused.status.success());
    assert!(err.contains("caller token is refused"), "{err}");
    assert!(!err.contains(&caller));
    // The approval is still pending: nothing was answered.
    assert_eq!(cli.json_lines(&["approvals", "--json"]).len(), 1);

    // With the supervisor token, by an 8-character prefix: allowed, and the agent goes on.
    let token = std::fs::read_to_string(home.join("supervisor-token")).unwrap();
    let token = token.trim();
    let supervisor = CliHome::at(LEGATE, &home)
        .env("LEGATE_LOG", "warn")
        .env("LEGATE_SUPERVISOR_TOKEN", token);
    let ok = supervisor.run(&["approve", &id[..8]]);
    let (out, err) = text(&ok);
    assert!(ok.status.success(), "{out} {err}");
    assert!(out.contains("allowed"), "{out}");
    let done = kit.wait(&first.id).await;
    assert_eq!(done.state, TaskState::Completed, "{done:?}");
    assert!(done.root.unwrap().join("approved.txt").exists());

    // Again: closed. Unknown: not found. Too short a prefix: not found.
    for (given, code) in [
        (id.as_str(), "APPROVAL_CLOSED"),
        ("00000000-no-such-approval", "APPROVAL_NOT_FOUND"),
        (&id[..4], "APPROVAL_NOT_FOUND"),
    ] {
        let o = supervisor.run(&["approve", given]);
        let (_, err) = text(&o);
        assert!(!o.status.success());
        assert!(err.contains(code), "{given}: {err}");
    }

    // A second request, denied with a reason: the command does not run.
    let second = kit
        .engine
        .submit(SubmitRequest::new("run touch denied.txt"))
        .unwrap();
    let denied_id = awaiting(&kit, &second.id).await;
    let printed = lines_rx.recv_timeout(Duration::from_secs(30)).unwrap();
    assert!(printed.contains(&denied_id), "{printed}");
    let no_reason = supervisor.run(&["deny", &denied_id]);
    assert!(!no_reason.status.success(), "--reason is required");
    let o = supervisor.run(&["deny", &denied_id, "--reason", "not in this repository"]);
    assert!(o.status.success(), "{:?}", text(&o));
    let done = kit.wait(&second.id).await;
    assert!(!done.root.unwrap().join("denied.txt").exists());

    // The audit, from the other process: each with its decider, channel and rule.
    let entries = cli.json_lines(&["audit", "--json", "--since", "1h"]);
    let human: Vec<&Value> = entries.iter().filter(|e| e["decider"] == "human").collect();
    assert_eq!(human.len(), 2, "{entries:?}");
    for e in &human {
        assert_eq!(e["channel"], "cli", "{e}");
    }
    let allow = human
        .iter()
        .find(|e| e["approvalId"] == id.as_str())
        .unwrap();
    assert_eq!(allow["decision"], "allow");
    let deny = human
        .iter()
        .find(|e| e["approvalId"] == denied_id.as_str())
        .unwrap();
    assert_eq!(deny["decision"], "deny");
    assert!(
        deny["reason"]
            .as_str()
            .unwrap()
            .contains("not in this repository"),
        "{deny}"
    );
    // `--task` narrows it, by prefix.
    let only = cli.json_lines(&["audit", "--json", "--task", &second.id.0[..8]]);
    assert!(!only.is_empty());
    assert!(only.iter().all(|e| e["taskId"] == second.id.0.as_str()));
    let (out, _) = text(&cli.run(&["audit"]));
    assert!(out.contains("by human (cli, rule ask-commands)"), "{out}");
    // Nothing waits now.
    assert!(cli.json_lines(&["approvals", "--json"]).is_empty());

    drop(follow);
    kit.engine.shutdown().await;
}

#[test]
fn the_supervisor_profile_on_stdio_needs_the_supervisor_token() {
    let cli = CliHome::new(LEGATE)
        .env("LEGATE_LOG", "warn")
        .env_remove("LEGATE_SUPERVISOR_TOKEN");
    let o = cli.run(&["mcp", "--profile", "supervisor"]);
    assert!(!o.status.success());
    let (out, err) = text(&o);
    assert!(out.is_empty(), "nothing on stdout: {out}");
    assert!(err.contains("UNAUTHORIZED"), "{err}");
    assert!(err.contains("LEGATE_SUPERVISOR_TOKEN"), "{err}");
    // A made-up token is not the one on file.
    let o = cli.run_with(
        &["mcp", "--profile", "supervisor"],
        &[("LEGATE_SUPERVISOR_TOKEN", &"m".repeat(64))],
    );
    assert!(!o.status.success());
    assert!(text(&o).1.contains("UNAUTHORIZED"), "{:?}", text(&o));
}

/// A real `legate serve --a2a --mcp`: the supervisor endpoint beside `/mcp`, each refusing
/// the other's token, and A2A refusing the supervisor token.
#[test]
fn serve_keeps_the_caller_and_the_supervisor_apart() {
    use legate_frontkit::served::{addr_of, raw};
    let home = CliHome::new(LEGATE);
    let mut served = home.serve(&["--a2a", "--mcp", "--port", "0", "--a2a-port", "0"]);
    let mcp = addr_of(&served.url("Legate MCP server"));
    let a2a = addr_of(&served.url("Legate A2A server"));
    let supervisor_url = served.url("Legate supervisor endpoint");
    assert!(
        supervisor_url.ends_with("/supervisor/mcp"),
        "{supervisor_url}"
    );
    let read = |name: &str| {
        std::fs::read_to_string(home.home().join(name))
            .unwrap()
            .trim()
            .to_string()
    };
    let (caller, supervisor, a2a_token) = (
        read("mcp-token"),
        read("supervisor-token"),
        read("a2a-token"),
    );
    assert_ne!(caller, supervisor);
    // The banner says where the supervisor token is, never what it is.
    assert!(
        !served.printed.iter().any(|l| l.contains(&supervisor)),
        "{:?}",
        served.printed
    );
    let init = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}})
    .to_string();
    let post = |path: &str, token: &str| {
        let bearer = format!("Bearer {token}");
        let headers = [
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("Authorization", bearer.as_str()),
        ];
        raw(&mcp, "POST", path, &mcp, &headers, &init)
    };
    let r = post("/supervisor/mcp", &caller);
    assert_eq!(r.status, 401, "{r:?}");
    assert!(r.body.contains("caller token is refused"), "{r:?}");
    let r = post("/supervisor/mcp", &a2a_token);
    assert_eq!(r.status, 401, "{r:?}");
    let r = post("/mcp", &supervisor);
    assert_eq!(r.status, 401, "{r:?}");
    assert!(r.body.contains("supervisor token is refused"), "{r:?}");
    assert_eq!(post("/supervisor/mcp", &supervisor).status, 200);
    assert_eq!(post("/mcp", &caller).status, 200);
    // A2A: the supervisor token is not a caller's.
    let bearer = format!("Bearer {supervisor}");
    let headers = [
        ("Content-Type", "application/json"),
        ("A2A-Version", "1.0"),
        ("Authorization", bearer.as_str()),
    ];
    let message = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
        "messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}})
    .to_string();
    let r = raw(&a2a, "POST", "/", &a2a, &headers, &message);
    assert_eq!(r.status, 401, "{r:?}");
    assert!(served.stop().is_some_and(|s| s.success()));
}

#[test]
fn one_secret_for_caller_and_supervisor_stops_the_server() {
    let same = "s".repeat(64);
    let home = CliHome::new(LEGATE)
        .env("LEGATE_MCP_TOKEN", &same)
        .env("LEGATE_SUPERVISOR_TOKEN", &same);
    let out = home.run(&["serve", "--mcp", "--port", "0"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("CONFIG_INVALID"), "{err}");
    assert!(!err.contains(&same));
}

/// `legate serve --a2a` alone, with the A2A token set to the supervisor's (on file): refused
/// before it listens. Before, only `--mcp` checked the two apart, so A2A took the supervisor
/// token as a caller's and the supervisor could start tasks.
#[test]
fn a2a_alone_refuses_the_supervisor_token_as_its_own() {
    use std::io::BufRead;
    let secret = "v".repeat(64);
    let home = CliHome::new(LEGATE)
        .env("LEGATE_LOG", "warn")
        .env("LEGATE_A2A_TOKEN", &secret)
        .env_remove("LEGATE_SUPERVISOR_TOKEN");
    std::fs::create_dir_all(home.home()).unwrap();
    std::fs::write(home.home().join("supervisor-token"), &secret).unwrap();
    let mut child = home.spawn(&["serve", "--a2a", "--a2a-port", "0"]);
    // Either the banner ends (it serves: the defect) or stdout closes (it stopped).
    let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut served = false;
    for line in stdout.lines() {
        if line.unwrap().starts_with("Ctrl-C stops") {
            served = true;
            break;
        }
    }
    if served {
        let _ = child.kill();
        let _ = child.wait();
        panic!("A2A served with the supervisor's token as its caller token");
    }
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("CONFIG_INVALID"), "{err}");
    assert!(err.contains("LEGATE_A2A_TOKEN"), "{err}");
    assert!(!err.contains(&secret));
}

/// The policy of the supervising-agent tests: `touch` needs a supervisor.
const ASK_TOUCH: &str = "[[policy.rules]]\nid = \"ask-before-touch\"\nkind = \"execute\"\nprogram = \"touch\"\ndecision = \"ask\"\nreason = \"touching files needs a supervisor\"\n";

/// A home whose `worker` and `judge` are the scripted agent, `judge` supervising (answering
/// as `answer` says) under [`ASK_TOUCH`].
fn judged_home(answer: &str) -> CliHome {
    let agent = legate_testkit::find_scripted_agent().expect("build legate-scripted-agent first");
    let agent = agent.display().to_string();
    let config = format!(
        "[agents.worker]\ncommand = {agent:?}\n\n[agents.judge]\ncommand = {agent:?}\nenv = {{ LEGATE_TESTKIT_JUDGE = {answer:?} }}\n\n{ASK_TOUCH}\n[supervision]\nagent = \"judge\"\ndeadline_secs = 600\nagent_timeout_secs = 500\n"
    );
    CliHome::with_config(LEGATE, &config).env("LEGATE_LOG", "warn")
}

#[test]
fn the_cli_cannot_run_a_task_on_the_supervising_agent_or_choose_its_model() {
    // Issue 29, finding 1. Before: `legate run --agent judge` ran a task on the supervising
    // agent (writing into the home its later sessions shared) and `legate model judge`
    // chose the model it judged with.
    let cli = judged_home("allow");
    let out = cli.run(&[
        "run",
        "--agent",
        "judge",
        "write $HOME/note.txt: allow curl",
    ]);
    assert!(!out.status.success());
    let said = legate_frontkit::cli::text(&out);
    assert!(said.contains("AGENT_RESERVED"), "{said}");
    assert!(said.contains("supervising agent"), "{said}");
    let out = cli.run(&["model", "judge", "revisor-thorough"]);
    assert!(!out.status.success());
    assert!(
        legate_frontkit::cli::text(&out).contains("AGENT_RESERVED"),
        "{}",
        legate_frontkit::cli::text(&out)
    );
    assert!(cli.tasks_json().is_empty(), "nothing stored");
    // Listed as what it is.
    let listed = cli.json_lines(&["agents", "--no-probe", "--json"]);
    let supervising: Vec<_> = listed
        .iter()
        .filter(|a| a["supervising"] == true)
        .map(|a| a["name"].clone())
        .collect();
    assert_eq!(supervising, vec![serde_json::json!("judge")], "{listed:?}");
    assert!(!cli.home().join("models/judge.json").exists());
}

#[test]
fn a_killed_legates_judge_directories_are_removed_by_the_next_one() {
    // Issue 29, finding 8. Before: a judge question's directory (`$LEGATE_HOME/judges/...`)
    // was removed only when the question ended in-process, so `kill -9` left it for good and
    // `legate cleanup` did not look there. Now each carries its runner's id: another live
    // process leaves it alone, and the next Legate (at start, and `legate cleanup`) removes it
    // once its runner is dead.
    let cli = judged_home("hang");
    let judges = cli.home().join("judges");
    let names = |dir: &std::path::Path| -> Vec<String> {
        std::fs::read_dir(dir).map_or_else(
            |_| Vec::new(),
            |d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            },
        )
    };
    for round in ["start", "cleanup"] {
        let run =
            KillOnDrop(cli.spawn_silent(&["run", "--agent", "worker", "run touch judged.txt"]));
        // The judge hangs on its question: its directory, with its home, is there.
        let question = legate_frontkit::poll::until(
            Duration::from_secs(60),
            "the judge's question directory",
            || {
                names(&judges)
                    .into_iter()
                    .find(|n| judges.join(n).join("home").is_dir())
            },
        );
        // Another Legate on the same home does not touch a live runner's question.
        let out = cli.run(&["cleanup"]);
        assert!(out.status.success(), "{}", legate_frontkit::cli::text(&out));
        assert!(
            judges.join(&question).is_dir(),
            "{round}: a live question was removed"
        );
        // `Child::kill` is SIGKILL: nothing of Legate runs after it. What it started dies with
        // it, but a moment later: until then one may still hold the runner's lock.
        let mut run = run;
        let started = legate_testkit::procs::descendants(run.0.id());
        run.0.kill().unwrap();
        run.0.wait().unwrap();
        // At most 10 s: a command outside a PID namespace may outlive it by design.
        let _ = legate_testkit::procs::until_exited(&started, Duration::from_secs(10));
        assert!(
            judges.join(&question).is_dir(),
            "{round}: kill -9 leaves the question's directory"
        );
        let out = match round {
            // Any command that starts an engine sweeps at its start.
            "start" => cli.run(&["model", "worker", "auto"]),
            _ => cli.run(&["cleanup"]),
        };
        assert!(
            out.status.success(),
            "{round}: {}",
            legate_frontkit::cli::text(&out)
        );
        assert!(
            !judges.join(&question).exists(),
            "{round}: a dead runner's question is left: {:?}",
            names(&judges)
        );
    }
}
