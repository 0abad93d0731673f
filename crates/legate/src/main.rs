//! `legate`: delegate a coding task to another agent, inside limits neither can widen.
//!
//! This is the binary's edge: argument parsing, configuration, logging, and the commands.
//! Commands translate; the engine decides.

/// `println!` that reports a closed stdout (e.g. `legate tasks | head`) as an error instead of
/// panicking; `main` treats a broken pipe as a normal end.
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout(), $($arg)*)
    }};
}

mod a2a;
mod agents;
mod approvals;
mod config;
mod front;
mod handoff;
mod harden;
mod mcp;
mod models;
mod policy;
mod render;
mod review;
mod review_config;
mod roles_config;
mod roles_list;
mod serve;
mod supervise;
mod supervision_config;
mod usage;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use legate_core::{Error, ErrorCode, TaskMode, TaskState};
use legate_engine::{Engine, SubmitRequest, WorkspaceRequest};
use legate_engine::{Records, TaskFilter};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Debug, Parser)]
#[command(
    name = "legate",
    version,
    about = "Delegate coding tasks to other agents, safely."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Delegate a task and watch it run.
    Run(RunArgs),
    /// List tasks, newest first.
    Tasks {
        /// Only tasks in this state (submitted, working, completed, failed, canceled, …).
        #[arg(long)]
        state: Option<String>,
        /// Only tasks of this context.
        #[arg(long)]
        context: Option<String>,
        /// Only tasks of this agent.
        #[arg(long)]
        agent: Option<String>,
        /// How many.
        #[arg(long, default_value_t = 20)]
        limit: usize,
        /// Print JSON lines.
        #[arg(long)]
        json: bool,
    },
    /// Show one task (id or unique prefix).
    Show {
        /// Task id or prefix.
        id: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print a task's events.
    Events {
        /// Task id or prefix.
        id: String,
        /// Only events after this number.
        #[arg(long, default_value_t = 0)]
        after: u64,
        /// Keep printing until the task ends.
        #[arg(long)]
        follow: bool,
    },
    /// Cancel a task.
    Cancel {
        /// Task id or prefix.
        id: String,
    },
    /// List configured agents and whether each starts.
    Agents {
        /// Do not start the agents, only list them.
        #[arg(long)]
        no_probe: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// List the roles a task may play (`run --role`): built in and `[roles.NAME]`.
    Roles {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Token usage of stored tasks, by task, session and model.
    Usage(UsageArgs),
    /// Check the permission policy, or explain which rule decides a described tool call.
    Policy {
        #[command(subcommand)]
        command: policy::PolicyCommand,
    },
    /// Show an agent's saved model preference, or save one (an id, or `auto`).
    Model {
        /// The agent.
        name: String,
        /// The model to use when a task names none: an id the agent lists, or `auto`.
        id: Option<String>,
        /// Remove the saved preference (the configured `model` applies again).
        #[arg(long)]
        unset: bool,
    },
    /// List the models an agent offers (`agy models`; an ACP agent is started once to ask).
    Models {
        /// The agent.
        name: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Serve MCP on stdin/stdout, for an MCP client that starts Legate (stdout carries only
    /// JSON-RPC; logs go to stderr).
    Mcp(mcp::StdioArgs),
    /// List the permission requests agents are waiting on (pending, newest first).
    Approvals(approvals::ApprovalsArgs),
    /// Allow a pending approval (its agent's request is answered with an option it offered).
    Approve(approvals::ApproveArgs),
    /// Deny a pending approval, saying why.
    Deny(approvals::DenyArgs),
    /// List permission decisions, each with who decided (table, policy, human, agent,
    /// deadline) and the rule id.
    Audit(approvals::AuditArgs),
    /// Serve Legate to remote clients: A2A by default (JSON-RPC and HTTP+JSON, agent cards);
    /// `--mcp` for MCP over Streamable HTTP at /mcp instead.
    Serve(serve::ServeArgs),
    /// What a finished copy task leaves for the next role: criteria, reports, tests,
    /// decisions, treeSha256 and the contextSha256 a handoff names.
    Context {
        /// Task id or prefix.
        id: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Start another role in a fresh copy of a finished copy task's current files (the patch
    /// keeps accumulating against the original project), and watch it run.
    Handoff(handoff::HandoffArgs),
    /// Show a copy task's patch (raw), or its preview with `--stat`/`--json`.
    Diff {
        /// Task id or prefix.
        id: String,
        /// Files with line counts, totals, sha256, verification and tests instead of the patch.
        #[arg(long)]
        stat: bool,
        /// The preview as JSON.
        #[arg(long)]
        json: bool,
        /// Refuse unless the patch still has this sha256.
        #[arg(long)]
        sha256: Option<String>,
    },
    /// Verify a copy task's acceptance criteria with a review per criterion.
    Verify {
        /// Task id or prefix.
        id: String,
        /// A JSON file: `[{criterionId, verdict, path, line, quote, explanation}, …]`, or
        /// `{"sha256": …, "reviews": [...]}`.
        #[arg(long)]
        review: PathBuf,
        /// The patch sha256 reviewed (default: the file's, else the current patch's).
        #[arg(long)]
        sha256: Option<String>,
    },
    /// Run a test command (no shell) in a copy task's copy and record the evidence.
    Test {
        /// Task id or prefix.
        id: String,
        /// Seconds before the command's process group is killed (default 600).
        #[arg(long)]
        timeout: Option<u64>,
        /// The patch sha256 to test (default: the current patch's).
        #[arg(long)]
        sha256: Option<String>,
        /// The executable and its arguments, after `--`.
        #[arg(last = true, required = true, num_args = 1..)]
        command: Vec<String>,
    },
    /// Apply a copy task's verified patch to the original project.
    Integrate {
        /// Task id or prefix.
        id: String,
        /// Refuse unless the patch still has this sha256.
        #[arg(long)]
        sha256: Option<String>,
    },
    /// Remove a finished copy task's copy and baseline now.
    Discard {
        /// Task id or prefix.
        id: String,
    },
    /// Remove finished copies past their retention, and orphaned ones.
    Cleanup,
    /// Run a built-in agent on stdio (used by Legate itself).
    Agent {
        /// Which agent: `revisor`, or `tck` (the A2A TCK profile).
        name: String,
    },
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    /// The agent to delegate to (default: `default_agent`, normally `revisor`).
    #[arg(long, short)]
    agent: Option<String>,
    /// Work in the context's sandbox. The default for a new context; a continued context
    /// (`--context`) keeps whatever workspace it started with.
    #[arg(long, conflicts_with_all = ["cwd", "copy"])]
    sandbox: bool,
    /// Work on a copy of this git project (its root): review with `legate diff`, `verify`,
    /// `test`, then `integrate`.
    #[arg(long, conflicts_with = "cwd")]
    copy: Option<PathBuf>,
    /// With `--copy`: copy only these relative files or directories (repeatable).
    #[arg(long = "include", requires = "copy")]
    include: Vec<String>,
    /// With `--copy`: acceptance criteria, a JSON file `[{id, description, check?}, …]`.
    #[arg(long, requires = "copy")]
    criteria: Option<PathBuf>,
    /// Work in this directory instead (shared: Legate does not own it).
    #[arg(long)]
    cwd: Option<PathBuf>,
    /// Continue this conversation (same agent session, same workspace).
    #[arg(long)]
    context: Option<String>,
    /// Refuse every change: read-only task (a planner or reviewer role is read-only anyway).
    #[arg(long)]
    read_only: bool,
    /// The role the agent plays: implementer (the default), planner, reviewer, or a
    /// configured role (`legate roles`). A conversation keeps its role.
    #[arg(long)]
    role: Option<String>,
    /// Seconds before the task is stopped with TASK_TIMEOUT.
    #[arg(long)]
    timeout: Option<u64>,
    /// The model to use (an id the agent lists, or `auto` for the agent's own choice).
    /// Without it: the saved preference (`legate model`), then the agent's configured
    /// `model`, then the agent's own choice. `agy` and ACP agents that offer a model option
    /// select it; other agents ignore it with a notice.
    #[arg(long)]
    model: Option<String>,
    /// A JSON Schema file the answer must follow (structured output, agents of kind `agy`):
    /// passed as `--json-schema`, and the answer's JSON comes back as the attachment
    /// `structured_output.json`.
    #[arg(long, value_name = "FILE")]
    json_schema: Option<PathBuf>,
    /// What to ask. Each argument becomes one line of the prompt.
    #[arg(required = true, num_args = 1..)]
    prompt: Vec<String>,
}

#[derive(Debug, clap::Args)]
struct UsageArgs {
    /// Only this task (id or unique prefix).
    #[arg(long)]
    task: Option<String>,
    /// Only this agent session (ACP session id or agy conversation id).
    #[arg(long)]
    session: Option<String>,
    /// Only usage counted for this model.
    #[arg(long)]
    model: Option<String>,
    /// Only tasks of this agent.
    #[arg(long)]
    agent: Option<String>,
    /// Print the whole report as JSON.
    #[arg(long)]
    json: bool,
}

fn main() -> ExitCode {
    // Parsing starts no thread. A built-in agent is an agent, not Legate: cleanup reads its
    // markers, and its environment is the agent's.
    let cli = Cli::parse();
    if let Command::Agent { name } = &cli.command {
        return run_builtin_agent(name);
    }
    // Then, while this is still the only thread: agents must not read Legate's environment.
    let hardened = harden::process();
    init_logging();
    tracing::debug!(
        non_dumpable = hardened.non_dumpable,
        secrets_removed = ?hardened.secrets,
        environ_scrubbed_bytes = hardened.scrubbed,
        not_scrubbed = hardened.not_scrubbed.as_deref(),
        "process hardened"
    );
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: INTERNAL: could not start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(dispatch(cli.command)) {
        Ok(code) => code,
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", error_chain(&e));
            ExitCode::from(2)
        }
    }
}

/// The error and its causes, joined with `: ` like `{:#}`, leaving out a cause whose text the
/// sentence already quotes (Legate's sentences often end with their cause's own words).
pub(crate) fn error_chain(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// The log filter when neither `LEGATE_LOG` nor `RUST_LOG` gives one: Legate's own warnings
/// (every `legate*` target), and only errors from the libraries it uses, whose warnings
/// (e.g. the ACP SDK's about a message it dropped) would mix into `legate run`'s output and
/// say nothing the task's events do not.
const DEFAULT_LOG: &str = "error,legate=warn";

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("LEGATE_LOG")
        .or_else(|_| tracing_subscriber::EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(DEFAULT_LOG));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

fn run_builtin_agent(name: &str) -> ExitCode {
    if name != "revisor" && name != "tck" {
        eprintln!("error: AGENT_NOT_FOUND: the built-in agents are revisor and tck (got {name:?})");
        return ExitCode::from(2);
    }
    init_logging();
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: INTERNAL: could not start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let served = if name == "tck" {
        rt.block_on(legate_tck::serve_stdio())
    } else {
        rt.block_on(legate_revisor::serve_stdio())
    };
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: {e}");
            ExitCode::from(1)
        }
    }
}

async fn dispatch(command: Command) -> Result<ExitCode> {
    if let Command::Policy { command } = command {
        // It reports an invalid policy itself (exit 1), so it loads the configuration itself.
        return policy::command(command);
    }
    let config = config::load()?;
    let paths = config.engine.paths.clone();
    // Every confinement this process prepares refuses the ports `legate serve` registered here.
    legate_confine::ports::use_registry(paths.run().join("listen"));
    match command {
        Command::Run(args) => run(config, args).await,
        Command::Tasks {
            state,
            context,
            agent,
            limit,
            json,
        } => {
            let records = Records::open_or_empty(&paths)?;
            let state = match state {
                Some(s) => Some(TaskState::parse_named(&s)?),
                None => None,
            };
            let filter_given = state.is_some() || context.is_some() || agent.is_some();
            let filter = TaskFilter {
                state,
                context_id: context,
                agent,
                limit: limit.clamp(1, 10_000),
                before: None,
            };
            let tasks = records.tasks(&filter)?;
            if tasks.is_empty() && !json && std::io::stdout().is_terminal() {
                out!(
                    "no tasks yet{}",
                    if filter_given { " that match" } else { "" }
                )?;
            }
            for t in tasks {
                if json {
                    out!("{}", serde_json::to_string(&t)?)?;
                } else {
                    let when = humantime::format_rfc3339_seconds(t.created_at.to_system_time());
                    let code = t
                        .error
                        .as_ref()
                        .map(|e| format!(" {}", e.code))
                        .unwrap_or_default();
                    out!(
                        "{}  {when}  {:<10} {:<15}{code}  {}",
                        t.id,
                        t.agent,
                        t.state.as_str(),
                        one_line(&t.prompt, 60)
                    )?;
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Show { id, json } => {
            let records = Records::open(&paths)?;
            let task = records.find_task(&id)?;
            if json {
                out!("{}", serde_json::to_string_pretty(&task)?)?;
            } else {
                print_task(&task)?;
                if let Some(r) = records.review(&task.id)? {
                    for line in render::integration_lines(&r) {
                        out!("{line}")?;
                    }
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Events { id, after, follow } => {
            let records = Records::open(&paths)?;
            let task = records.find_task(&id)?;
            if follow {
                let mut sub = records.follow(task.id.clone(), after);
                while let Some(e) = sub.next().await? {
                    out!("{}", render::event_line(&e))?;
                }
                // Like `legate run`: 0 only when the task completed.
                let done = records.find_task(task.id.as_str())?;
                return Ok(if done.state == TaskState::Completed {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::from(1)
                });
            } else {
                let mut cursor = after;
                loop {
                    let page = records.events(&task.id, cursor, 500)?;
                    let Some(last) = page.last() else { break };
                    cursor = last.seq;
                    for e in &page {
                        out!("{}", render::event_line(e))?;
                    }
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Cancel { id } => {
            // The engine decides, as for every front: a task waiting for input ends here and
            // now; a running one is asked to stop, and the process running it stops it.
            let engine = front::start_engine(&config.engine)?;
            let outcome = engine
                .cancel(&id)
                .and_then(|before| Ok((engine.task(before.id.as_str())?, before)));
            engine.shutdown().await;
            let (after, before) = outcome?;
            if after.is_terminal() {
                out!("canceled {} (it was {})", after.id, before.state)?;
            } else {
                out!(
                    "cancel requested for {} ({}); the process running it stops it within a second",
                    after.id,
                    after.state
                )?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Agents { no_probe, json } => {
            if no_probe {
                return agents::list(&config, None, json).await;
            }
            let engine = front::start_engine(&config.engine)?;
            let code = agents::list(&config, Some(&engine), json).await;
            engine.shutdown().await;
            code
        }
        Command::Roles { json } => roles_list::print(&config, json),
        Command::Usage(args) => usage::print(&Records::open_or_empty(&paths)?, args),
        Command::Model { name, id, unset } => {
            with_engine(config, |e| async move {
                models::preference(&e, &name, id, unset)
            })
            .await
        }
        Command::Models { name, json } => {
            with_engine(
                config,
                |e| async move { models::list(&e, &name, json).await },
            )
            .await
        }
        Command::Mcp(args) => mcp::stdio(config, args).await,
        Command::Approvals(args) => approvals::list(config, args).await,
        Command::Approve(args) => approvals::approve(config, args),
        Command::Deny(args) => approvals::deny(config, args),
        Command::Audit(args) => approvals::audit(config, args),
        Command::Serve(args) => serve::serve(config, args).await,
        Command::Context { id, json } => {
            with_engine(
                config,
                |e| async move { handoff::context(&e, &id, json).await },
            )
            .await
        }
        Command::Handoff(args) => handoff::handoff(config, args).await,
        Command::Diff {
            id,
            stat,
            json,
            sha256,
        } => {
            with_engine(config, |e| async move {
                review::diff(&e, &id, stat, json, sha256.as_deref()).await
            })
            .await
        }
        Command::Verify { id, review, sha256 } => {
            with_engine(config, |e| async move {
                review::verify(&e, &id, &review, sha256).await
            })
            .await
        }
        Command::Test {
            id,
            timeout,
            sha256,
            command,
        } => {
            with_engine(config, |e| async move {
                review::test(&e, &id, command, timeout, sha256).await
            })
            .await
        }
        Command::Integrate { id, sha256 } => {
            with_engine(config, |e| async move {
                review::integrate(&e, &id, sha256.as_deref()).await
            })
            .await
        }
        Command::Discard { id } => {
            with_engine(config, |e| async move { review::discard(&e, &id).await }).await
        }
        Command::Cleanup => with_engine(config, |e| async move { review::cleanup(&e).await }).await,
        Command::Agent { .. } | Command::Policy { .. } => Ok(ExitCode::from(2)),
    }
}

/// Starts an engine, runs `f` on it, and shuts it down whatever `f` returned.
async fn with_engine<F, Fut>(config: config::Config, f: F) -> Result<ExitCode>
where
    F: FnOnce(Engine) -> Fut,
    Fut: std::future::Future<Output = Result<ExitCode>>,
{
    let engine = front::start_engine(&config.engine)?;
    let result = f(engine.clone()).await;
    engine.shutdown().await;
    result
}

/// The backends this build has (`legate_backend::registry::BUILTIN`), each refusing to
/// start an agent the kernel cannot confine when `confinement` is required.
pub fn backends(confinement: legate_confine::Requirement) -> legate_backend::Registry {
    legate_backend::Registry::builtin(confinement)
}

/// How often `legate run` redraws its progress line on a terminal.
const PROGRESS_TICK: Duration = Duration::from_millis(200);

async fn run(config: config::Config, args: RunArgs) -> Result<ExitCode> {
    let engine = front::start_engine(&config.engine)?;
    let workspace = match (args.cwd, args.copy) {
        (Some(dir), _) => WorkspaceRequest::Shared(dir),
        (None, Some(source)) => WorkspaceRequest::Copy {
            source: std::path::absolute(&source).unwrap_or(source),
            include_paths: args.include,
            criteria: match &args.criteria {
                Some(file) => serde_json::from_value(read_json(file, "a list of criteria")?)
                    .map_err(|e| {
                        Error::caused_by(
                            ErrorCode::InvalidInput,
                            format!("{} is not a list of criteria: {e}", file.display()),
                            e,
                        )
                    })?,
                None => Vec::new(),
            },
        },
        (None, None) if args.sandbox => WorkspaceRequest::Sandbox,
        (None, None) => WorkspaceRequest::Context,
    };
    let request = SubmitRequest {
        agent: args.agent,
        prompt: args.prompt.join("\n"),
        workspace,
        context_id: args.context,
        mode: args.read_only.then_some(TaskMode::ReadOnly),
        timeout: args.timeout.map(Duration::from_secs),
        model: args.model,
        message_id: None,
        json_schema: match &args.json_schema {
            Some(file) => Some(read_json(file, "a JSON Schema")?),
            None => None,
        },
        role: args.role,
    };
    let task = engine.submit(request)?;
    watch(engine, task).await
}

/// Follows `task` on `engine` to its end (or until it waits for input), rendering its events;
/// Ctrl-C cancels it. Shuts the engine down; exit code 0 when it completed.
pub(crate) async fn watch(engine: Engine, task: legate_core::Task) -> Result<ExitCode> {
    eprintln!(
        "task {} · agent {} · context {}",
        task.id, task.agent, task.context_id
    );
    let mut renderer = render::Renderer::new();
    let mut sub = engine.subscribe(&task.id, 0);
    let mut interrupts = 0;
    let mut ticker = tokio::time::interval(PROGRESS_TICK);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = ticker.tick(), if renderer.live() => renderer.tick(),
            next = sub.next() => match next? {
                Some(e) => {
                    renderer.event(&e);
                    // The agent asked for input: the task waits for a reply, not for us.
                    if let legate_core::EventKind::Status { state, .. } = &e.kind
                        && *state == TaskState::InputRequired
                    {
                        break;
                    }
                }
                None => break,
            },
            _ = tokio::signal::ctrl_c() => {
                interrupts += 1;
                if interrupts > 1 {
                    eprintln!("interrupted twice; stopping now");
                    engine.shutdown().await;
                    return Ok(ExitCode::from(130));
                }
                eprintln!("\ncanceling (press Ctrl-C again to stop at once)");
                let _ = engine.cancel(task.id.as_str());
            }
        }
    }
    let done = engine.task(task.id.as_str())?;
    renderer.summary(&done);
    engine.shutdown().await;
    Ok(if done.state == TaskState::Completed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The JSON in `file`; `INVALID_INPUT` naming `what` when it cannot be read or parsed.
fn read_json(file: &std::path::Path, what: &str) -> Result<serde_json::Value> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("INVALID_INPUT: could not read {}", file.display()))?;
    Ok(serde_json::from_str(&text).map_err(|e| {
        Error::caused_by(
            ErrorCode::InvalidInput,
            format!("{} is not {what} (not JSON: {e})", file.display()),
            e,
        )
    })?)
}

fn print_task(t: &legate_core::Task) -> std::io::Result<()> {
    let at = |ts: legate_core::Timestamp| {
        humantime::format_rfc3339_seconds(ts.to_system_time()).to_string()
    };
    out!("task     {}", t.id)?;
    out!("state    {}", t.state)?;
    if let Some(e) = &t.error {
        out!("error    {}: {}", e.code, e.message)?;
    }
    out!("agent    {}", t.agent)?;
    out!("context  {}", t.context_id)?;
    if let Some(s) = &t.session_id {
        out!("session  {s}")?;
    }
    out!("mode     {}", t.mode.as_str())?;
    match &t.role {
        Some(r) if r.name != r.base.as_str() => out!("role     {} ({})", r.name, r.base.as_str())?,
        Some(r) => out!("role     {}", r.name)?,
        None => out!("role     implementer")?,
    }
    match &t.root {
        Some(r) => out!("workspace {} {}", t.workspace.as_str(), r.display())?,
        None => out!("workspace {}", t.workspace.as_str())?,
    }
    out!("created  {}", at(t.created_at))?;
    out!("updated  {}", at(t.updated_at))?;
    out!("usage    {}", render::usage_text(t))?;
    if let Some(m) = &t.status_message {
        out!("status   {m}")?;
    }
    out!("prompt   {}", one_line(&t.prompt, 200))?;
    if let Some(r) = &t.result {
        out!(
            "tools    {} call(s), {} failed{}",
            r.tool_calls,
            r.failed_tool_calls,
            r.stop_reason
                .as_ref()
                .map(|s| format!(", stop reason {s}"))
                .unwrap_or_default()
        )?;
        for refusal in &r.refusals {
            out!("refused  {}: {}", refusal.title, refusal.reason)?;
        }
        for line in r.report.iter().flat_map(render::report_lines) {
            out!("{line}")?;
        }
        if !r.text.is_empty() {
            out!("\n{}", r.text.trim_end())?;
        }
    }
    Ok(())
}

pub(crate) fn one_line(s: &str, max: usize) -> String {
    // Whitespace collapsed, and any other control character escaped: the text may be an
    // agent's, and must not drive the terminal (ANSI sequences) or start a line of its own.
    let flat: String = s
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .flat_map(|c| {
            let escaped: Vec<char> = if c.is_control() {
                c.escape_default().collect()
            } else {
                vec![c]
            };
            escaped
        })
        .collect();
    if flat.chars().count() > max {
        format!("{}…", flat.chars().take(max).collect::<String>())
    } else {
        flat
    }
}

#[cfg(test)]
mod tests {
    use super::error_chain;

    #[test]
    fn an_error_chain_says_each_cause_once() {
        let io = std::io::Error::other("disk on fire");
        let e = legate_core::Error::caused_by(
            legate_core::ErrorCode::StoreError,
            "the store could not append events: disk on fire.",
            io,
        );
        let e = anyhow::Error::new(e).context("while running");
        assert_eq!(
            error_chain(&e),
            "while running: STORE_ERROR: the store could not append events: disk on fire."
        );
        let other = anyhow::Error::new(std::io::Error::other("root cause")).context("outer");
        assert_eq!(error_chain(&other), "outer: root cause");
    }

    /// A file that is not JSON is `INVALID_INPUT` with the parser's error as its cause (not
    /// flattened into a string), and the printed chain says the cause once.
    #[test]
    fn a_bad_json_file_keeps_its_cause() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("criteria.json");
        std::fs::write(&file, "[not json").unwrap();
        let e = super::read_json(&file, "a list of criteria").unwrap_err();
        let legate = e.downcast_ref::<legate_core::Error>().unwrap();
        assert_eq!(legate.code, legate_core::ErrorCode::InvalidInput);
        // The parser's own error, kept (behind the `Arc` the error holds it in).
        let cause = std::error::Error::source(legate).expect("a cause");
        assert!(cause.to_string().contains("expected"), "{cause:?}");
        let chain = error_chain(&e);
        assert!(chain.starts_with("INVALID_INPUT: "), "{chain}");
        assert_eq!(chain.matches(&cause.to_string()).count(), 1, "{chain}");
    }

    /// The token in an environment variable that is not a valid token: the token's own error,
    /// its sentence naming the variable.
    #[test]
    fn a_bad_env_token_is_the_tokens_error_naming_the_variable() {
        let env = |_: &str| Some("short".to_string());
        let e = crate::front::env_token(&env, "LEGATE_MCP_TOKEN").unwrap_err();
        let legate = e.downcast_ref::<legate_core::Error>().unwrap();
        assert!(legate.message.starts_with("LEGATE_MCP_TOKEN: "), "{legate}");
        assert!(!error_chain(&e).contains("short"), "{e}");
    }

    /// docs/troubleshooting.md has a row for every error code, so that a new code cannot
    /// ship without saying what it means and what to do.
    #[test]
    fn troubleshooting_lists_every_error_code() {
        let doc = include_str!("../../../docs/troubleshooting.md");
        let missing: Vec<&str> = legate_core::ErrorCode::ALL
            .iter()
            .map(|c| c.as_str())
            .filter(|code| !doc.contains(&format!("| `{code}` |")))
            .collect();
        assert!(
            missing.is_empty(),
            "docs/troubleshooting.md has no row for {missing:?}"
        );
    }
}
