//! Configured agents: [`AgentSpec`], the open [`AgentKind`] name and the [`Transport`] that
//! reaches an agent.
//!
//! This module owns the shape of an agent's configuration and the validation of a kind's
//! name. It must never know which kinds a build serves (that is `legate_backend::Registry`)
//! nor how a transport is used: a new backend adds no line here.

use crate::{Error, ErrorCode, Result};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

/// The longest kind name accepted, in bytes.
pub const MAX_KIND_BYTES: usize = 32;

/// How Legate talks to an agent: the name of the backend that serves it (`acp`, `revisor`,
/// `agy`, or any kind a registry adds). An open, validated name: 1 to [`MAX_KIND_BYTES`]
/// lowercase ASCII letters, digits and `-`, starting with a letter. Its wire and TOML form is
/// the name itself.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct AgentKind(Cow<'static, str>);

impl AgentKind {
    /// An ACP agent on stdio, spawned by Legate.
    pub const ACP: AgentKind = AgentKind(Cow::Borrowed("acp"));
    /// The built-in, model-free ACP agent (`legate agent revisor`).
    pub const REVISOR: AgentKind = AgentKind(Cow::Borrowed("revisor"));
    /// The Antigravity CLI (`agy`), driven headless with stream-json, one process per turn.
    pub const AGY: AgentKind = AgentKind(Cow::Borrowed("agy"));

    /// A kind named `name`; `INVALID_INPUT` unless it is a valid kind name.
    pub fn new(name: impl Into<String>) -> Result<Self> {
        let name = name.into();
        let mut chars = name.chars();
        let ok = name.len() <= MAX_KIND_BYTES
            && chars.next().is_some_and(|c| c.is_ascii_lowercase())
            && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if !ok {
            return Err(Error::invalid_input(format!(
                "an agent kind must be 1 to {MAX_KIND_BYTES} lowercase letters, digits or '-', starting with a letter (got {:?})",
                name.chars().take(MAX_KIND_BYTES * 2).collect::<String>()
            )));
        }
        Ok(Self(Cow::Owned(name)))
    }

    /// The wire form.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for AgentKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for AgentKind {
    type Error = Error;
    fn try_from(s: String) -> Result<Self> {
        Self::new(s)
    }
}

impl From<AgentKind> for String {
    fn from(k: AgentKind) -> String {
        k.0.into_owned()
    }
}

/// A program Legate starts on this machine, and what it is started with.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LocalCommand {
    /// The executable (looked up on `PATH` when not absolute).
    pub command: String,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Variables set for it, on top of the filtered environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Extra variable names inherited from Legate's environment, by exact name, on top of the
    /// backend's allowlist. Loader variables (`NODE_OPTIONS`, `NODE_PATH`, `LD_*`, `DYLD_*`)
    /// are refused here in any case or spacing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inherit_env: Vec<String>,
}

/// How an agent is reached. Serialized flat in its [`AgentSpec`]: `command`, `args`, `env`,
/// `inheritEnv` for a local command; `url`, `tokenEnv` or `tokenFile`, `agent`,
/// `maxTransferBytes`, `allowUnsupervised` for a remote agent. Read strictly: exactly one of
/// `command` and `url`, a URL with none of the local command's fields and a command with none
/// of the remote agent's (a spec that names a URL is never read as a process to spawn).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged, try_from = "RawTransport")]
pub enum Transport {
    /// A process Legate spawns (and confines).
    Local(LocalCommand),
    /// An agent served elsewhere, over A2A (kind `a2a`); a local backend refuses it with
    /// `AGENT_START_FAILED`.
    Url(RemoteEndpoint),
}

/// The default bound of what a copy task carries to a remote agent and back, in bytes.
pub const DEFAULT_MAX_TRANSFER_BYTES: u64 = 64 << 20;

/// Where the bearer token of a remote agent is read from: never the configuration itself.
/// Its flat wire form is `tokenEnv` or `tokenFile`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum TokenRef {
    /// The value of this environment variable of Legate's own process.
    #[serde(rename = "tokenEnv")]
    Env(String),
    /// The content of this file (mode 0600, no other line).
    #[serde(rename = "tokenFile")]
    File(std::path::PathBuf),
}

/// A remote agent: where it is served and how Legate talks to it. Holds no secret: the
/// token is named by where it is ([`TokenRef`]), read when a session opens.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RemoteEndpoint {
    /// The agent card's URL, or the base URL its card is under
    /// (`<url>/.well-known/agent-card.json`).
    pub url: String,
    /// The bearer token's source, when the remote wants one.
    #[serde(default, skip_serializing_if = "Option::is_none", flatten)]
    pub token: Option<TokenRef>,
    /// The remote agent, when it is not the card's default (on a remote Legate, the card at
    /// `/agents/NAME`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// The bound of a copy task's transfer each way, in bytes ([`DEFAULT_MAX_TRANSFER_BYTES`]
    /// when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_transfer_bytes: Option<u64>,
    /// Whether write tasks may run on a remote that does not supervise its agent's
    /// permission requests (its card lacks Legate's supervision extension).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_unsupervised: bool,
    /// The CA certificates (PEM) an `https://` remote's certificate is checked against,
    /// instead of the machine's trusted roots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_ca_file: Option<std::path::PathBuf>,
    /// Whether the bearer token may travel over plain `http://` to a host that is not this
    /// machine (`legate_remote::tls::token_in_clear`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_plain_http: bool,
}

impl RemoteEndpoint {
    /// An endpoint at `url` with no token and the defaults.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            token: None,
            agent: None,
            max_transfer_bytes: None,
            allow_unsupervised: false,
            tls_ca_file: None,
            allow_plain_http: false,
        }
    }

    /// The transfer bound in bytes.
    pub fn max_transfer_bytes(&self) -> u64 {
        self.max_transfer_bytes
            .unwrap_or(DEFAULT_MAX_TRANSFER_BYTES)
    }
}

/// A transport's fields as written, before [`Transport`] decides which one they name.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawTransport {
    command: Option<String>,
    args: Option<Vec<String>>,
    env: Option<BTreeMap<String, String>>,
    inherit_env: Option<Vec<String>>,
    url: Option<String>,
    token_env: Option<String>,
    token_file: Option<std::path::PathBuf>,
    /// Refused wherever it appears: a token is never written in a spec.
    token: Option<serde_json::Value>,
    agent: Option<String>,
    max_transfer_bytes: Option<u64>,
    allow_unsupervised: Option<bool>,
    tls_ca_file: Option<std::path::PathBuf>,
    allow_plain_http: Option<bool>,
}

impl TryFrom<RawTransport> for Transport {
    type Error = String;
    fn try_from(raw: RawTransport) -> std::result::Result<Self, String> {
        let local_fields = raw.args.is_some() || raw.env.is_some() || raw.inherit_env.is_some();
        let remote_fields = raw.token_env.is_some()
            || raw.token_file.is_some()
            || raw.agent.is_some()
            || raw.max_transfer_bytes.is_some()
            || raw.allow_unsupervised.is_some()
            || raw.tls_ca_file.is_some()
            || raw.allow_plain_http.is_some();
        if raw.token.is_some() {
            return Err(
                "an agent's token is never written inline: name it with tokenEnv or tokenFile"
                    .to_string(),
            );
        }
        match (raw.command, raw.url) {
            (Some(_), Some(_)) => {
                Err("an agent names both a command and a url; it has one".to_string())
            }
            (None, Some(_)) if local_fields => Err(
                "an agent reached at a url takes no args, env or inheritEnv (they are a local command's)"
                    .to_string(),
            ),
            (Some(_), None) if remote_fields => Err(
                "a local command takes no tokenEnv, tokenFile, agent, maxTransferBytes, allowUnsupervised, tlsCaFile or allowPlainHttp (they are a remote agent's)"
                    .to_string(),
            ),
            (None, Some(url)) => {
                let token = match (raw.token_env, raw.token_file) {
                    (Some(_), Some(_)) => {
                        return Err(
                            "a remote agent names both tokenEnv and tokenFile; it has one"
                                .to_string(),
                        );
                    }
                    (Some(v), None) => Some(TokenRef::Env(v)),
                    (None, Some(p)) => Some(TokenRef::File(p)),
                    (None, None) => None,
                };
                Ok(Self::Url(RemoteEndpoint {
                    url,
                    token,
                    agent: raw.agent,
                    max_transfer_bytes: raw.max_transfer_bytes,
                    allow_unsupervised: raw.allow_unsupervised.unwrap_or(false),
                    tls_ca_file: raw.tls_ca_file,
                    allow_plain_http: raw.allow_plain_http.unwrap_or(false),
                }))
            }
            (Some(command), None) => Ok(Self::Local(LocalCommand {
                command,
                args: raw.args.unwrap_or_default(),
                env: raw.env.unwrap_or_default(),
                inherit_env: raw.inherit_env.unwrap_or_default(),
            })),
            (None, None) => Err("an agent needs a command or a url".to_string()),
        }
    }
}

/// Where a preset agent's model credentials are (`[agents.NAME] credentials`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AgentCredentials {
    /// In the agent's environment (the preset's variables, the spec's `env`): the default.
    #[default]
    Environment,
    /// Only in Legate's egress proxy: the agent's environment holds a placeholder per
    /// variable, and the proxy sets the real value on requests to the preset's model host.
    Proxy,
}

impl AgentCredentials {
    /// Whether this is the default ([`AgentCredentials::Environment`]).
    pub fn is_environment(&self) -> bool {
        *self == AgentCredentials::Environment
    }
}

/// One configured agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentSpec {
    /// The name callers use (`revisor`, `claude`, …).
    pub name: String,
    /// The backend that serves it.
    pub kind: AgentKind,
    /// How it is reached.
    #[serde(flatten)]
    pub transport: Transport,
    /// The preset it follows (`claude`, `codex`, `gemini`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preset: Option<String>,
    /// Whether execute/fetch/other tools may run in roots Legate does not own.
    #[serde(default)]
    pub allow_execute: bool,
    /// Whether the `terminal` client capability is advertised.
    #[serde(default)]
    pub terminal: bool,
    /// A one-line description for listings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The model used when neither the task nor a saved preference names one; `None` leaves
    /// the choice to the agent. Only backends that can select models use it (today: `agy`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Where the preset's model credentials are: the agent's environment (the default) or
    /// only the egress proxy.
    #[serde(default, skip_serializing_if = "AgentCredentials::is_environment")]
    pub credentials: AgentCredentials,
    /// Where its process runs: locally (the default) or in a pod of a cluster.
    #[serde(default, skip_serializing_if = "crate::AgentRuntime::is_local")]
    pub runtime: crate::AgentRuntime,
    /// How much of the machine its local process tree may take.
    #[serde(default, skip_serializing_if = "crate::ProcessLimits::is_default")]
    pub limits: crate::ProcessLimits,
    /// Whether every task of this agent records its protocol frames (the wire tap,
    /// `[agents.NAME] tap = true`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tap: bool,
}

impl AgentSpec {
    /// An agent of `kind` that Legate runs as `program` (no arguments, no variables, no
    /// preset); the builder methods below add the rest.
    pub fn command(name: impl Into<String>, kind: AgentKind, program: impl Into<String>) -> Self {
        Self::with_transport(
            name,
            kind,
            Transport::Local(LocalCommand {
                command: program.into(),
                ..LocalCommand::default()
            }),
        )
    }

    /// An agent of `kind` served at `url`.
    pub fn url(name: impl Into<String>, kind: AgentKind, url: impl Into<String>) -> Self {
        Self::with_transport(name, kind, Transport::Url(RemoteEndpoint::new(url)))
    }

    fn with_transport(name: impl Into<String>, kind: AgentKind, transport: Transport) -> Self {
        Self {
            name: name.into(),
            kind,
            transport,
            preset: None,
            allow_execute: false,
            terminal: false,
            description: None,
            model: None,
            credentials: AgentCredentials::Environment,
            runtime: crate::AgentRuntime::Local,
            limits: crate::ProcessLimits::default(),
            tap: false,
        }
    }

    /// The local command, for a backend that spawns one: `AGENT_START_FAILED` when the agent
    /// is reached at a URL instead.
    pub fn local(&self) -> Result<&LocalCommand> {
        match &self.transport {
            Transport::Local(c) => Ok(c),
            Transport::Url { .. } => Err(Error::new(
                ErrorCode::AgentStartFailed,
                format!(
                    "agent `{}` is configured with a URL, but its kind `{}` runs a local command",
                    self.name, self.kind
                ),
            )),
        }
    }

    /// The local command, when there is one.
    pub fn local_command(&self) -> Option<&LocalCommand> {
        match &self.transport {
            Transport::Local(c) => Some(c),
            Transport::Url { .. } => None,
        }
    }

    /// Where the agent is, for listings: its command, or its URL.
    pub fn target(&self) -> &str {
        match &self.transport {
            Transport::Local(c) => &c.command,
            Transport::Url(remote) => &remote.url,
        }
    }

    /// The remote endpoint, when the agent is reached at a URL.
    pub fn remote(&self) -> Option<&RemoteEndpoint> {
        match &self.transport {
            Transport::Url(remote) => Some(remote),
            Transport::Local(_) => None,
        }
    }

    /// The local command to change, when there is one.
    pub fn local_mut(&mut self) -> Option<&mut LocalCommand> {
        match &mut self.transport {
            Transport::Local(c) => Some(c),
            Transport::Url { .. } => None,
        }
    }

    /// The local command the builder methods change; one is made (empty) when the agent had
    /// a URL, so that `AgentSpec::url(…).args(…)` is a local spec again (its command unset).
    fn local_or_new(&mut self) -> &mut LocalCommand {
        if !matches!(self.transport, Transport::Local(_)) {
            self.transport = Transport::Local(LocalCommand::default());
        }
        match &mut self.transport {
            Transport::Local(c) => c,
            // Unreachable: the line above made it local.
            Transport::Url { .. } => unreachable!("the transport was just made local"),
        }
    }

    /// With these arguments.
    #[must_use]
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.local_or_new().args = args.into_iter().map(Into::into).collect();
        self
    }

    /// With one more variable set.
    #[must_use]
    pub fn env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.local_or_new().env.insert(name.into(), value.into());
        self
    }

    /// With these variables set (replacing any set before).
    #[must_use]
    pub fn envs(mut self, env: BTreeMap<String, String>) -> Self {
        self.local_or_new().env = env;
        self
    }

    /// Inheriting these variable names from Legate's environment.
    #[must_use]
    pub fn inherit_env<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.local_or_new().inherit_env = names.into_iter().map(Into::into).collect();
        self
    }

    /// Following this preset.
    #[must_use]
    pub fn preset(mut self, preset: impl Into<String>) -> Self {
        self.preset = Some(preset.into());
        self
    }

    /// Whether tools may run in roots Legate does not own.
    #[must_use]
    pub fn allow_execute(mut self, allow: bool) -> Self {
        self.allow_execute = allow;
        self
    }

    /// Whether the `terminal` client capability is advertised.
    #[must_use]
    pub fn terminal(mut self, terminal: bool) -> Self {
        self.terminal = terminal;
        self
    }

    /// With this description.
    #[must_use]
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// With this default model.
    #[must_use]
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn built_in_kinds_keep_their_wire_strings() {
        for (k, s) in [
            (AgentKind::ACP, "acp"),
            (AgentKind::REVISOR, "revisor"),
            (AgentKind::AGY, "agy"),
        ] {
            assert_eq!(serde_json::to_value(&k).unwrap(), s);
            assert_eq!(serde_json::from_value::<AgentKind>(s.into()).unwrap(), k);
            assert_eq!(AgentKind::new(s).unwrap(), k);
        }
    }

    #[test]
    fn hostile_kind_names_are_refused() {
        for bad in [
            "", "ACP", "a b", "../x", "a/b", "1abc", "-a", "acp\0", "ä", "a\n",
        ] {
            assert!(AgentKind::new(bad).is_err(), "{bad:?}");
            assert!(serde_json::from_value::<AgentKind>(bad.into()).is_err());
        }
        assert!(AgentKind::new("a".repeat(MAX_KIND_BYTES + 1)).is_err());
        assert!(AgentKind::new("a".repeat(MAX_KIND_BYTES)).is_ok());
    }

    #[test]
    fn a_spec_keeps_its_flat_wire_shape() {
        let spec = AgentSpec::command("a", AgentKind::ACP, "/bin/a")
            .args(["--x"])
            .env("K", "V");
        let v = serde_json::to_value(&spec).unwrap();
        assert_eq!(v["command"], "/bin/a");
        assert_eq!(v["args"][0], "--x");
        assert_eq!(v["env"]["K"], "V");
        assert_eq!(v["kind"], "acp");
        let back: AgentSpec = serde_json::from_value(v).unwrap();
        assert_eq!(back, spec);
        let remote: AgentSpec = serde_json::from_value(serde_json::json!({
            "name": "r", "kind": "a2a", "url": "https://example.invalid/a"
        }))
        .unwrap();
        assert!(matches!(remote.transport, Transport::Url { .. }));
        assert_eq!(
            remote.local().unwrap_err().code,
            ErrorCode::AgentStartFailed
        );
    }

    /// A spec naming both a command and a URL (or neither) is refused, never read as the
    /// local command with its URL dropped: a spec that says "remote" must not spawn.
    #[test]
    fn a_spec_with_both_transports_or_none_is_refused() {
        let both = serde_json::json!({
            "name": "r", "kind": "acp", "command": "sh", "args": ["-c", "x"],
            "url": "http://127.0.0.1:9/a"
        });
        let e = serde_json::from_value::<AgentSpec>(both).unwrap_err();
        assert!(e.to_string().contains("both"), "{e}");
        let url_with_args = serde_json::json!({
            "name": "r", "kind": "a2a", "url": "http://127.0.0.1:9/a", "args": ["x"]
        });
        assert!(serde_json::from_value::<AgentSpec>(url_with_args).is_err());
        let neither = serde_json::json!({"name": "r", "kind": "acp"});
        assert!(serde_json::from_value::<AgentSpec>(neither).is_err());
        let local = AgentSpec::command("a", AgentKind::ACP, "/bin/a").inherit_env(["X"]);
        let back: AgentSpec =
            serde_json::from_value(serde_json::to_value(&local).unwrap()).unwrap();
        assert_eq!(back, local);
    }

    /// A remote spec keeps its fields on the wire, refuses an inline token and both token
    /// sources, and a local command refuses the remote fields.
    #[test]
    fn a_remote_spec_is_read_strictly() {
        let v = serde_json::json!({
            "name": "r", "kind": "a2a", "url": "http://127.0.0.1:9/a",
            "tokenEnv": "REMOTE_TOKEN", "agent": "coder", "maxTransferBytes": 1024,
            "allowUnsupervised": true
        });
        let spec: AgentSpec = serde_json::from_value(v.clone()).unwrap();
        let remote = spec.remote().unwrap();
        assert_eq!(remote.token, Some(TokenRef::Env("REMOTE_TOKEN".into())));
        assert_eq!(remote.agent.as_deref(), Some("coder"));
        assert_eq!(remote.max_transfer_bytes(), 1024);
        assert!(remote.allow_unsupervised);
        let back = serde_json::to_value(&spec).unwrap();
        assert_eq!(back["tokenEnv"], "REMOTE_TOKEN");
        assert_eq!(serde_json::from_value::<AgentSpec>(back).unwrap(), spec);
        let plain = AgentSpec::url("r", AgentKind::new("a2a").unwrap(), "http://x/");
        assert_eq!(
            plain.remote().unwrap().max_transfer_bytes(),
            DEFAULT_MAX_TRANSFER_BYTES
        );
        for bad in [
            serde_json::json!({"name": "r", "kind": "a2a", "url": "http://x", "token": "s3cret-value"}),
            serde_json::json!({"name": "r", "kind": "a2a", "url": "http://x", "tokenEnv": "A", "tokenFile": "/t"}),
            serde_json::json!({"name": "r", "kind": "acp", "command": "x", "tokenEnv": "A"}),
            serde_json::json!({"name": "r", "kind": "acp", "command": "x", "allowUnsupervised": true}),
        ] {
            let e = serde_json::from_value::<AgentSpec>(bad)
                .unwrap_err()
                .to_string();
            assert!(!e.contains("s3cret-value"), "{e}");
        }
    }

    proptest! {
        #[test]
        fn a_kind_accepted_is_a_plain_name(s in "\\PC{0,40}") {
            if let Ok(k) = AgentKind::new(s.clone()) {
                prop_assert_eq!(k.as_str(), s.as_str());
                prop_assert!(k.as_str().len() <= MAX_KIND_BYTES);
                prop_assert!(k.as_str().bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'));
                prop_assert!(!k.as_str().contains(".."));
            }
        }
    }
}
