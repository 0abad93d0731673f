//! `legate serve --a2a --mcp`: both fronts from one process over one engine, each behind the
//! `Host`/`Origin` allowlist before its token, and both stopped by one SIGTERM.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_frontkit::cli::CliHome;
use legate_frontkit::served::{addr_of, raw};
use legate_testkit::git;
use serde_json::{Value, json};

const LEGATE: &str = env!("CARGO_BIN_EXE_legate");

fn send_message(text: &str) -> String {
    json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
        "messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": text}]}}})
    .to_string()
}

fn mcp_headers(auth: &str) -> [(&str, &str); 3] {
    [
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("Authorization", auth),
    ]
}

#[test]
fn both_fronts_serve_from_one_process_behind_their_allowlists() {
    let home = CliHome::new(LEGATE);
    let mut served = home.serve(&["--a2a", "--mcp", "--port", "0", "--a2a-port", "0"]);
    let a2a = addr_of(&served.url("Legate A2A server"));
    let mcp = addr_of(&served.url("Legate MCP server"));
    assert_ne!(a2a, mcp);
    assert!(
        served
            .printed
            .iter()
            .any(|l| l.starts_with("answers to Host: localhost, 127.0.0.1, ::1")),
        "{:?}",
        served.printed
    );
    // Only what the configuration names (nothing here), the default and revisor are served:
    // presets nobody named are not probed, so no "not served" line for them.
    assert!(
        !served.printed.iter().any(|l| l.contains("not served")),
        "{:?}",
        served.printed
    );
    let a2a_token = std::fs::read_to_string(home.home().join("a2a-token")).unwrap();
    let a2a_bearer = format!("Bearer {}", a2a_token.trim());
    let mcp_token = std::fs::read_to_string(home.home().join("mcp-token")).unwrap();
    let mcp_bearer = format!("Bearer {}", mcp_token.trim());

    // A2A: the card for a loopback Host; 403 for a foreign Host or Origin, before the token.
    let card = raw(&a2a, "GET", "/.well-known/agent-card.json", &a2a, &[], "");
    assert_eq!(card.status, 200, "{card:?}");
    let foreign = raw(
        &a2a,
        "GET",
        "/.well-known/agent-card.json",
        "evil.example",
        &[],
        "",
    );
    assert_eq!(foreign.status, 403);
    assert!(foreign.body.contains("HOST_NOT_ALLOWED"), "{foreign:?}");
    assert!(foreign.body.contains("a2a.allowed_hosts"), "{foreign:?}");
    let headers = [
        ("Content-Type", "application/json"),
        ("A2A-Version", "1.0"),
        ("Origin", "http://evil.example"),
    ];
    let cross = raw(&a2a, "POST", "/", &a2a, &headers, &send_message("hi"));
    assert_eq!(cross.status, 403, "{cross:?}");
    assert!(cross.body.contains("ORIGIN_NOT_ALLOWED"), "{cross:?}");
    assert!(!cross.head.contains("www-authenticate"), "{cross:?}");

    // A2A with its token: a task runs to its end on the shared engine.
    let headers = [
        ("Content-Type", "application/json"),
        ("A2A-Version", "1.0"),
        ("Authorization", a2a_bearer.as_str()),
    ];
    let sent = raw(
        &a2a,
        "POST",
        "/",
        &format!("localhost:{}", a2a.rsplit(':').next().unwrap()),
        &headers,
        &send_message("summarize this workspace"),
    );
    assert_eq!(sent.status, 200, "{sent:?}");
    let body: Value = serde_json::from_str(&sent.body).unwrap();
    let task_id = body["result"]["task"]["id"].as_str().unwrap().to_string();
    assert_eq!(
        body["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{body}"
    );

    // MCP: the same allowlist rules, then its own token (the A2A token is not MCP's).
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}})
    .to_string();
    let wrong = raw(&mcp, "POST", "/mcp", &mcp, &mcp_headers(&a2a_bearer), &init);
    assert_eq!(wrong.status, 401, "{wrong:?}");
    let right = mcp_headers(&mcp_bearer);
    let foreign = raw(&mcp, "POST", "/mcp", "evil.example", &right, &init);
    assert_eq!(foreign.status, 403);
    let ok = raw(&mcp, "POST", "/mcp", &mcp, &right, &init);
    assert_eq!(ok.status, 200, "{ok:?}");

    // One SIGTERM stops both, cleanly; the task A2A ran is in the shared store.
    let status = served.stop().expect("serve did not stop on SIGTERM");
    assert!(status.success(), "{status:?}");
    let out = home.run(&["show", &task_id]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("completed"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn both_fronts_on_one_port_is_refused_before_anything_starts() {
    let home = CliHome::new(LEGATE);
    let out = home.run(&[
        "serve",
        "--a2a",
        "--mcp",
        "--port",
        "9999",
        "--a2a-port",
        "9999",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("INVALID_INPUT"), "{err}");
    assert!(!home.home().join("a2a-token").exists());
}

/// A message body asking for a copy of `project`.
fn copy_message(method: &str, project: &std::path::Path, id: &str) -> String {
    json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": {"message": {
        "messageId": id, "role": "ROLE_USER",
        "parts": [{"text": "replace src/greeting.txt: hello => hi"}, {"text": "write NOTES.md: # Notes"}],
        "metadata": {"workspace": {"kind": "copy", "path": project, "includePaths": ["src"]}}}}})
    .to_string()
}

#[test]
fn a_copy_task_over_a2a_brings_its_patch_back_as_an_artifact() {
    let home = CliHome::new(LEGATE);
    let base = home.base();
    let roots = base.join("repos");
    let project = roots.join("project");
    std::fs::create_dir_all(project.join("src")).unwrap();
    git(&project, &["init", "-q"]);
    std::fs::write(project.join("src/greeting.txt"), "hello world\n").unwrap();
    git(&project, &["add", "-A"]);
    git(&project, &["commit", "-q", "-m", "init"]);
    home.configure(&format!(
        "[a2a]\nauth = \"none\"\ncopy_roots = [{:?}]\n",
        roots.to_string_lossy()
    ));
    let served = home.serve(&["--port", "0"]);
    let a2a = addr_of(&served.url("Legate A2A server"));
    let headers = [("Content-Type", "application/json"), ("A2A-Version", "1.0")];

    let sent = raw(
        &a2a,
        "POST",
        "/",
        &a2a,
        &headers,
        &copy_message("SendMessage", &project, "c-1"),
    );
    assert_eq!(sent.status, 200, "{sent:?}");
    let body: Value = serde_json::from_str(&sent.body).unwrap();
    let task = &body["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{body}");
    let artifacts = task["artifacts"].as_array().unwrap();
    let patch = artifacts
        .iter()
        .find(|a| a["artifactId"] == "patch")
        .unwrap_or_else(|| panic!("no patch artifact: {body}"));
    let diff = patch["parts"][0]["text"].as_str().unwrap();
    assert!(diff.contains("-hello world"), "{diff}");
    assert!(diff.contains("+hi world"), "{diff}");
    // includePaths narrowed the copy to src/, but the agent may add files anywhere in it.
    assert!(diff.contains("+++ b/NOTES.md"), "{diff}");
    assert_eq!(patch["parts"][0]["mediaType"], "text/x-diff");
    let data = &patch["parts"][1]["data"];
    let sha = data["sha256"].as_str().unwrap();
    assert_eq!(data["summary"]["filesChanged"], 2.0, "{data}");
    assert_eq!(data["inline"], true);
    // The original is untouched, and the CLI sees the same patch.
    assert_eq!(
        std::fs::read_to_string(project.join("src/greeting.txt")).unwrap(),
        "hello world\n"
    );
    let task_id = task["id"].as_str().unwrap();
    let out = home.run(&["diff", "--json", task_id]);
    let preview: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(preview["sha256"], sha);

    // Streaming: the patch arrives as an artifact update just before the final status.
    let streamed = raw(
        &a2a,
        "POST",
        "/",
        &a2a,
        &headers,
        &copy_message("SendStreamingMessage", &project, "c-2"),
    );
    assert_eq!(streamed.status, 200, "{streamed:?}");
    let frames: Vec<Value> = streamed
        .body
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(|d| serde_json::from_str(d.trim()).unwrap())
        .collect();
    let n = frames.len();
    assert!(n >= 3, "{frames:?}");
    assert_eq!(
        frames[n - 2]["result"]["artifactUpdate"]["artifact"]["artifactId"],
        "patch",
        "{frames:?}"
    );
    assert_eq!(
        frames[n - 1]["result"]["statusUpdate"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );

    // A project outside copy_roots, or a shared directory, is refused and starts nothing.
    let outside = base.join("elsewhere");
    std::fs::create_dir_all(&outside).unwrap();
    for body in [
        copy_message("SendMessage", &outside, "c-3"),
        json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
            "messageId": "c-4", "role": "ROLE_USER", "parts": [{"text": "hi"}],
            "metadata": {"workspace": {"kind": "shared", "path": project}}}}})
        .to_string(),
    ] {
        let refused = raw(&a2a, "POST", "/", &a2a, &headers, &body);
        assert!(refused.body.contains("INVALID_WORKSPACE"), "{refused:?}");
        assert!(refused.body.contains("\"error\""), "{refused:?}");
    }
    let out = home.run(&["tasks", "--json"]);
    let listed = String::from_utf8_lossy(&out.stdout);
    assert_eq!(listed.lines().count(), 2, "{listed}");
}

/// One word list from a systemd command line as `legate service` quotes it: double-quoted
/// words, `\` escapes, `$$` and `%%` for `$` and `%`.
fn systemd_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '"' {
            assert!(c == ' ', "unquoted {c:?} in {line:?}");
            continue;
        }
        let mut word = String::new();
        loop {
            match chars.next().unwrap() {
                '"' => break,
                '\\' => word.push(chars.next().unwrap()),
                c @ ('$' | '%') => {
                    assert_eq!(chars.next(), Some(c), "a lone {c} in {line:?}");
                    word.push(c);
                }
                c => word.push(c),
            }
        }
        words.push(word);
    }
    words
}

/// `legate service install --dry-run`'s unit, run as written: its `ExecStart` with its
/// `Environment` and nothing else (as a user manager would) serves both fronts, their tokens
/// read from the home's files, and stops on SIGTERM.
#[test]
fn the_service_units_exec_start_as_written_serves_the_fronts() {
    let home = CliHome::new(LEGATE);
    let user = tempfile::tempdir().unwrap();
    let out = home
        .cmd(&[
            "service",
            "install",
            "--dry-run",
            "--a2a",
            "--mcp",
            "--port",
            "0",
            "--a2a-port",
            "0",
        ])
        .env("HOME", user.path())
        .env("XDG_CONFIG_HOME", user.path().join("config"))
        .output()
        .unwrap();
    let unit = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{unit}");
    assert!(
        !user.path().join("config").exists(),
        "a dry run wrote something"
    );
    assert!(unit.starts_with(&format!(
        "# {}",
        user.path().join("config/systemd/user/legate.service").display()
    )));
    let field = |key: &str| {
        let line = unit
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .unwrap_or_else(|| panic!("no {key} in {unit}"));
        systemd_words(line)
    };
    let exec = field("ExecStart=");
    assert_eq!(
        std::path::Path::new(&exec[0]),
        std::path::Path::new(LEGATE).canonicalize().unwrap()
    );
    let env = field("Environment=");
    assert_eq!(env.len(), 1, "{unit}");
    let (key, value) = env[0].split_once('=').unwrap();
    assert_eq!((key, value), ("LEGATE_HOME", home.home().to_str().unwrap()));
    assert!(!unit.to_lowercase().contains("token"), "{unit}");

    let mut command = std::process::Command::new(&exec[0]);
    command
        .args(&exec[1..])
        .env_clear()
        .env(key, value)
        .env("PATH", "/usr/bin:/bin")
        .stdin(std::process::Stdio::null());
    let mut served = legate_frontkit::served::Served::spawn(&mut command);
    let a2a = addr_of(&served.url("Legate A2A server"));
    let mcp = addr_of(&served.url("Legate MCP server"));
    let card = raw(&a2a, "GET", "/.well-known/agent-card.json", &a2a, &[], "");
    assert_eq!(card.status, 200, "{card:?}");
    let token = std::fs::read_to_string(home.home().join("mcp-token")).unwrap();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}})
    .to_string();
    let bearer = format!("Bearer {}", token.trim());
    let ok = raw(&mcp, "POST", "/mcp", &mcp, &mcp_headers(&bearer), &init);
    assert_eq!(ok.status, 200, "{ok:?}");
    let status = served.stop().expect("the service did not stop on SIGTERM");
    assert!(status.success(), "{status:?}");
}

/// Installing where no service manager answers fails with `SERVICE_UNAVAILABLE` and leaves
/// no unit behind; flags `legate serve` would refuse are refused before anything is written.
#[test]
fn a_service_install_that_cannot_start_leaves_nothing() {
    let home = CliHome::new(LEGATE);
    let user = tempfile::tempdir().unwrap();
    let unit = user.path().join("config/systemd/user/legate.service");
    let install = |args: &[&str]| {
        let mut all = vec!["service", "install"];
        all.extend_from_slice(args);
        home.cmd(&all)
            .env("HOME", user.path())
            .env("XDG_CONFIG_HOME", user.path().join("config"))
            .env("PATH", user.path())
            .output()
            .unwrap()
    };
    let out = install(&["--mcp"]);
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(said.contains("SERVICE_UNAVAILABLE"), "{said}");
    assert!(!unit.exists());
    let out = install(&["--ui-port", "9"]);
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(said.contains("INVALID_INPUT"), "{said}");
    assert!(!unit.exists());
    let status = home
        .cmd(&["service", "status"])
        .env("HOME", user.path())
        .env("XDG_CONFIG_HOME", user.path().join("config"))
        .output()
        .unwrap();
    assert_eq!(status.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&status.stdout).contains("not installed"));
}
