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
/// `inheritEnv` for a local command, `url` for a remote agent. Read strictly: exactly one of
/// `command` and `url`, and a URL with none of the local command's fields (a spec that
/// names a URL is never read as a process to spawn).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged, try_from = "RawTransport")]
pub enum Transport {
    /// A process Legate spawns (and confines).
    Local(LocalCommand),
    /// An agent served elsewhere, at this URL (the remote A2A backend's shape; no backend of
    /// this build serves one, and a local backend refuses it with `AGENT_START_FAILED`).
    Url {
        /// Where the agent is served.
        url: String,
    },
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
}

impl TryFrom<RawTransport> for Transport {
    type Error = String;
    fn try_from(raw: RawTransport) -> std::result::Result<Self, String> {
        let local_fields = raw.args.is_some() || raw.env.is_some() || raw.inherit_env.is_some();
        match (raw.command, raw.url) {
            (Some(_), Some(_)) => {
                Err("an agent names both a command and a url; it has one".to_string())
            }
            (None, Some(_)) if local_fields => Err(
                "an agent reached at a url takes no args, env or inheritEnv (they are a local command's)"
                    .to_string(),
            ),
            (None, Some(url)) => Ok(Self::Url { url }),
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
        Self::with_transport(name, kind, Transport::Url { url: url.into() })
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
            Transport::Url { url } => url,
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
