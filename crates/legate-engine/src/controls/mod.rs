//! The controls a task is given besides its prompt ([`TaskControls`]): checked once at submit,
//! stored with the task, inherited by every later task of its context.
//!
//! Each control has its own module, which owns its limits and its checks: `memory`
//! (snapshots of private memory entries), `skills` (packages staged in the copy), `delivery`
//! (events or messages), `tools` (tool kinds and MCP servers) and `artifacts` (files
//! collected when the task ends). This module only orders them and applies the one rule they
//! share: a continuation keeps the controls its context started with, and naming one again is
//! refused rather than silently ignored.
//!
//! Nothing here grants a permission: a control narrows what a task may use or adds data for
//! the agent to read.

pub(crate) mod artifacts;
mod delivery;
mod memory;
pub(crate) mod skills;
mod tools;

pub(crate) use tools::catalogued;

use crate::core::Core;
use crate::core::request::SubmitRequest;
use legate_core::{Error, Result, Task, TaskControls};

impl Core {
    /// The controls `request` gives its task. `continues`: the latest task of the context the
    /// request continues, whose controls are kept (naming memory, skills, tools, MCP servers
    /// or artifacts again is `INVALID_INPUT`; a delivery mode may be named only if it is the
    /// same). Changes nothing.
    pub(crate) fn check_controls(
        &self,
        request: &SubmitRequest,
        continues: Option<&Task>,
    ) -> Result<TaskControls> {
        if let Some(last) = continues {
            return inherit(request, last);
        }
        Ok(TaskControls {
            memory: memory::check(self, request)?,
            skills: skills::check(self, request)?,
            delivery_mode: delivery::check(request),
            allowed_tools: tools::check_tools(self, request)?,
            mcp_servers: tools::check_mcp(self, request)?,
            artifact_paths: artifacts::check(self, request)?,
            group: None,
            comparison_id: None,
            continued_from: None,
            // Set with the agent at submit (`core::request`).
            tap: false,
            inbound: request.inbound,
        })
    }
}

/// A continuation's controls: its context's, unchanged.
fn inherit(request: &SubmitRequest, last: &Task) -> Result<TaskControls> {
    let named = [
        ("memory", request.memory.is_some()),
        ("skills", !request.skills.is_empty()),
        ("allowedTools", request.allowed_tools.is_some()),
        ("mcpServers", request.mcp_servers.is_some()),
        ("artifactPaths", !request.artifact_paths.is_empty()),
    ];
    if let Some((name, _)) = named.iter().find(|(_, given)| *given) {
        return Err(Error::invalid_input(format!(
            "{name} is fixed when a context starts; a continuation of context {} keeps its own. Start a new task for another selection",
            last.context_id
        )));
    }
    if let Some(mode) = request.delivery_mode
        && mode != last.controls.delivery_mode
    {
        return Err(Error::invalid_input(format!(
            "context {} delivers {}; change it with set_delivery_mode, not on a continuation",
            last.context_id,
            last.controls.delivery_mode.as_str()
        )));
    }
    // Checked by `deliver` too; here again, as the context is read again at submit (a task
    // of another front's may have started it in between).
    if request.inbound && !last.controls.inbound {
        return Err(crate::core::inbound::not_inbound(&last.context_id));
    }
    // And the other way: an inbound caller chose this context's id and reads its tasks, so a
    // task of another front's would hand it the prompt and run in its workspace (a local
    // `--context` naming it, believing it new, was read back over A2A).
    if !request.inbound && last.controls.inbound {
        return Err(crate::core::inbound::inbound_only(&last.context_id));
    }
    // A continuation of a cut turn is one task; the turns after it are ordinary.
    Ok(TaskControls {
        continued_from: None,
        ..last.controls.clone()
    })
}
