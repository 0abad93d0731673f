//! Codex's registration of Legate as the docs show it, and Legate's own approval over Codex's:
//! `codex mcp add` for stdio and for Streamable HTTP (each then used by a `codex exec`), and
//! an integration Legate asks about in its approval mode `ask`, which `codex exec` declines.
//! Owns these three scenarios; the shared pieces (Codex's configuration, its run, the tap)
//! are the parent module's. Like it, it never decides anything about Legate: it reads the
//! disk, Legate's store and log, Codex's output and the tap.

use super::*;
use legate_frontkit::served::{McpServed, Served, addr_of};

#[test]
fn codex_mcp_add_registers_legate() {
    let openai = ModelServer::start().unwrap();
    let (home, project, codex_home, user_home) = setup("");
    let config = codex_home.join("config.toml");
    std::fs::write(&config, codex_base(&openai)).unwrap();

    // The command the docs show, with this test's binary and home.
    let legate_home = format!("LEGATE_HOME={}", home.home().display());
    let written = codex_mcp_add(
        &codex_home,
        &user_home,
        &["--env", &legate_home, "--", LEGATE, "mcp"],
    );
    let table = format!(
        "[mcp_servers.legate]\ncommand = {:?}\nargs = [\"mcp\"]\n\n[mcp_servers.legate.env]\nLEGATE_HOME = {:?}\n",
        LEGATE,
        home.home().display().to_string()
    );
    assert!(written.contains(&table), "codex mcp add wrote:\n{written}");
    assert!(written.starts_with(&codex_base(&openai)), "{written}");

    // A run on that file calls Legate, and Legate's answer reaches Codex's model.
    openai.script(vec![
        legate("health", json!({"probe": false})),
        Step::text("Legate is there."),
    ]);
    let (out, events) = codex_exec(&codex_home, &user_home, &project, "Is Legate there?", &[]);
    assert!(out.status.success(), "{}", describe(&out));
    let calls = legate_calls(&events);
    assert_eq!(calls.len(), 1, "{}", describe(&out));
    assert_eq!(
        (calls[0].0.as_str(), calls[0].1.as_str()),
        ("health", "completed")
    );
    let health: Value = serde_json::from_str(&calls[0].2).unwrap();
    assert_eq!(health["toolProfile"], "full", "{health}");
    let last = tool_outputs(openai.requests().last().unwrap());
    assert!(
        last.iter().any(|o| o.contains("\"toolProfile\":\"full\"")),
        "{last:?}"
    );
}

/// `legate serve --mcp` with its debug log in `log`: what a client needs to call it.
fn serve_logged(home: &CliHome, log: &Path) -> McpServed {
    let mut command = home.program("sh");
    command
        .args(["-c", "exec \"$0\" serve --mcp --port 0 2>>\"$1\""])
        .arg(LEGATE)
        .arg(log)
        .env("LEGATE_LOG", "debug");
    let served = Served::spawn(&mut command);
    let url = served.url("Legate MCP server");
    let token = std::fs::read_to_string(home.home().join("mcp-token")).unwrap();
    McpServed {
        addr: addr_of(&url),
        served,
        url,
        token: token.trim().to_string(),
    }
}

/// Each MCP session Legate's debug log shows starting, in order: the revision, and whether
/// the client declared the tasks extension.
fn sessions_in(log: &Path) -> Vec<(String, bool)> {
    const AT: &str = "protocol_version: ProtocolVersion(\"";
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("Service initialized as server"))
        .filter_map(|l| {
            let from = &l[l.find(AT)? + AT.len()..];
            let tasks = l.contains("io.modelcontextprotocol/tasks");
            Some((from[..from.find('"')?].to_string(), tasks))
        })
        .collect()
}

#[test]
fn codex_over_http_delegates() {
    let openai = ModelServer::start().unwrap();
    let (home, project, codex_home, user_home) = setup("");
    let log = home.base().join("serve.log");
    let server = serve_logged(&home, &log);
    // Codex asks for 2025-06-18 over HTTP too; with its feature `mcp_2026_07_28` (under
    // development) it sends `server/discover` and speaks 2026-07-28 (a session per request).
    for (feature, revision) in [(false, "2025-06-18"), (true, "2026-07-28")] {
        let mut config = codex_base(&openai);
        if feature {
            config = config.replace("[features]\n", "[features]\nmcp_2026_07_28 = true\n");
        }
        std::fs::write(codex_home.join("config.toml"), config).unwrap();
        // The command the docs show for HTTP; the default tool timeout (60 s) is above this
        // test's wait.
        let written = codex_mcp_add(
            &codex_home,
            &user_home,
            &[
                "--url",
                &server.url,
                "--bearer-token-env-var",
                "LEGATE_MCP_TOKEN",
            ],
        );
        let table = format!(
            "[mcp_servers.legate]\nurl = {:?}\nbearer_token_env_var = \"LEGATE_MCP_TOKEN\"\n",
            server.url
        );
        assert!(written.contains(&table), "codex mcp add wrote:\n{written}");
        let file = format!("{revision}.txt");
        openai.script(vec![
            legate(
                "run",
                json!({"prompt": format!("write {file}: over HTTP"), "agent": "revisor",
                       "workingDirectory": project}),
            ),
            wait_until_ready(),
            Step::text("Delegated over HTTP."),
        ]);
        let before = sessions_in(&log).len();
        let (out, events) = codex_exec(
            &codex_home,
            &user_home,
            &project,
            "Delegate a file through Legate.",
            &[("LEGATE_MCP_TOKEN", &server.token)],
        );
        assert!(out.status.success(), "{}", describe(&out));
        let calls = legate_calls(&events);
        let names: Vec<&str> = calls.iter().map(|(n, _, _)| n.as_str()).collect();
        assert_eq!(names, ["run", "wait"], "{}", describe(&out));
        for (name, status, text) in &calls {
            assert_eq!(status, "completed", "{name}: {text}");
        }
        let run: Value = serde_json::from_str(&calls[0].2).unwrap();
        let wait: Value = serde_json::from_str(&calls[1].2).unwrap();
        assert_eq!(
            (&wait["ready"], &wait["state"]),
            (&json!(true), &json!("completed"))
        );
        let shown = home.show(run["taskId"].as_str().unwrap());
        let root = PathBuf::from(shown["root"].as_str().unwrap());
        assert_eq!(
            std::fs::read_to_string(root.join(&file)).unwrap(),
            "over HTTP"
        );
        assert!(
            !project.join(&file).exists(),
            "a copy task changed the project"
        );
        let sessions = sessions_in(&log).split_off(before);
        eprintln!("codex over HTTP (mcp_2026_07_28 {feature}): MCP sessions {sessions:?}");
        assert!(
            !sessions.is_empty() && sessions.iter().all(|(r, tasks)| r == revision && !tasks),
            "{sessions:?}"
        );
    }
}

/// `[copies] approval_mode = "ask"`: Legate asks Codex through a form elicitation before it
/// integrates, and `codex exec` (nobody to ask) declines, even with `integrate` approved on
/// Codex's side: the integration is `INTEGRATION_DECLINED` and the project untouched.
#[test]
fn codex_exec_declines_an_integration_legate_asks_about() {
    let openai = ModelServer::start().unwrap();
    let (home, project, codex_home, user_home) = setup("[copies]\napproval_mode = \"ask\"\n");
    let base = home.base().to_path_buf();
    let table = legate_table(&tap(&base), &["mcp"], &home.home());
    std::fs::write(codex_home.join("config.toml"), codex_base(&openai) + &table).unwrap();
    let task = json!({"taskId": "{{taskId}}"});
    openai.script(vec![
        run_on_copy(
            "write hello.txt: asked first",
            "revisor",
            &project,
            "hello.txt",
        ),
        wait_until_ready(),
        legate("preview", task),
        verify_file("hello.txt", "asked first"),
        integrate("{{sha256}}"),
        Step::text("Not integrated."),
    ]);
    let (out, events) = codex_exec(&codex_home, &user_home, &project, "Integrate.", &[]);
    assert!(out.status.success(), "{}", describe(&out));
    let calls = legate_calls(&events);
    let (name, status, text) = calls.last().unwrap();
    assert_eq!(
        (name.as_str(), status.as_str()),
        ("integrate", "failed"),
        "{text}"
    );
    assert!(text.contains("INTEGRATION_DECLINED"), "{text}");
    assert!(
        !project.join("hello.txt").exists(),
        "integrated without a confirmation"
    );
    let asked = messages(&base.join("out.jsonl"))
        .into_iter()
        .find(|m| m["method"] == "elicitation/create")
        .expect("Legate did not ask");
    let answer = messages(&base.join("in.jsonl"))
        .into_iter()
        .find(|m| m["id"] == asked["id"] && m.get("method").is_none())
        .expect("Codex did not answer");
    eprintln!(
        "codex: Legate asked to integrate; codex exec answered {}",
        answer["result"]
    );
    assert_eq!(answer["result"]["action"], "decline");
}
