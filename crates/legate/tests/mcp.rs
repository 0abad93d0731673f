//! `legate mcp` and `legate serve --mcp` as real processes, driven by real clients: the
//! official Python `mcp` SDK (tests/mcp/client.py) over stdio and over HTTP with the token,
//! offering MCP 2025-06-18 and 2025-11-25; raw JSON-RPC lines on stdio; raw HTTP requests
//! without the token and with a foreign Host.
//!
//! Single behaviours, with the SDK (tests/mcp/scenarios.py) or raw lines: a stdio server whose
//! client left (EOF) finishes the running task before it exits; an HTTP client that gives up
//! on a wait and then dies mid-wait leaves its task running to completion; `cancel` ends a
//! running task `canceled`; `send_message` from a `query` server into a write context makes a
//! read-only task; `health` reports the configured confinement requirement and limits; the
//! caller-side skill names only served tools and arguments; `run` on a git root works in a
//! copy unless in place is asked for, with the seed's top-level options, hostile include paths
//! and contradicting options refused, the memory a task was given shown, the prompt limit in
//! characters, and an old git refused (tests/mcp/run_flow.py).
//!
//! The Python tests need only `python3`: the `mcp` package comes from a pinned virtual
//! environment that `legate_testkit::python` provisions under the target directory on first
//! use. Without `python3` at all they say so and skip, except in CI (`LEGATE_REQUIRE_PYTHON`
//! or `CI` set), where they fail.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_frontkit::cli::CliHome;
use legate_frontkit::served::{McpServed, raw};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

const LEGATE: &str = env!("CARGO_BIN_EXE_legate");
const PROTOCOLS: [&str; 2] = ["2025-06-18", "2025-11-25"];

/// One of the Python scripts in tests/mcp/.
fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/mcp")
        .join(name)
}

/// The interpreter of the pinned Python environment with the `mcp` package, provisioned on
/// first use ([`legate_testkit::python`]); `None` (skip) when `python3` is missing, unless
/// `LEGATE_REQUIRE_PYTHON` or `CI` is set.
fn interpreter() -> Option<&'static Path> {
    static PYTHON: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();
    PYTHON
        .get_or_init(|| legate_testkit::python("mcp"))
        .as_deref()
}

fn python_ready() -> bool {
    interpreter().is_some()
}

/// An empty home (made, so a test may write its `legate.toml`).
fn home() -> CliHome {
    CliHome::with_config(LEGATE, "").env("LEGATE_LOG", "warn")
}

/// `python tests/mcp/<name> args…` in the test's home.
fn python_command(home: &CliHome, name: &str, args: &[&str]) -> Command {
    let python = interpreter().expect("python_ready() is checked first");
    let mut command = home.program(python);
    command.arg(script(name)).args(args);
    command
}

/// Runs a Python script (`client.py`, `scenarios.py`) to its end; returns its report, the
/// last line it printed.
fn python(home: &CliHome, name: &str, args: &[&str]) -> Value {
    let out = python_command(home, name, args).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{name} failed ({args:?}):\n{stderr}\n{stdout}"
    );
    let line = stdout.lines().last().expect("no report");
    serde_json::from_str(line).unwrap_or_else(|e| panic!("bad report {line:?}: {e}"))
}

fn check_report(report: &Value, protocol: &str) {
    assert_eq!(report["protocol"], protocol, "{report}");
    assert_eq!(report["tools"], 50, "{report}");
    assert!(report["progress"].as_u64().unwrap() >= 1, "{report}");
    assert!(report["pieces"].as_u64().unwrap() > 2, "{report}");
}

#[test]
fn python_sdk_over_stdio_delegates_waits_with_progress_and_reads_in_pieces() {
    if !python_ready() {
        return;
    }
    for protocol in PROTOCOLS {
        let home = home();
        let report = python(&home, "client.py", &["stdio", protocol, LEGATE]);
        check_report(&report, protocol);
    }
}

/// The seed's first call, `run({prompt, workingDirectory})` on a git root, works in a copy;
/// see tests/mcp/run_flow.py for everything it checks.
#[test]
fn run_on_a_git_root_works_in_a_copy_unless_in_place_is_asked_for() {
    if !python_ready() {
        return;
    }
    let home = home();
    let base = home.base().to_path_buf();
    let outside = base.join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "not for the copy\n").unwrap();
    let project = home.make_project(&[("README.md", "# Demo\n"), ("src/lib.rs", "fn f() {}\n")]);
    std::os::unix::fs::symlink(&outside, project.join("escape")).unwrap();
    let plain = base.join("plain");
    std::fs::create_dir_all(&plain).unwrap();
    // A git that says it is 2.31 and otherwise is the real one.
    let real = Command::new("sh")
        .args(["-c", "command -v git"])
        .output()
        .unwrap();
    let real = String::from_utf8(real.stdout).unwrap().trim().to_string();
    let fake = base.join("old-git");
    std::fs::create_dir_all(&fake).unwrap();
    let script = fake.join("git");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nfor a in \"$@\"; do [ \"$a\" = --version ] && {{ echo 'git version 2.31.0'; exit 0; }}; done\nexec {real:?} \"$@\"\n"
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let args = [
        LEGATE,
        project.to_str().unwrap(),
        plain.to_str().unwrap(),
        outside.to_str().unwrap(),
        fake.to_str().unwrap(),
    ];
    let report = python(&home, "run_flow.py", &args);
    assert_eq!(report["oldGit"], "GIT_UNSUPPORTED", "{report}");
    assert_eq!(report["noMemoryShown"], true, "{report}");
    // Every hostile include path is refused, with the include path's own codes.
    for (name, code) in report["hostile"].as_object().unwrap() {
        assert!(
            ["INVALID_INCLUDE_PATH", "UNSAFE_PATH"].contains(&code.as_str().unwrap()),
            "{name}: {code}"
        );
    }
    assert!(!project.join("new.txt").exists());
    // `legate show` names the memory the task was given, never its text.
    let shown = home
        .cmd(&["show", report["memoryTask"].as_str().unwrap()])
        .output()
        .unwrap();
    let shown = String::from_utf8(shown.stdout).unwrap();
    let line = shown
        .lines()
        .find(|l| l.starts_with("memory "))
        .unwrap_or_else(|| panic!("no memory line:\n{shown}"));
    assert!(
        line.contains("reviewer sha256 ") && line.ends_with("(15 bytes)"),
        "{line}"
    );
    assert!(!shown.contains("Keep src small."), "{shown}");
    let plain = home
        .cmd(&["show", report["copyTask"].as_str().unwrap()])
        .output()
        .unwrap();
    assert!(!String::from_utf8(plain.stdout).unwrap().contains("memory "));
}

/// `legate serve --mcp` on `home`; its banner tells how to add it to Claude Code.
fn server(home: &CliHome) -> McpServed {
    let server = McpServed::start(home, &["--mcp", "--port", "0"]);
    assert!(
        server
            .served
            .printed
            .iter()
            .any(|l| l.contains("Claude Code")),
        "{:?}",
        server.served.printed
    );
    server
}

/// Sends one raw MCP `initialize` to `server`; returns the status, the head (lowercased) and
/// the error code of a JSON refusal (empty for any other body).
fn raw_initialize(server: &McpServed, host: &str, extra: &[(&str, &str)]) -> (u16, String, String) {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}})
    .to_string();
    let mut headers = vec![
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    headers.extend_from_slice(extra);
    let r = raw(&server.addr, "POST", "/mcp", host, &headers, &body);
    let code = serde_json::from_str::<Value>(&r.body)
        .ok()
        .and_then(|v| v["error"]["code"].as_str().map(str::to_string))
        .unwrap_or_default();
    (r.status, r.head, code)
}

#[test]
fn python_sdk_over_http_with_the_token() {
    if !python_ready() {
        return;
    }
    let home = home();
    let server = server(&home);
    for protocol in PROTOCOLS {
        let report = python(
            &home,
            "client.py",
            &["http", protocol, &server.url, &server.token],
        );
        check_report(&report, protocol);
    }
}

#[test]
fn http_refuses_requests_without_the_token_or_from_a_foreign_host() {
    let home = home();
    let server = server(&home);
    let mode = {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(home.home().join("mcp-token"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(mode, 0o600);
    assert_eq!(server.token.len(), 64);
    let local = server.addr.clone();
    let bearer = format!("Bearer {}", server.token);

    let (status, head, code) = raw_initialize(&server, &local, &[]);
    assert_eq!((status, code.as_str()), (401, "UNAUTHORIZED"), "{head}");
    assert!(head.contains("www-authenticate: bearer"), "{head}");
    let (status, head, code) = raw_initialize(&server, &local, &[("Authorization", "Bearer nope")]);
    assert_eq!((status, code.as_str()), (401, "UNAUTHORIZED"));
    assert!(head.contains("error=\"invalid_token\""), "{head}");

    let (status, _, code) = raw_initialize(&server, "evil.example", &[("Authorization", &bearer)]);
    assert_eq!((status, code.as_str()), (403, "HOST_NOT_ALLOWED"));
    let (status, _, code) = raw_initialize(&server, "evil.example", &[]);
    assert_eq!(
        (status, code.as_str()),
        (403, "HOST_NOT_ALLOWED"),
        "a foreign Host learns nothing, not even that a token is needed"
    );
    let (status, _, code) = raw_initialize(
        &server,
        &local,
        &[
            ("Authorization", &bearer),
            ("Origin", "http://evil.example"),
        ],
    );
    assert_eq!((status, code.as_str()), (403, "ORIGIN_NOT_ALLOWED"));

    let (status, head, _) = raw_initialize(
        &server,
        &local,
        &[
            ("Authorization", &bearer),
            ("Origin", "http://localhost:6274"),
        ],
    );
    assert_eq!(status, 200, "{head}");
    let port = local.rsplit(':').next().unwrap();
    let (status, _, _) = raw_initialize(
        &server,
        &format!("localhost:{port}"),
        &[("Authorization", &bearer)],
    );
    assert_eq!(status, 200);
}

#[test]
fn stdio_stdout_carries_only_json_rpc_and_offers_output_schemas() {
    let home = home();
    let (mut mcp, init) = home.mcp_stdio(&[]);
    assert_eq!(init["protocolVersion"], "2025-06-18");
    assert_eq!(init["serverInfo"]["name"], "legate");
    assert!(mcp.request("ping", json!({})).is_object());
    let tools = mcp.request("tools/list", json!({}));
    let tools = tools["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 50);
    for t in tools {
        assert_eq!(t["outputSchema"]["type"], "object", "{t}");
    }
    let failed = mcp.call("result", json!({"taskId": "nope-nope"}));
    assert_eq!(failed["isError"], true);
    assert_eq!(
        failed["structuredContent"]["error"]["code"],
        "TASK_NOT_FOUND"
    );
    let status = mcp.close(Duration::from_secs(10));
    assert!(status.success(), "{status}");
}

#[test]
fn stdio_after_eof_finishes_the_running_task_then_exits() {
    let home = home();
    let (mut mcp, _) = home.mcp_stdio(&[]);
    let run = mcp.call(
        "run",
        json!({"prompt": "run sleep 2\nwrite done.txt: finished after EOF", "agent": "revisor"}),
    );
    let id = run["structuredContent"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("{run}"))
        .to_string();
    mcp.wait_for_tool_call(&id);
    // The client leaves while the command runs: the process finishes the task, then exits.
    let status = mcp.close(Duration::from_secs(120));
    assert!(status.success(), "{status}");
    let task = home.show(&id);
    assert_eq!(task["state"], "completed", "{task}");
    let root = PathBuf::from(task["root"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(root.join("done.txt")).unwrap(),
        "finished after EOF"
    );
}

#[test]
fn stdio_health_reports_the_configured_confinement_and_limits() {
    for requirement in ["best-effort", "required"] {
        let home = home();
        let (mut mcp, _) = home.mcp_stdio(&[
            ("LEGATE_CONFINEMENT", requirement),
            ("LEGATE_MAX_RUNNING", "3"),
            ("LEGATE_MAX_QUEUED", "7"),
            ("LEGATE_TASK_TIMEOUT_SECS", "123"),
        ]);
        let health = mcp.call("health", json!({"probe": false}));
        let health = &health["structuredContent"];
        assert_eq!(
            health["confinement"],
            json!({"requirement": requirement}),
            "{health}"
        );
        assert_eq!(
            health["limits"],
            json!({
                "maxRunning": 3, "maxQueued": 7, "maxPendingPerContext": 20,
                "defaultTimeoutSeconds": 123, "waitMaxSeconds": 60, "maxEvents": 1000,
                "readLimitMax": 50000, "messageMaxChars": 2000,
            }),
            "{health}"
        );
        let agents = health["agents"].as_array().unwrap();
        assert!(agents.iter().any(|a| a["name"] == "revisor"), "{health}");
        for agent in agents {
            // How much the kernel enforces depends on the machine, never on the client; a
            // requirement that cannot be met is the agent's error code, never `none`.
            let allowed: &[&str] = if requirement == "required" {
                &["full", "partial", "CONFINEMENT_UNAVAILABLE"]
            } else {
                &["full", "partial", "none"]
            };
            let confinement = agent["confinement"].as_str().unwrap();
            assert!(allowed.contains(&confinement), "{agent}");
            assert!(agent["starts"].is_null(), "{agent}");
            assert_eq!(agent["capabilities"], json!([]), "{agent}");
        }
        assert!(mcp.close(Duration::from_secs(10)).success());
    }
}

#[test]
fn cancel_ends_a_running_task_canceled() {
    if !python_ready() {
        return;
    }
    let home = home();
    let report = python(&home, "scenarios.py", &["cancel", LEGATE]);
    assert_eq!(report["stateBefore"], "working", "{report}");
    assert_eq!(report["cancel"]["state"], "working", "{report}");
    assert_eq!(report["cancel"]["cancelRequested"], true, "{report}");
    assert_eq!(report["final"], "canceled", "{report}");
    // A canceled task carries TASK_CANCELED as its error (the seed's code for it).
    assert_eq!(report["taskError"]["code"], "TASK_CANCELED", "{report}");
    assert_eq!(report["cancelAgain"], "TASK_NOT_CANCELABLE", "{report}");
}

/// `max_queued = 0` means no waiting room, not no room at all: a free running place takes a
/// task, a full one refuses the next with `QUEUE_FULL`, and a cancel gives the place back.
#[test]
fn with_no_waiting_room_a_free_place_still_takes_a_task() {
    if !python_ready() {
        return;
    }
    let home =
        CliHome::with_config(LEGATE, "max_running = 1\nmax_queued = 0\n").env("LEGATE_LOG", "warn");
    let report = python(&home, "scenarios.py", &["queue-zero", LEGATE]);
    assert_eq!(report["first"], "submitted", "{report}");
    assert_eq!(report["refused"], "QUEUE_FULL", "{report}");
    assert_eq!(report["firstEnded"], "canceled", "{report}");
    assert_eq!(report["again"], "completed", "{report}");
}

/// The caller-side skill (`legate caller-skill`) teaches a calling agent the tools by name:
/// every `tool(arg, …)` it writes must be one this server lists, taking those arguments, so
/// the skill cannot drift from the schemas it describes.
#[test]
fn the_caller_skill_names_only_served_tools_and_their_arguments() {
    if !python_ready() {
        return;
    }
    let home = home();
    let report = python(&home, "scenarios.py", &["caller-skill", LEGATE]);
    assert_eq!(report["missing"], json!([]), "{report}");
    assert!(report["calls"].as_u64().unwrap() >= 25, "{report}");
    assert!(report["tools"].as_u64().unwrap() >= 25, "{report}");
}

#[test]
fn wait_many_returns_at_the_first_or_all_and_refuses_hostile_id_lists() {
    if !python_ready() {
        return;
    }
    let home = home();
    let report = python(&home, "scenarios.py", &["wait-many", LEGATE]);
    let first = &report["first"];
    assert_eq!(first["mode"], "first", "{report}");
    assert_eq!(first["ready"], true, "{report}");
    assert_eq!(first["timedOut"], false, "{report}");
    assert_eq!(first["tasks"][0]["ready"], false, "{report}");
    assert_eq!(first["tasks"][1]["ready"], true, "{report}");
    assert_eq!(first["tasks"][1]["state"], "completed", "{report}");
    let timed = &report["timed"];
    assert_eq!(timed["mode"], "all", "{report}");
    assert_eq!(timed["ready"], false, "{report}");
    assert_eq!(timed["timedOut"], true, "{report}");
    let slow = report["slowAfterTimeout"].as_str().unwrap();
    assert!(["submitted", "working"].contains(&slow), "{report}");
    let hostile = &report["hostile"];
    for case in [
        "duplicate",
        "duplicatePrefix",
        "tooMany",
        "thousands",
        "none",
        "badMode",
        "badTimeout",
    ] {
        assert_eq!(hostile[case], "INVALID_INPUT", "{case}: {report}");
    }
    assert_eq!(hostile["unknown"], "TASK_NOT_FOUND", "{report}");
    let all = &report["all"];
    assert_eq!(all["ready"], true, "{report}");
    assert_eq!(all["tasks"][0]["state"], "canceled", "{report}");
    assert_eq!(
        all["tasks"][0]["taskError"]["code"], "TASK_CANCELED",
        "{report}"
    );
}

#[test]
fn send_message_under_the_query_profile_makes_a_read_only_task() {
    if !python_ready() {
        return;
    }
    let home = home();
    let report = python(&home, "scenarios.py", &["query-message", LEGATE]);
    // The context was made by a `full` server, with a write task…
    assert_eq!(report["firstMode"], "write", "{report}");
    assert_eq!(report["firstState"], "completed", "{report}");
    // …and a `query` server's message into it runs read-only: its write is refused.
    assert_eq!(report["profile"], "query", "{report}");
    assert_eq!(report["receipt"]["duplicate"], false, "{report}");
    assert_eq!(report["contextId"], report["receipt"]["contextId"]);
    assert_eq!(report["mode"], "read-only", "{report}");
    assert_eq!(report["final"], "completed", "{report}");
    assert_eq!(report["refusals"], 1, "{report}");
}

#[test]
fn roles_and_a_configured_role_run_validate_against_their_schemas_in_the_query_profile() {
    if !python_ready() {
        return;
    }
    let home = home();
    std::fs::write(
        home.home().join("legate.toml"),
        "[roles.security-review]\nbase = \"reviewer\"\ndescription = \"access control\"\ninstructions = \"Check access control.\"\ndefaults = { timeoutSeconds = 120 }\n",
    )
    .unwrap();
    let report = python(&home, "scenarios.py", &["roles", LEGATE]);
    assert_eq!(
        report["names"],
        json!(["implementer", "planner", "reviewer", "security-review"]),
        "{report}"
    );
    assert_eq!(report["custom"]["instructionsChars"], 21, "{report}");
    assert_eq!(
        report["custom"]["defaults"]["timeoutSeconds"], 120,
        "{report}"
    );
    assert_eq!(
        report["roleEnum"],
        json!([
            "implementer",
            "planner",
            "reviewer",
            "security-review",
            null
        ])
    );
    assert_eq!(report["mode"], "read-only", "{report}");
    assert_eq!(
        (report["role"].as_str(), report["roleBase"].as_str()),
        (Some("security-review"), Some("reviewer"))
    );
    assert_eq!(report["final"], "completed", "{report}");
    assert_eq!(report["report"]["kind"], "review", "{report}");
    assert_eq!(report["report"]["citationsChecked"], true, "{report}");
    assert_eq!(
        report["report"]["findings"][0]["path"], "lib.rs",
        "{report}"
    );
    assert_eq!(report["unknown"], "ROLE_NOT_FOUND", "{report}");
}

#[test]
fn an_http_client_that_gives_up_on_a_wait_or_dies_mid_wait_leaves_its_task_running() {
    if !python_ready() {
        return;
    }
    let home = home();
    let server = server(&home);
    let mut leaving = python_command(
        &home,
        "scenarios.py",
        &["leave", &server.url, &server.token],
    )
    .stdout(Stdio::piped())
    .spawn()
    .unwrap();
    let mut lines = BufReader::new(leaving.stdout.take().unwrap()).lines();
    let first = lines.next().expect("the client printed nothing").unwrap();
    let seen: Value = serde_json::from_str(&first).unwrap();
    let id = seen["taskId"].as_str().unwrap().to_string();
    // The client canceled one wait (notifications/cancelled), and is now mid-way through
    // another (a progress notification of the call arrived): gone without a word, as a
    // crashed client or a dropped connection would be.
    leaving.kill().unwrap();
    leaving.wait().unwrap();

    let report = python(
        &home,
        "scenarios.py",
        &["follow", &server.url, &server.token, &id],
    );
    assert_ne!(report["stateWhenFollowed"], "canceled", "{report}");
    assert_eq!(report["final"], "completed", "{report}");
    assert!(report["taskError"].is_null(), "{report}");
    let states = report["states"].as_array().unwrap();
    assert!(!states.iter().any(|s| s == "canceled"), "{report}");
}
