//! agy's native tool controls, staged for one turn of a task in a copy: the policy outside
//! the copy, and in the copy `.agents/hooks.json` (a PreToolUse hook, matcher `*`, that runs
//! `legate agy-hook` bound to the policy's SHA-256) and `.agents/mcp_config.json` (the
//! selected catalogue servers, their unselected tools as `disabledTools`).
//!
//! This module owns turning the task's [`ToolControls`](legate_supervisor::ToolControls)
//! into agy's tool names (`read` gives `view_file`; `edit` gives `write_to_file`,
//! `replace_file_content` and `multi_replace_file_content`; no other kind has an agy file
//! tool; `finish` is implicit),
//! writing those files beneath the copy without following links, and checking after the turn
//! that the agent left them as staged. It must never stage anything for a workspace that is
//! not a copy, write outside `.agents/` in the copy, or put the policy where the agent can
//! write it. The baseline leaves both files out of every patch (`legate_workspace`).

use super::hook::{self, Policy};
use legate_beneath::Root;
use legate_core::{Error, ErrorCode, McpServerSpec, McpTransport, Result, ToolKind, WorkspaceKind};
use legate_supervisor::Supervision;
use std::path::{Path, PathBuf};

/// The hooks file, relative to the copy.
pub const HOOKS_FILE: &str = ".agents/hooks.json";
/// The MCP configuration, relative to the copy.
pub const MCP_CONFIG_FILE: &str = ".agents/mcp_config.json";
/// The largest staged file read back.
const MAX_STAGED: u64 = 4 * 1024 * 1024;

/// agy's file tools for `allowed` (`None`: every kind), none that writes on a read-only task.
pub fn agy_tools(allowed: Option<&[ToolKind]>, read_only: bool) -> Vec<String> {
    let has = |k: ToolKind| allowed.is_none_or(|a| a.contains(&k));
    let mut tools = Vec::new();
    if has(ToolKind::Read) {
        tools.extend(hook::READ_TOOLS.iter().map(|t| t.to_string()));
    }
    if has(ToolKind::Edit) && !read_only {
        tools.extend(hook::WRITE_TOOLS.iter().map(|t| t.to_string()));
    }
    tools
}

/// What one turn staged: the policy file and each staged file's bytes.
#[derive(Debug)]
pub(super) struct Staged {
    policy: PathBuf,
    files: Vec<(&'static str, Vec<u8>)>,
}

fn refused(message: impl Into<String>) -> Error {
    Error::new(ErrorCode::ToolNotAllowed, message)
}

/// Single-quoted for a POSIX shell.
fn quoted(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// Stages the controls of `supervision` for the turn of `task` in the copy `root`: `None`
/// when the task has none. `first`: the session's first turn, when a file already there is
/// the project's own (refused rather than replaced).
pub(super) fn stage(
    root: &Path,
    state_dir: Option<&Path>,
    task: &str,
    supervision: &Supervision,
    servers: &[McpServerSpec],
    first: bool,
) -> Result<Option<Staged>> {
    let controls = &supervision.tools;
    if !controls.is_set() {
        return Ok(None);
    }
    if supervision.workspace != WorkspaceKind::Copy {
        return Err(refused(
            "agy's tool controls are hooks staged in a copy of the project; this workspace is not a copy, so the task is refused rather than run unchecked",
        ));
    }
    let Some(state_dir) = state_dir else {
        return Err(refused(
            "agy's tool controls need the agent's state directory for their policy; none was given",
        ));
    };
    let read_only = supervision.mode == legate_core::TaskMode::ReadOnly;
    let policy = Policy {
        root: root.to_path_buf(),
        read_only,
        tools: agy_tools(controls.allowed.as_deref(), read_only),
        mcp: controls.mcp.clone(),
    };
    let policy_bytes = serde_json::to_vec_pretty(&policy)
        .map_err(|e| Error::quoting(ErrorCode::Internal, "could not write the tool policy", e))?;
    let policy_file = state_dir.join("hooks").join(format!("{task}.json"));
    super::usage::write_private(&policy_file, &policy_bytes).map_err(|e| {
        Error::quoting(
            ErrorCode::AgentStartFailed,
            "could not write agy's tool policy",
            e,
        )
    })?;
    let exe = std::env::current_exe().map_err(|e| {
        Error::quoting(
            ErrorCode::AgentStartFailed,
            "could not find Legate's own program for agy's hook",
            e,
        )
    })?;
    let command = format!(
        // Any failure of the hook itself (it could not start, it stopped) is a deny: agy
        // treats only exit 2 as one.
        "{} agy-hook --policy {} --sha256 {} || exit 2",
        quoted(&exe.to_string_lossy()),
        quoted(&policy_file.to_string_lossy()),
        hook::sha256_hex(&policy_bytes)
    );
    let hooks = serde_json::json!({
        "hooks": {"PreToolUse": [{"matcher": "*", "hooks": [{"type": "command", "command": command}]}]}
    });
    let files = vec![
        (HOOKS_FILE, pretty(&hooks)?),
        (MCP_CONFIG_FILE, pretty(&mcp_config(servers, controls))?),
    ];
    let beneath = Root::open(root).map_err(|e| write_failed(root, &e))?;
    if first {
        for (rel, _) in &files {
            if !matches!(beneath.kind(Path::new(rel)), Ok(None)) {
                return Err(refused(format!(
                    "the project has its own {rel}; agy's tool controls cannot be staged over it"
                )));
            }
        }
    }
    for (rel, bytes) in &files {
        beneath
            .write(Path::new(rel), bytes, true)
            .map_err(|e| write_failed(Path::new(rel), &e))?;
    }
    Ok(Some(Staged {
        policy: policy_file,
        files,
    }))
}

fn pretty(v: &serde_json::Value) -> Result<Vec<u8>> {
    serde_json::to_vec_pretty(v).map_err(|e| {
        Error::quoting(
            ErrorCode::Internal,
            "could not write agy's configuration",
            e,
        )
    })
}

fn write_failed(path: &Path, e: &legate_beneath::BeneathError) -> Error {
    Error::new(
        ErrorCode::AgentStartFailed,
        format!(
            "could not stage agy's tool controls at {}: {e}",
            path.display()
        ),
    )
}

/// agy's MCP configuration: each selected server's transport, its unselected tools disabled.
fn mcp_config(
    servers: &[McpServerSpec],
    controls: &legate_supervisor::ToolControls,
) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    for selection in &controls.mcp {
        let Some(spec) = servers.iter().find(|s| s.id == selection.server_id) else {
            continue;
        };
        let disabled: Vec<&str> = spec
            .tools
            .iter()
            .map(|t| t.name.as_str())
            .filter(|t| !selection.tools.iter().any(|s| s == t))
            .collect();
        let mut entry = match &spec.transport {
            McpTransport::Stdio { command, args, env } => serde_json::json!({
                "command": command, "args": args, "env": env,
            }),
            McpTransport::Http { url } => serde_json::json!({ "serverUrl": url }),
        };
        entry["disabledTools"] = serde_json::json!(disabled);
        out.insert(spec.id.clone(), entry);
    }
    serde_json::json!({ "mcpServers": out })
}

impl Staged {
    /// After the turn: the policy is removed, and each staged file must be as staged
    /// (`TOOL_NOT_ALLOWED` when the agent changed or removed one).
    pub(super) fn check(&self, root: &Path) -> Result<()> {
        let _ = std::fs::remove_file(&self.policy);
        let beneath = Root::open(root).map_err(|e| write_failed(root, &e))?;
        for (rel, bytes) in &self.files {
            match beneath.read(Path::new(rel), MAX_STAGED) {
                Ok(found) if &found == bytes => {}
                _ => {
                    return Err(refused(format!(
                        "{rel}, which Legate staged to enforce the task's tool controls, was changed during the turn"
                    )));
                }
            }
        }
        Ok(())
    }
}
