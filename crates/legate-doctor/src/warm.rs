//! The warm sessions check: what `[agents.NAME] warm` asks for, against what a long-lived
//! Legate process can keep ready. The sessions themselves live in that process (`legate
//! serve`, `legate mcp`), so this reads the configuration and the agents' own checks only;
//! it never starts an agent or asks a running process.

use crate::{Check, Status};

/// One agent's `warm` setting, with whether its own check found it starting (`None` when the
/// agents were not started: `legate doctor --no-probe`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WarmAgent {
    /// The agent's name.
    pub name: String,
    /// How many sessions of it are to be kept ready.
    pub warm: usize,
    /// Whether it starts.
    pub starts: Option<bool>,
}

impl Check {
    /// The warm sessions check, or `None` when no agent keeps any. It warns when an agent
    /// kept warm does not start (none of its sessions is ever ready; the process retries it
    /// with a growing delay), and when the sessions asked for pass `max_idle_sessions`, which
    /// counts them with the conversations' idle sessions (at most that many are kept).
    pub fn warm(agents: &[WarmAgent], max_idle_sessions: usize) -> Option<Self> {
        let kept: Vec<&WarmAgent> = agents.iter().filter(|a| a.warm > 0).collect();
        if kept.is_empty() {
            return None;
        }
        let total: usize = kept.iter().map(|a| a.warm).sum();
        let listing = kept
            .iter()
            .map(|a| format!("{} {}", a.name, a.warm))
            .collect::<Vec<_>>()
            .join(", ");
        let failing: Vec<&str> = kept
            .iter()
            .filter(|a| a.starts == Some(false))
            .map(|a| a.name.as_str())
            .collect();
        let name = "warm sessions";
        if !failing.is_empty() {
            let agents = failing.join(", ");
            let (does, its, check) = if failing.len() == 1 {
                ("does", "its", "its check")
            } else {
                ("do", "their", "their checks")
            };
            return Some(Self::problem(
                Status::Warn,
                name,
                format!(
                    "{listing} asked for; {agents} {does} not start, so none of {its} sessions is ever ready (each process tries again after 1 s, doubling up to 60 s), and {its} tasks start {} themselves",
                    if failing.len() == 1 { "it" } else { "them" }
                ),
                format!("fix {agents} ({check} above), or set {its} warm to 0"),
            ));
        }
        if total > max_idle_sessions {
            return Some(Self::problem(
                Status::Warn,
                name,
                format!(
                    "{listing} asked for, {total} in all, but max_idle_sessions is {max_idle_sessions} and counts them with the conversations' idle sessions: at most {max_idle_sessions} are kept"
                ),
                format!(
                    "raise max_idle_sessions to at least {total} plus the conversations you keep idle, or lower warm"
                ),
            ));
        }
        Some(Self::ok(
            name,
            format!(
                "{listing} kept ready by each legate serve or legate mcp once started ({total} of max_idle_sessions {max_idle_sessions}, shared with idle conversations){}",
                if kept.iter().any(|a| a.starts.is_none()) {
                    "; whether each agent starts was not checked (--no-probe)"
                } else {
                    ""
                }
            ),
        ))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn agent(name: &str, warm: usize, starts: Option<bool>) -> WarmAgent {
        WarmAgent {
            name: name.into(),
            warm,
            starts,
        }
    }

    #[test]
    fn no_check_when_no_agent_is_kept_warm() {
        assert_eq!(Check::warm(&[], 16), None);
        assert_eq!(Check::warm(&[agent("claude", 0, Some(false))], 16), None);
    }

    #[test]
    fn warm_agents_that_start_within_the_idle_cap_hold() {
        let c = Check::warm(
            &[
                agent("claude", 2, Some(true)),
                agent("revisor", 0, Some(false)),
                agent("codex", 1, Some(true)),
            ],
            3,
        )
        .unwrap();
        assert_eq!(c.status, Status::Ok, "{c:?}");
        assert!(c.found.starts_with("claude 2, codex 1 kept ready"), "{c:?}");
        assert!(c.found.contains("3 of max_idle_sessions 3"), "{c:?}");
        assert!(!c.found.contains("--no-probe"), "{c:?}");
        assert_eq!(c.fix, None);
        let unprobed = Check::warm(&[agent("claude", 1, None)], 16).unwrap();
        assert_eq!(unprobed.status, Status::Ok);
        assert!(unprobed.found.contains("--no-probe"), "{unprobed:?}");
    }

    #[test]
    fn more_warm_sessions_than_the_idle_cap_warn() {
        let c = Check::warm(
            &[agent("claude", 3, Some(true)), agent("codex", 2, None)],
            4,
        )
        .unwrap();
        assert_eq!(c.status, Status::Warn, "{c:?}");
        assert!(c.found.contains("5 in all"), "{c:?}");
        assert!(c.found.contains("at most 4 are kept"), "{c:?}");
        assert!(c.fix.unwrap().contains("at least 5"));
    }

    #[test]
    fn a_warm_agent_that_does_not_start_warns_before_the_cap() {
        let c = Check::warm(
            &[
                agent("claude", 8, Some(false)),
                agent("codex", 1, Some(true)),
            ],
            4,
        )
        .unwrap();
        assert_eq!(c.status, Status::Warn, "{c:?}");
        assert!(c.found.contains("claude does not start"), "{c:?}");
        assert!(!c.found.contains("codex does not"), "{c:?}");
        assert!(c.fix.unwrap().starts_with("fix claude (its check above)"));
        let both = Check::warm(
            &[
                agent("claude", 1, Some(false)),
                agent("codex", 1, Some(false)),
            ],
            4,
        )
        .unwrap();
        assert!(
            both.found.contains("claude, codex do not start"),
            "{both:?}"
        );
        assert_eq!(
            both.fix.as_deref(),
            Some("fix claude, codex (their checks above), or set their warm to 0")
        );
    }
}
