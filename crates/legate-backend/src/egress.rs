//! An agent process's one way out of its network namespace: Legate's egress proxy, served on
//! the listener the namespace handed back ([`legate_confine::EgressHandoff`]), with each
//! connection decided by the session's network rules and, for `ask`, by the approval queue;
//! every connection an event of the running turn and a line of the audit.
//!
//! This module owns the seam between the proxy (`legate-egress`, which parses, resolves,
//! checks addresses and relays, and builds the proxy variables, `legate_egress::proxy_env`)
//! and a session: the [`Gate`] over a session's [`Turns`], and the rules a session runs
//! under ([`session_rules`]: the engine's layers plus the preset's model host). It never decides
//! what a rule means (`legate_supervisor::network` does) and never touches a socket itself.

use crate::approvals::{ApprovalChannel, Ask, Sent};
use crate::{Abort, EventSink};
use async_trait::async_trait;
use legate_core::{
    ConnectionEvent, Decider, Decision, EventKind, OptionKind, PermissionOption, PermissionRequest,
    Ruling, TaskId, ToolKind,
};
use legate_egress::{ConnectRequest, Decided, Gate};
use legate_supervisor::Supervision;
use legate_supervisor::network::{HostPattern, HostRule, NetworkRules};
use std::ffi::OsString;
use std::net::IpAddr;
use std::sync::Arc;
use tokio::sync::oneshot;
use tracing::{info, warn};

pub(crate) use legate_egress::point_at_proxy;

/// The rules a session's connections run under: the engine's (`[network]`, the agent's own
/// rules), plus the preset's model host (the host of the base URL the agent's environment
/// names, `ANTHROPIC_BASE_URL`, …, when it names one, else the preset's default hosts), plus
/// the loopback address of each catalogued MCP server the session was handed over HTTP.
pub(crate) fn session_rules(
    base: &NetworkRules,
    preset: &str,
    env: &[(OsString, OsString)],
    mcp_servers: &[legate_core::McpServerSpec],
) -> NetworkRules {
    let mut rules = base.clone();
    for server in mcp_servers {
        if let legate_core::McpTransport::Http { url } = &server.transport {
            rules = mcp_rules(rules, url, &server.id);
        }
    }
    let var = crate::acp::launch::base_url_var(preset);
    let url = var
        .and_then(|v| legate_egress::env_value(env, v))
        .filter(|s| !s.is_empty());
    let id = format!("preset:{preset}");
    match url {
        Some(url) => match legate_supervisor::network::base_url_rule(url) {
            Some(rule) => rules = rules.with_allow(rule, &id),
            None => warn!(
                preset,
                "the model's base URL does not read as a URL; no rule made for it"
            ),
        },
        None => {
            for host in legate_supervisor::network::model_hosts(preset) {
                match host.parse() {
                    Ok(rule) => rules = rules.with_allow(rule, &id),
                    Err(e) => {
                        warn!(preset, host, error = %e, "a preset's model host does not read as a rule")
                    }
                }
            }
        }
    }
    rules
}

/// `rules` with those that reach the catalogued MCP server at `url` (on this machine's
/// loopback, as the catalogue requires): its address exactly, and `localhost` with both
/// loopback addresses when the URL names it.
fn mcp_rules(mut rules: NetworkRules, url: &str, id: &str) -> NetworkRules {
    let Some(rule) = legate_supervisor::network::base_url_rule(url) else {
        warn!(
            server = id,
            "a catalogued MCP server's URL does not read as a URL; no rule made"
        );
        return rules;
    };
    let id = format!("mcp_servers.{id}");
    if matches!(&rule.pattern, HostPattern::Exact(name) if name == "localhost") {
        for ip in [
            IpAddr::from(std::net::Ipv4Addr::LOCALHOST),
            IpAddr::from(std::net::Ipv6Addr::LOCALHOST),
        ] {
            rules = rules.with_allow(HostRule::new(HostPattern::Ip(ip), rule.port), &id);
        }
    }
    rules.with_allow(rule, id)
}

/// Real credentials shorter than this are replaced only under their own variable's name,
/// never searched for in other variables' values (a short value would match by chance).
const COPIED_SECRET_MIN: usize = 16;

/// `credentials = "proxy"`: replaces, in the agent's environment `env`, the value of each
/// credential variable of `preset` ([`crate::acp::launch::credential_vars`], whether the
/// preset passed it or the spec's `env` set it) by a fresh placeholder of its own, and any
/// copy of such a value under another name too. Returns the (placeholder, real value) pairs
/// the proxy is to hold. An empty value is left; a value that is not UTF-8 is replaced by a
/// placeholder the proxy cannot fill (a warning says so).
pub(crate) fn hold_credentials(
    env: &mut [(OsString, OsString)],
    preset: &str,
) -> Vec<(String, String)> {
    let names = crate::acp::launch::credential_vars(preset);
    let mut secrets: Vec<(String, String)> = Vec::new();
    for (name, value) in env.iter_mut() {
        if !names.iter().any(|n| name == n) || value.is_empty() {
            continue;
        }
        let placeholder = legate_egress::Credentials::placeholder();
        match value.to_str() {
            Some(real) => secrets.push((placeholder.clone(), real.to_string())),
            None => warn!(
                variable = %name.to_string_lossy(),
                "a credential is not UTF-8; the agent gets a placeholder the proxy cannot fill"
            ),
        }
        *value = OsString::from(placeholder);
    }
    for (name, value) in env.iter_mut() {
        let Some(text) = value.to_str() else { continue };
        let mut held = text.to_string();
        for (placeholder, real) in &secrets {
            if real.len() >= COPIED_SECRET_MIN && held.contains(real.as_str()) {
                held = held.replace(real.as_str(), placeholder);
            }
        }
        if held != text {
            info!(variable = %name.to_string_lossy(), "a copy of a credential replaced by its placeholder");
            *value = OsString::from(held);
        }
    }
    secrets
}

/// The certificate authority of `home` (`$LEGATE_HOME/egress-ca/`: `ca.pem` and `ca.key`,
/// mode 0600 in a 0700 directory, which agents never see), made on first use; one per home
/// for the life of the process. Without a home (probes, tests): one kept in memory only.
pub(crate) fn authority(
    home: Option<&std::path::Path>,
) -> std::io::Result<Arc<legate_egress::Authority>> {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static KEPT: OnceLock<
        Mutex<HashMap<Option<std::path::PathBuf>, Arc<legate_egress::Authority>>>,
    > = OnceLock::new();
    let kept = KEPT.get_or_init(Mutex::default);
    let mut kept = kept.lock().unwrap_or_else(|p| p.into_inner());
    let key = home.map(std::path::Path::to_path_buf);
    if let Some(authority) = kept.get(&key) {
        return Ok(Arc::clone(authority));
    }
    let authority = match home {
        None => legate_egress::Authority::generate().map_err(std::io::Error::other)?,
        Some(home) => {
            let dir = home.join("egress-ca");
            load_or_make_authority(&dir)
                .map_err(|source| std::io::Error::new(source.kind(), AuthorityAt { dir, source }))?
        }
    };
    let authority = Arc::new(authority);
    kept.insert(key, Arc::clone(&authority));
    Ok(authority)
}

/// The authority kept in `dir` could not be loaded or made; it reads as the directory and
/// the cause, the way the agent's start failure has always quoted it.
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", dir.display())]
struct AuthorityAt {
    dir: std::path::PathBuf,
    source: std::io::Error,
}

fn load_or_make_authority(dir: &std::path::Path) -> std::io::Result<legate_egress::Authority> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let invalid = |e: legate_egress::InterceptError| {
        std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string())
    };
    let (cert, key) = (dir.join("ca.pem"), dir.join("ca.key"));
    if let (Ok(cert_pem), Ok(key_pem)) = (
        std::fs::read_to_string(&cert),
        std::fs::read_to_string(&key),
    ) {
        return legate_egress::Authority::from_pem(&cert_pem, &key_pem).map_err(invalid);
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let authority = legate_egress::Authority::generate().map_err(invalid)?;
    // Written beside, then renamed: a reader never sees half a key, and a process making
    // its own at the same time leaves one whole pair (each process keeps the one it made).
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let suffix = format!(".{}-{nanos}.tmp", std::process::id());
    let write = |path: &std::path::Path, text: &str| -> std::io::Result<std::path::PathBuf> {
        let tmp = path.with_extension(format!(
            "{}{suffix}",
            path.extension()
                .and_then(|e| e.to_str())
                .unwrap_or_default()
        ));
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        Ok(tmp)
    };
    let key_tmp = write(&key, &authority.key_pem())?;
    let cert_tmp = write(&cert, authority.cert_pem())?;
    std::fs::rename(key_tmp, &key)?;
    std::fs::rename(cert_tmp, &cert)?;
    info!(dir = %dir.display(), "egress certificate authority made");
    Ok(authority)
}

/// Bundles the agent trusts besides its own: where the system's are (the first that exists).
const SYSTEM_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
];

/// Makes the agent trust `authority`: writes `legate-ca.pem` (Legate's certificate alone)
/// and `ca-bundle.pem` (the bundle the agent's environment named in `SSL_CERT_FILE`, else the
/// system's, then Legate's) into `dir` (the agent's state directory), and points
/// `SSL_CERT_FILE`, `REQUESTS_CA_BUNDLE`, `CURL_CA_BUNDLE` at the bundle and
/// `NODE_EXTRA_CA_CERTS` at Legate's certificate.
pub(crate) fn trust_authority(
    env: &mut Vec<(OsString, OsString)>,
    authority: &legate_egress::Authority,
    dir: &std::path::Path,
) -> std::io::Result<()> {
    // The state directory is the agent's to write: a name there may be a symlink it planted
    // (to the user's `~/.bashrc`, say). Legate writes beneath it in the kernel, by temp file
    // and rename, following no link, so it writes nothing the agent could not.
    std::fs::create_dir_all(dir)?;
    let root = legate_beneath::Root::open(dir).map_err(std::io::Error::other)?;
    let write = |name: &str, bytes: &[u8]| {
        root.write(&std::path::Path::new("legate-ca").join(name), bytes, true)
            .map_err(std::io::Error::other)
    };
    let ours = dir.join("legate-ca").join("legate-ca.pem");
    let bundle = dir.join("legate-ca").join("ca-bundle.pem");
    write("legate-ca.pem", authority.cert_pem().as_bytes())?;
    let named = env
        .iter()
        .find(|(k, _)| k == "SSL_CERT_FILE")
        .map(|(_, v)| std::path::PathBuf::from(v));
    let base = named
        .into_iter()
        .chain(SYSTEM_BUNDLES.iter().map(std::path::PathBuf::from))
        .find_map(|p| std::fs::read_to_string(p).ok())
        .unwrap_or_default();
    let mut text = base;
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(authority.cert_pem());
    write("ca-bundle.pem", text.as_bytes())?;
    let set = [
        ("SSL_CERT_FILE", &bundle),
        ("REQUESTS_CA_BUNDLE", &bundle),
        ("CURL_CA_BUNDLE", &bundle),
        ("NODE_EXTRA_CA_CERTS", &ours),
    ];
    env.retain(|(k, _)| !set.iter().any(|(n, _)| k == n));
    for (name, path) in set {
        env.push((OsString::from(name), path.as_os_str().to_owned()));
    }
    Ok(())
}

/// `credentials = "proxy"` for one session: the agent's credential variables hold
/// placeholders, it trusts the home's authority, and the returned [`legate_egress::Credentials`]
/// (for its [`SessionGate`]) set the real values on connections the preset's rule
/// (`preset:NAME`) allows, TLS ones through the authority.
pub(crate) fn proxy_credentials(
    env: &mut Vec<(OsString, OsString)>,
    preset: &str,
    home: Option<&std::path::Path>,
    state_dir: &std::path::Path,
) -> std::io::Result<legate_egress::Credentials> {
    let secrets = hold_credentials(env, preset);
    let authority = authority(home)?;
    trust_authority(env, &authority, state_dir)?;
    let tls = legate_egress::Interception::new(authority).map_err(std::io::Error::other)?;
    info!(
        preset,
        credentials = secrets.len(),
        "the agent's credentials are held by the egress proxy"
    );
    // Plain HTTP gets the real values only for a model URL that is explicitly `http://` (a
    // local model server): never the public host, which is reached over TLS.
    let plain_http = crate::acp::launch::base_url_var(preset)
        .and_then(|var| legate_egress::env_value(env, var))
        .is_some_and(|url| url.len() > 7 && url[..7].eq_ignore_ascii_case("http://"));
    Ok(
        legate_egress::Credentials::new(format!("preset:{preset}"), secrets)
            .with_tls(Arc::new(tls))
            .with_plain_http(plain_http),
    )
}

/// What a [`SessionGate`] needs of a session: its running turn, its supervision, its channel.
pub(crate) trait Turns: Send + Sync + std::fmt::Debug + 'static {
    /// The running turn's task, event sink and abort signal, when a task's turn runs.
    fn turn(&self) -> Option<(TaskId, EventSink, Abort)>;
    /// The supervision inputs now.
    fn supervision(&self) -> Supervision;
    /// Where `ask` rulings go and decisions are recorded.
    fn channel(&self) -> Option<Arc<dyn ApprovalChannel>>;
    /// One of the session's places for a request waiting on a supervisor (`None`: all taken).
    fn ask_place(&self) -> Option<Box<dyn Send + Sync>>;
    /// Sends an event of the running turn; `false` when none runs.
    fn emit(&self, event: EventKind) -> bool;
}

/// The [`Gate`] of one session: its rules decide, an `ask` goes to the approval queue.
#[derive(Debug)]
pub(crate) struct SessionGate<T: Turns> {
    turns: Arc<T>,
    rules: Arc<NetworkRules>,
    /// Connections audited as allowed whose record has not come yet: one refused after the
    /// decision (every address it resolved to is refused) is audited again, as refused.
    allowed: std::sync::Mutex<std::collections::HashMap<String, ConnectRequest>>,
    /// The credentials the proxy sets (`credentials = "proxy"`), when it sets any.
    credentials: Option<legate_egress::Credentials>,
}

impl<T: Turns> SessionGate<T> {
    pub(crate) fn new(turns: Arc<T>, rules: Arc<NetworkRules>) -> Self {
        Self {
            turns,
            rules,
            allowed: std::sync::Mutex::default(),
            credentials: None,
        }
    }

    /// With the proxy setting `credentials`.
    pub(crate) fn with_credentials(
        mut self,
        credentials: Option<legate_egress::Credentials>,
    ) -> Self {
        self.credentials = credentials;
        self
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
        let ruled = self.rules.decide(&request.destination);
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
        self.rules.names_exactly(addr, port)
    }

    fn denies_address(&self, addr: IpAddr, port: u16) -> Option<String> {
        self.rules.denies_address(addr, port).map(|r| r.id.clone())
    }

    fn credentials(&self) -> Option<&legate_egress::Credentials> {
        self.credentials.as_ref()
    }

    fn record(&self, event: ConnectionEvent) {
        let audited = self.allowed().remove(&event.id);
        if let Some(request) = audited
            && event.decision != Decision::Allow
        {
            // Allowed by its rule, refused at its addresses: the audit says so too.
            let ruling = Ruling {
                decision: Decision::Deny,
                option_id: None,
                reason: event.reason.clone(),
                decider: event.decider,
                rule_id: event.rule_id.clone(),
            };
            self.audit(&request, &ruling, None, None);
        }
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
    use legate_egress::env_value as value;

    #[test]
    fn the_preset_allows_its_model_host_or_the_base_url_it_was_given() {
        let base = NetworkRules::default();
        // The rules's decision for a destination `host:port`.
        let decision = |rules: &NetworkRules, s: &str| {
            let dest = legate_supervisor::network::Destination::parse_authority(s, None).unwrap();
            rules.decide(&dest).decision
        };
        let claude = session_rules(&base, "claude", &[], &[]);
        assert_eq!(decision(&claude, "api.anthropic.com:443"), Decision::Allow);
        let local = session_rules(
            &base,
            "claude",
            &[(
                OsString::from("ANTHROPIC_BASE_URL"),
                OsString::from("http://127.0.0.1:4242"),
            )],
            &[],
        );
        assert_eq!(decision(&local, "api.anthropic.com:443"), Decision::Deny);
        assert_eq!(decision(&local, "127.0.0.1:4242"), Decision::Allow);
        assert!(local.names_exactly(IpAddr::from([127, 0, 0, 1]), 4242));
        let revisor = session_rules(&base, "revisor", &[], &[]);
        // A catalogued MCP server on `localhost`: the name and both loopback addresses, so
        // the name resolves to an address a rule names exactly; `localhost` leaves NO_PROXY.
        let server = legate_core::McpServerSpec {
            id: "docs".into(),
            transport: legate_core::McpTransport::Http {
                url: "http://localhost:8931/mcp".into(),
            },
            tools: Vec::new(),
        };
        let with_mcp = session_rules(&base, "revisor", &[], &[server]);
        assert_eq!(decision(&with_mcp, "localhost:8931"), Decision::Allow);
        assert!(with_mcp.names_exactly(IpAddr::from([127, 0, 0, 1]), 8931));
        assert!(!with_mcp.names_exactly(IpAddr::from([127, 0, 0, 1]), 8932));
        assert_eq!(
            value(&legate_egress::proxy_env(&with_mcp), "NO_PROXY"),
            Some("")
        );
        assert_eq!(decision(&revisor, "api.anthropic.com:443"), Decision::Deny);
    }

    #[test]
    fn with_proxy_credentials_the_agent_env_holds_no_real_key() {
        let dir = tempfile::tempdir().unwrap();
        let real = "sk-ant-api03-REALKEY-0123456789abcdef";
        let token = "oauth-REALTOKEN-0123456789abcdef";
        let parent = vec![
            (OsString::from("ANTHROPIC_API_KEY"), OsString::from(real)),
            (
                OsString::from("OPENAI_API_KEY"),
                OsString::from("sk-openai-not-passed-000000"),
            ),
            (OsString::from("PATH"), OsString::from("/usr/bin:/bin")),
        ];
        // The spec's env sets a credential variable of the preset, and copies the key under
        // a name of its own.
        let spec_env = std::collections::BTreeMap::from([
            ("CLAUDE_CODE_OAUTH_TOKEN".to_string(), token.to_string()),
            ("MY_COPY".to_string(), format!("Bearer {real}")),
        ]);
        let launch = crate::acp::launch::launch("claude", dir.path(), None, None, false).unwrap();
        let mut env: Vec<(OsString, OsString)> = spec_env
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .chain(std::iter::once((
                OsString::from("PATH"),
                OsString::from("/usr/bin:/bin"),
            )))
            .collect();
        launch.apply(&mut env, &parent, &spec_env);
        assert_eq!(value(&env, "ANTHROPIC_API_KEY"), Some(real), "passed today");

        let secrets = hold_credentials(&mut env, "claude");
        assert_eq!(secrets.len(), 2);
        for (k, v) in &env {
            let v = v.to_string_lossy();
            assert!(
                !v.contains(real) && !v.contains(token),
                "{k:?} holds a real credential"
            );
        }
        let key = value(&env, "ANTHROPIC_API_KEY").unwrap().to_string();
        let oauth = value(&env, "CLAUDE_CODE_OAUTH_TOKEN").unwrap().to_string();
        assert_ne!(key, oauth, "each variable its own placeholder");
        for p in [&key, &oauth] {
            let hex = p.strip_prefix(legate_egress::PLACEHOLDER_PREFIX).unwrap();
            assert_eq!(hex.len(), 32);
        }
        assert_eq!(
            value(&env, "MY_COPY"),
            Some(format!("Bearer {key}").as_str())
        );
        assert_eq!(value(&env, "PATH"), Some("/usr/bin:/bin"));
        assert!(secrets.contains(&(key.clone(), real.to_string())));
        assert!(secrets.contains(&(oauth.clone(), token.to_string())));

        // Another preset's variables are not its business; a short value is not searched for.
        let mut env = vec![
            (OsString::from("GEMINI_API_KEY"), OsString::from("g")),
            (OsString::from("PATH"), OsString::from("/g/bin")),
            (OsString::from("ANTHROPIC_API_KEY"), OsString::from("")),
        ];
        let secrets = hold_credentials(&mut env, "gemini");
        assert_eq!(secrets.len(), 1);
        assert_eq!(value(&env, "PATH"), Some("/g/bin"));
        assert_eq!(value(&env, "ANTHROPIC_API_KEY"), Some(""));
    }

    #[test]
    fn the_home_keeps_one_private_authority_and_the_agent_trusts_it() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("home").join("egress-ca");
        let made = load_or_make_authority(&ca).unwrap();
        let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&ca), 0o700);
        assert_eq!(mode(&ca.join("ca.key")), 0o600);
        assert_eq!(mode(&ca.join("ca.pem")), 0o600);
        let again = load_or_make_authority(&ca).unwrap();
        assert_eq!(again.cert_pem(), made.cert_pem());
        assert_eq!(
            std::fs::read_dir(&ca).unwrap().count(),
            2,
            "no temporary file left"
        );

        let state = dir.path().join("state");
        let mut env = vec![(
            OsString::from("ANTHROPIC_API_KEY"),
            OsString::from("sk-0123456789abcdef0123"),
        )];
        let credentials =
            proxy_credentials(&mut env, "claude", Some(&dir.path().join("home")), &state).unwrap();
        assert_eq!(credentials.rule_id(), "preset:claude");
        let bundle = std::path::PathBuf::from(value(&env, "SSL_CERT_FILE").unwrap());
        assert_eq!(value(&env, "REQUESTS_CA_BUNDLE"), bundle.to_str());
        assert_eq!(value(&env, "CURL_CA_BUNDLE"), bundle.to_str());
        assert!(bundle.starts_with(&state));
        let text = std::fs::read_to_string(&bundle).unwrap();
        assert!(text.ends_with(made.cert_pem()));
        let ours = value(&env, "NODE_EXTRA_CA_CERTS").unwrap();
        assert_eq!(std::fs::read_to_string(ours).unwrap(), made.cert_pem());
        assert!(
            !env.iter()
                .any(|(_, v)| v.to_string_lossy().contains("sk-0123456789"))
        );
        assert!(!text.contains("PRIVATE KEY"));
    }

    #[test]
    fn the_trusted_bundle_is_written_through_no_link_the_agent_planted() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        std::fs::create_dir_all(state.join("legate-ca")).unwrap();
        let victim = dir.path().join("bashrc");
        std::fs::write(&victim, "mine").unwrap();
        std::os::unix::fs::symlink(&victim, state.join("legate-ca/ca-bundle.pem")).unwrap();
        let authority = legate_egress::Authority::generate().unwrap();
        let mut env = Vec::new();
        // Refused (the session does not start), and the link's target is untouched.
        assert!(trust_authority(&mut env, &authority, &state).is_err());
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "mine");
        assert!(env.is_empty());
        // A planted link in place of the directory itself is refused, not followed.
        let other = tempfile::tempdir().unwrap();
        let state2 = dir.path().join("state2");
        std::fs::create_dir_all(&state2).unwrap();
        std::os::unix::fs::symlink(other.path(), state2.join("legate-ca")).unwrap();
        assert!(trust_authority(&mut env, &authority, &state2).is_err());
        assert_eq!(std::fs::read_dir(other.path()).unwrap().count(), 0);
    }
}
