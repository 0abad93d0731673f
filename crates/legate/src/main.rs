//! `legate`: delegate a coding task to another agent, inside limits neither can widen.
//!
//! This is the binary's edge: the `Cli`/`Command` parser, process start (hardening, logging,
//! the runtime, the built-in agents), dispatching each command to the module that owns it,
//! and the few helpers every command shares (`out!`, `error_chain`, `one_line`). Command
//! bodies live in their modules (`run`, `tasks`, `review`, `agents`, `serve`, `approvals`, …),
//! never here. Commands translate; the engine decides.

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
mod caller_skill;
mod compare;
mod config;
mod doctor;
mod errors;
mod front;
mod group;
mod handoff;
mod harden;
mod json_out;
mod logs;
mod mcp;
mod metrics;
mod models;
mod policy;
mod render;
mod review;
mod roles_list;
mod run;
mod serve;
mod service;
mod supervise;
mod tap;
mod tasks;
mod telemetry;
mod ui;
mod usage;

use anyhow::Result;
use clap::{Parser, Subcommand};
pub(crate) use errors::error_chain;
use errors::{is_broken_pipe, report};
use legate_engine::{Engine, Records};
use std::path::PathBuf;
use std::process::ExitCode;

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
    Run(run::RunFlags),
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
    /// Print a tapped task's protocol frames (the wire tap): ACP, agy stream-json or A2A,
    /// both ways, redacted. A task is tapped when its agent has `tap = true` or it was run
    /// with `--tap`; another is `TAP_OFF`.
    Tap {
        /// Task id or prefix.
        id: String,
        /// Keep printing new frames until the task ends.
        #[arg(long)]
        follow: bool,
        /// Print one JSON object a frame.
        #[arg(long)]
        json: bool,
    },
    /// Continue a task cut by a restart of Legate (failed, SERVER_RESTARTED): a new turn of
    /// its context that resumes the agent's session, watched like `run`. Never automatic.
    Continue {
        /// Task id or prefix.
        id: String,
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
    /// Legate's log lines (`$LEGATE_HOME/logs`), oldest first.
    Logs {
        /// Keep printing new lines until interrupted.
        #[arg(long)]
        follow: bool,
        /// Only the lines of this task (id or prefix).
        #[arg(long)]
        task: Option<String>,
        /// Print the lines as written (JSON).
        #[arg(long)]
        json: bool,
    },
    /// Run `legate serve` as a user service (systemd on Linux, launchd on macOS).
    Service {
        #[command(subcommand)]
        command: service::ServiceCommand,
    },
    /// Say what holds on this machine for Legate (kernel confinement, process limits, the
    /// home, token files, each agent), each problem with its fix. Exit 1 when something fails.
    Doctor {
        /// Do not start the agents.
        #[arg(long)]
        no_probe: bool,
        /// Print JSON lines, one per check.
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
    Usage(usage::UsageFlags),
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
    Approvals(approvals::ApprovalsFlags),
    /// Allow a pending approval (its agent's request is answered with an option it offered).
    Approve(approvals::ApproveArgs),
    /// Deny a pending approval, saying why.
    Deny(approvals::DenyArgs),
    /// List permission decisions, each with who decided (table, policy, human, agent,
    /// deadline) and the rule id.
    Audit(approvals::AuditFlags),
    /// Make the supervisor token if it is missing and print its file's path (never the
    /// token), for a script that answers approvals: `LEGATE_SUPERVISOR_TOKEN=$(cat PATH)`.
    /// Only a person at a terminal may run it.
    SupervisorToken,
    /// Serve Legate to remote clients: A2A by default (JSON-RPC and HTTP+JSON, agent cards);
    /// `--mcp` for MCP over Streamable HTTP at /mcp instead; `--ui` for the dashboard (any of
    /// them together, from one process).
    Serve(serve::ServeArgs),
    /// Open the dashboard of the `legate serve --ui` running on this home in the browser, with
    /// a fresh one-time URL (`--print-url` prints it instead).
    Ui(ui::UiArgs),
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
    Handoff(handoff::HandoffFlags),
    /// Ask 2 to 4 distinct targets (`--target agent[:model]`) the same question about a
    /// finished copy task's current files, each a read-only review in its own copy; wait for
    /// every review and print the findings grouped by file and line (exit 1 unless complete).
    Compare(compare::CompareFlags),
    /// Print a comparison: its reviews, start errors, staleness and grouped findings.
    Comparison {
        /// The comparison id `legate compare` printed.
        id: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Groups of tasks and workflows: `create FILE` (TOML or JSON), `start ID SHA256`,
    /// `status`, `wait`, `cancel`, `list`, `result`, `receipts`.
    Group(group::GroupFlags),
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
        /// Fix turns allowed when the command fails (0 to 3): the task's agent is shown the
        /// failure in the same copy, then the command runs again; waits for the last.
        #[arg(long, default_value_t = 0)]
        retries: u8,
        /// Run in a fresh tree of the patch (its tracked files only, nothing the copy
        /// ignores: no build output or cache an agent left) instead of the copy.
        #[arg(long)]
        fresh: bool,
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
    /// The skill that teaches a calling agent (Claude Code, Codex) to delegate through
    /// Legate: `print` it, or `install --for claude-code|codex [--project DIR]`.
    CallerSkill(caller_skill::CallerSkillFlags),
    /// Run a built-in agent on stdio (used by Legate itself).
    Agent {
        /// Which agent: `revisor`, or `tck` (the A2A TCK profile).
        name: String,
    },
    /// agy's PreToolUse hook for a task under tool controls: staged by Legate in the copy's
    /// `.agents/hooks.json`, run by agy with one tool call on stdin (not for people).
    #[command(hide = true)]
    AgyHook {
        /// The task's policy file, outside the copy.
        #[arg(long)]
        policy: PathBuf,
        /// The policy's SHA-256 (hex): a policy that differs is refused.
        #[arg(long)]
        sha256: String,
    },
}

fn main() -> ExitCode {
    // Parsing starts no thread. A built-in agent is an agent, not Legate: cleanup reads its
    // markers, and its environment is the agent's.
    let cli = Cli::parse();
    if let Command::Agent { name } = &cli.command {
        return run_builtin_agent(name);
    }
    // agy's hook decides one tool call from its policy file: no engine, no thread, no log.
    if let Command::AgyHook { policy, sha256 } = &cli.command {
        let code = legate_backend::agy::hook::hook_main(policy, sha256);
        return ExitCode::from(u8::try_from(code).unwrap_or(2));
    }
    // reqwest is built with rustls and no crypto provider of its own (`legate-remote` hands
    // its clients a configuration on `ring`); any other client (the OTLP exporter's) takes
    // the process's default, which is `ring` too. Fails only when one is installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();
    // Then, while this is still the only thread: agents must not read Legate's environment.
    // (Logging starts once the configuration says where its files go: `dispatch`.)
    let hardened = harden::process();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return report(&runtime_failed(e)),
    };
    // Spans still queued are sent before the process ends (nothing to do with traces off).
    let done = runtime.block_on(async {
        let done = dispatch(cli.command, hardened).await;
        telemetry::shutdown().await;
        done
    });
    match done {
        Ok(code) => code,
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => report(&e),
    }
}

/// The process kind a command's log file is named after (`$LEGATE_HOME/logs/<kind>.log`).
fn log_kind(command: &Command) -> &'static str {
    match command {
        Command::Serve(_) => "serve",
        Command::Mcp(_) => "mcp",
        Command::Ui(_) => "ui",
        _ => "cli",
    }
}

/// The log filter when neither `LEGATE_LOG` nor `RUST_LOG` gives one: Legate's own warnings
/// (every `legate*` target), and only errors from the libraries it uses, whose warnings
/// (e.g. the ACP SDK's about a message it dropped) would mix into `legate run`'s output and
/// say nothing the task's events do not. The Kubernetes client logs every failed request as
/// an error of its own; Legate reports those as `KUBE_UNAVAILABLE`, so they are off.
const DEFAULT_LOG: &str = "error,legate=warn,kube_client=off";

/// Logging to stderr (`LEGATE_LOG`, else `RUST_LOG`, else [`DEFAULT_LOG`]) and, given one, to
/// a log file in JSON lines (`LEGATE_LOG_FILE`, else `[logs] level` for Legate's own lines and
/// warnings for the libraries'), and, when the `OTEL_*` variables ask for it, spans to
/// OpenTelemetry for `process` (`telemetry`; never for a built-in agent).
fn init_logging(file: Option<(legate_logs::LogFile, &str)>, process: Option<&'static str>) {
    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = tracing_subscriber::EnvFilter::try_from_env("LEGATE_LOG")
        .or_else(|_| tracing_subscriber::EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(DEFAULT_LOG));
    let stderr = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_filter(filter);
    let file = file.map(|(file, level)| {
        let filter =
            tracing_subscriber::EnvFilter::try_from_env("LEGATE_LOG_FILE").unwrap_or_else(|_| {
                tracing_subscriber::EnvFilter::new(format!("warn,legate={level},kube_client=off"))
            });
        tracing_subscriber::fmt::layer()
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .with_writer(file)
            .with_filter(filter)
    });
    let otel = process.and_then(telemetry::layer);
    let _ = tracing_subscriber::registry()
        .with(otel)
        .with(stderr)
        .with(file)
        .try_init();
}

/// Starts logging for `command` (its file when the configuration loaded and allows one) and
/// says how the process was hardened.
fn start_logging(config: Option<&config::Config>, command: &Command, hardened: &harden::Hardened) {
    let file = config.filter(|c| c.logs.level != "off").and_then(|c| {
        legate_logs::LogFile::open(&c.engine.paths.logs(), log_kind(command), c.logs.rotation)
            .map_err(|e| eprintln!("warning: no log file: {e}"))
            .ok()
            .map(|f| (f, c.logs.level.as_str()))
    });
    init_logging(file, Some(log_kind(command)));
    tracing::debug!(
        non_dumpable = hardened.non_dumpable,
        secrets_removed = ?hardened.secrets,
        environ_scrubbed_bytes = hardened.scrubbed,
        not_scrubbed = hardened.not_scrubbed.as_deref(),
        "process hardened"
    );
}

/// The runtime could not start: `INTERNAL`, its cause kept.
fn runtime_failed(e: std::io::Error) -> anyhow::Error {
    legate_core::Error::caused_by(
        legate_core::ErrorCode::Internal,
        "could not start the runtime",
        e,
    )
    .into()
}

fn run_builtin_agent(name: &str) -> ExitCode {
    if name != "revisor" && name != "tck" {
        return report(&coded!(
            AgentNotFound,
            "the built-in agents are revisor and tck (got {name:?})"
        ));
    }
    init_logging(None, None);
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return report(&runtime_failed(e)),
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

async fn dispatch(command: Command, hardened: harden::Hardened) -> Result<ExitCode> {
    let config = match &command {
        Command::Policy { .. } | Command::CallerSkill(_) | Command::Doctor { .. } => None,
        _ => Some(config::load()),
    };
    start_logging(
        config.as_ref().and_then(|c| c.as_ref().ok()),
        &command,
        &hardened,
    );
    if let Command::Policy { command } = command {
        // It reports an invalid policy itself (exit 1), so it loads the configuration itself.
        return policy::command(command);
    }
    if let Command::Doctor { no_probe, json } = command {
        // An invalid configuration is one of its findings: it loads it itself.
        return doctor::doctor(no_probe, json).await;
    }
    if let Command::CallerSkill(flags) = command {
        // It writes the caller's own files and needs no configuration.
        return caller_skill::run(flags);
    }
    let config = match config {
        Some(loaded) => loaded?,
        None => config::load()?,
    };
    let paths = config.engine.paths.clone();
    match command {
        Command::Run(args) => run::run(config, args).await,
        Command::Tasks {
            state,
            context,
            agent,
            limit,
            json,
        } => tasks::list(&paths, state, context, agent, limit, json),
        Command::Show { id, json } => tasks::show(&paths, &id, json),
        Command::Events { id, after, follow } => tasks::events(&paths, &id, after, follow).await,
        Command::Tap { id, follow, json } => tap::tap(&paths, &id, follow, json).await,
        Command::Continue { id } => run::continue_task(config, &id).await,
        Command::Cancel { id } => tasks::cancel(&config, &id).await,
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
        Command::SupervisorToken => supervise::make_token(&config),
        Command::Serve(args) => serve::serve(config, args).await,
        Command::Service { command } => service::service(&config, command),
        Command::Logs { follow, task, json } => {
            logs::print(&paths.logs(), task, follow, json).await
        }
        Command::Ui(args) => ui::ui(config, args),
        Command::Context { id, json } => {
            with_engine(
                config,
                |e| async move { handoff::context(&e, &id, json).await },
            )
            .await
        }
        Command::Handoff(args) => handoff::handoff(config, args).await,
        Command::Compare(args) => compare::compare(config, args).await,
        Command::Comparison { id, json } => {
            with_engine(
                config,
                |e| async move { compare::show(&e, &id, json).await },
            )
            .await
        }
        Command::Group(args) => group::run(config, args).await,
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
            retries,
            fresh,
            command,
        } => {
            with_engine(config, |e| async move {
                review::test(&e, &id, command, timeout, sha256, retries, fresh).await
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
        Command::Agent { .. }
        | Command::AgyHook { .. }
        | Command::Policy { .. }
        | Command::CallerSkill(_)
        | Command::Doctor { .. } => Ok(ExitCode::from(2)),
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

pub use legate_config::backends;

pub(crate) fn one_line(s: &str, max: usize) -> String {
    // Whitespace collapsed, and any other control character escaped: the text may be an
    // agent's, and must not drive the terminal (ANSI sequences) or start a line of its own.
    render::flattened(s, max, |c, flat| {
        if legate_core::text::is_unseen(c) {
            flat.extend(c.escape_default());
        } else {
            flat.push(c);
        }
    })
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
