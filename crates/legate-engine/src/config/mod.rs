//! The engine's limits and where its state lives, including the limits every front reads
//! ([`FrontLimits`]) so that no front keeps its own. This module only holds values; it never
//! reads a file (the binary's configuration does) and never enforces anything itself.

mod features;
mod output;
mod tap;

pub use features::*;
use legate_core::AgentSpec;
use legate_supervisor::network::NetworkRules;
pub use output::OutputLimits;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
pub use tap::TapLimits;

/// Where Legate keeps its state, all under `$LEGATE_HOME` (mode 0700).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paths {
    /// `$LEGATE_HOME`.
    pub home: PathBuf,
}

impl Paths {
    /// Paths rooted at `home`.
    pub fn new(home: impl Into<PathBuf>) -> Self {
        Self { home: home.into() }
    }
    /// The SQLite database.
    pub fn db(&self) -> PathBuf {
        self.home.join("legate.db")
    }
    /// Where sandboxes are made.
    pub fn sandboxes(&self) -> PathBuf {
        self.home.join("sandboxes")
    }
    /// Where copy workspaces are made, one directory per task.
    pub fn copies(&self) -> PathBuf {
        self.home.join("copies")
    }
    /// Where copies' private baselines live, one directory per task.
    pub fn baselines(&self) -> PathBuf {
        self.home.join("baselines")
    }
    /// Where the copies' secret scan verdicts are kept, one directory per project (mode
    /// 0700, named by the sha256 of the project's canonical path), so that a later copy does
    /// not read a file scanned before and unchanged since.
    pub fn scan_verdicts(&self) -> PathBuf {
        self.home.join("scan-verdicts")
    }
    /// Where the projects' bases are kept, one directory per project (named as its scan
    /// verdicts are): on btrfs, every copy is a snapshot of its project's base
    /// (`legate_workspace::make_copy_with_base`).
    pub fn bases(&self) -> PathBuf {
        self.home.join("bases")
    }
    /// Where the log files are (`legate_logs`).
    pub fn logs(&self) -> PathBuf {
        self.home.join("logs")
    }
    /// Where runner lock files live.
    pub fn run(&self) -> PathBuf {
        self.home.join("run")
    }
    /// Where workspaces blocked by an unverified process cleanup are marked, one file per
    /// workspace root and agent run, shared by every agent and the review operations.
    pub fn blocked(&self) -> PathBuf {
        self.home.join("blocked")
    }
    /// Private state directories of agents (`HOME`-like), one per agent.
    pub fn agent_state(&self, agent: &str) -> PathBuf {
        self.home.join("agents").join(agent)
    }
    /// `$LEGATE_HOME` itself.
    pub fn home(&self) -> &Path {
        &self.home
    }
}

/// The default of [`EngineConfig::max_idle_sessions`]: enough to keep a handful of
/// conversations warm, few enough (about 8 descriptors each) to stay far from a 1,024-descriptor
/// limit.
pub const DEFAULT_MAX_IDLE_SESSIONS: usize = 16;

/// Limits and agents.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Where state lives.
    pub paths: Paths,
    /// At most this many tasks run at once.
    pub max_running: usize,
    /// At most this many wait; one more is `QUEUE_FULL`.
    pub max_queued: usize,
    /// Default task timeout.
    pub default_timeout: Duration,
    /// Idle agent sessions are stopped after this long.
    pub idle_timeout: Duration,
    /// At most this many idle agent sessions are kept; one more stops the least recently
    /// used. 0 stops every session when its turn ends (unless its task waits for input).
    pub max_idle_sessions: usize,
    /// After a cancel, how long the agent gets to end its turn before it is killed.
    pub cancel_grace: Duration,
    /// How many finished tasks are kept; older ones are pruned when the engine starts and
    /// every [`EngineConfig::retention_interval`] while it runs, with the conversations,
    /// messages, comparisons and sandboxes no remaining task needs.
    pub retention: usize,
    /// How often a running engine prunes what is past `retention` (a minute). Not read from
    /// the configuration file: tests shorten it.
    pub retention_interval: Duration,
    /// At most this many nodes in a new group (`max_group_nodes`; the seed's 32 by default,
    /// at most [`crate::MAX_NODES`]). Groups already stored keep the size they were created
    /// with.
    pub max_group_nodes: usize,
    /// The largest prompt the agent reads, in characters (`max_prompt_chars`, the seed's
    /// 50,000 by default): the caller's text, and with Legate's framing, a role's
    /// instructions, a handed-off or compared context and the selected memory. A longer one is
    /// refused (`INVALID_INPUT`, `CONTEXT_TOO_LARGE` for a handoff or comparison); nothing is
    /// cut.
    pub max_prompt_chars: usize,
    /// The agent used when a request names none.
    pub default_agent: String,
    /// Configured agents by name.
    pub agents: BTreeMap<String, AgentSpec>,
    /// Whether an agent process the kernel cannot confine may run (`best-effort`) or fails
    /// with `CONFINEMENT_UNAVAILABLE` (`required`).
    pub confinement: legate_confine::Requirement,
    /// Private state directories (`HOME`-like) that replace `$LEGATE_HOME/agents/<name>`,
    /// by agent name.
    pub state_dirs: BTreeMap<String, PathBuf>,
    /// Copy workspaces and their review: limits, secret policy, retention, approval mode.
    pub review: ReviewConfig,
    /// Files and directories no agent or test command may see besides `$LEGATE_HOME`: the
    /// token files and the configuration file, when they are elsewhere.
    pub hidden: Vec<PathBuf>,
    /// Limits of requests fronts take, read by every front from [`crate::Engine::config`].
    pub fronts: FrontLimits,
    /// The declarative permission policy (`[[policy.rules]]`): its rules decide before the
    /// supervisor the engine is started with; empty, that supervisor decides alone.
    pub policy: legate_supervisor::Policy,
    /// The approval queue: deadlines and the supervising agent (`[supervision]`).
    pub approvals: ApprovalsConfig,
    /// The configured roles (`[roles.NAME]`), checked when the engine starts.
    pub roles: Vec<RoleSpec>,
    /// How much private memory the store keeps (`[memory]`).
    pub memory: MemoryLimits,
    /// How much of its agent's output one task keeps (`[output]`).
    pub output: OutputLimits,
    /// How much of a tapped task's protocol frames the wire tap keeps (`[tap]`).
    pub tap: TapLimits,
    /// Directories that are never a workspace, a copy's source or a test's root, nor inside
    /// one (`forbidden_directories`), as configured (absolute).
    pub forbidden_directories: Vec<PathBuf>,
    /// The skill packs staged in every new copy task (`[skills]`).
    pub skills: SkillsConfig,
    /// The ceiling of tool kinds and the catalogue of trusted MCP servers (`[controls]`,
    /// `[[mcp_servers]]`; see `controls::tools`).
    pub controls: legate_core::ControlsConfig,
    /// The egress policy every agent's connections run under (`[network]`); the backend adds
    /// each preset's model host.
    pub network: NetworkRules,
    /// Agents with rules of their own (`[agents.NAME.network]`): the whole policy each runs
    /// under, [`EngineConfig::network`] included.
    pub agent_network: BTreeMap<String, NetworkRules>,
    /// Warm sessions kept ready per agent (`[agents.NAME] warm`, at most [`MAX_WARM`] each):
    /// started, `initialize` done and a session opened in a fresh sandbox before any task,
    /// handed to the next task that fits and replaced in the background (`core::warm`). They
    /// count against [`EngineConfig::max_idle_sessions`] and the process's budget.
    pub warm: BTreeMap<String, usize>,
    /// Whether this engine takes over, at start and about once a second, every group with
    /// work left whose driving process is gone (`group::restart`). A one-shot command (the
    /// binary's `legate tasks`, `legate run`, …) says `false`: it would admit a node and then
    /// end, cutting it. A group is still taken over on purpose by an engine that waits on it,
    /// starts it or cancels it.
    pub take_over_groups: bool,
}

/// The most warm sessions one agent may keep ready (`[agents.NAME] warm`).
pub const MAX_WARM: usize = 8;

/// Which skill packs every new copy task gets besides the caller's skills (`[skills]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillsConfig {
    /// Whether packs are staged at all (`bundled`, default `true`).
    pub bundled: bool,
    /// A directory of packs in the bundled packs' format, used instead of Legate's own
    /// (`directory`, absolute); verified against its manifests before every new task.
    pub directory: Option<PathBuf>,
}

impl Default for SkillsConfig {
    fn default() -> Self {
        Self {
            bundled: true,
            directory: None,
        }
    }
}

/// The default of [`ApprovalsConfig::deadline`]: 120 s.
pub const DEFAULT_APPROVAL_DEADLINE: Duration = Duration::from_secs(120);

/// How `ask` rulings are supervised (`[supervision]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalsConfig {
    /// How long an approval waits for an answer before it is refused (`deadline_secs`).
    pub deadline: Duration,
    /// The configured agent asked first to decide (`agent`), if any.
    pub agent: Option<String>,
    /// How long the supervising agent may take to answer one approval
    /// (`agent_timeout_secs`); a late answer falls through to the human channel. Kept below
    /// [`ApprovalsConfig::deadline`] by the configuration.
    pub agent_timeout: Duration,
    /// The model the supervising agent answers with (`model`); `None`: its configured
    /// `model`, else its own default. Never a saved preference or a caller's choice.
    pub model: Option<String>,
}

/// The default of [`ApprovalsConfig::agent_timeout`]: 30 s.
pub const DEFAULT_SUPERVISING_AGENT_TIMEOUT: Duration = Duration::from_secs(30);

impl Default for ApprovalsConfig {
    fn default() -> Self {
        Self {
            deadline: DEFAULT_APPROVAL_DEADLINE,
            agent: None,
            agent_timeout: DEFAULT_SUPERVISING_AGENT_TIMEOUT,
            model: None,
        }
    }
}

/// Limits of what a front accepts or waits for, one value for every front (CLI, MCP, A2A),
/// with the values each front had before as defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrontLimits {
    /// The longest text of a conversational `message` (MCP's `message` tool), in characters;
    /// a longer prompt is a `resume`. A prompt's own limit is [`EngineConfig::max_prompt_chars`].
    pub message_max_chars: usize,
    /// The longest timeout a caller may give `test` (`Reviews::test` refuses a longer one with
    /// `INVALID_INPUT`); the default one is `review.test_timeout`.
    pub test_timeout_max: Duration,
    /// How long probing an agent (`agents`, `probe`) may take.
    pub probe_timeout: Duration,
    /// How long listing an agent's models may take.
    pub models_timeout: Duration,
    /// How long a server's start-up probe of each served agent may take.
    pub serve_probe_timeout: Duration,
    /// How long a cancel waits for the task to reach `canceled` before answering.
    pub cancel_wait: Duration,
    /// How long an integration in approval mode `ask` waits for the caller's answer.
    pub approval_timeout: Duration,
    /// The largest patch given inline (an A2A `patch` artifact); a larger one is named, and
    /// read in chunks instead.
    pub inline_patch_max_bytes: usize,
    /// The most bytes of files a message may carry under Legate's copy-workspace extension
    /// (`a2a.max_transfer_bytes`; `COPY_TOO_LARGE` past it), and the largest patch of such a
    /// copy given inline.
    pub max_transfer_bytes: u64,
}

impl Default for FrontLimits {
    fn default() -> Self {
        Self {
            message_max_chars: 2000,
            test_timeout_max: Duration::from_secs(3600),
            probe_timeout: Duration::from_secs(20),
            models_timeout: Duration::from_secs(30),
            serve_probe_timeout: Duration::from_secs(30),
            cancel_wait: Duration::from_secs(10),
            approval_timeout: Duration::from_secs(300),
            inline_patch_max_bytes: 1 << 20,
            max_transfer_bytes: legate_core::remote::DEFAULT_MAX_TRANSFER_BYTES,
        }
    }
}

impl EngineConfig {
    /// The documented defaults, with no agents.
    pub fn new(paths: Paths) -> Self {
        Self {
            paths,
            max_running: 2,
            max_queued: 20,
            default_timeout: Duration::from_secs(1800),
            idle_timeout: Duration::from_secs(300),
            max_idle_sessions: DEFAULT_MAX_IDLE_SESSIONS,
            warm: BTreeMap::new(),
            take_over_groups: true,
            max_group_nodes: DEFAULT_MAX_NODES,
            max_prompt_chars: crate::core::request::DEFAULT_MAX_PROMPT_CHARS,
            cancel_grace: Duration::from_secs(5),
            retention: 1000,
            retention_interval: Duration::from_secs(60),
            default_agent: "revisor".to_string(),
            agents: BTreeMap::new(),
            confinement: legate_confine::Requirement::BestEffort,
            state_dirs: BTreeMap::new(),
            review: ReviewConfig::default(),
            hidden: Vec::new(),
            fronts: FrontLimits::default(),
            policy: legate_supervisor::Policy::empty(),
            approvals: ApprovalsConfig::default(),
            roles: Vec::new(),
            memory: MemoryLimits::default(),
            output: OutputLimits::default(),
            tap: TapLimits::default(),
            forbidden_directories: Vec::new(),
            skills: SkillsConfig::default(),
            controls: legate_core::ControlsConfig::default(),
            network: NetworkRules::default(),
            agent_network: BTreeMap::new(),
        }
    }

    /// The egress policy agent `name`'s connections run under.
    pub fn network_for(&self, name: &str) -> std::sync::Arc<NetworkRules> {
        std::sync::Arc::new(
            self.agent_network
                .get(name)
                .unwrap_or(&self.network)
                .clone(),
        )
    }

    /// Everything spawned processes must not see: `$LEGATE_HOME`, then [`EngineConfig::hidden`].
    pub fn hidden_paths(&self) -> Vec<PathBuf> {
        let mut all = vec![self.paths.home.clone()];
        for p in &self.hidden {
            if !all.contains(p) {
                all.push(p.clone());
            }
        }
        all
    }

    /// The private state directory (`HOME`-like) of agent `name`: its configured one, or
    /// `$LEGATE_HOME/agents/<name>`. The agent process may write there.
    pub fn state_dir(&self, name: &str) -> PathBuf {
        self.state_dirs
            .get(name)
            .cloned()
            .unwrap_or_else(|| self.paths.agent_state(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_the_documented_ones() {
        let c = EngineConfig::new(Paths::new("/legate"));
        assert_eq!((c.max_running, c.max_queued), (2, 20));
        assert_eq!(c.default_timeout, Duration::from_secs(1800));
        assert_eq!(c.idle_timeout, Duration::from_secs(300));
        assert_eq!(c.max_idle_sessions, 16);
        assert!(!c.review.keep_interrupted_copies);
        assert_eq!(c.retention, 1000);
        assert_eq!(c.retention_interval, Duration::from_secs(60));
        assert_eq!(c.default_agent, "revisor");
        assert_eq!(c.confinement, legate_confine::Requirement::BestEffort);
        let f = &c.fronts;
        assert_eq!(f.message_max_chars, 2000);
        assert_eq!(f.test_timeout_max, Duration::from_secs(3600));
        assert_eq!(f.probe_timeout, Duration::from_secs(20));
        assert_eq!(f.models_timeout, Duration::from_secs(30));
        assert_eq!(f.serve_probe_timeout, Duration::from_secs(30));
        assert_eq!(f.cancel_wait, Duration::from_secs(10));
        assert_eq!(f.approval_timeout, Duration::from_secs(300));
        assert_eq!(f.inline_patch_max_bytes, 1 << 20);
        assert_eq!(c.approvals.deadline, Duration::from_secs(120));
        assert_eq!(c.approvals.agent, None);
        assert_eq!(c.skills, SkillsConfig::default());
        assert!(c.skills.bundled && c.skills.directory.is_none());
    }
}
