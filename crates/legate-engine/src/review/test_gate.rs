//! The gate of a test command's connections: the engine's `[network]` rules, by those rules
//! alone. A test has no turn and no supervisor to wait on, so what a rule does not allow
//! (a deny rule, an `ask`, no rule at all) is refused, and says so.
//!
//! This module owns only that translation; the proxy (`legate-egress`) relays, and the
//! runner (`legate-workspace`) serves it and keeps every connection as the test's evidence.

use async_trait::async_trait;
use legate_core::{Decider, Decision};
use legate_egress::{ConnectRequest, ConnectionEvent, Decided, Gate};
use legate_supervisor::network::NetworkRules;
use std::net::IpAddr;
use std::sync::Arc;

/// What every refusal of an `ask` (or of a destination no rule names) begins with.
pub(crate) const RULES_ONLY: &str =
    "refused: a test command's connections are decided by rules only";

/// A test's [`Gate`] over network rules, rules only.
#[derive(Debug)]
pub(crate) struct TestGate {
    rules: Arc<NetworkRules>,
}

impl TestGate {
    pub(crate) fn new(rules: Arc<NetworkRules>) -> Self {
        Self { rules }
    }

    /// The runner's egress for a test under `rules`: this gate, and the proxy variables.
    pub(crate) fn egress(rules: Arc<NetworkRules>) -> legate_testrun::TestEgress {
        legate_testrun::TestEgress {
            env: legate_egress::proxy_env(&rules),
            gate: Arc::new(Self::new(rules)),
        }
    }
}

#[async_trait]
impl Gate for TestGate {
    async fn decide(&self, request: &ConnectRequest) -> Decided {
        let ruled = self.rules.decide(&request.destination);
        let decider = if ruled.rule_id.is_some() {
            Decider::Policy
        } else {
            Decider::Table
        };
        // An allow rule allows; a deny rule refuses with its own reason; anything else (an
        // `ask`, or no rule at all) is refused as a test's.
        let (decision, reason) = match (ruled.decision, &ruled.rule_id) {
            (Decision::Allow, _) => (Decision::Allow, ruled.reason),
            (Decision::Deny, Some(_)) => (Decision::Deny, ruled.reason),
            _ => (Decision::Deny, format!("{RULES_ONLY} ({})", ruled.reason)),
        };
        tracing::info!(
            destination = %request.destination,
            decision = ?decision,
            rule_id = ?ruled.rule_id,
            "a test command's connection decided"
        );
        Decided {
            decision,
            decider,
            rule_id: ruled.rule_id,
            reason,
        }
    }

    fn names_exactly(&self, addr: IpAddr, port: u16) -> bool {
        self.rules.names_exactly(addr, port)
    }

    fn denies_address(&self, addr: IpAddr, port: u16) -> Option<String> {
        self.rules.denies_address(addr, port).map(|r| r.id.clone())
    }

    fn record(&self, record: ConnectionEvent) {
        tracing::info!(
            id = %record.id,
            destination = %record.destination,
            decision = ?record.decision,
            sent = record.sent,
            received = record.received,
            "a test command's connection"
        );
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use legate_egress::Method;
    use legate_supervisor::network::{Destination, Otherwise};

    fn request(dest: &str) -> ConnectRequest {
        ConnectRequest {
            destination: Destination::parse_authority(dest, None).unwrap(),
            method: Method::Connect,
            id: "net-1".into(),
        }
    }

    #[tokio::test]
    async fn rules_decide_and_an_ask_is_refused() {
        let rules = NetworkRules::new(Otherwise::Ask)
            .with_allow("registry.example:443".parse().unwrap(), "network.allow[0]")
            .with_deny("blocked.example".parse().unwrap(), "network.deny[0]");
        let gate = TestGate::new(Arc::new(rules.clone()));
        let allowed = gate.decide(&request("registry.example:443")).await;
        assert_eq!(allowed.decision, Decision::Allow);
        assert_eq!(allowed.decider, Decider::Policy);
        assert_eq!(allowed.rule_id.as_deref(), Some("network.allow[0]"));
        assert_eq!(
            rules
                .decide(&request("elsewhere.example:443").destination)
                .decision,
            Decision::Ask
        );
        let asked = gate.decide(&request("elsewhere.example:443")).await;
        assert_eq!(asked.decision, Decision::Deny);
        assert_eq!(asked.decider, Decider::Table);
        assert!(asked.reason.starts_with(RULES_ONLY), "{}", asked.reason);
        let denied = gate.decide(&request("blocked.example:443")).await;
        assert_eq!(denied.decision, Decision::Deny);
        assert_eq!(denied.rule_id.as_deref(), Some("network.deny[0]"));
        assert!(!denied.reason.starts_with(RULES_ONLY), "{}", denied.reason);
        let special = gate.decide(&request("127.0.0.1:80")).await;
        assert_eq!(special.decision, Decision::Deny);
        assert!(special.reason.starts_with(RULES_ONLY), "{}", special.reason);
        assert!(!gate.names_exactly(IpAddr::from([127, 0, 0, 1]), 80));
    }
}
