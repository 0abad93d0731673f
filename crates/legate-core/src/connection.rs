//! One network connection an agent's process asked Legate's egress proxy for, as an event of
//! its task: where to, what was decided and by whom, and how much crossed.
//!
//! This module only declares the record; the proxy (`legate-egress`) makes it, a session's
//! gate stores it as an event (a test's, in its evidence). It never decides anything.

use crate::{Decider, Decision};
use serde::{Deserialize, Serialize};

/// A connection through the egress proxy: refused (recorded before the agent is told), or
/// allowed and closed (recorded with the bytes each way and how long it lasted).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ConnectionEvent {
    /// The proxy's id for it (`net-…`): the permission request's tool call id when it was
    /// put to a supervisor.
    pub id: String,
    /// `host:port` as the agent asked for it.
    pub destination: String,
    /// The address actually connected to (`None`: no connection was made).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// `CONNECT` (a tunnel, usually TLS) or the plain HTTP request's method.
    pub method: String,
    /// Allowed or refused.
    pub decision: Decision,
    /// Who decided.
    pub decider: Decider,
    /// The rule that decided, when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_id: Option<String>,
    /// One sentence saying why (for an allowed connection that failed, why it failed).
    pub reason: String,
    /// Bytes sent by the agent to the destination.
    #[serde(default)]
    pub sent: u64,
    /// Bytes received by the agent from the destination.
    #[serde(default)]
    pub received: u64,
    /// How long the connection lasted, in milliseconds (the decision included).
    #[serde(default)]
    pub duration_ms: u64,
    /// Whether the proxy replaced a credential placeholder with the real credential in a
    /// request of this connection (an agent with `credentials = "proxy"`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub credentials_injected: bool,
}

impl ConnectionEvent {
    /// One line for a person: `allowed CONNECT api.example.com:443 (policy network.allow[0]):
    /// 1.2 kB sent, 30 kB received in 812 ms`.
    pub fn describe(&self) -> String {
        let verdict = match self.decision {
            Decision::Allow => "allowed",
            Decision::Deny => "refused",
            Decision::Ask => "asked",
        };
        let by = match &self.rule_id {
            Some(rule) => format!("{} {rule}", self.decider.as_str()),
            None => self.decider.as_str().to_string(),
        };
        let mut line = format!("{verdict} {} {} ({by})", self.method, self.destination);
        if self.decision == Decision::Allow && self.address.is_some() {
            line.push_str(&format!(
                ": {} B sent, {} B received in {} ms",
                self.sent, self.received, self.duration_ms
            ));
        } else {
            line.push_str(&format!(": {}", self.reason));
        }
        line
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn describes_allowed_and_refused_connections() {
        let mut c = ConnectionEvent {
            id: "net-1".into(),
            destination: "api.example.com:443".into(),
            address: Some("93.184.216.34:443".into()),
            method: "CONNECT".into(),
            decision: Decision::Allow,
            decider: Decider::Policy,
            rule_id: Some("network.allow[0]".into()),
            reason: "allowed by network.allow[0]".into(),
            sent: 10,
            received: 20,
            duration_ms: 5,
            credentials_injected: false,
        };
        assert_eq!(
            c.describe(),
            "allowed CONNECT api.example.com:443 (policy network.allow[0]): 10 B sent, 20 B received in 5 ms"
        );
        c.decision = Decision::Deny;
        c.address = None;
        c.reason = "no rule names it".into();
        assert_eq!(
            c.describe(),
            "refused CONNECT api.example.com:443 (policy network.allow[0]): no rule names it"
        );
        let v = serde_json::to_value(&c).unwrap();
        assert_eq!(v["durationMs"], 5);
        let back: ConnectionEvent = serde_json::from_value(v).unwrap();
        assert_eq!(back, c);
    }
}
