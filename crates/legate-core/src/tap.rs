//! The wire tap's nouns: one recorded protocol frame ([`TapFrame`]), which way it went
//! ([`TapDirection`]) and which protocol it belongs to ([`TapProtocol`]).
//!
//! A frame is a line as it crossed the wire between Legate and an agent (an ACP JSON-RPC
//! message, an agy stream-json line, an A2A request or response), already redacted and
//! bounded when it is made into one of these. This module only names them; it never records,
//! redacts, stores or prints anything.

use crate::{TaskId, Timestamp};
use serde::{Deserialize, Serialize};

/// Which way a frame went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TapDirection {
    /// Legate sent it to the agent.
    ToAgent,
    /// The agent sent it to Legate.
    FromAgent,
    /// Not a frame: Legate's own note in the tap (the cap was reached and what was dropped).
    Marker,
}

impl TapDirection {
    /// The stable wire form: `to-agent`, `from-agent` or `marker`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ToAgent => "to-agent",
            Self::FromAgent => "from-agent",
            Self::Marker => "marker",
        }
    }

    /// The direction named `s` (its wire form), if any.
    pub fn parse(s: &str) -> Option<Self> {
        [Self::ToAgent, Self::FromAgent, Self::Marker]
            .into_iter()
            .find(|d| d.as_str() == s)
    }
}

/// The protocol a frame belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TapProtocol {
    /// ACP JSON-RPC lines on an agent's stdin and stdout.
    Acp,
    /// agy's stream-json lines.
    Agy,
    /// A2A requests and responses to a remote agent.
    A2a,
}

impl TapProtocol {
    /// The stable wire form: `acp`, `agy` or `a2a`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Acp => "acp",
            Self::Agy => "agy",
            Self::A2a => "a2a",
        }
    }

    /// The protocol named `s` (its wire form), if any.
    pub fn parse(s: &str) -> Option<Self> {
        [Self::Acp, Self::Agy, Self::A2a]
            .into_iter()
            .find(|p| p.as_str() == s)
    }
}

/// One recorded frame of a task, numbered from 1 per task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TapFrame {
    /// The task it was recorded for.
    pub task_id: TaskId,
    /// Its number in the task's tap, from 1, without gaps.
    pub seq: u64,
    /// When it was recorded.
    pub at: Timestamp,
    /// Which way it went.
    pub direction: TapDirection,
    /// Its protocol.
    pub protocol: TapProtocol,
    /// The frame as kept: redacted, and cut at the per-frame bound. For a marker, Legate's
    /// sentence.
    pub frame: String,
    /// Its size on the wire in bytes, before it was redacted or cut. For a marker: the bytes
    /// dropped.
    pub wire_bytes: u64,
    /// Whether the frame was cut at the per-frame bound.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    /// For a marker: how many frames were dropped past the cap.
    #[serde(default, skip_serializing_if = "crate::wire_skip::is_zero")]
    pub dropped: u64,
}

/// A frame to store: a [`TapFrame`] before the store numbers and stamps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTapFrame {
    /// Which way it went.
    pub direction: TapDirection,
    /// Its protocol.
    pub protocol: TapProtocol,
    /// The frame as kept (redacted and bounded).
    pub frame: String,
    /// Its size on the wire, before it was redacted or cut (for a marker: the bytes dropped).
    pub wire_bytes: u64,
    /// Whether it was cut.
    pub truncated: bool,
    /// For a marker: the frames dropped.
    pub dropped: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directions_and_protocols_round_trip_their_wire_forms() {
        for d in [
            TapDirection::ToAgent,
            TapDirection::FromAgent,
            TapDirection::Marker,
        ] {
            assert_eq!(TapDirection::parse(d.as_str()), Some(d));
            assert_eq!(
                serde_json::to_string(&d).unwrap_or_default(),
                format!("\"{}\"", d.as_str())
            );
        }
        for p in [TapProtocol::Acp, TapProtocol::Agy, TapProtocol::A2a] {
            assert_eq!(TapProtocol::parse(p.as_str()), Some(p));
            assert_eq!(
                serde_json::to_string(&p).unwrap_or_default(),
                format!("\"{}\"", p.as_str())
            );
        }
        assert_eq!(TapDirection::parse("sideways"), None);
        assert_eq!(TapProtocol::parse("mcp"), None);
    }
}
