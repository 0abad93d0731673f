//! `[agents.NAME] max_processes` and `max_memory_mb`: how much of the machine an agent's local
//! process tree may take (`legate_core::ProcessLimits`).
//!
//! This module only reads and bounds the two keys over the agent's base (or the defaults);
//! `legate-confine` enforces them. Every error is `CONFIG_INVALID` and names its key.

use crate::{Result, refuse};
use legate_core::limits::{
    MAX_MAX_MEMORY_MIB, MAX_MAX_PROCESSES, MIN_MAX_MEMORY_MIB, MIN_MAX_PROCESSES,
};
use legate_core::{AgentSpec, ProcessLimits};

/// Agent `name`'s limits: `max_processes` and `max_memory_mb` (MiB) when given, else its
/// base's, else the defaults; each within its bounds.
pub(crate) fn resolve(
    name: &str,
    max_processes: Option<u32>,
    max_memory_mb: Option<u64>,
    base: Option<&AgentSpec>,
) -> Result<ProcessLimits> {
    let mut limits = base.map(|b| b.limits).unwrap_or_default();
    if let Some(n) = max_processes {
        if !(MIN_MAX_PROCESSES..=MAX_MAX_PROCESSES).contains(&n) {
            refuse!(
                "agents.{name}.max_processes must be {MIN_MAX_PROCESSES} to {MAX_MAX_PROCESSES} (got {n})"
            );
        }
        limits.max_processes = n;
    }
    if let Some(mb) = max_memory_mb {
        if !(MIN_MAX_MEMORY_MIB..=MAX_MAX_MEMORY_MIB).contains(&mb) {
            refuse!(
                "agents.{name}.max_memory_mb must be {MIN_MAX_MEMORY_MIB} to {MAX_MAX_MEMORY_MIB} (got {mb})"
            );
        }
        limits.max_memory_mib = mb;
    }
    Ok(limits)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use crate::config::resolve_text;

    #[test]
    fn an_agents_limits_default_and_can_be_set() {
        let c = resolve_text("", &[]).unwrap();
        assert!(c.agents["revisor"].limits.is_default());
        let c = resolve_text(
            "[agents.revisor]\nmax_processes = 64\nmax_memory_mb = 512\n[agents.claude]\nmax_memory_mb = 1024\n",
            &[],
        )
        .unwrap();
        assert_eq!(c.agents["revisor"].limits.max_processes, 64);
        assert_eq!(c.agents["revisor"].limits.max_memory_mib, 512);
        assert_eq!(c.agents["claude"].limits.max_memory_mib, 1024);
        assert_eq!(
            c.agents["claude"].limits.max_processes,
            legate_core::limits::DEFAULT_MAX_PROCESSES
        );
    }

    #[test]
    fn limits_out_of_bounds_or_for_a_remote_or_pod_agent_are_refused() {
        for (text, key) in [
            (
                "[agents.revisor]\nmax_processes = 3\n",
                "agents.revisor.max_processes",
            ),
            (
                "[agents.revisor]\nmax_processes = 4194305\n",
                "agents.revisor.max_processes",
            ),
            (
                "[agents.revisor]\nmax_memory_mb = 1\n",
                "agents.revisor.max_memory_mb",
            ),
            (
                "[agents.revisor]\nmax_memory_mb = 9999999999999\n",
                "agents.revisor.max_memory_mb",
            ),
            ("[agents.revisor]\nmax_processes = -1\n", "max_processes"),
            (
                "[agents.far]\nurl = \"https://far.example\"\ntoken_env = \"T\"\nmax_processes = 64\n",
                "agents.far.max_processes",
            ),
            (
                "[kubernetes]\nnamespace = \"n\"\n[agents.revisor]\nruntime = \"kubernetes\"\nimage = \"i:1\"\nmax_memory_mb = 64\n",
                "agents.revisor.max_processes",
            ),
        ] {
            let e = resolve_text(text, &[]).unwrap_err().to_string();
            assert!(e.contains(key), "{text}: {e}");
        }
    }
}
