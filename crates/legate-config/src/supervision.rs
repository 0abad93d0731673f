//! The `[supervision]` table of `legate.toml`: how long an approval waits (`deadline_secs`),
//! the supervising agent asked first (`agent`), how long it may take
//! (`agent_timeout_secs`) and the model it answers with (`model`).
//!
//! This module only reads and validates these settings into the engine's
//! `ApprovalsConfig`; it never decides an approval. Every error is `CONFIG_INVALID` and
//! names its key.

use crate::{Result, refuse};
use legate_engine::EngineConfig;
use serde::Deserialize;
use std::time::Duration;

/// The longest `deadline_secs`: a day. Nothing waits longer for a supervisor.
const MAX_DEADLINE_SECS: u64 = 86_400;

/// `[supervision]`. Unknown keys are errors.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SupervisionTable {
    deadline_secs: Option<u64>,
    agent: Option<String>,
    agent_timeout_secs: Option<u64>,
    model: Option<String>,
}

/// Applies `table` to `engine` (whose agents are already resolved): the deadline within 1 s
/// to a day, the agent a configured one other than the default agent (no caller's task runs
/// on it), its timeout at least 1 s and below the deadline, its model an id (or `auto`) and
/// only with an agent.
pub fn apply(table: SupervisionTable, engine: &mut EngineConfig) -> Result<()> {
    let s = &mut engine.approvals;
    if let Some(secs) = table.deadline_secs {
        if !(1..=MAX_DEADLINE_SECS).contains(&secs) {
            refuse!("supervision.deadline_secs must be 1 to {MAX_DEADLINE_SECS} (got {secs})");
        }
        s.deadline = Duration::from_secs(secs);
    }
    if let Some(secs) = table.agent_timeout_secs {
        if secs == 0 {
            refuse!("supervision.agent_timeout_secs must be at least 1");
        }
        s.agent_timeout = Duration::from_secs(secs);
    }
    if let Some(name) = table.agent {
        if !engine.agents.contains_key(&name) {
            let shown: String = name.chars().take(64).collect();
            refuse!("supervision.agent names {shown:?}, which is not a configured agent");
        }
        if name == engine.default_agent {
            let shown: String = name.chars().take(64).collect();
            refuse!(
                "supervision.agent names the default agent {shown:?}, and no caller's task may run on the supervising agent: set default_agent to another agent, or configure a separate agent to supervise (e.g. [agents.judge] command = \"legate\", args = [\"agent\", \"revisor\"])"
            );
        }
        engine.approvals.agent = Some(name);
    }
    if let Some(m) = table.model {
        if m.trim().is_empty() || m.len() > 128 || m.chars().any(char::is_whitespace) {
            let shown: String = m.chars().take(64).collect();
            refuse!("supervision.model must be a model id or \"auto\" (got {shown:?})");
        }
        if engine.approvals.agent.is_none() {
            refuse!(
                "supervision.model needs supervision.agent: it is the supervising agent's model"
            );
        }
        engine.approvals.model = Some(m);
    }
    let s = &engine.approvals;
    if s.agent.is_some() && s.agent_timeout >= s.deadline {
        refuse!(
            "supervision.agent_timeout_secs ({} s) must be below supervision.deadline_secs ({} s), so a human can still answer when the supervising agent does not",
            s.agent_timeout.as_secs(),
            s.deadline.as_secs()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use legate_core::{AgentKind, AgentSpec};
    use legate_engine::Paths;

    fn engine() -> EngineConfig {
        let mut c = EngineConfig::new(Paths::new("/nonexistent/home"));
        c.agents.insert(
            "judge".into(),
            AgentSpec::command("judge", AgentKind::ACP, "/bin/true"),
        );
        c
    }

    fn applied(text: &str) -> Result<EngineConfig> {
        let table: SupervisionTable = crate::config::parse(text)?;
        let mut c = engine();
        apply(table, &mut c)?;
        Ok(c)
    }

    #[test]
    fn the_defaults_and_the_issue_spelling() {
        let c = applied("").unwrap();
        assert_eq!(c.approvals.deadline, Duration::from_secs(120));
        assert_eq!(c.approvals.agent, None);
        let c = applied("deadline_secs = 120\nagent = \"judge\"\nagent_timeout_secs = 10").unwrap();
        assert_eq!(c.approvals.agent.as_deref(), Some("judge"));
        assert_eq!(c.approvals.agent_timeout, Duration::from_secs(10));
        assert_eq!(c.approvals.model, None);
        let c = applied("agent = \"judge\"\nmodel = \"judge-model-1\"").unwrap();
        assert_eq!(c.approvals.model.as_deref(), Some("judge-model-1"));
    }

    #[test]
    fn an_unknown_agent_or_a_timeout_past_the_deadline_is_config_invalid() {
        let e = applied("agent = \"nobody\"").unwrap_err().to_string();
        assert!(e.starts_with("CONFIG_INVALID: supervision.agent"), "{e}");
        let e = applied("agent = \"judge\"\ndeadline_secs = 10\nagent_timeout_secs = 10")
            .unwrap_err()
            .to_string();
        assert!(e.contains("agent_timeout_secs"), "{e}");
        for bad in [
            "deadline_secs = 0",
            "deadline_secs = 86401",
            "agent_timeout_secs = 0",
            "model = \"m\"",
            "agent = \"judge\"\nmodel = \"two words\"",
            "agent = \"judge\"\nmodel = \"\"",
        ] {
            assert!(
                applied(bad)
                    .unwrap_err()
                    .to_string()
                    .starts_with("CONFIG_INVALID"),
                "{bad}"
            );
        }
        assert!(
            applied("agents = \"judge\"").is_err(),
            "unknown keys are refused"
        );
        // The default agent cannot supervise: every task naming no agent would be refused.
        let table: SupervisionTable = crate::config::parse("agent = \"judge\"").unwrap();
        let mut c = engine();
        c.default_agent = "judge".into();
        let e = apply(table, &mut c).unwrap_err().to_string();
        assert!(e.contains("names the default agent"), "{e}");
    }
}
