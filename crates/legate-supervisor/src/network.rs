//! The network rules: which destinations a confined agent may connect to through Legate's
//! egress proxy.
//!
//! A [`NetworkRules`] holds allow and deny [`HostRule`]s, each with the id the audit trail
//! names it by, and what happens to a destination no rule names ([`Otherwise`]). Layers stack
//! on it in order: the global `[network]` ([`NetworkConfig`]), the hosts the agent's preset
//! needs for its model ([`model_hosts`], [`base_url_rule`]), then per-agent and per-role
//! additions. [`NetworkRules::decide`] rules on one [`Destination`]:
//! * a deny rule that names it wins over any allow rule;
//! * a special address ([`special`]: loopback, private, link-local, …) is refused unless an
//!   allow rule names that exact address; a name rule (even `*`) never allows one, and the
//!   proxy applies the same check to every address a name resolves to
//!   ([`NetworkRules::names_exactly`]);
//! * otherwise an allow rule that names it allows it, and no rule means [`Otherwise`].
//!
//! Pure: this module never resolves a name, never opens a socket and never reads a file.

mod rule;
mod special;

pub use rule::{Destination, Host, HostPattern, HostRule, HostRuleError};
pub use special::{Special, canonical, special};

use legate_core::Decision;
use serde::{Deserialize, Serialize};
use std::net::IpAddr;

legate_core::wire_enum! {
    /// What happens to a destination no rule names: `unknown = "deny" | "ask"`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub enum Otherwise {
        /// Refused (the default).
        #[default]
        Deny => "deny",
        /// Put to a supervisor (a person or the supervising agent) through the approval queue.
        Ask => "ask",
    }
}

/// A rule and the id the audit trail names it by (`network.allow[2]`, `preset:claude`, …).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamedRule {
    /// The rule.
    pub rule: HostRule,
    /// Where it came from.
    pub id: String,
}

/// The network rules of one agent's task.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetworkRules {
    /// Destinations allowed, in order.
    pub allow: Vec<NamedRule>,
    /// Destinations refused, in order; they win over `allow`.
    pub deny: Vec<NamedRule>,
    /// What happens to a destination no rule names.
    pub otherwise: Otherwise,
}

/// The policy's answer for one destination.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkRuling {
    /// Allow, deny, or ask a supervisor (only when no rule names it and `otherwise` is ask).
    pub decision: Decision,
    /// The rule that decided; `None` when none did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_id: Option<String>,
    /// One sentence saying why.
    pub reason: String,
}

/// `[network]` in `legate.toml` (also the shape of a per-agent or per-role addition).
/// Unknown keys are errors.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkConfig {
    /// Destinations allowed.
    #[serde(default)]
    pub allow: Vec<HostRule>,
    /// Destinations refused.
    #[serde(default)]
    pub deny: Vec<HostRule>,
    /// What happens to a destination no rule names; unset keeps the layer below's (deny at
    /// the bottom).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unknown: Option<Otherwise>,
}

impl NetworkConfig {
    /// Stacks this layer on `base`: its rules are appended with ids `SOURCE.allow[i]` and
    /// `SOURCE.deny[i]`, and its `unknown`, when set, replaces the base's.
    pub fn apply(&self, mut base: NetworkRules, source: &str) -> NetworkRules {
        for (i, rule) in self.allow.iter().enumerate() {
            base = base.with_allow(rule.clone(), format!("{source}.allow[{i}]"));
        }
        for (i, rule) in self.deny.iter().enumerate() {
            base = base.with_deny(rule.clone(), format!("{source}.deny[{i}]"));
        }
        if let Some(otherwise) = self.unknown {
            base.otherwise = otherwise;
        }
        base
    }
}

impl NetworkRules {
    /// Rules with none in them.
    pub fn new(otherwise: Otherwise) -> Self {
        Self {
            allow: Vec::new(),
            deny: Vec::new(),
            otherwise,
        }
    }

    /// These rules with one more allow rule.
    pub fn with_allow(mut self, rule: HostRule, id: impl Into<String>) -> Self {
        self.allow.push(NamedRule {
            rule,
            id: id.into(),
        });
        self
    }

    /// These rules with one more deny rule.
    pub fn with_deny(mut self, rule: HostRule, id: impl Into<String>) -> Self {
        self.deny.push(NamedRule {
            rule,
            id: id.into(),
        });
        self
    }

    /// These rules with `otherwise` for destinations no rule names.
    pub fn with_otherwise(mut self, otherwise: Otherwise) -> Self {
        self.otherwise = otherwise;
        self
    }

    /// These rules with the hosts `preset`'s agent uses for its model allowed, as
    /// `preset:NAME` ([`model_hosts`]).
    pub fn with_preset(mut self, preset: &str) -> Self {
        for host in model_hosts(preset) {
            match host.parse::<HostRule>() {
                Ok(rule) => self = self.with_allow(rule, format!("preset:{preset}")),
                Err(error) => {
                    tracing::error!(preset, host, %error, "a preset model host does not parse")
                }
            }
        }
        self
    }

    /// These rules with `layer`'s rules appended after its own; `otherwise` stays
    /// theirs (set it with [`Self::with_otherwise`] or [`NetworkConfig::apply`]).
    pub fn merge(mut self, layer: NetworkRules) -> Self {
        self.allow.extend(layer.allow);
        self.deny.extend(layer.deny);
        self
    }

    /// Rules on one destination (see the module doc for the order).
    pub fn decide(&self, dest: &Destination) -> NetworkRuling {
        if let Some(hit) = self.deny.iter().find(|r| r.rule.matches(dest)) {
            return NetworkRuling {
                decision: Decision::Deny,
                rule_id: Some(hit.id.clone()),
                reason: format!("{dest} is denied by `{}` ({})", hit.rule, hit.id),
            };
        }
        if let Host::Ip(ip) = dest.host
            && let Some(class) = special(ip)
        {
            return match self
                .allow
                .iter()
                .find(|r| r.rule.names_exactly(ip, dest.port))
            {
                Some(hit) => NetworkRuling {
                    decision: Decision::Allow,
                    rule_id: Some(hit.id.clone()),
                    reason: format!(
                        "{dest} is a {class} address named exactly by `{}` ({})",
                        hit.rule, hit.id
                    ),
                },
                None => NetworkRuling {
                    decision: Decision::Deny,
                    rule_id: None,
                    reason: format!(
                        "{dest} is a {class} address, which no allow rule names exactly"
                    ),
                },
            };
        }
        if let Some(hit) = self.allow.iter().find(|r| r.rule.matches(dest)) {
            return NetworkRuling {
                decision: Decision::Allow,
                rule_id: Some(hit.id.clone()),
                reason: format!("{dest} is allowed by `{}` ({})", hit.rule, hit.id),
            };
        }
        match self.otherwise {
            Otherwise::Deny => NetworkRuling {
                decision: Decision::Deny,
                rule_id: None,
                reason: format!("no network rule allows {dest}"),
            },
            Otherwise::Ask => NetworkRuling {
                decision: Decision::Ask,
                rule_id: None,
                reason: format!("no network rule names {dest}; a supervisor decides"),
            },
        }
    }

    /// Whether an allow rule names exactly the address `addr` (an IPv4-mapped form counts as
    /// its IPv4) and `port` (or has no port): what a special address needs to be reached.
    /// Deny rules are [`Self::decide`]'s; this reads only the allow rules.
    pub fn names_exactly(&self, addr: IpAddr, port: u16) -> bool {
        self.allow.iter().any(|r| r.rule.names_exactly(addr, port))
    }

    /// The deny rule that names the address `addr` itself (and `port`, or no port), if one
    /// does: a name that resolves to a denied address is refused like the address.
    pub fn denies_address(&self, addr: IpAddr, port: u16) -> Option<&NamedRule> {
        self.deny.iter().find(|r| r.rule.names_exactly(addr, port))
    }

    /// Whether an allow rule names the address `addr` itself, on any port: such a rule means
    /// the host's service at that address (a local model server), which only the proxy can
    /// reach from inside a namespace.
    pub fn names_address(&self, addr: IpAddr) -> bool {
        self.allow
            .iter()
            .any(|r| matches!(r.rule.pattern, HostPattern::Ip(ip) if ip == canonical(addr)))
    }
}

/// The hosts (`host:port`) the agent of `preset` contacts for its model and its sign-in;
/// none for a preset Legate knows no hosts for.
pub fn model_hosts(preset: &str) -> &'static [&'static str] {
    const GOOGLE: &[&str] = &[
        "generativelanguage.googleapis.com:443",
        "cloudcode-pa.googleapis.com:443",
        "oauth2.googleapis.com:443",
    ];
    match preset {
        "claude" => &["api.anthropic.com:443"],
        "codex" => &[
            "api.openai.com:443",
            "chatgpt.com:443",
            "auth.openai.com:443",
        ],
        "gemini" | "agy" => GOOGLE,
        _ => &[],
    }
}

/// The rule for the host and port of a model base URL (`ANTHROPIC_BASE_URL`,
/// `OPENAI_BASE_URL`, `GOOGLE_GEMINI_BASE_URL`, …): `http://` (port 80 unless given) or
/// `https://` (443), an exact host, no user info. `None` for anything else.
pub fn base_url_rule(url: &str) -> Option<HostRule> {
    let (scheme, rest) = url.split_once("://")?;
    let default_port = if scheme.eq_ignore_ascii_case("https") {
        443
    } else if scheme.eq_ignore_ascii_case("http") {
        80
    } else {
        return None;
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    if authority.contains('@') {
        return None;
    }
    let dest = Destination::parse_authority(authority, Some(default_port)).ok()?;
    let pattern = match dest.host {
        Host::Name(name) => HostPattern::Exact(name),
        Host::Ip(ip) => HostPattern::Ip(ip),
    };
    Some(HostRule::new(pattern, Some(dest.port)))
}

#[cfg(test)]
mod tests;
