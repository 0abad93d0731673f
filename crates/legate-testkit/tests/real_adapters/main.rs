//! The real adapters through Legate, offline: Claude Code (`claude-agent-acp`), Codex
//! (`codex-acp`) and Gemini CLI (`gemini --acp`), each pointed at the scripted model server.
//!
//! Opt-in: `scripts/real-adapters.sh` installs the adapters from npm into a cache directory
//! and runs `cargo test -p legate-testkit --features real-adapters --test real_adapters`.
//! `LEGATE_ADAPTERS_DIR` names the directory holding their `node_modules` (default
//! `~/.cache/legate-adapters`). An adapter that is not installed fails its test with a
//! message saying so, rather than passing silently.
//!
//! Each adapter gets, in this order: a plain answer; a write inside a shared root (allowed);
//! a shell command in an owned sandbox (allowed) and in a shared root (refused, the task
//! still ends clearly); a write outside the root (refused, the file absent); and, for Claude
//! and Gemini, entering and leaving plan mode, in an owned sandbox and in a shared root, each
//! followed by a shell command whose permission request proves the agent still asks:
//!
//! - Claude's `ExitPlanMode` is a `switch_mode`: the option that keeps supervision
//!   (`default`) is chosen wherever the root is; the shell command after it is asked about,
//!   and refused in the shared root;
//! - Gemini's `exit_plan_mode` (like its `enter_plan_mode`) is kind `other`, decided by the
//!   `other` row: `proceed_once` in an owned sandbox (which lands in `default`: the shell
//!   command after it is still asked about), `cancel` in a shared root.
//!
//! Codex has no plan-exit step: codex-acp 0.16.0 never asks about leaving plan mode (see
//! `docs/backends/acp.md`). Assertions are on the disk and on the recorded decisions.
//!
//! `resume` (the `<name>_resume_after_restart` tests) continues a context after a `kill -9` of
//! the Legate process that ran its first turn.

#![cfg(feature = "real-adapters")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_core::{
    AgentKind, ConnectionEvent, Decision, Event, EventKind, Task, TaskState, ToolKind,
};
use legate_engine::{Engine, SubmitRequest, WorkspaceRequest};
use legate_testkit::model_server::{ModelServer, Step};
use legate_testkit::{EngineHarness, TestAgent};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

mod direct;
mod resume;

/// Which releases: `current` (the default) or `old` (`LEGATE_ADAPTERS=old`).
fn old() -> bool {
    std::env::var("LEGATE_ADAPTERS").is_ok_and(|v| v == "old")
}

/// `$LEGATE_ADAPTERS_DIR/<current|old>`, holding that set's `node_modules`.
fn adapters_dir() -> PathBuf {
    let base = std::env::var_os("LEGATE_ADAPTERS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/legate-adapters")
        });
    base.join(if old() { "old" } else { "current" })
}

/// The tool names and inputs one adapter's model uses.
struct Adapter {
    name: &'static str,
    command: String,
    args: Vec<String>,
    env: BTreeMap<String, String>,
    write: fn(&Path, &str) -> Step,
    shell: fn(&str) -> Step,
    /// Entering and leaving plan mode, if the adapter asks about it.
    plan: Option<Plan>,
    /// Files to put in the agent's state directory before it starts.
    state_files: Vec<(&'static str, String)>,
}

fn require(path: PathBuf) -> String {
    assert!(
        path.exists(),
        "{} is not installed: run scripts/real-adapters.sh",
        path.display()
    );
    path.display().to_string()
}

fn claude(url: &str) -> Adapter {
    let package = if old() {
        "@zed-industries/claude-agent-acp"
    } else {
        "@agentclientprotocol/claude-agent-acp"
    };
    let js = require(adapters_dir().join(format!("node_modules/{package}/dist/index.js")));
    Adapter {
        name: "claude",
        command: "node".into(),
        args: vec![js],
        env: BTreeMap::from([
            ("ANTHROPIC_BASE_URL".into(), url.into()),
            ("ANTHROPIC_API_KEY".into(), "sk-ant-legate-test".into()),
        ]),
        write: |p, c| Step::tool("Write", json!({"file_path": p, "content": c})),
        shell: |c| Step::tool("Bash", json!({"command": c, "description": "run it"})),
        // Claude refuses ExitPlanMode outside plan mode, so the model enters it first. Its
        // plan exit is a `switch_mode`: where the root is changes nothing.
        plan: Some(Plan {
            steps: vec![
                Step::tool("EnterPlanMode", json!({})),
                Step::tool("ExitPlanMode", json!({"plan": "1. write the code"})),
            ],
            // 0.23.1 offers the destination mode as the id (`default`); 0.101.0 offers
            // `exit-plan-default`, `exit-plan-auto`, `exit-plan-bypass` and `reject`.
            owned: if old() {
                "default"
            } else {
                "exit-plan-default"
            },
            shared: (
                Decision::Allow,
                if old() {
                    "default"
                } else {
                    "exit-plan-default"
                },
            ),
            shared_state_files: vec![],
        }),
        state_files: vec![],
    }
}

fn codex(url: &str) -> Adapter {
    let provider = format!(
        "[model_providers.fake]\nname = \"fake\"\nbase_url = \"{url}/v1\"\nenv_key = \"LEGATE_FAKE_OPENAI_KEY\"\nwire_api = \"responses\"\n"
    );
    let config = if old() {
        format!("model = \"gpt-5.3-codex\"\nmodel_provider = \"fake\"\n\n{provider}")
    } else {
        std::env::var("LEGATE_CODEX_CONFIG")
            .unwrap_or_default()
            .replace("\\n", "\n")
            + &format!("model = \"gpt-5.3-codex\"\nmodel_provider = \"fake\"\n\n{provider}")
    };
    let (command, args) = if old() {
        let bin = require(
            adapters_dir().join("node_modules/@zed-industries/codex-acp-linux-x64/bin/codex-acp"),
        );
        let args = vec![
            "-c".into(),
            "approval_policy=\"untrusted\"".into(),
            "-c".into(),
            "sandbox_mode=\"danger-full-access\"".into(),
        ];
        (bin, args)
    } else {
        let js = require(
            adapters_dir().join("node_modules/@agentclientprotocol/codex-acp/dist/index.js"),
        );
        ("node".to_string(), vec![js])
    };
    Adapter {
        name: "codex",
        command,
        args,
        // Codex reads its endpoint from the provider in its config file; Legate's preset
        // reads it from `OPENAI_BASE_URL` (its rule `preset:codex` allows that host), which
        // Codex 0.166 itself ignores. Both name the scripted model server.
        env: BTreeMap::from([
            ("LEGATE_FAKE_OPENAI_KEY".into(), "sk-legate-test".into()),
            ("OPENAI_BASE_URL".into(), format!("{url}/v1")),
        ]),
        write: if old() {
            |p, c| {
                Step::tool(
                    "apply_patch",
                    json!(format!(
                        "*** Begin Patch\n*** Add File: {}\n+{c}\n*** End Patch\n",
                        p.display()
                    )),
                )
            }
        } else {
            // Codex 0.166 offers no `apply_patch` tool to a model it has no metadata for;
            // the model writes through `exec_command`, which Codex recognises as a patch.
            |p, c| {
                Step::tool(
                    "exec_command",
                    json!({"cmd": format!(
                        "apply_patch <<'EOF'\n*** Begin Patch\n*** Add File: {}\n+{c}\n*** End Patch\nEOF\n",
                        p.display()
                    )}),
                )
            }
        },
        // In its `read-only` mode Codex runs a command in its own sandbox without asking;
        // it asks only when the model requests escalation, as its instructions tell it to
        // for anything that writes.
        shell: if old() {
            |c| Step::tool("exec_command", json!({"cmd": c}))
        } else {
            |c| {
                Step::tool(
                    "exec_command",
                    json!({"cmd": c, "sandbox_permissions": "require_escalated",
                           "justification": "writes a file in the workspace"}),
                )
            }
        },
        plan: None,
        state_files: vec![(".codex/config.toml", config)],
    }
}

fn gemini(url: &str) -> Adapter {
    let js = require(adapters_dir().join("node_modules/@google/gemini-cli/bundle/gemini.js"));
    Adapter {
        name: "gemini",
        command: "node".into(),
        args: vec![js, "--acp".into()],
        env: BTreeMap::from([
            ("GEMINI_API_KEY".into(), "legate-test".into()),
            ("GOOGLE_GEMINI_BASE_URL".into(), url.into()),
        ]),
        write: |p, c| Step::tool("write_file", json!({"file_path": p, "content": c})),
        shell: |c| Step::tool("run_shell_command", json!({"command": c})),
        // gemini-cli 0.61.0 asks about entering plan mode (an `info` confirmation) and about
        // leaving it (`exit_plan_mode`, options `proceed_once`/`cancel`), both as kind `other`.
        // The plan must be a file in its plans directory, which it may write in plan mode
        // without asking. `proceed_once` leaves plan mode for `default` (it asks again).
        plan: Some(Plan {
            steps: vec![
                Step::tool("enter_plan_mode", json!({"reason": "plan first"})),
                Step::tool(
                    "write_file",
                    json!({"file_path": "plan.md", "content": "# Plan\n\n1. write the code\n"}),
                ),
                Step::tool("exit_plan_mode", json!({"plan_filename": "plan.md"})),
            ],
            owned: "proceed_once",
            shared: (Decision::Deny, "cancel"),
            // In a shared root entering plan mode would be refused first (kind `other`); a
            // user policy lets it enter unasked, so that the exit is what is asked about.
            shared_state_files: vec![(
                ".gemini/policies/legate-test.toml",
                "[[rule]]\ntoolName = \"enter_plan_mode\"\ndecision = \"allow\"\npriority = 100\n"
                    .into(),
            )],
        }),
        state_files: vec![(
            ".gemini/settings.json",
            json!({"security": {"auth": {"selectedType": "gemini-api-key"}}}).to_string(),
        )],
    }
}

/// How one adapter enters and leaves plan mode, and what the supervisor answers.
struct Plan {
    /// The model's steps, from entering plan mode to proposing to leave it.
    steps: Vec<Step>,
    /// The option chosen at the plan exit in an owned sandbox.
    owned: &'static str,
    /// The decision and option at the plan exit in a shared root.
    shared: (Decision, &'static str),
    /// Files to put in the state directory before the shared-root run (and remove after).
    shared_state_files: Vec<(&'static str, String)>,
}

struct Run {
    _dir: tempfile::TempDir,
    engine: Engine,
    shared: PathBuf,
    outside: PathBuf,
    state: PathBuf,
    server: ModelServer,
    /// The adapter's (and its preset's) name.
    name: &'static str,
    /// Every connection of every task so far, described (decision, method, destination, rule).
    seen: std::sync::Mutex<std::collections::BTreeSet<String>>,
}

/// An engine whose home is `<base>/home`, running `adapter` with its state in `state`; called
/// again over the same `base`, it is the engine a restarted Legate would start.
fn engine_for(adapter: &Adapter, base: &Path, state: &Path) -> Engine {
    let mut agent = TestAgent::command(adapter.name, AgentKind::ACP, &adapter.command)
        .args(adapter.args.clone())
        .preset(adapter.name);
    for (k, v) in &adapter.env {
        agent = agent.env(k, v);
    }
    let (name, state_dir) = (adapter.name.to_string(), state.to_path_buf());
    EngineHarness::builder()
        .agent(agent)
        .acp_handshake(Duration::from_secs(60))
        .config(move |c| {
            c.default_timeout = Duration::from_secs(180);
            c.state_dirs.insert(name, state_dir);
        })
        .engine_in(base)
}

fn start(make: fn(&str) -> Adapter) -> (Run, Adapter) {
    let server = ModelServer::start().unwrap();
    let adapter = make(&server.url());
    let dir = tempfile::tempdir().unwrap();
    let _home = dir.path().join("home");
    let state = dir.path().join("state");
    for (file, text) in &adapter.state_files {
        let p = state.join(file);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    let engine = engine_for(&adapter, dir.path(), &state);

    let shared = dir.path().join("shared");
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    let run = Run {
        _dir: dir,
        engine,
        shared: std::fs::canonicalize(shared).unwrap(),
        outside: std::fs::canonicalize(outside).unwrap(),
        state,
        server,
        name: adapter.name,
        seen: Default::default(),
    };
    (run, adapter)
}

impl Run {
    async fn task(&self, steps: Vec<Step>, workspace: WorkspaceRequest) -> (Task, Vec<Event>) {
        self.task_in(steps, workspace, None).await
    }

    /// A task in context `context` (its sandbox, when it has one), or a new one.
    async fn task_in(
        &self,
        steps: Vec<Step>,
        workspace: WorkspaceRequest,
        context: Option<String>,
    ) -> (Task, Vec<Event>) {
        self.server.script(steps);
        let mut req = SubmitRequest::new("Do what the model says.");
        req.workspace = workspace;
        req.context_id = context;
        let task = self.engine.submit(req).unwrap();
        let task = tokio::time::timeout(Duration::from_secs(200), self.engine.wait(&task.id))
            .await
            .expect("the task ends")
            .unwrap();
        let events = self.engine.events(&task.id, 0, 100_000).unwrap();
        // Every task's model traffic went through the proxy, allowed by the preset's rule.
        through_proxy(self.name, &self.server, &task, &events);
        self.seen
            .lock()
            .unwrap()
            .extend(connections(&events).iter().map(|c| {
                let by = c.rule_id.as_deref().unwrap_or(c.decider.as_str());
                format!("{:?} {} {} ({by})", c.decision, c.method, c.destination)
            }));
        if std::env::var_os("LEGATE_SUITE_REQUESTS").is_some() {
            for r in self.server.requests() {
                let last = r.body["messages"]
                    .as_array()
                    .and_then(|m| m.last())
                    .map(|m| m.to_string().chars().take(300).collect::<String>());
                eprintln!(
                    "model request {} {} tools {} system {:?} last {last:?}",
                    r.method,
                    r.path,
                    r.body["tools"].as_array().map_or(0, |t| t.len()),
                    r.body["system"]
                        .to_string()
                        .chars()
                        .take(120)
                        .collect::<String>()
                );
            }
            eprintln!("--- end of task {}", task.id);
        }
        (task, events)
    }
}

fn decisions(events: &[Event]) -> Vec<(Decision, Option<String>, String)> {
    permissions(events)
        .into_iter()
        .map(|(decision, id, title, _)| (decision, id, title))
        .collect()
}

/// Each permission decision: decision, option, title, tool kind.
fn permissions(events: &[Event]) -> Vec<(Decision, Option<String>, String, ToolKind)> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Permission {
                verdict,
                title,
                tool_kind,
                ..
            } => Some((
                verdict.decision,
                verdict.option_id.clone(),
                title.clone(),
                *tool_kind,
            )),
            _ => None,
        })
        .collect()
}

/// The titles of the tool calls marked `ranWithoutAsking`.
fn unasked(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Notice { detail, .. } => detail
                .get("ranWithoutAsking")
                .map(|d| format!("{} {}", d["kind"], d["title"])),
            _ => None,
        })
        .collect()
}

/// The task's connections through Legate's egress proxy.
fn connections(events: &[Event]) -> Vec<&ConnectionEvent> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Connection(c) => Some(c),
            _ => None,
        })
        .collect()
}

/// Asserts that the task's model traffic went through the proxy: at least one connection
/// allowed by `preset:<name>` (the rule made from the preset's base URL, pointed at the
/// scripted model server) to the server's `127.0.0.1:PORT`, with bytes each way; and that
/// every allowed connection was that one (the agent's namespace has no other way out, and no
/// other rule allows anything). Returns the connections, for the log.
fn through_proxy(name: &str, server: &ModelServer, task: &Task, events: &[Event]) -> Vec<String> {
    let model = server.url().trim_start_matches("http://").to_string();
    let rule = format!("preset:{name}");
    let conns = connections(events);
    let described: Vec<String> = conns.iter().map(|c| c.describe()).collect();
    assert!(
        conns.iter().any(|c| c.decision == Decision::Allow
            && c.rule_id.as_deref() == Some(rule.as_str())
            && c.destination == model
            && c.sent > 0
            && c.received > 0),
        "{name}: no connection to the model server {model} allowed by {rule} with bytes each way: {described:?}\n{}",
        describe(task, events)
    );
    for c in conns.iter().filter(|c| c.decision == Decision::Allow) {
        assert!(
            c.rule_id.as_deref() == Some(rule.as_str()) && c.destination == model,
            "{name}: a connection allowed by something other than {rule} to {model}: {}",
            c.describe()
        );
    }
    described
}

fn describe(task: &Task, events: &[Event]) -> String {
    let tail: Vec<String> = events
        .iter()
        .rev()
        .take(25)
        .rev()
        .map(|e| format!("{:?}", e.kind))
        .collect();
    format!("{task:#?}\n{}", tail.join("\n"))
}

async fn suite(make: fn(&str) -> Adapter) {
    let started = Instant::now();
    let (run, adapter) = start(make);
    let name = adapter.name;

    // A plain answer.
    let (task, events) = run
        .task(
            vec![Step::text("hello from the model")],
            WorkspaceRequest::Sandbox,
        )
        .await;
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
            .contains("hello from the model"),
        "{}",
        describe(&task, &events)
    );
    let confinement = events.iter().find_map(|e| match &e.kind {
        EventKind::Notice { detail, .. } => detail.get("confinement").cloned(),
        _ => None,
    });
    let version = events.iter().find_map(|e| match &e.kind {
        EventKind::Notice { detail, message } if detail["warning"] == "adapterVersion" => {
            Some(message.clone())
        }
        _ => None,
    });
    assert_eq!(
        version, None,
        "the verified version was reported as not verified"
    );
    let conns = through_proxy(name, &run.server, &task, &events);
    eprintln!("{name}: plain answer ok (confinement {confinement:?}, version verified)");
    eprintln!("{name}: model reached through the proxy: {conns:?}");

    // A write in an owned sandbox (the plain answer's, continued): asked about, allowed.
    let sandbox = task.root.clone().unwrap();
    let owned = sandbox.join("owned.txt");
    let (task, events) = run
        .task_in(
            vec![
                (adapter.write)(&owned, "written in the sandbox"),
                Step::text("wrote it"),
            ],
            WorkspaceRequest::Sandbox,
            Some(task.context_id.clone()),
        )
        .await;
    assert_eq!(task.root.as_deref(), Some(sandbox.as_path()));
    let d = decisions(&events);
    assert!(
        d.iter().any(|(dec, _, _)| *dec == Decision::Allow),
        "{}",
        describe(&task, &events)
    );
    assert!(
        std::fs::read_to_string(&owned)
            .unwrap_or_default()
            .contains("written in the sandbox"),
        "{}",
        describe(&task, &events)
    );
    eprintln!("{name}: write in an owned sandbox ok ({d:?})");

    // A write inside a shared root: allowed.
    let inside = run.shared.join("inside.txt");
    let (task, events) = run
        .task(
            vec![
                (adapter.write)(&inside, "written inside"),
                Step::text("wrote it"),
            ],
            WorkspaceRequest::Shared(run.shared.clone()),
        )
        .await;
    let d = decisions(&events);
    assert!(
        d.iter().any(|(dec, _, _)| *dec == Decision::Allow),
        "{}",
        describe(&task, &events)
    );
    assert!(
        std::fs::read_to_string(&inside)
            .unwrap_or_default()
            .contains("written inside"),
        "{}",
        describe(&task, &events)
    );
    eprintln!("{name}: write inside ok ({d:?})");

    // A shell command in an owned sandbox: allowed.
    let (task, events) = run
        .task(
            vec![
                (adapter.shell)("echo made-by-shell > shell.txt"),
                Step::text("ran it"),
            ],
            WorkspaceRequest::Sandbox,
        )
        .await;
    let root = task.root.clone().unwrap();
    assert!(
        root.join("shell.txt").exists(),
        "{}",
        describe(&task, &events)
    );
    eprintln!(
        "{name}: shell in sandbox ok ({:?}; ran without asking: {:?})",
        decisions(&events),
        unasked(&events)
    );

    // The same in a shared root: refused, and the task still ends clearly.
    let (task, events) = run
        .task(
            vec![
                (adapter.shell)("echo nope > refused.txt"),
                Step::text("tried"),
            ],
            WorkspaceRequest::Shared(run.shared.clone()),
        )
        .await;
    let d = decisions(&events);
    assert!(
        d.iter().any(|(dec, _, _)| *dec == Decision::Deny),
        "{}",
        describe(&task, &events)
    );
    assert!(!run.shared.join("refused.txt").exists());
    assert!(
        matches!(task.state, TaskState::Completed | TaskState::Canceled),
        "{}",
        describe(&task, &events)
    );
    assert!(
        task.status_message
            .as_deref()
            .unwrap_or_default()
            .contains("refused by the supervisor"),
        "{}",
        describe(&task, &events)
    );
    eprintln!(
        "{name}: shell in shared root refused ({:?}, {d:?})",
        task.state
    );

    // A write outside the root: refused, the file absent.
    let outside = run.outside.join("escaped.txt");
    let (task, events) = run
        .task(
            vec![(adapter.write)(&outside, "escaped"), Step::text("tried")],
            WorkspaceRequest::Shared(run.shared.clone()),
        )
        .await;
    assert!(!outside.exists(), "{}", describe(&task, &events));
    let d = decisions(&events);
    // Refused by the supervisor when the adapter asks (Claude, Codex); gemini-cli refuses a
    // path outside its workspace itself, before asking: the call fails and nothing is written.
    let failed_by_agent = events.iter().any(|e| {
        matches!(&e.kind, EventKind::ToolCallUpdate(u) if u.status == Some(legate_core::ToolStatus::Failed))
    });
    assert!(
        d.iter().any(|(dec, _, _)| *dec == Decision::Deny) || (d.is_empty() && failed_by_agent),
        "{}",
        describe(&task, &events)
    );
    let by = if d.is_empty() {
        "the agent itself"
    } else {
        "the supervisor"
    };
    eprintln!(
        "{name}: write outside refused by {by} ({:?}, {d:?})",
        task.state
    );

    // Plan mode, entered and left, then a shell command: in an owned sandbox and in a
    // shared root.
    if let Some(plan) = &adapter.plan {
        plan_mode(&run, &adapter, plan).await;
    }
    // Every session over, nothing of Legate's is left in the shared root (Codex's private
    // temp directories live there while its sessions run).
    run.engine.shutdown().await;
    let leftover = run.shared.join(legate_backend::acp::CODEX_TMP);
    // Removed as the adapter's process goes, which no event marks: a bounded retry.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while leftover.exists() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let left: Vec<_> = walk(&leftover);
    // Codex 0.166's own sandbox (bubblewrap) leaves a marker directory with an empty `lock`
    // in its `TMPDIR`; Legate removes only an empty temp directory, so that stays (see
    // docs/backends/acp.md). Anything else left is a failure.
    const BWRAP_MARKER: &str = "codex-bwrap-synthetic-mount-targets-";
    let marker = |p: &PathBuf| p.to_string_lossy().contains(BWRAP_MARKER);
    let unexpected: Vec<_> = left
        .iter()
        .filter(|p| !marker(p) && !left.iter().any(|q| marker(q) && q.starts_with(p)))
        .collect();
    assert!(unexpected.is_empty(), "{name} left {left:?}");
    if !left.is_empty() {
        eprintln!("{name}: left its own sandbox's marker in the shared root: {left:?}");
    }
    eprintln!(
        "{name}: connections through the proxy: {:?}",
        run.seen.lock().unwrap()
    );
    eprintln!(
        "{name}: real-adapter suite passed in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// Every path beneath `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        out.extend(walk(&path));
        out.push(path);
    }
    out
}

/// Enters and leaves plan mode, then runs a shell command, in an owned sandbox and then in a
/// shared root; checks the decision at the plan exit and that the command was still asked
/// about (allowed in the sandbox, refused in the shared root).
async fn plan_mode(run: &Run, adapter: &Adapter, plan: &Plan) {
    let name = adapter.name;
    let with_shell = |file: &str| {
        let mut steps = plan.steps.clone();
        steps.push((adapter.shell)(&format!("echo after-plan > {file}")));
        steps.push(Step::text("planned"));
        steps
    };
    let is_shell = |kind: &ToolKind| *kind == ToolKind::Execute;

    // An owned sandbox: the plan exit is allowed; the command after it is asked and allowed.
    let (task, events) = run
        .task(with_shell("after-plan.txt"), WorkspaceRequest::Sandbox)
        .await;
    let p = permissions(&events);
    let exit = p.iter().rposition(|(_, _, _, kind)| !is_shell(kind));
    assert!(
        exit.is_some_and(|i| p[i].0 == Decision::Allow && p[i].1.as_deref() == Some(plan.owned)),
        "{}",
        describe(&task, &events)
    );
    assert!(
        p.iter()
            .any(|(dec, _, _, kind)| is_shell(kind) && *dec == Decision::Allow),
        "the command after the plan was not asked about: {}",
        describe(&task, &events)
    );
    let root = task.root.clone().unwrap();
    assert!(
        root.join("after-plan.txt").exists(),
        "{}",
        describe(&task, &events)
    );
    eprintln!(
        "{name}: plan mode in a sandbox ok ({:?}, {p:?})",
        task.state
    );

    // A shared root.
    for (file, text) in &plan.shared_state_files {
        let path = run.state.join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    let (task, events) = run
        .task(
            with_shell("after-plan.txt"),
            WorkspaceRequest::Shared(run.shared.clone()),
        )
        .await;
    for (file, _) in &plan.shared_state_files {
        std::fs::remove_file(run.state.join(file)).unwrap();
    }
    let p = permissions(&events);
    let (decision, option) = plan.shared;
    let exit = p.iter().rposition(|(_, _, _, kind)| !is_shell(kind));
    assert!(
        exit.is_some_and(|i| p[i].0 == decision && p[i].1.as_deref() == Some(option)),
        "{}",
        describe(&task, &events)
    );
    if decision == Decision::Allow {
        // Supervision held: the command after the plan is still asked about, and refused.
        assert!(
            p.iter()
                .any(|(dec, _, _, kind)| is_shell(kind) && *dec == Decision::Deny),
            "the command after the plan was not asked about: {}",
            describe(&task, &events)
        );
    }
    assert!(!run.shared.join("after-plan.txt").exists());
    assert!(
        matches!(task.state, TaskState::Completed | TaskState::Canceled),
        "{}",
        describe(&task, &events)
    );
    eprintln!(
        "{name}: plan mode in a shared root ok ({:?}, {p:?})",
        task.state
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_through_legate() {
    suite(claude).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_through_legate() {
    suite(codex).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_through_legate() {
    suite(gemini).await;
}

/// The environment Legate's presets add, for talking to an adapter directly.
fn direct_env(adapter: &Adapter, state: &Path) -> BTreeMap<String, String> {
    let mut env = adapter.env.clone();
    let tmp = state.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    env.insert("HOME".into(), state.display().to_string());
    env.insert("TMPDIR".into(), tmp.display().to_string());
    match adapter.name {
        "claude" => {
            for (k, v) in [
                ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
                ("DISABLE_TELEMETRY", "1"),
                ("DISABLE_AUTOUPDATER", "1"),
                ("IS_SANDBOX", "1"),
            ] {
                env.insert(k.into(), v.into());
            }
            env.insert("CLAUDE_CODE_TMPDIR".into(), tmp.display().to_string());
        }
        "gemini" => {
            env.insert("GEMINI_CLI_NO_RELAUNCH".into(), "true".into());
        }
        _ => {}
    }
    env
}

/// One direct conversation: the model writes a file with the adapter's write tool, then runs
/// a shell command; every permission request is answered with `answer_kind`. Returns the
/// transcript and whether each file exists afterwards.
async fn direct_run(
    make: fn(&str) -> Adapter,
    mode: Option<&str>,
    answer_kind: &str,
) -> (direct::Observed, bool, bool) {
    let server = ModelServer::start().unwrap();
    let adapter = make(&server.url());
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let root = std::fs::canonicalize(root).unwrap();
    for (file, text) in &adapter.state_files {
        let p = state.join(file);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    let write = root.join("direct.txt");
    server.script(vec![
        (adapter.write)(&write, "written directly"),
        (adapter.shell)("echo by-shell > shell.txt"),
        Step::text("done"),
    ]);
    let env = direct_env(&adapter, &state);
    let observed = direct::observe(
        &adapter.command,
        &adapter.args,
        &env,
        &root,
        mode,
        "Do what the model says.",
        answer_kind,
    )
    .await;
    let wrote = write.exists();
    let shell = root.join("shell.txt").exists();
    if std::env::var_os("LEGATE_DIRECT_REQUESTS").is_some() {
        for r in server.requests() {
            let tools: Vec<String> = r.body["tools"]
                .as_array()
                .map(|t| {
                    t.iter()
                        .map(|t| {
                            t["name"]
                                .as_str()
                                .map(str::to_string)
                                .unwrap_or_else(|| t.to_string().chars().take(300).collect())
                        })
                        .collect()
                })
                .unwrap_or_default();
            let last = r.body["input"].as_array().and_then(|i| i.last()).cloned();
            if std::env::var_os("LEGATE_DIRECT_BODY").is_some() {
                let mut b = r.body.clone();
                b["input"] = json!("…");
                b["instructions"] = json!("…");
                eprintln!(
                    "model body {}",
                    b.to_string().chars().take(4000).collect::<String>()
                );
            }
            eprintln!(
                "model request {} {} tools {tools:?} last input {:?}",
                r.method,
                r.path,
                last.map(|l| l.to_string())
            );
        }
    }
    eprintln!(
        "direct {}: agentInfo {}, modes {}, {} tool calls, {} permission requests, stop {}, wrote {wrote}, shell {shell}",
        adapter.name,
        observed.initialize["agentInfo"],
        observed.session["modes"]["availableModes"]
            .as_array()
            .map(|m| m
                .iter()
                .map(|m| m["id"].as_str().unwrap_or_default().to_string())
                .collect::<Vec<_>>()
                .join(","))
            .unwrap_or_default(),
        observed.tool_calls().len(),
        observed.permissions.len(),
        observed.prompt["stopReason"],
    );
    (observed, wrote, shell)
}

/// `LEGATE_DIRECT_ANSWER` names the option kind answered (default `allow_once`).
fn direct_answer() -> String {
    std::env::var("LEGATE_DIRECT_ANSWER").unwrap_or_else(|_| "allow_once".into())
}

/// `LEGATE_DIRECT_MODE` names a mode to set before the prompt (for exploring an adapter).
fn direct_mode() -> Option<String> {
    std::env::var("LEGATE_DIRECT_MODE")
        .ok()
        .filter(|m| !m.is_empty())
}

/// Talks to the adapter directly in its preset's supervised mode (or `LEGATE_DIRECT_MODE`,
/// for exploring; then nothing is asserted), and checks what the preset relies on: the
/// announced version lies in the preset's verified range, the supervised mode is offered
/// (unless the adapter reports no modes), and the write and the command were asked about
/// before they happened.
async fn direct(make: fn(&str) -> Adapter, name: &str) {
    let preset = legate_supervisor::Preset::by_name(name).unwrap();
    let explore = direct_mode();
    let mode = explore.clone().or(preset.supervised_mode.clone());
    let (observed, wrote, shell) = direct_run(make, mode.as_deref(), &direct_answer()).await;
    if explore.is_some() || std::env::var_os("LEGATE_DIRECT_ANSWER").is_some() {
        return;
    }
    let info = &observed.initialize["agentInfo"];
    assert_eq!(
        preset.check_version(info["name"].as_str(), info["version"].as_str()),
        legate_supervisor::VersionCheck::Verified,
        "{info}"
    );
    let modes: Vec<&str> = observed.session["modes"]["availableModes"]
        .as_array()
        .map(|m| m.iter().filter_map(|m| m["id"].as_str()).collect())
        .unwrap_or_default();
    if !modes.is_empty() {
        assert!(
            modes.contains(&preset.supervised_mode.as_deref().unwrap()),
            "{modes:?}"
        );
        assert!(
            observed
                .set_mode
                .as_ref()
                .is_some_and(|r| r.get("error").is_none()),
            "{:?}",
            observed.set_mode
        );
    }
    assert!(
        wrote && shell,
        "the write and the command, allowed, happened"
    );
    let kinds: Vec<&str> = observed
        .permissions
        .iter()
        .filter_map(|(p, _)| p["toolCall"]["kind"].as_str())
        .collect();
    assert!(
        kinds.contains(&"edit") && kinds.contains(&"execute"),
        "both were asked about: {kinds:?}"
    );
    eprintln!(
        "direct {name}: supervised mode {mode:?} asked about {kinds:?} with options {:?}",
        observed
            .permissions
            .iter()
            .map(|(p, _)| p["options"]
                .as_array()
                .map(|o| o
                    .iter()
                    .filter_map(|o| o["optionId"].as_str())
                    .collect::<Vec<_>>()
                    .join("/"))
                .unwrap_or_default())
            .collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_codex() {
    direct(codex, "codex").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_claude() {
    direct(claude, "claude").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_gemini() {
    direct(gemini, "gemini").await;
}
