//! Why an agent ended its turn: [`StopReason`], one table that gives each reason its variant
//! and its wire string.
//!
//! Each driver maps its protocol's own result here (the ACP driver from ACP's `StopReason`
//! and `_meta.legate.inputRequired`, the agy driver from how its process ended); the engine
//! decides a task's state from it. The wire strings are those stored in a task's result
//! (`stopReason`) and must never change: clients read them.

use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! stop_reasons {
    ($($(#[$doc:meta])* $variant:ident => $wire:literal,)+) => {
        /// Why an agent ended its turn.
        #[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum StopReason {
            $($(#[$doc])* #[serde(rename = $wire)] $variant,)+
            /// A reason a newer protocol version added, by its wire string.
            #[serde(untagged)]
            Other(String),
        }

        impl StopReason {
            /// Every named reason (not [`StopReason::Other`]).
            pub const ALL: &[StopReason] = &[$(StopReason::$variant,)+];

            /// The wire string.
            pub fn as_str(&self) -> &str {
                match self {
                    $(StopReason::$variant => $wire,)+
                    StopReason::Other(s) => s,
                }
            }
        }
    };
}

stop_reasons! {
    /// The agent finished its turn.
    EndTurn => "end_turn",
    /// The agent reached its token limit.
    MaxTokens => "max_tokens",
    /// The agent reached its limit of requests in one turn.
    MaxTurnRequests => "max_turn_requests",
    /// The agent refused to go on.
    Refusal => "refusal",
    /// The turn was canceled (the agent confirmed, or its process was stopped).
    Cancelled => "cancelled",
    /// The agent ended its turn asking the caller for more input (over ACP: `end_turn` with
    /// `_meta.legate.inputRequired: true`, see [`crate::acp::ext`]). The engine puts such a
    /// task in `input-required`.
    InputRequired => "input_required",
    /// The agent finished its turn and says its answer is a direct message, one that needs no
    /// task tracking (over ACP: `end_turn` with `_meta.legate.directMessage: true`, see
    /// [`crate::acp::ext`]). The engine completes the task like an `end_turn`; a front whose
    /// protocol has direct messages (A2A's `Message` answer) may answer with one.
    DirectMessage => "direct_message",
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The strings stored and sent before the enum existed.
    #[test]
    fn wire_strings_are_unchanged() {
        let wire: Vec<_> = StopReason::ALL
            .iter()
            .map(|r| serde_json::to_value(r).unwrap())
            .collect();
        assert_eq!(
            wire,
            [
                "end_turn",
                "max_tokens",
                "max_turn_requests",
                "refusal",
                "cancelled",
                "input_required",
                "direct_message"
            ]
        );
        for r in StopReason::ALL {
            assert_eq!(serde_json::to_value(r).unwrap(), r.as_str());
            let back: StopReason = serde_json::from_value(r.as_str().into()).unwrap();
            assert_eq!(&back, r);
        }
        let other = StopReason::Other("paused".into());
        assert_eq!(serde_json::to_value(&other).unwrap(), "paused");
        assert_eq!(
            serde_json::from_value::<StopReason>("paused".into()).unwrap(),
            other
        );
    }
}
