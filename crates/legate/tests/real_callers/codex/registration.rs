//! Codex's registration of Legate as the docs show it, and Legate's own approval over Codex's:
//! `codex mcp add` for stdio and for Streamable HTTP (each then used by a `codex exec`), and
//! an integration Legate asks about in its approval mode `ask`, which `codex exec` declines.
//! Owns these three scenarios; the shared pieces are the parent module's (Codex's
//! configuration and its run) and the harness's (Legate's home, its serving, the tap). Like it, it never decides anything about Legate: it reads the
//! disk, Legate's store and log, Codex's output and the tap.

use super::*;

#[test]
fn codex_mcp_add_registers_legate() {
    let openai = ModelServer::start().unwrap();
    let home = legate_home(Transport::Stdio, "");
    let codex = Codex::new(&home);
    codex.configure(&codex_base(&openai));

    // The command the docs show, with this test's binary and home.
    let env = format!("LEGATE_HOME={}", home.cli.home().display());
    let written = codex.mcp_add(&["--env", &env, "--", LEGATE, "mcp"]);
    let table = format!(
        "[mcp_servers.legate]\ncommand = {:?}\nargs = [\"mcp\"]\n\n[mcp_servers.legate.env]\nLEGATE_HOME = {:?}\n",
        LEGATE,
        home.cli.home().display().to_string()
    );
    assert!(written.contains(&table), "codex mcp add wrote:\n{written}");
    assert!(written.starts_with(&codex_base(&openai)), "{written}");

    // A run on that file calls Legate, and Legate's answer reaches Codex's model.
    openai.script(vec![
        legate("health", json!({"probe": false})),
        Step::text("Legate is there."),
    ]);
    let (out, events) = codex.exec("Is Legate there?", &[]);
    let calls = legate_calls(&events);
    assert_eq!(calls.len(), 1, "{out}");
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

#[test]
fn codex_over_http_delegates() {
    let openai = ModelServer::start().unwrap();
    let home = legate_home(Transport::Http, "");
    let (project, url, token) = (home.project(), home.mcp_url(), home.token());
    let codex = Codex::new(&home);
    // Codex asks for 2025-06-18 over HTTP too; with its feature `mcp_2026_07_28` (under
    // development) it sends `server/discover` and speaks 2026-07-28 (a session per request).
    for (feature, revision) in [(false, "2025-06-18"), (true, "2026-07-28")] {
        let mut config = codex_base(&openai);
        if feature {
            config = config.replace("[features]\n", "[features]\nmcp_2026_07_28 = true\n");
        }
        codex.configure(&config);
        // The command the docs show for HTTP; the default tool timeout (60 s) is above this
        // test's wait.
        let written = codex.mcp_add(&["--url", &url, "--bearer-token-env-var", "LEGATE_MCP_TOKEN"]);
        let table = format!(
            "[mcp_servers.legate]\nurl = {:?}\nbearer_token_env_var = \"LEGATE_MCP_TOKEN\"\n",
            url
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
        let before = home.tap().sessions.len();
        let (out, events) = codex.exec(
            "Delegate a file through Legate.",
            &[("LEGATE_MCP_TOKEN", &token)],
        );
        let calls = legate_calls(&events);
        let names: Vec<&str> = calls.iter().map(|(n, _, _)| n.as_str()).collect();
        assert_eq!(names, ["run", "wait"], "{out}");
        for (name, status, text) in &calls {
            assert_eq!(status, "completed", "{name}: {text}");
        }
        let run: Value = serde_json::from_str(&calls[0].2).unwrap();
        let wait: Value = serde_json::from_str(&calls[1].2).unwrap();
        assert_eq!(
            (&wait["ready"], &wait["state"]),
            (&json!(true), &json!("completed"))
        );
        let shown = home.task(run["taskId"].as_str().unwrap());
        let root = PathBuf::from(shown["root"].as_str().unwrap());
        assert_eq!(
            std::fs::read_to_string(root.join(&file)).unwrap(),
            "over HTTP"
        );
        assert!(
            !project.join(&file).exists(),
            "a copy task changed the project"
        );
        let sessions = home.tap().sessions.split_off(before);
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
    let home = legate_home(Transport::Stdio, "[copies]\napproval_mode = \"ask\"\n");
    let project = home.project();
    let codex = Codex::new(&home);
    codex.configure(&(codex_base(&openai) + &codex.stdio_table()));
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
    let (_, events) = codex.exec("Integrate.", &[]);
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
    let tap = home.tap();
    let asked = tap
        .legate_request("elicitation/create")
        .expect("Legate did not ask");
    let answer = tap.answer_to(asked).expect("Codex did not answer");
    eprintln!(
        "codex: Legate asked to integrate; codex exec answered {}",
        answer["result"]
    );
    assert_eq!(answer["result"]["action"], "decline");
}
