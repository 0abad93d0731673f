//! `[network]` and `[agents.NAME.network]`: the egress policy agents' connections run under.
//!
//! ```toml
//! [network]
//! allow = ["api.example.com", "*.pypi.org:443", "127.0.0.1:11434"]
//! deny = ["*.tracking.example"]
//! unknown = "ask"                 # or "deny" (the default)
//!
//! [agents.claude.network]         # added to [network] for this agent only
//! allow = ["statsig.anthropic.com:443"]
//! ```
//!
//! This module only stacks the parsed tables (`legate_supervisor::network::NetworkConfig`,
//! whose rules are checked as they are read: a bad rule is `CONFIG_INVALID` at its line) into
//! `NetworkRules`s: one for every agent, one per agent with rules of its own. What a rule
//! means and how a connection is decided belong to `legate_supervisor::network`.

use legate_engine::EngineConfig;
use legate_supervisor::network::{NetworkConfig, NetworkRules};
use std::collections::BTreeMap;

/// Sets `c.network` from `[network]` and `c.agent_network` from each agent's own table (its
/// rules added to `[network]`'s, its `unknown` replacing it).
pub(crate) fn apply(
    network: &NetworkConfig,
    agents: BTreeMap<String, NetworkConfig>,
    c: &mut EngineConfig,
) {
    c.network = network.apply(NetworkRules::default(), "network");
    for (name, table) in agents {
        let policy = table.apply(c.network.clone(), &format!("agents.{name}.network"));
        c.agent_network.insert(name, policy);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use legate_core::Decision;
    use legate_supervisor::network::{Destination, NetworkRules};

    fn dest(s: &str) -> Destination {
        Destination::parse_authority(s, None).unwrap()
    }

    /// What `policy` decides for a connection to `authority`.
    fn decision(policy: &NetworkRules, authority: &str) -> Decision {
        policy.decide(&dest(authority)).decision
    }

    #[test]
    fn network_and_an_agents_own_rules() {
        let c = crate::config::resolve_text(
            "[network]\nallow = [\"api.example.com:443\", \"*.pypi.org\"]\ndeny = [\"bad.pypi.org\"]\nunknown = \"ask\"\n\
             [agents.claude.network]\nallow = [\"extra.example:443\"]\n",
            &[],
        )
        .unwrap();
        let all = c.network_for("revisor");
        assert_eq!(decision(&all, "api.example.com:443"), Decision::Allow);
        assert_eq!(decision(&all, "files.pypi.org:443"), Decision::Allow);
        assert_eq!(decision(&all, "bad.pypi.org:443"), Decision::Deny);
        assert_eq!(decision(&all, "other.example:443"), Decision::Ask);
        assert_eq!(decision(&all, "extra.example:443"), Decision::Ask);
        let claude = c.network_for("claude");
        assert_eq!(decision(&claude, "extra.example:443"), Decision::Allow);
        assert_eq!(decision(&claude, "bad.pypi.org:443"), Decision::Deny);
        let ruling = claude.decide(&dest("extra.example:443"));
        assert_eq!(
            ruling.rule_id.as_deref(),
            Some("agents.claude.network.allow[0]")
        );
    }

    #[test]
    fn by_default_nothing_is_allowed_and_bad_rules_are_refused() {
        let c = crate::config::resolve_text("", &[]).unwrap();
        assert_eq!(
            decision(&c.network_for("revisor"), "example.com:443"),
            Decision::Deny
        );
        for (text, key) in [
            ("[network]\nallow = [\"exa mple.com\"]\n", "exa mple.com"),
            ("[network]\ndeny = [\"host:99999\"]\n", "99999"),
            ("[network]\nunknown = \"maybe\"\n", "maybe"),
            ("[network]\nallowed = []\n", "allowed"),
            ("[agents.claude.network]\nallow = [\"a:b\"]\n", "a:b"),
        ] {
            let e = format!("{:#}", crate::config::resolve_text(text, &[]).unwrap_err());
            assert!(e.contains(key), "{text}: {e}");
        }
    }
}
