//! One engine harness for every suite that drives a real engine: [`EngineHarness`].
//!
//! It owns the temporary directory (the engine's home is `<dir>/home`, and an optional git
//! project `<dir>/project`), the agents it configures (the scripted agent and `fake-agy`,
//! found where cargo built them), the backends map, and the waits a test needs: a task that
//! ends, a task that reaches a state, an event that comes, all by following the task's events,
//! never by polling with sleeps.
//!
//! Every `AgentSpec` the harness configures is built in one place ([`TestAgent::spec`]), so a
//! change of its shape touches one function. The harness must never be used by product code:
//! it panics on every failure, because a harness that cannot start is a broken test.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use legate_backend::Backend;
use legate_backend::acp::AcpBackend;
use legate_backend::agy::AgyBackend;
use legate_core::{AgentKind, AgentSpec, Event, EventKind, Task, TaskId, TaskState};
use legate_engine::{Engine, EngineConfig, Paths, SubmitRequest};
use legate_supervisor::Supervisor;

use crate::{FAULT_ENV, find_scripted_agent, git};

/// How long [`EngineHarness::run`] and the other waits give a task before the test fails.
pub const WAIT_LIMIT: Duration = Duration::from_secs(60);

/// The name the harness gives its default agent when the test names none.
pub const DEFAULT_AGENT: &str = "agent";

/// The scripted agent's path, as cargo built it; panics with the command that builds it.
pub fn scripted_agent_path() -> PathBuf {
    find_scripted_agent().unwrap_or_else(|| {
        panic!(
            "legate-scripted-agent is not built; run `cargo build -p legate-testkit --bins` (cargo test --workspace does)"
        )
    })
}

/// `fake-agy`'s path: built beside the scripted agent. Panics when it is missing.
pub fn fake_agy_path() -> PathBuf {
    let path = scripted_agent_path().with_file_name("fake-agy");
    assert!(
        path.is_file(),
        "fake-agy is not built; run `cargo build -p legate-testkit --bins`"
    );
    path
}

/// An agent the harness configures: a name, a backend kind, a command and its environment.
#[derive(Debug, Clone)]
pub struct TestAgent {
    name: String,
    kind: AgentKind,
    command: String,
    args: Vec<String>,
    env: BTreeMap<String, String>,
    preset: Option<String>,
    model: Option<String>,
    inherit_env: Vec<String>,
}

impl TestAgent {
    /// An agent of `kind` that runs `command`.
    pub fn command(name: &str, kind: AgentKind, command: impl AsRef<Path>) -> Self {
        Self {
            name: name.to_string(),
            kind,
            command: command.as_ref().display().to_string(),
            args: Vec::new(),
            env: BTreeMap::new(),
            preset: None,
            model: None,
            inherit_env: Vec::new(),
        }
    }

    /// The scripted agent (revisor on stdio, ACP).
    pub fn scripted(name: &str) -> Self {
        Self::command(name, AgentKind::ACP, scripted_agent_path())
    }

    /// `fake-agy`, driven by the agy backend.
    pub fn fake_agy(name: &str) -> Self {
        Self::command(name, AgentKind::AGY, fake_agy_path())
    }

    /// The same agent started with the scripted agent's fault `fault` ([`FAULT_ENV`]).
    #[must_use]
    pub fn fault(self, fault: &str) -> Self {
        self.env(FAULT_ENV, fault)
    }

    /// The same agent with `key=value` in its environment.
    #[must_use]
    pub fn env(mut self, key: &str, value: impl AsRef<str>) -> Self {
        self.env.insert(key.to_string(), value.as_ref().to_string());
        self
    }

    /// The same agent started with these arguments.
    #[must_use]
    pub fn args(mut self, args: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.args = args.into_iter().map(Into::into).collect();
        self
    }

    /// The same agent with this preset (a real adapter's known quirks).
    #[must_use]
    pub fn preset(mut self, preset: &str) -> Self {
        self.preset = Some(preset.to_string());
        self
    }

    /// The same agent with this configured model.
    #[must_use]
    pub fn model(mut self, model: &str) -> Self {
        self.model = Some(model.to_string());
        self
    }

    /// The same agent, which also inherits `name` from Legate's environment.
    #[must_use]
    pub fn inherit_env(mut self, name: &str) -> Self {
        self.inherit_env.push(name.to_string());
        self
    }

    /// The agent's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The configuration entry. The one place the harness spells an `AgentSpec`.
    pub fn spec(&self) -> AgentSpec {
        let mut spec =
            AgentSpec::command(self.name.clone(), self.kind.clone(), self.command.clone())
                .args(self.args.clone())
                .envs(self.env.clone())
                .inherit_env(self.inherit_env.clone());
        spec.preset.clone_from(&self.preset);
        spec.model.clone_from(&self.model);
        spec
    }
}

type Tune = Box<dyn FnOnce(&mut EngineConfig)>;

/// Builds an [`EngineHarness`]; start with [`EngineHarness::builder`].
#[allow(missing_debug_implementations)] // holds closures and backends, which have none
pub struct HarnessBuilder {
    agents: Vec<TestAgent>,
    default_agent: Option<String>,
    tunes: Vec<Tune>,
    backends: HashMap<AgentKind, Arc<dyn Backend>>,
    supervisor: Arc<dyn Supervisor>,
    project: Option<Vec<(String, String)>>,
    dir: Option<tempfile::TempDir>,
}

impl HarnessBuilder {
    fn new() -> Self {
        // As the binary's `main` does, before any HTTP client is built.
        crate::tls::install_provider();
        let acp: Arc<dyn Backend> = Arc::new(AcpBackend::new());
        let agy: Arc<dyn Backend> = Arc::new(AgyBackend::default());
        let a2a: Arc<dyn Backend> = Arc::new(legate_remote::A2aBackend::default());
        Self {
            agents: Vec::new(),
            default_agent: None,
            tunes: Vec::new(),
            backends: HashMap::from([
                (AgentKind::ACP, acp),
                (AgentKind::AGY, agy),
                (legate_remote::kind(), a2a),
            ]),
            supervisor: Arc::new(legate_supervisor::Rules),
            project: None,
            dir: None,
        }
    }

    /// Configures `agent`, in place of an agent of the same name added before. The first
    /// agent added is the default unless [`default_agent`](Self::default_agent) names another;
    /// with none added, the harness configures the scripted agent as [`DEFAULT_AGENT`].
    #[must_use]
    pub fn agent(mut self, agent: TestAgent) -> Self {
        match self.agents.iter_mut().find(|a| a.name == agent.name) {
            Some(same) => *same = agent,
            None => self.agents.push(agent),
        }
        self
    }

    /// The agent a request that names none runs.
    #[must_use]
    pub fn default_agent(mut self, name: &str) -> Self {
        self.default_agent = Some(name.to_string());
        self
    }

    /// Changes the configuration after the agents are in it (runs in the order given).
    #[must_use]
    pub fn config(mut self, tune: impl FnOnce(&mut EngineConfig) + 'static) -> Self {
        self.tunes.push(Box::new(tune));
        self
    }

    /// Serves agents of `kind` with `backend` instead of the default one.
    #[must_use]
    pub fn backend(mut self, kind: AgentKind, backend: Arc<dyn Backend>) -> Self {
        self.backends.insert(kind, backend);
        self
    }

    /// Serves ACP agents with a handshake limit of `limit` (for agents that never answer).
    #[must_use]
    pub fn acp_handshake(self, limit: Duration) -> Self {
        self.backend(
            AgentKind::ACP,
            Arc::new(AcpBackend {
                handshake_timeout: limit,
                ..AcpBackend::new()
            }),
        )
    }

    /// Rules on permissions with `supervisor` instead of the default rules.
    #[must_use]
    pub fn supervisor(mut self, supervisor: Arc<dyn Supervisor>) -> Self {
        self.supervisor = supervisor;
        self
    }

    /// Creates a git project at `<dir>/project` holding `files` (path, content), committed.
    #[must_use]
    pub fn project(mut self, files: &[(&str, &str)]) -> Self {
        self.project = Some(
            files
                .iter()
                .map(|(p, c)| (p.to_string(), c.to_string()))
                .collect(),
        );
        self
    }

    /// Uses `dir` (which the harness then owns) instead of a fresh temporary directory.
    #[must_use]
    pub fn in_dir(mut self, dir: tempfile::TempDir) -> Self {
        self.dir = Some(dir);
        self
    }

    /// The configuration the engine would start with in `base` (home `<base>/home`).
    pub fn config_for(&mut self, base: &Path) -> EngineConfig {
        let mut config = EngineConfig::new(Paths::new(base.join("home")));
        if self.agents.is_empty() {
            self.agents.push(TestAgent::scripted(DEFAULT_AGENT));
        }
        for agent in &self.agents {
            config.agents.insert(agent.name.clone(), agent.spec());
        }
        config.default_agent = self
            .default_agent
            .clone()
            .unwrap_or_else(|| self.agents[0].name.clone());
        config.cancel_grace = Duration::from_secs(2);
        for tune in self.tunes.drain(..) {
            tune(&mut config);
        }
        config
    }

    /// Starts an engine whose home is `<base>/home`, as a new process would, without owning
    /// `base`: for tests that restart an engine over the same home.
    pub fn engine_in(self, base: &Path) -> Engine {
        self.try_engine_in(base)
            .unwrap_or_else(|e| panic!("the engine does not start: {e}"))
    }

    /// Like [`HarnessBuilder::engine_in`], for a test of a configuration the engine refuses
    /// at start.
    pub fn try_engine_in(mut self, base: &Path) -> legate_core::Result<Engine> {
        let config = self.config_for(base);
        Engine::start(config, self.backends, self.supervisor)
    }

    /// Starts the engine in the harness's own directory.
    pub fn start(mut self) -> EngineHarness {
        let dir = match self.dir.take() {
            Some(dir) => dir,
            None => tempfile::tempdir().unwrap_or_else(|e| panic!("no temporary directory: {e}")),
        };
        let base = std::fs::canonicalize(dir.path())
            .unwrap_or_else(|e| panic!("cannot resolve {}: {e}", dir.path().display()));
        if let Some(files) = self.project.take() {
            let files: Vec<(&str, &str)> = files
                .iter()
                .map(|(p, c)| (p.as_str(), c.as_str()))
                .collect();
            make_project(&base.join("project"), &files);
        }
        let engine = self.engine_in(&base);
        EngineHarness {
            _dir: dir,
            base,
            engine,
        }
    }
}

/// Writes `files` into a new git repository at `project` and commits them.
pub fn make_project(project: &Path, files: &[(&str, &str)]) {
    for (path, content) in files {
        let file = project.join(path);
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent)
                .unwrap_or_else(|e| panic!("cannot create {}: {e}", parent.display()));
        }
        std::fs::write(&file, content)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", file.display()));
    }
    std::fs::create_dir_all(project)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", project.display()));
    git(project, &["init", "-q"]);
    git(project, &["add", "-A"]);
    git(project, &["commit", "-q", "--allow-empty", "-m", "init"]);
}

/// A running engine in a temporary directory it owns, and the waits tests need.
#[allow(missing_debug_implementations)] // the engine has none
pub struct EngineHarness {
    _dir: tempfile::TempDir,
    base: PathBuf,
    /// The engine under test.
    pub engine: Engine,
}

impl EngineHarness {
    /// A builder with the default backends (ACP and agy) and supervisor (the rules).
    pub fn builder() -> HarnessBuilder {
        HarnessBuilder::new()
    }

    /// An engine with the scripted agent as its default agent, `agent`.
    pub fn start() -> Self {
        Self::builder().start()
    }

    /// The harness's directory, resolved (the home and the project are inside it).
    pub fn base(&self) -> &Path {
        &self.base
    }

    /// Stops nothing, drops the engine and hands back the directory, for a test that starts
    /// another engine on the same home (as another process would). Shut the engine down first.
    pub fn into_dir(self) -> tempfile::TempDir {
        self._dir
    }

    /// The engine's home, `<base>/home`.
    pub fn home(&self) -> PathBuf {
        self.base.join("home")
    }

    /// The git project made by [`HarnessBuilder::project`], `<base>/project`.
    pub fn project(&self) -> PathBuf {
        self.base.join("project")
    }

    /// A request for `prompt` on a copy of [`EngineHarness::project`] (every file, no
    /// criteria): the start of every copy-review suite.
    pub fn on_copy(&self, prompt: &str) -> SubmitRequest {
        let mut req = SubmitRequest::new(prompt);
        req.workspace = legate_engine::WorkspaceRequest::Copy {
            source: self.project(),
            include_paths: vec![],
            criteria: vec![],
        };
        req
    }

    /// Submits `req` and waits until the task ends or waits for input.
    pub async fn run(&self, req: SubmitRequest) -> Task {
        let task = self
            .engine
            .submit(req)
            .unwrap_or_else(|e| panic!("submit refused: {e}"));
        self.wait(&task.id).await
    }

    /// Submits `prompt` to the default agent and waits for the task.
    pub async fn run_prompt(&self, prompt: &str) -> Task {
        self.run(SubmitRequest::new(prompt)).await
    }

    /// Waits until the task ends or waits for input; fails after [`WAIT_LIMIT`].
    pub async fn wait(&self, id: &TaskId) -> Task {
        match tokio::time::timeout(WAIT_LIMIT, self.engine.wait(id)).await {
            Ok(Ok(task)) => task,
            Ok(Err(e)) => panic!("waiting for {id} failed: {e}"),
            Err(_) => panic!("task {id} did not end within {WAIT_LIMIT:?}"),
        }
    }

    /// Every stored event of the task, in order.
    pub fn events(&self, id: &TaskId) -> Vec<Event> {
        self.engine
            .events(id, 0, 100_000)
            .unwrap_or_else(|e| panic!("events of {id}: {e}"))
    }

    /// Follows the task's events from the first until one satisfies `done`; returns every
    /// event up to and including it. Fails after [`WAIT_LIMIT`] with what came.
    pub async fn until(&self, id: &TaskId, done: impl Fn(&Event) -> bool) -> Vec<Event> {
        until(&self.engine, id, done).await
    }

    /// Follows the task's events until a status event says `state`; returns the task then.
    pub async fn wait_state(&self, id: &TaskId, state: TaskState) -> Task {
        wait_state(&self.engine, id, state).await
    }
}

/// [`EngineHarness::until`] for an engine the harness does not own.
pub async fn until(engine: &Engine, id: &TaskId, done: impl Fn(&Event) -> bool) -> Vec<Event> {
    let mut sub = engine.subscribe(id, 0);
    let mut seen = Vec::new();
    let followed = tokio::time::timeout(WAIT_LIMIT, async {
        while let Some(e) = sub
            .next()
            .await
            .unwrap_or_else(|e| panic!("following {id}: {e}"))
        {
            let stop = done(&e);
            seen.push(e);
            if stop {
                return true;
            }
        }
        false
    })
    .await;
    assert!(
        followed == Ok(true),
        "the event never came for {id}: {seen:?}"
    );
    seen
}

/// [`EngineHarness::wait_state`] for an engine the harness does not own.
pub async fn wait_state(engine: &Engine, id: &TaskId, state: TaskState) -> Task {
    until(
        engine,
        id,
        |e| matches!(&e.kind, EventKind::Status { state: s, .. } if *s == state),
    )
    .await;
    engine
        .task(id.as_str())
        .unwrap_or_else(|e| panic!("task {id}: {e}"))
}

/// When the task's first event was stored (its submit) and when its terminal status was, in
/// the events' milliseconds: for tests and benchmarks of the order tasks ran in.
pub fn span(engine: &Engine, id: &TaskId) -> (i64, i64) {
    let events = engine
        .events(id, 0, 100_000)
        .unwrap_or_else(|e| panic!("events of {id}: {e}"));
    let start = events
        .first()
        .unwrap_or_else(|| panic!("task {id} has no event"))
        .at
        .0;
    let end = events
        .iter()
        .rev()
        .find(|e| matches!(&e.kind, EventKind::Status { state, .. } if state.is_terminal()))
        .unwrap_or_else(|| panic!("task {id} has not ended"))
        .at
        .0;
    (start, end)
}

/// The session events among `events`: (session id, resumed), in order.
pub fn session_events(events: &[Event]) -> Vec<(String, bool)> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Session {
                session_id,
                resumed,
            } => Some((session_id.clone(), *resumed)),
            _ => None,
        })
        .collect()
}

/// Waits until `done` holds, checking every 20 ms; false when it still does not after `limit`.
/// For a condition no event announces (a process count, a file, a counter of the engine).
pub async fn until_holds(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + limit;
    while std::time::Instant::now() < deadline {
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    done()
}

/// The warm sessions' sandboxes under `home` (`$LEGATE_HOME/sandboxes/warm-<runner>-XXXXXX`, the
/// names `legate_workspace::warm_sandbox` makes; a context's sandbox has one hyphen).
pub fn warm_sandboxes(home: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(home.join("sandboxes"))
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("warm-") && n.matches('-').count() == 2)
                })
                .collect()
        })
        .unwrap_or_default()
}
