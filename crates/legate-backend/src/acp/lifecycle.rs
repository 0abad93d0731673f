//! ACP's session lifecycle beyond `session/new`: what the agent announced
//! (`sessionCapabilities.resume`, `.close`, `.list`, and the older top-level `loadSession`),
//! how an earlier session is continued, and `session/close` when a session ends.
//!
//! This module owns the choice between `session/resume` (preferred: the agent keeps the
//! conversation without replaying it) and `session/load` (which replays it as updates that
//! Legate must not record as the turn's), and the bounded `session/close` sent before an idle
//! session's processes are stopped. It must never close a session while a turn runs (a
//! timed-out or canceled turn is stopped, not closed), never wait on a close longer than
//! [`CLOSE_TIMEOUT`], and never trust a continued session's mode: the handshake sets the
//! supervised mode afterwards as for a new one. `session/list` is only reported (Legate keeps
//! each context's session id itself, in the store).

use agent_client_protocol::Agent;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema as acp;
use std::time::Duration;
use tracing::{debug, info};

/// How long the agent may take to answer `session/close` before its processes are stopped
/// anyway.
pub const CLOSE_TIMEOUT: Duration = Duration::from_secs(2);

/// The lifecycle methods an agent announced at `initialize`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Lifecycle {
    /// `session/load` (`agentCapabilities.loadSession`).
    pub load: bool,
    /// `session/resume` (`sessionCapabilities.resume`).
    pub resume: bool,
    /// `session/close` (`sessionCapabilities.close`).
    pub close: bool,
    /// `session/list` (`sessionCapabilities.list`).
    pub list: bool,
}

/// The longest session id Legate keeps, in bytes. ACP's adapters use UUIDs (36 bytes); the
/// id is the agent's own word, stored with the task and the context, shown by every front
/// and sent back on `session/resume`.
pub const SESSION_ID_MAX: usize = 256;

/// Why `id` is not a session id Legate will keep (`None` when it is): empty, longer than
/// [`SESSION_ID_MAX`], or holding a control character (a terminal escape, a newline forging
/// a log line) or a bidirectional override. The reason never quotes the id.
pub fn unusable_session_id(id: &str) -> Option<String> {
    if id.is_empty() {
        return Some("it is empty".to_string());
    }
    if id.len() > SESSION_ID_MAX {
        return Some(format!(
            "it is {} bytes long, more than {SESSION_ID_MAX}",
            id.len()
        ));
    }
    let bidi = |c: char| matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
    if id.chars().any(|c| c.is_control() || bidi(c)) {
        return Some("it holds control characters".to_string());
    }
    None
}

/// How an earlier session is to be continued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Continue {
    /// `session/resume`.
    Resume,
    /// `session/load`.
    Load,
}

impl Lifecycle {
    /// What `capabilities` announce.
    pub fn of(capabilities: &acp::AgentCapabilities) -> Self {
        let session = &capabilities.session_capabilities;
        Self {
            load: capabilities.load_session,
            resume: session.resume.is_some(),
            close: session.close.is_some(),
            list: session.list.is_some(),
        }
    }

    /// The method names announced, for health listings (`AgentInfo::capabilities`).
    pub fn names(self) -> Vec<String> {
        [
            (self.load, "session/load"),
            (self.resume, "session/resume"),
            (self.close, "session/close"),
            (self.list, "session/list"),
        ]
        .into_iter()
        .filter(|(on, _)| *on)
        .map(|(_, name)| name.to_string())
        .collect()
    }

    /// How to continue an earlier session: `session/resume` when announced, else
    /// `session/load`; `None` when the agent can do neither.
    pub fn continuation(self) -> Option<Continue> {
        if self.resume {
            Some(Continue::Resume)
        } else if self.load {
            Some(Continue::Load)
        } else {
            None
        }
    }
}

/// Sends `session/close` for `session_id` and waits up to [`CLOSE_TIMEOUT`] for the answer;
/// whether the agent confirmed it. Failures are only logged: the processes are stopped next
/// in any case.
pub async fn close(cx: &ConnectionTo<Agent>, session_id: &str) -> bool {
    let request = acp::CloseSessionRequest::new(session_id.to_string());
    match tokio::time::timeout(CLOSE_TIMEOUT, cx.send_request(request).block_task()).await {
        Ok(Ok(_)) => {
            info!(session_id, "session closed (session/close)");
            true
        }
        Ok(Err(e)) => {
            debug!(session_id, code = %e.code, error = %e.message, "the agent refused session/close");
            false
        }
        Err(_) => {
            debug!(
                session_id,
                timeout_secs = CLOSE_TIMEOUT.as_secs(),
                "the agent did not answer session/close"
            );
            false
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn resume_is_preferred_to_load_and_names_are_listed() {
        let none = Lifecycle::of(&acp::AgentCapabilities::new());
        assert_eq!(none, Lifecycle::default());
        assert_eq!(none.continuation(), None);
        let load = Lifecycle::of(&acp::AgentCapabilities::new().load_session(true));
        assert_eq!(load.continuation(), Some(Continue::Load));
        let all = Lifecycle::of(
            &acp::AgentCapabilities::new()
                .load_session(true)
                .session_capabilities(
                    acp::SessionCapabilities::new()
                        .resume(acp::SessionResumeCapabilities::new())
                        .close(acp::SessionCloseCapabilities::new())
                        .list(acp::SessionListCapabilities::new()),
                ),
        );
        assert_eq!(all.continuation(), Some(Continue::Resume));
        assert_eq!(
            all.names(),
            [
                "session/load",
                "session/resume",
                "session/close",
                "session/list"
            ]
        );
    }

    #[test]
    fn session_ids_are_bounded_and_printable() {
        assert_eq!(
            unusable_session_id("0b7c6a52-8f0e-4f7e-9d55-3f1e2c9a1b00"),
            None
        );
        assert_eq!(unusable_session_id(&"a".repeat(SESSION_ID_MAX)), None);
        for bad in [
            String::new(),
            "a".repeat(SESSION_ID_MAX + 1),
            "s\u{1b}[2J".to_string(),
            "s\nforged".to_string(),
            "s\u{202e}".to_string(),
        ] {
            let why = unusable_session_id(&bad).expect("refused");
            assert!(!why.contains(&bad) || bad.is_empty(), "{why}");
        }
    }

    proptest::proptest! {
        #[test]
        fn a_kept_id_is_bounded_and_clean(id in "\\PC{0,300}|[\\x00-\\x7f]{0,300}") {
            if unusable_session_id(&id).is_none() {
                proptest::prop_assert!(!id.is_empty() && id.len() <= SESSION_ID_MAX);
                proptest::prop_assert!(!id.chars().any(char::is_control));
            }
        }
    }

    #[test]
    fn capabilities_that_do_not_parse_announce_nothing() {
        // `null`, a string or a number where `{}` belongs: the schema's DefaultOnError keeps
        // the rest of `initialize` usable and the method unannounced.
        for bad in [
            serde_json::json!(null),
            serde_json::json!("yes"),
            serde_json::json!(1),
        ] {
            let caps: acp::AgentCapabilities = serde_json::from_value(serde_json::json!({
                "loadSession": true,
                "sessionCapabilities": {"resume": bad, "close": bad},
            }))
            .unwrap();
            let lifecycle = Lifecycle::of(&caps);
            assert!(lifecycle.load, "{bad}");
            assert!(!lifecycle.resume && !lifecycle.close, "{bad}");
        }
    }
}
