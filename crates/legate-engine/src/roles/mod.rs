//! The role catalog: the three built-in roles (`implementer`, the default, `planner` and
//! `reviewer`) and the roles configured as `[roles.NAME]`, with their defaults, checked once
//! when the engine starts; and the resolution of a request's role at submit.
//!
//! This module owns the limits of a configured role (name, description, instructions, how
//! many), what its defaults may hold, and the rules a role puts on a request: a planner or
//! reviewer base is read-only (`write` is `MODE_NOT_ALLOWED`), a default fills only a field
//! the request left out (an explicit argument replaces the whole field; lists never merge),
//! and a conversation keeps the role it started with. It never grants a permission: a role's
//! instructions are guidance for the agent, framed as such by `framing`, and the supervisor
//! answers the agent's requests whatever the role says.

pub use crate::config::{RoleDefaults, RoleSpec};
use crate::core::Core;
use crate::core::request::{MAX_TASK_TIMEOUT, SubmitRequest, WorkspaceRequest, validate_model};
use legate_core::{Error, ErrorCode, Result, RoleBase, TaskMode, TaskRole};
use serde::Serialize;
use std::time::Duration;

/// The longest role name, in characters (lowercase ASCII letters, digits and hyphens).
pub const MAX_ROLE_NAME_CHARS: usize = 32;
/// The longest description of a configured role, in characters.
pub const MAX_ROLE_DESCRIPTION_CHARS: usize = 500;
/// The longest instructions of a configured role, in characters.
pub const MAX_ROLE_INSTRUCTIONS_CHARS: usize = 8000;
/// At most this many configured roles.
pub const MAX_CUSTOM_ROLES: usize = 20;
/// The largest output schema a role's defaults may hold, serialized, in bytes (the same limit
/// as a request's JSON Schema).
const MAX_OUTPUT_SCHEMA_BYTES: usize = 64 * 1024;

/// One role as listed to a caller (the MCP `roles` tool, `legate roles`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RoleInfo {
    /// Its name, to pass as `role`.
    pub name: String,
    /// What it is built on.
    pub base: RoleBase,
    /// Whether it is one of the three built-in roles.
    pub builtin: bool,
    /// What it is for.
    pub description: String,
    /// Whether its tasks are read-only (a planner or reviewer base).
    pub read_only: bool,
    /// How long its instructions are, in characters (0 for a built-in role).
    pub instructions_chars: usize,
    /// What it fills in when a request leaves a field out.
    pub defaults: RoleDefaults,
}

/// The roles this engine knows: the built-ins, then the configured ones in name order.
#[derive(Debug, Clone, Default)]
pub struct Roles {
    custom: Vec<RoleSpec>,
}

fn builtin_description(base: RoleBase) -> &'static str {
    match base {
        RoleBase::Implementer => {
            "Changes files in its workspace to carry out the task (the default)."
        }
        RoleBase::Planner => {
            "Reads the workspace and returns a plan report: steps with files and an observable check; it never writes."
        }
        RoleBase::Reviewer => {
            "Reads the workspace and returns a review report whose citations Legate checks; it never writes."
        }
    }
}

const BUILTINS: [RoleBase; 3] = [RoleBase::Implementer, RoleBase::Planner, RoleBase::Reviewer];

fn invalid(role: &str, what: impl std::fmt::Display) -> Error {
    Error::new(ErrorCode::ConfigInvalid, format!("roles.{role}: {what}"))
}

impl Roles {
    /// The catalog of `custom` roles, each checked: `CONFIG_INVALID` naming the first role
    /// that breaks a limit. `agents` are the configured agents' names, which a role's default
    /// agent must be one of.
    pub fn new<'a>(
        custom: Vec<RoleSpec>,
        agents: impl IntoIterator<Item = &'a str> + Clone,
    ) -> Result<Self> {
        if custom.len() > MAX_CUSTOM_ROLES {
            return Err(Error::new(
                ErrorCode::ConfigInvalid,
                format!(
                    "at most {MAX_CUSTOM_ROLES} roles may be configured; {} are",
                    custom.len()
                ),
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        for spec in &custom {
            check_spec(spec, agents.clone())?;
            if !seen.insert(spec.name.as_str()) {
                return Err(invalid(&spec.name, "is declared twice"));
            }
        }
        let mut custom = custom;
        custom.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(Self { custom })
    }

    /// Every role: the built-ins first, then the configured ones by name.
    pub fn list(&self) -> Vec<RoleInfo> {
        let builtins = BUILTINS.iter().map(|&base| RoleInfo {
            name: base.as_str().to_string(),
            base,
            builtin: true,
            description: builtin_description(base).to_string(),
            read_only: base.is_read_only(),
            instructions_chars: 0,
            defaults: RoleDefaults::default(),
        });
        let custom = self.custom.iter().map(|s| RoleInfo {
            name: s.name.clone(),
            base: s.base,
            builtin: false,
            description: s.description.clone().unwrap_or_default(),
            read_only: s.base.is_read_only(),
            instructions_chars: s.instructions.chars().count(),
            defaults: s.defaults.clone(),
        });
        builtins.chain(custom).collect()
    }

    /// Every role's name, built-ins first (for a schema's enum).
    pub fn names(&self) -> Vec<String> {
        self.list().into_iter().map(|r| r.name).collect()
    }

    /// The role called `name` as a task stores it, with its defaults; `ROLE_NOT_FOUND` for a
    /// name no role has.
    pub fn resolve(&self, name: &str) -> Result<(TaskRole, RoleDefaults)> {
        if let Some(&base) = BUILTINS.iter().find(|b| b.as_str() == name) {
            return Ok((TaskRole::builtin(base), RoleDefaults::default()));
        }
        match self.custom.iter().find(|s| s.name == name) {
            Some(s) => Ok((
                TaskRole {
                    name: s.name.clone(),
                    base: s.base,
                    instructions: s.instructions.clone(),
                },
                s.defaults.clone(),
            )),
            None => Err(Error::new(
                ErrorCode::RoleNotFound,
                format!(
                    "no role is called {:?}; the roles are {}",
                    excerpt(name),
                    self.names().join(", ")
                ),
            )),
        }
    }
}

/// At most 40 characters of a caller's role name, for an error message.
fn excerpt(name: &str) -> String {
    name.chars().take(40).collect()
}

/// A role name is 1 to 32 lowercase ASCII letters, digits and hyphens.
pub fn valid_role_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_ROLE_NAME_CHARS
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

fn check_spec<'a>(spec: &RoleSpec, agents: impl IntoIterator<Item = &'a str>) -> Result<()> {
    let name = &spec.name;
    if !valid_role_name(name) {
        return Err(Error::new(
            ErrorCode::ConfigInvalid,
            format!(
                "role name {name:?} must be 1 to {MAX_ROLE_NAME_CHARS} lowercase letters, digits or hyphens"
            ),
        ));
    }
    if BUILTINS.iter().any(|b| b.as_str() == name) {
        return Err(invalid(
            name,
            "is a built-in role and cannot be replaced; choose another name",
        ));
    }
    if let Some(d) = &spec.description
        && d.chars().count() > MAX_ROLE_DESCRIPTION_CHARS
    {
        return Err(invalid(
            name,
            format_args!("description is longer than {MAX_ROLE_DESCRIPTION_CHARS} characters"),
        ));
    }
    if spec.instructions.trim().is_empty() {
        return Err(invalid(name, "instructions must not be empty"));
    }
    let chars = spec.instructions.chars().count();
    if chars > MAX_ROLE_INSTRUCTIONS_CHARS {
        return Err(invalid(
            name,
            format_args!(
                "instructions are {chars} characters; the limit is {MAX_ROLE_INSTRUCTIONS_CHARS}"
            ),
        ));
    }
    let d = &spec.defaults;
    if let Some(agent) = &d.agent
        && !agents.into_iter().any(|a| a == agent)
    {
        return Err(invalid(
            name,
            format_args!("defaults.agent {agent:?} is not a configured agent"),
        ));
    }
    if let Some(model) = &d.model {
        // The cause is a validation sentence, folded into the role's (no error to keep).
        validate_model(model).map_err(|e| invalid(name, format_args!("defaults.model: {e}")))?;
    }
    if let Some(paths) = &d.include_paths
        && paths.is_empty()
    {
        return Err(invalid(
            name,
            "defaults.includePaths is empty; leave it out to copy the whole project",
        ));
    }
    if let Some(s) = d.timeout_seconds
        && (s == 0 || s > MAX_TASK_TIMEOUT.as_secs())
    {
        return Err(invalid(
            name,
            format_args!(
                "defaults.timeoutSeconds must be 1 to {}",
                MAX_TASK_TIMEOUT.as_secs()
            ),
        ));
    }
    if spec.base.is_read_only() && d.mode == Some(TaskMode::Write) {
        return Err(invalid(
            name,
            format_args!(
                "a {} base is read-only; defaults.mode cannot be write",
                spec.base
            ),
        ));
    }
    check_defaults(name, d)?;
    if let Some(schema) = &d.output_schema {
        if spec.base != RoleBase::Implementer {
            return Err(invalid(
                name,
                format_args!(
                    "defaults.outputSchema needs an implementer base; a {} keeps its own report contract",
                    spec.base
                ),
            ));
        }
        if !schema.is_object() || schema.to_string().len() > MAX_OUTPUT_SCHEMA_BYTES {
            return Err(invalid(
                name,
                format_args!(
                    "defaults.outputSchema must be a JSON object of at most {MAX_OUTPUT_SCHEMA_BYTES} bytes"
                ),
            ));
        }
    }
    Ok(())
}

/// The defaults a role may give a task's controls, checked for their shape at start (each is
/// checked again, like a request's own, at every submit: the tool ceiling, the catalogue, the
/// memory entries and the skills' files, and whether the agent takes an effort).
fn check_defaults(name: &str, d: &RoleDefaults) -> Result<()> {
    if let Some(effort) = &d.effort
        && legate_core::Effort::parse(effort).is_none()
    {
        return Err(invalid(
            name,
            format_args!("defaults.effort must be one of low, medium, high, xhigh, max"),
        ));
    }
    let empty = [
        ("skills", d.skills.as_ref().is_some_and(Vec::is_empty)),
        (
            "artifactPaths",
            d.artifact_paths.as_ref().is_some_and(Vec::is_empty),
        ),
        (
            "allowedTools",
            d.allowed_tools.as_ref().is_some_and(Vec::is_empty),
        ),
    ];
    if let Some((field, _)) = empty.iter().find(|(_, e)| *e) {
        return Err(invalid(
            name,
            format_args!("defaults.{field} is empty; leave it out instead"),
        ));
    }
    if let Some(paths) = &d.artifact_paths {
        let max = legate_core::delivery::MAX_ARTIFACT_PATHS;
        if paths.len() > max {
            return Err(invalid(
                name,
                format_args!("defaults.artifactPaths names more than {max} paths"),
            ));
        }
        if let Some(why) = paths.iter().find_map(|p| legate_workspace::path_problem(p)) {
            return Err(invalid(
                name,
                format_args!("a path of defaults.artifactPaths {why}"),
            ));
        }
    }
    Ok(())
}

impl Core {
    /// Resolves `request`'s role and fills in what its defaults give, in place; returns the
    /// role the task is stored with (`None` for the plain implementer). A conversation keeps
    /// the role its latest task was stored with, even if the configuration changed since:
    /// naming another is `INVALID_INPUT`. After this the request's mode is set.
    pub(crate) fn apply_role(&self, request: &mut SubmitRequest) -> Result<Option<TaskRole>> {
        let kept = match &request.context_id {
            Some(c) => match self.latest_task(c) {
                Ok(last) => Some(last.role),
                Err(e) if e.code == ErrorCode::ContextNotFound => None,
                Err(e) => return Err(e),
            },
            None => None,
        };
        let (role, defaults) = match kept {
            Some(stored) => {
                let stored_name = stored
                    .as_ref()
                    .map_or(RoleBase::Implementer.as_str(), |r| r.name.as_str());
                if let Some(asked) = &request.role
                    && asked != stored_name
                {
                    return Err(Error::invalid_input(format!(
                        "this conversation is a {stored_name} and asked for {:?}: a conversation keeps its role; hand off to another role instead",
                        excerpt(asked)
                    )));
                }
                // The stored snapshot, without today's defaults: a continuation keeps its
                // agent, model and timeout from the conversation.
                (stored, RoleDefaults::default())
            }
            None => match &request.role {
                None => (None, RoleDefaults::default()),
                Some(name) => {
                    let (role, defaults) = self.roles().resolve(name)?;
                    (Some(role), defaults)
                }
            },
        };
        let base = role.as_ref().map_or(RoleBase::Implementer, |r| r.base);
        let role_name = role
            .as_ref()
            .map_or(RoleBase::Implementer.as_str(), |r| r.name.as_str())
            .to_string();
        fill(request, defaults);
        let mode = match request.mode {
            Some(TaskMode::Write) if base.is_read_only() => {
                return Err(Error::new(
                    ErrorCode::ModeNotAllowed,
                    format!(
                        "role {role_name} (a {base}) is read-only; omit mode or pass \"read-only\""
                    ),
                ));
            }
            Some(mode) => mode,
            None if base.is_read_only() => TaskMode::ReadOnly,
            None => TaskMode::Write,
        };
        request.mode = Some(mode);
        if base.is_read_only() && request.json_schema.is_some() {
            return Err(Error::invalid_input(format!(
                "role {role_name} (a {base}) answers with its own report; a JSON Schema needs an implementer role"
            )));
        }
        // The plain implementer is stored as no role, as every task before roles was.
        Ok(role.filter(|r| *r != TaskRole::builtin(RoleBase::Implementer)))
    }
}

/// Fills each field `request` left out from `defaults`. An explicit value replaces the whole
/// default: lists are never merged.
fn fill(request: &mut SubmitRequest, defaults: RoleDefaults) {
    let RoleDefaults {
        agent,
        model,
        include_paths,
        timeout_seconds,
        mode,
        output_schema,
        effort,
        skills,
        artifact_paths,
        delivery_mode,
        allowed_tools,
        mcp_servers,
        memory,
    } = defaults;
    if request.agent.is_none() {
        request.agent = agent;
    }
    if request.model.is_none() {
        request.model = model;
    }
    if let (
        WorkspaceRequest::Copy {
            include_paths: asked,
            ..
        },
        Some(paths),
    ) = (&mut request.workspace, include_paths)
        && asked.is_empty()
    {
        *asked = paths;
    }
    if request.timeout.is_none() {
        request.timeout = timeout_seconds.map(Duration::from_secs);
    }
    if request.mode.is_none() {
        request.mode = mode;
    }
    if request.json_schema.is_none() {
        request.json_schema = output_schema;
    }
    if request.effort.is_none() {
        // Checked to parse at start (`check_defaults`).
        request.effort = effort.as_deref().and_then(legate_core::Effort::parse);
    }
    // Like includePaths, skills are staged in a copy only: elsewhere there is nothing to fill.
    if let Some(skills) = skills
        && request.skills.is_empty()
        && matches!(request.workspace, WorkspaceRequest::Copy { .. })
    {
        request.skills = skills;
    }
    if let Some(paths) = artifact_paths
        && request.artifact_paths.is_empty()
    {
        request.artifact_paths = paths;
    }
    if request.delivery_mode.is_none() {
        request.delivery_mode = delivery_mode;
    }
    if request.allowed_tools.is_none() {
        request.allowed_tools = allowed_tools;
    }
    if request.mcp_servers.is_none() {
        request.mcp_servers = mcp_servers;
    }
    if request.memory.is_none() {
        request.memory = memory;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
