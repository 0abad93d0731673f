//! An agent process's one way out of its network namespace: Legate's egress proxy, served on
//! the listener the namespace handed back ([`legate_confine::EgressHandoff`]), with each
//! connection decided by the session's network policy and, for `ask`, by the approval queue;
//! every connection an event of the running turn and a line of the audit.
//!
//! This module owns the seam between the proxy (`legate-egress`, which parses, resolves,
//! checks addresses and relays) and a session: the [`Gate`] over a session's [`Turns`], the
//! proxy variables an agent is given ([`proxy_env`]), and the policy a session runs under
//! ([`session_policy`]: the engine's layers plus the preset's model host). It never decides
//! what a rule means (`legate_supervisor::network` does) and never touches a socket itself.

use crate::supervision::{Ask, Sent, SupervisionChannel};
use crate::{Abort, EventSink};
use async_trait::async_trait;
use legate_core::{
    ConnectionEvent, Decider, Decision, EventKind, OptionKind, PermissionOption, PermissionRequest,
    Ruling, TaskId, ToolKind,
};
use legate_egress::{ConnectRequest, Decided, Gate, Record};
use legate_supervisor::Supervision;
use legate_supervisor::network::{HostPattern, HostRule, NetworkPolicy};
use std::ffi::OsString;
use std::net::IpAddr;
use std::sync::Arc;
use tokio::sync::oneshot;
use tracing::{info, warn};

/// The proxy's address inside every namespace.
pub(crate) fn proxy_url() -> String {
    format!("http://127.0.0.1:{}", legate_egress::PROXY_PORT)
}

/// The variables that point an agent at the proxy: `HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`
/// and `NO_PROXY`, in both cases. `NO_PROXY` keeps the namespace's own loopback direct
/// (a test server the agent starts), except a loopback address an allow rule names: that
/// rule means the host's service (a local model server), which only the proxy reaches.
pub(crate) fn proxy_env(policy: &NetworkPolicy) -> Vec<(OsString, OsString)> {
    let url = proxy_url();
    let v4 = IpAddr::from(std::net::Ipv4Addr::LOCALHOST);
    let v6 = IpAddr::from(std::net::Ipv6Addr::LOCALHOST);
    let named_localhost = policy
        .allow
        .iter()
        .any(|r| matches!(&r.rule.pattern, HostPattern::Exact(name) if name == "localhost"));
    let direct: Vec<&str> = [
        ("localhost", !named_localhost),
        ("127.0.0.1", !policy.names_address(v4)),
        ("::1", !policy.names_address(v6)),
    ]
    .into_iter()
    .filter(|(_, direct)| *direct)
    .map(|(name, _)| name)
    .collect();
    let no_proxy = direct.join(",");
    let mut env = Vec::new();
    for name in ["HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY"] {
        env.push((OsString::from(name), OsString::from(&url)));
        env.push((
            OsString::from(name.to_ascii_lowercase()),
            OsString::from(&url),
        ));
    }
    env.push((OsString::from("NO_PROXY"), OsString::from(&no_proxy)));
    env.push((OsString::from("no_proxy"), OsString::from(&no_proxy)));
    // Node's own `fetch` and `http` honour the variables only when asked (Node 24 and newer).
    env.push((OsString::from("NODE_USE_ENV_PROXY"), OsString::from("1")));
    env
}

/// Replaces every proxy variable of `env` with [`proxy_env`]'s: inside the namespace no
/// other proxy is reachable, so the agent's own settings would only fail.
pub(crate) fn point_at_proxy(env: &mut Vec<(OsString, OsString)>, policy: &NetworkPolicy) {
    let ours = proxy_env(policy);
    env.retain(|(k, _)| !ours.iter().any(|(o, _)| o == k));
    env.extend(ours);
}

/// The policy a session's connections run under: the engine's (`[network]`, the agent's own
/// rules), plus the preset's model host (the host of the base URL the agent's environment
/// names, `ANTHROPIC_BASE_URL`, …, when it names one, else the preset's default hosts), plus
/// the loopback address of each catalogued MCP server the session was handed over HTTP.
pub(crate) fn session_policy(
    base: &NetworkPolicy,
    preset: &str,
    env: &[(OsString, OsString)],
    mcp_servers: &[legate_core::McpServerSpec],
) -> NetworkPolicy {
    let mut policy = base.clone();
    for server in mcp_servers {
        if let legate_core::McpTransport::Http { url } = &server.transport {
            policy = mcp_rules(policy, url, &server.id);
        }
    }
    let var = crate::acp::launch::base_url_var(preset);
    let url = var.and_then(|v| {
        env.iter()
            .find(|(k, _)| k == v)
            .and_then(|(_, value)| value.to_str())
            .filter(|s| !s.is_empty())
    });
    let id = format!("preset:{preset}");
    match url {
        Some(url) => match legate_supervisor::network::base_url_rule(url) {
            Some(rule) => policy = policy.with_allow(rule, &id),
            None => warn!(
                preset,
                "the model's base URL does not read as a URL; no rule made for it"
            ),
        },
        None => {
            for host in legate_supervisor::network::model_hosts(preset) {
                match host.parse() {
                    Ok(rule) => policy = policy.with_allow(rule, &id),
                    Err(e) => {
                        warn!(preset, host, error = %e, "a preset's model host does not read as a rule")
                    }
                }
            }
        }
    }
    policy
}

/// `policy` with the rules that reach the catalogued MCP server at `url` (on this machine's
/// loopback, as the catalogue requires): its address exactly, and `localhost` with both
/// loopback addresses when the URL names it.
fn mcp_rules(mut policy: NetworkPolicy, url: &str, id: &str) -> NetworkPolicy {
    let Some(rule) = legate_supervisor::network::base_url_rule(url) else {
        warn!(
            server = id,
            "a catalogued MCP server's URL does not read as a URL; no rule made"
        );
        return policy;
    };
    let id = format!("mcp_servers.{id}");
    if matches!(&rule.pattern, HostPattern::Exact(name) if name == "localhost") {
        for ip in [
            IpAddr::from(std::net::Ipv4Addr::LOCALHOST),
            IpAddr::from(std::net::Ipv6Addr::LOCALHOST),
        ] {
            policy = policy.with_allow(HostRule::new(HostPattern::Ip(ip), rule.port), &id);
        }
    }
    policy.with_allow(rule, id)
}

/// What a [`SessionGate`] needs of a session: its running turn, its supervision, its channel.
pub(crate) trait Turns: Send + Sync + std::fmt::Debug + 'static {
    /// The running turn's task, event sink and abort signal, when a task's turn runs.
    fn turn(&self) -> Option<(TaskId, EventSink, Abort)>;
    /// The supervision inputs now.
    fn supervision(&self) -> Supervision;
    /// Where `ask` rulings go and decisions are recorded.
    fn channel(&self) -> Option<Arc<dyn SupervisionChannel>>;
    /// One of the session's places for a request waiting on a supervisor (`None`: all taken).
    fn ask_place(&self) -> Option<Box<dyn Send + Sync>>;
    /// Sends an event of the running turn; `false` when none runs.
    fn emit(&self, event: EventKind) -> bool;
}

/// The [`Gate`] of one session: its policy decides, an `ask` goes to the approval queue.
#[derive(Debug)]
pub(crate) struct SessionGate<T: Turns> {
    turns: Arc<T>,
    policy: Arc<NetworkPolicy>,
    /// Connections audited as allowed whose record has not come yet: one refused after the
    /// decision (every address it resolved to is refused) is audited again, as refused.
    allowed: std::sync::Mutex<std::collections::HashMap<String, ConnectRequest>>,
}

impl<T: Turns> SessionGate<T> {
    pub(crate) fn new(turns: Arc<T>, policy: Arc<NetworkPolicy>) -> Self {
        Self {
            turns,
            policy,
            allowed: std::sync::Mutex::default(),
        }
    }

    fn allowed(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, ConnectRequest>> {
        self.allowed.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A connection put to a supervisor: a permission request Legate writes (kind `fetch`,
    /// the destination in `raw_input.network`), with one allowing and one refusing option.
    fn request(request: &ConnectRequest) -> PermissionRequest {
        let destination = request.destination.to_string();
        PermissionRequest {
            tool_call_id: request.id.clone(),
            title: format!("connect to {destination}"),
            tool_kind: ToolKind::Fetch,
            locations: Vec::new(),
            raw_input: Some(serde_json::json!({
                "network": {
                    "destination": destination,
                    "method": request.method.as_str(),
                }
            })),
            options: vec![
                PermissionOption {
                    id: "allow".into(),
                    name: "Allow this connection".into(),
                    kind: OptionKind::AllowOnce,
                },
                PermissionOption {
                    id: "reject".into(),
                    name: "Refuse this connection".into(),
                    kind: OptionKind::RejectOnce,
                },
            ],
        }
    }

    /// Puts `request` to the supervision channel and waits for its answer.
    async fn ask(
        &self,
        request: &ConnectRequest,
        ruling: Ruling,
    ) -> (Ruling, Option<String>, Option<String>) {
        let refused = |why: &str, ruling: Ruling| Ruling {
            decision: Decision::Deny,
            option_id: None,
            reason: format!(
                "refused: a supervisor must decide ({}), and {why}",
                ruling.reason
            ),
            ..ruling
        };
        let (Some(channel), Some((task_id, sink, abort))) =
            (self.turns.channel(), self.turns.turn())
        else {
            return (
                refused(
                    "no supervision channel is connected to a running turn",
                    ruling,
                ),
                None,
                None,
            );
        };
        let Some(_place) = self.turns.ask_place() else {
            return (
                refused(
                    "too many of this agent's requests already wait for one",
                    ruling,
                ),
                None,
                None,
            );
        };
        let answered = channel
            .ask(Ask {
                task_id,
                supervision: self.turns.supervision(),
                request: Self::request(request),
                ruling: ruling.clone(),
                sink,
                abort,
            })
            .await;
        let mut verdict = answered.ruling;
        if verdict.decision == Decision::Ask {
            verdict = refused("nobody answered", verdict);
        }
        (verdict, answered.approval_id, answered.channel)
    }

    /// Audits a decision before the agent is told (durable before told).
    fn audit(
        &self,
        request: &ConnectRequest,
        ruling: &Ruling,
        approval: Option<&str>,
        channel_name: Option<&str>,
    ) {
        let (Some(channel), Some((task_id, _, _))) = (self.turns.channel(), self.turns.turn())
        else {
            return;
        };
        let supervision = self.turns.supervision();
        let permission = Self::request(request);
        let option = match ruling.decision {
            Decision::Allow => Some("allow".to_string()),
            _ => Some("reject".to_string()),
        };
        channel.record(Sent {
            task_id: &task_id,
            supervision: &supervision,
            request: &permission,
            ruling: &Ruling {
                option_id: option,
                ..ruling.clone()
            },
            approval_id: approval,
            channel: channel_name,
        });
    }
}

#[async_trait]
impl<T: Turns> Gate for SessionGate<T> {
    async fn decide(&self, request: &ConnectRequest) -> Decided {
        let ruled = self.policy.decide(&request.destination);
        let ruling = Ruling {
            decision: ruled.decision,
            option_id: None,
            reason: ruled.reason,
            decider: if ruled.rule_id.is_some() {
                Decider::Policy
            } else {
                Decider::Table
            },
            rule_id: ruled.rule_id,
        };
        let (ruling, approval, channel) = match ruling.decision {
            Decision::Ask => self.ask(request, ruling).await,
            _ => (ruling, None, None),
        };
        self.audit(request, &ruling, approval.as_deref(), channel.as_deref());
        if ruling.decision == Decision::Allow {
            self.allowed().insert(request.id.clone(), request.clone());
        }
        info!(
            destination = %request.destination,
            decision = ?ruling.decision,
            decider = ruling.decider.as_str(),
            rule_id = ?ruling.rule_id,
            "connection decided"
        );
        Decided {
            decision: ruling.decision,
            decider: ruling.decider,
            rule_id: ruling.rule_id,
            reason: ruling.reason,
        }
    }

    fn names_exactly(&self, addr: IpAddr, port: u16) -> bool {
        self.policy.names_exactly(addr, port)
    }

    fn denies_address(&self, addr: IpAddr, port: u16) -> Option<String> {
        self.policy.denies_address(addr, port).map(|r| r.id.clone())
    }

    fn record(&self, record: Record) {
        let audited = self.allowed().remove(&record.id);
        if let Some(request) = audited
            && record.decision != Decision::Allow
        {
            // Allowed by its rule, refused at its addresses: the audit says so too.
            let ruling = Ruling {
                decision: Decision::Deny,
                option_id: None,
                reason: record.reason.clone(),
                decider: record.decider,
                rule_id: record.rule_id.clone(),
            };
            self.audit(&request, &ruling, None, None);
        }
        let event = ConnectionEvent {
            id: record.id,
            destination: record.destination,
            address: record.address.map(|a| a.to_string()),
            method: record.method,
            decision: record.decision,
            decider: record.decider,
            rule_id: record.rule_id,
            reason: record.reason,
            sent: record.sent,
            received: record.received,
            duration_ms: record.duration_ms,
        };
        if !self.turns.emit(EventKind::Connection(event.clone())) {
            // No turn runs (a process the agent left running between turns): traced only.
            info!(connection = %event.describe(), "a connection outside any turn");
        }
    }
}

/// The proxy serving one namespace, stopped when dropped.
#[derive(Debug)]
pub(crate) struct Egress {
    stop: Option<oneshot::Sender<()>>,
}

impl Egress {
    /// Takes the listener `handoff` carries (after the process was spawned) and serves the
    /// proxy on it with `gate`.
    pub(crate) fn start(
        handoff: legate_confine::EgressHandoff,
        gate: Arc<dyn Gate>,
    ) -> std::io::Result<Self> {
        let listener = handoff.receive()?;
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let (tx, rx) = oneshot::channel::<()>();
        tokio::spawn(legate_egress::serve(
            listener,
            gate,
            legate_egress::Limits::default(),
            async move {
                let _ = rx.await;
            },
        ));
        Ok(Self { stop: Some(tx) })
    }
}

impl Drop for Egress {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn value<'a>(env: &'a [(OsString, OsString)], name: &str) -> Option<&'a str> {
        env.iter()
            .find(|(k, _)| k == name)
            .and_then(|(_, v)| v.to_str())
    }

    #[test]
    fn every_proxy_variable_points_at_the_namespace_proxy() {
        let env = proxy_env(&NetworkPolicy::default());
        for name in [
            "HTTPS_PROXY",
            "https_proxy",
            "HTTP_PROXY",
            "http_proxy",
            "ALL_PROXY",
            "all_proxy",
        ] {
            assert_eq!(value(&env, name), Some("http://127.0.0.1:3128"), "{name}");
        }
        assert_eq!(value(&env, "NO_PROXY"), Some("localhost,127.0.0.1,::1"));
    }

    #[test]
    fn a_named_loopback_address_goes_through_the_proxy() {
        let policy =
            NetworkPolicy::default().with_allow("127.0.0.1:11434".parse().unwrap(), "test");
        let env = proxy_env(&policy);
        assert_eq!(value(&env, "no_proxy"), Some("localhost,::1"));
        let mut env = vec![
            (
                OsString::from("HTTPS_PROXY"),
                OsString::from("http://corp:8080"),
            ),
            (OsString::from("KEEP"), OsString::from("1")),
        ];
        point_at_proxy(&mut env, &policy);
        assert_eq!(value(&env, "HTTPS_PROXY"), Some("http://127.0.0.1:3128"));
        assert_eq!(value(&env, "KEEP"), Some("1"));
        assert_eq!(env.iter().filter(|(k, _)| k == "HTTPS_PROXY").count(), 1);
    }

    #[test]
    fn the_preset_allows_its_model_host_or_the_base_url_it_was_given() {
        let base = NetworkPolicy::default();
        let dest =
            |s: &str| legate_supervisor::network::Destination::parse_authority(s, None).unwrap();
        let claude = session_policy(&base, "claude", &[], &[]);
        assert_eq!(
            claude.decide(&dest("api.anthropic.com:443")).decision,
            Decision::Allow
        );
        let local = session_policy(
            &base,
            "claude",
            &[(
                OsString::from("ANTHROPIC_BASE_URL"),
                OsString::from("http://127.0.0.1:4242"),
            )],
            &[],
        );
        assert_eq!(
            local.decide(&dest("api.anthropic.com:443")).decision,
            Decision::Deny
        );
        assert_eq!(
            local.decide(&dest("127.0.0.1:4242")).decision,
            Decision::Allow
        );
        assert!(local.names_exactly(IpAddr::from([127, 0, 0, 1]), 4242));
        let revisor = session_policy(&base, "revisor", &[], &[]);
        // A catalogued MCP server on `localhost`: the name and both loopback addresses, so
        // the name resolves to an address a rule names exactly; `localhost` leaves NO_PROXY.
        let server = legate_core::McpServerSpec {
            id: "docs".into(),
            transport: legate_core::McpTransport::Http {
                url: "http://localhost:8931/mcp".into(),
            },
            tools: Vec::new(),
        };
        let with_mcp = session_policy(&base, "revisor", &[], &[server]);
        assert_eq!(
            with_mcp.decide(&dest("localhost:8931")).decision,
            Decision::Allow
        );
        assert!(with_mcp.names_exactly(IpAddr::from([127, 0, 0, 1]), 8931));
        assert!(!with_mcp.names_exactly(IpAddr::from([127, 0, 0, 1]), 8932));
        assert_eq!(value(&proxy_env(&with_mcp), "NO_PROXY"), Some(""));
        assert_eq!(
            revisor.decide(&dest("api.anthropic.com:443")).decision,
            Decision::Deny
        );
    }
}
