//! The `[roles.NAME]` tables of `legate.toml`: configured roles, each with a `base`, optional
//! `description`, `instructions` and `[roles.NAME.defaults]`.
//!
//! This module only reads the tables into the engine's `RoleSpec`s and checks them with the
//! engine's own catalog (`legate_engine::Roles::new`), so that a bad role stops `legate` at
//! start with `CONFIG_INVALID` naming it. Every default of the seed is read (`effort`,
//! `skills`, `artifactPaths`, `deliveryMode`, `allowedTools`, `mcpServers` and `memory`
//! included); none is silently ignored. The rules that use roles live in the engine.

use crate::{Result, refuse};
use legate_core::RoleBase;
use legate_engine::{RoleDefaults, RoleSpec};
use serde::Deserialize;
use std::collections::BTreeMap;

/// `[roles.NAME]`. Unknown keys are errors.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoleTable {
    base: Option<String>,
    description: Option<String>,
    instructions: Option<String>,
    #[serde(default)]
    defaults: DefaultsTable,
}

/// `[roles.NAME.defaults]`: snake_case or the seed's camelCase spellings. Unknown keys are
/// errors.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct DefaultsTable {
    agent: Option<String>,
    model: Option<String>,
    #[serde(alias = "includePaths")]
    include_paths: Option<Vec<String>>,
    #[serde(alias = "timeoutSeconds", alias = "timeout_seconds")]
    timeout_secs: Option<u64>,
    mode: Option<String>,
    #[serde(alias = "outputSchema")]
    output_schema: Option<toml::Value>,
    effort: Option<String>,
    skills: Option<Vec<legate_core::SkillPackage>>,
    #[serde(alias = "artifactPaths")]
    artifact_paths: Option<Vec<String>>,
    #[serde(alias = "deliveryMode")]
    delivery_mode: Option<String>,
    #[serde(alias = "allowedTools")]
    allowed_tools: Option<Vec<String>>,
    #[serde(alias = "mcpServers")]
    mcp_servers: Option<Vec<legate_core::McpSelection>>,
    memory: Option<Vec<legate_core::MemorySelection>>,
}

/// The configured roles, checked with the engine's catalog against the configured agents.
pub fn resolve<'a>(
    tables: BTreeMap<String, RoleTable>,
    agents: impl IntoIterator<Item = &'a str> + Clone,
) -> Result<Vec<RoleSpec>> {
    let mut specs = Vec::with_capacity(tables.len());
    for (name, table) in tables {
        specs.push(spec(name, table)?);
    }
    // The engine checks these again when it starts; checking here names the file's role
    // before anything else happens.
    legate_engine::Roles::new(specs.clone(), agents)?;
    Ok(specs)
}

fn spec(name: String, t: RoleTable) -> Result<RoleSpec> {
    let base = match t.base.as_deref() {
        None => {
            refuse!("roles.{name}.base is missing (implementer, planner or reviewer)")
        }
        Some(b) => match RoleBase::parse(b) {
            Some(base) => base,
            None => refuse!(
                "roles.{name}.base must be implementer, planner or reviewer (got {:?})",
                excerpt(b)
            ),
        },
    };
    let Some(instructions) = t.instructions else {
        refuse!("roles.{name}.instructions is missing");
    };
    let d = t.defaults;
    let delivery_mode = match d.delivery_mode.as_deref() {
        None => None,
        Some(m) => match legate_core::DeliveryMode::parse(m) {
            Some(mode) => Some(mode),
            None => refuse!(
                "roles.{name}.defaults.deliveryMode must be events or messages (got {:?})",
                excerpt(m)
            ),
        },
    };
    let allowed_tools = match d.allowed_tools {
        None => None,
        Some(kinds) => {
            let mut out = Vec::with_capacity(kinds.len());
            for k in kinds {
                match legate_core::ToolKind::parse(&k) {
                    Some(kind) => out.push(kind),
                    None => refuse!(
                        "roles.{name}.defaults.allowedTools names {:?}, which is not a tool kind",
                        excerpt(&k)
                    ),
                }
            }
            Some(out)
        }
    };
    let mode = match d.mode.as_deref() {
        None => None,
        Some(m) => match legate_core::TaskMode::parse(m) {
            Some(mode) => Some(mode),
            None => refuse!(
                "roles.{name}.defaults.mode must be write or read-only (got {:?})",
                excerpt(m)
            ),
        },
    };
    let output_schema = match d.output_schema {
        None => None,
        Some(v) => Some(serde_json::to_value(v).map_err(|e| {
            crate::Error::invalid_because(
                format!("roles.{name}.defaults.outputSchema is not JSON"),
                e,
            )
        })?),
    };
    Ok(RoleSpec {
        name,
        base,
        description: t.description,
        instructions,
        defaults: RoleDefaults {
            agent: d.agent,
            model: d.model,
            include_paths: d.include_paths,
            timeout_seconds: d.timeout_secs,
            mode,
            output_schema,
            effort: d.effort,
            skills: d.skills,
            artifact_paths: d.artifact_paths,
            delivery_mode,
            allowed_tools,
            mcp_servers: d.mcp_servers,
            memory: d.memory,
        },
    })
}

/// At most 40 characters of a hostile value, for an error message.
fn excerpt(s: &str) -> String {
    s.chars().take(40).collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn roles(text: &str) -> Result<Vec<RoleSpec>> {
        #[derive(Deserialize)]
        struct F {
            roles: BTreeMap<String, RoleTable>,
        }
        let f: F = crate::config::parse(text)?;
        resolve(f.roles, ["revisor", "claude"])
    }

    fn refused(text: &str) -> String {
        format!("{:#}", roles(text).unwrap_err())
    }

    #[test]
    fn every_default_of_the_seed_is_read() {
        let specs = roles(
            r#"
            [roles.scribe]
            base = "implementer"
            instructions = "Write notes."
            [roles.scribe.defaults]
            effort = "high"
            artifactPaths = ["notes.md"]
            deliveryMode = "messages"
            allowedTools = ["read", "edit"]
            mcpServers = [{ serverId = "docs", tools = ["search"] }]
            memory = [{ specialist = "scribe", sha256 = "00" }]
            skills = [{ name = "style", content = "Use short sentences." }]
            "#,
        )
        .unwrap();
        let d = &specs[0].defaults;
        assert_eq!(d.effort.as_deref(), Some("high"));
        assert_eq!(d.artifact_paths.as_deref().unwrap(), ["notes.md"]);
        assert_eq!(d.delivery_mode, Some(legate_core::DeliveryMode::Messages));
        assert_eq!(
            d.allowed_tools.as_deref().unwrap(),
            [legate_core::ToolKind::Read, legate_core::ToolKind::Edit]
        );
        assert_eq!(d.mcp_servers.as_ref().unwrap()[0].server_id, "docs");
        assert_eq!(d.memory.as_ref().unwrap()[0].specialist, "scribe");
        assert_eq!(d.skills.as_ref().unwrap()[0].name, "style");
    }

    #[test]
    fn a_role_parses_with_either_spelling_of_its_defaults() {
        let specs = roles(
            r#"
            [roles.security-review]
            base = "reviewer"
            description = "access control"
            instructions = "Check access control."
            [roles.security-review.defaults]
            agent = "claude"
            includePaths = ["src"]
            timeoutSeconds = 600
            [roles.fast]
            base = "implementer"
            instructions = "Be quick."
            defaults = { include_paths = ["a", "b"], timeout_secs = 60, mode = "read-only", model = "auto", output_schema = { type = "object" } }
            "#,
        )
        .unwrap();
        assert_eq!(specs.len(), 2);
        let fast = specs.iter().find(|s| s.name == "fast").unwrap();
        assert_eq!(fast.defaults.include_paths.as_deref().unwrap(), ["a", "b"]);
        assert_eq!(fast.defaults.timeout_seconds, Some(60));
        assert_eq!(fast.defaults.mode, Some(legate_core::TaskMode::ReadOnly));
        assert_eq!(
            fast.defaults.output_schema,
            Some(serde_json::json!({"type": "object"}))
        );
        let review = specs.iter().find(|s| s.name == "security-review").unwrap();
        assert_eq!(review.base, RoleBase::Reviewer);
        assert_eq!(review.defaults.agent.as_deref(), Some("claude"));
    }

    #[test]
    fn every_refusal_is_config_invalid_and_names_the_role() {
        for (text, says) in [
            ("[roles.x]\ninstructions = \"i\"", "roles.x.base is missing"),
            (
                "[roles.x]\nbase = \"boss\"\ninstructions = \"i\"",
                "roles.x.base must be",
            ),
            (
                "[roles.x]\nbase = \"planner\"",
                "roles.x.instructions is missing",
            ),
            (
                "[roles.x]\nbase = \"planner\"\ninstructions = \"\"",
                "roles.x: instructions must not be empty",
            ),
            (
                "[roles.planner]\nbase = \"planner\"\ninstructions = \"i\"",
                "roles.planner: is a built-in role",
            ),
            (
                "[roles.X]\nbase = \"planner\"\ninstructions = \"i\"",
                "\"X\" must be 1 to 32",
            ),
            (
                "[roles.x]\nbase = \"planner\"\ninstructions = \"i\"\ndefaults = { mode = \"write\" }",
                "roles.x: a planner base is read-only",
            ),
            (
                "[roles.x]\nbase = \"planner\"\ninstructions = \"i\"\ndefaults = { mode = \"rw\" }",
                "roles.x.defaults.mode must be",
            ),
            (
                "[roles.x]\nbase = \"planner\"\ninstructions = \"i\"\ndefaults = { deliveryMode = \"inline\" }",
                "roles.x.defaults.deliveryMode must be events or messages",
            ),
            (
                "[roles.x]\nbase = \"planner\"\ninstructions = \"i\"\ndefaults = { memory = true }",
                "memory",
            ),
            (
                "[roles.x]\nbase = \"planner\"\ninstructions = \"i\"\ndefaults = { allowed_tools = [] }",
                "roles.x: defaults.allowedTools is empty",
            ),
            (
                "[roles.x]\nbase = \"planner\"\ninstructions = \"i\"\ndefaults = { allowed_tools = [\"teleport\"] }",
                "roles.x.defaults.allowedTools names \"teleport\"",
            ),
            (
                "[roles.x]\nbase = \"planner\"\ninstructions = \"i\"\ndefaults = { effort = \"Very High!\" }",
                "roles.x: defaults.effort must be",
            ),
            (
                "[roles.x]\nbase = \"planner\"\ninstructions = \"i\"\ndefaults = { artifactPaths = [\"../out\"] }",
                "roles.x: a path of defaults.artifactPaths",
            ),
            (
                "[roles.x]\nbase = \"planner\"\ninstructions = \"i\"\ndefaults = { agent = \"nobody\" }",
                "roles.x: defaults.agent \"nobody\"",
            ),
            (
                "[roles.x]\nbase = \"planner\"\ninstructions = \"i\"\ncolour = \"red\"",
                "unknown field `colour`",
            ),
        ] {
            let message = refused(text);
            assert!(message.contains(says), "{text}: {message}");
            if !says.starts_with("unknown") {
                assert!(message.contains("CONFIG_INVALID"), "{message}");
            }
        }
    }
}
