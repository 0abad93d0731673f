//! Tool and MCP controls (issue 17, part 4) over a real engine and the scripted ACP agent on
//! real pipes: a kind the task may not use is refused on its permission request with
//! `TOOL_NOT_ALLOWED` (the caller's list and the configured ceiling alike); an agent that skips
//! the permission request and writes through `fs/write_text_file` is refused the same way; the
//! selected catalogue servers reach the agent in `session/new`, and only they; a backend that
//! cannot enforce the controls (agy outside a copy) gets the task refused.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_core::{
    ControlsConfig, Decider, Decision, ErrorCode, EventKind, McpSelection, McpServerSpec,
    McpToolSpec, McpTransport, TaskMode, TaskState, ToolKind,
};
use legate_engine::SubmitRequest;
use legate_testkit::directives::MCP_SERVERS_HEAD;
use legate_testkit::{EngineHarness, TestAgent};

const SECRET: &str = "tok-9f8e7d6c5b4a39281706";

fn catalogue() -> ControlsConfig {
    ControlsConfig {
        allowed_tools: None,
        mcp_servers: vec![
            McpServerSpec {
                id: "docs".into(),
                transport: McpTransport::Stdio {
                    command: "/usr/local/bin/docs-mcp".into(),
                    args: vec!["--stdio".into()],
                    env: [("DOCS_TOKEN".to_string(), SECRET.to_string())].into(),
                },
                tools: vec![
                    McpToolSpec {
                        name: "search".into(),
                        read_only: true,
                    },
                    McpToolSpec {
                        name: "publish".into(),
                        read_only: false,
                    },
                ],
            },
            McpServerSpec {
                id: "other".into(),
                transport: McpTransport::Stdio {
                    command: "/usr/local/bin/other-mcp".into(),
                    args: vec![],
                    env: Default::default(),
                },
                tools: vec![McpToolSpec {
                    name: "x".into(),
                    read_only: true,
                }],
            },
        ],
    }
}

fn harness(controls: ControlsConfig) -> EngineHarness {
    EngineHarness::builder()
        .agent(TestAgent::scripted("agent"))
        .agent(TestAgent::fake_agy("agy"))
        .default_agent("agent")
        .config(move |c| c.controls = controls)
        .start()
}

fn permissions(h: &EngineHarness, id: &legate_core::TaskId) -> Vec<legate_core::Ruling> {
    h.events(id)
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::Permission { verdict, .. } => Some(verdict),
            _ => None,
        })
        .collect()
}

fn tools(kinds: &[ToolKind]) -> SubmitRequest {
    let mut r = SubmitRequest::new("write a.txt: hi");
    r.allowed_tools = Some(kinds.to_vec());
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_outside_the_allowed_kinds_is_refused_on_its_permission_request() {
    let h = harness(ControlsConfig::default());
    let t = h.run(tools(&[ToolKind::Read, ToolKind::Search])).await;
    let rulings = permissions(&h, &t.id);
    let refused = rulings.first().expect("the edit was asked about");
    assert_eq!(refused.decision, Decision::Deny);
    assert_eq!(refused.decider, Decider::Controls);
    assert_eq!(refused.rule_id.as_deref(), Some("TOOL_NOT_ALLOWED"));
    assert!(
        refused.reason.starts_with("TOOL_NOT_ALLOWED"),
        "{}",
        refused.reason
    );
    let sandbox = h.engine.task(t.id.as_str()).unwrap();
    assert_eq!(
        sandbox.controls.allowed_tools,
        Some(vec![ToolKind::Read, ToolKind::Search])
    );
    // Nothing was written in the context's sandbox.
    let root = h.home().join("sandboxes");
    let written = walk(&root).into_iter().any(|p| p.ends_with("a.txt"));
    assert!(!written, "a.txt was written under {}", root.display());

    // The same edit with edit allowed goes through.
    let t = h.run(tools(&[ToolKind::Read, ToolKind::Edit])).await;
    assert_eq!(t.state, TaskState::Completed);
    assert!(
        permissions(&h, &t.id)
            .iter()
            .all(|r| r.decision == Decision::Allow)
    );
    h.engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_direct_fs_write_without_asking_is_refused_without_edit() {
    let h = harness(ControlsConfig::default());
    let mut r = SubmitRequest::new("!fs-write b.txt");
    r.allowed_tools = Some(vec![ToolKind::Read]);
    let t = h.run(r).await;
    let fs: Vec<_> = h
        .events(&t.id)
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::FsAccess {
                op,
                allowed,
                reason,
                ..
            } => Some((op, allowed, reason)),
            _ => None,
        })
        .collect();
    assert_eq!(fs.len(), 1, "{fs:?}");
    let (op, allowed, reason) = &fs[0];
    assert_eq!(op, "write");
    assert!(!allowed);
    assert!(
        reason.as_deref().unwrap().starts_with("TOOL_NOT_ALLOWED"),
        "{reason:?}"
    );
    assert!(
        t.result
            .as_ref()
            .unwrap()
            .text
            .contains("fs-write b.txt: refused")
    );
    let written = walk(&h.home().join("sandboxes"))
        .into_iter()
        .any(|p| p.ends_with("b.txt"));
    assert!(!written);
    h.engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_configured_ceiling_applies_when_the_caller_names_nothing() {
    let h = harness(ControlsConfig {
        allowed_tools: Some(vec![ToolKind::Read]),
        ..ControlsConfig::default()
    });
    let t = h.run(SubmitRequest::new("write a.txt: hi")).await;
    let rulings = permissions(&h, &t.id);
    assert_eq!(rulings[0].rule_id.as_deref(), Some("TOOL_NOT_ALLOWED"));
    // Naming a kind above the ceiling is refused at submit, before anything is stored.
    let e = h.engine.submit(tools(&[ToolKind::Edit])).unwrap_err();
    assert_eq!(e.code, ErrorCode::ToolNotAllowed);
    // agy holds tool kinds only by hooks staged in a copy: under a ceiling its task in a
    // sandbox is refused, not run.
    let mut r = SubmitRequest::new("hello");
    r.agent = Some("agy".into());
    let e = h.engine.submit(r).unwrap_err();
    assert_eq!(e.code, ErrorCode::ToolNotAllowed, "{e}");
    h.engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_selected_mcp_servers_reach_the_agent_in_session_new() {
    let h = harness(catalogue());
    let mut r = SubmitRequest::new("!mcp-servers");
    r.mcp_servers = Some(vec![McpSelection {
        server_id: "docs".into(),
        tools: vec!["search".into()],
    }]);
    let t = h.run(r).await;
    assert_eq!(t.state, TaskState::Completed, "{:?}", t.error);
    let text = &t.result.as_ref().unwrap().text;
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix(MCP_SERVERS_HEAD))
        .expect("the agent reported its servers");
    let servers: serde_json::Value = serde_json::from_str(line.trim()).unwrap();
    let servers = servers.as_array().unwrap();
    assert_eq!(servers.len(), 1, "only the selected server: {servers:?}");
    assert_eq!(servers[0]["name"], "docs");
    assert_eq!(servers[0]["command"], "/usr/local/bin/docs-mcp");
    assert_eq!(servers[0]["args"][0], "--stdio");
    assert_eq!(servers[0]["env"][0]["name"], "DOCS_TOKEN");
    // The transport went to the agent only: no event but the agent's own report of it
    // carries it (Legate's workspace, status and notice events do not).
    for e in h.events(&t.id) {
        let json = serde_json::to_string(&e).unwrap();
        assert!(
            !json.contains(SECRET) || json.contains(MCP_SERVERS_HEAD),
            "{json}"
        );
    }
    // A continuation keeps the context's selection (the same session).
    let t2 = h
        .engine
        .resume(legate_engine::ContinueRequest {
            context_id: t.context_id.clone(),
            prompt: "!mcp-servers".into(),
            mode: None,
            timeout: None,
        })
        .unwrap();
    let t2 = h.wait(&t2.id).await;
    assert_eq!(t2.controls.mcp_servers, t.controls.mcp_servers);
    h.engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selections_outside_the_catalogue_are_refused() {
    let h = harness(catalogue());
    let submit = |server: &str, tool: &str, mode: Option<TaskMode>, agent: Option<&str>| {
        let mut r = SubmitRequest::new("hi");
        r.mode = mode;
        r.agent = agent.map(str::to_owned);
        r.mcp_servers = Some(vec![McpSelection {
            server_id: server.into(),
            tools: vec![tool.into()],
        }]);
        h.engine.submit(r).map(|_| ()).unwrap_err()
    };
    assert_eq!(
        submit("nope", "search", None, None).code,
        ErrorCode::McpServerNotFound
    );
    assert_eq!(
        submit("docs", "rm", None, None).code,
        ErrorCode::ToolNotAllowed
    );
    let e = submit("docs", "publish", Some(TaskMode::ReadOnly), None);
    assert_eq!(e.code, ErrorCode::ToolNotAllowed);
    assert_eq!(
        submit("docs", "search", None, Some("agy")).code,
        ErrorCode::ToolNotAllowed
    );
    h.engine.shutdown().await;
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}
