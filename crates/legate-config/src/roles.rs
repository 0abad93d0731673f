//! The `[roles.NAME]` tables of `legate.toml`: configured roles, each with a `base`, optional
//! `description`, `instructions` and `[roles.NAME.defaults]`.
//!
//! This module only reads the tables into the engine's `RoleSpec`s and checks them with the
//! engine's own catalog (`legate_engine::Roles::new`), so that a bad role stops `legate` at
//! start with `CONFIG_INVALID` naming it. Defaults another part of Legate does not honour yet
//! (`effort`, `skills`, `artifactPaths`, `deliveryMode`, `allowedTools`, `mcpServers`,
//! `memory`) are parsed and refused as not supported yet, never silently ignored. The rules
//! that use roles live in the engine.

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
    // Parsed so that they are refused by name below.
    effort: Option<toml::Value>,
    skills: Option<toml::Value>,
    #[serde(alias = "artifactPaths")]
    artifact_paths: Option<toml::Value>,
    #[serde(alias = "deliveryMode")]
    delivery_mode: Option<toml::Value>,
    #[serde(alias = "allowedTools")]
    allowed_tools: Option<toml::Value>,
    #[serde(alias = "mcpServers")]
    mcp_servers: Option<toml::Value>,
    memory: Option<toml::Value>,
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
    let unsupported = [
        ("effort", d.effort.is_some()),
        ("skills", d.skills.is_some()),
        ("artifactPaths", d.artifact_paths.is_some()),
        ("deliveryMode", d.delivery_mode.is_some()),
        ("allowedTools", d.allowed_tools.is_some()),
        ("mcpServers", d.mcp_servers.is_some()),
        ("memory", d.memory.is_some()),
    ];
    if let Some((key, _)) = unsupported.iter().find(|(_, set)| *set) {
        refuse!(
            "roles.{name}.defaults.{key} is not supported yet; remove it (Legate does not honour it for any role today)"
        );
    }
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
                "roles.x.defaults.deliveryMode is not supported yet",
            ),
            (
                "[roles.x]\nbase = \"planner\"\ninstructions = \"i\"\ndefaults = { memory = true }",
                "roles.x.defaults.memory is not supported yet",
            ),
            (
                "[roles.x]\nbase = \"planner\"\ninstructions = \"i\"\ndefaults = { allowed_tools = [] }",
                "roles.x.defaults.allowedTools is not supported yet",
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
