//! What one turn's tool calls said about themselves, remembered to fill a permission request
//! that only names its call, and to notice calls that ran without asking.
//!
//! The agent is hostile and chooses every byte: a title, a list of locations or a `rawInput`
//! of megabytes, sent thousands of times. So the memory is bounded twice: at most
//! [`MAX_KNOWN_TOOLS`] calls, and at most [`MAX_KNOWN_BYTES`] of what they said, weighed as
//! their JSON would be. A call past the bytes keeps only its kind and flags: the supervisor
//! then sees what its permission request itself carries, which is all the agent could have
//! sent anyway.
//!
//! It owns that memory only; what a call's update means is `translate`'s.

use super::translate::KnownTool;
use std::collections::HashMap;

/// Tool calls remembered per turn.
pub(crate) const MAX_KNOWN_TOOLS: usize = 4_096;
/// Bytes of titles, locations and raw inputs remembered per turn.
pub(crate) const MAX_KNOWN_BYTES: usize = 16 * 1024 * 1024;

/// The tool calls of one turn.
#[derive(Debug, Default)]
pub(crate) struct KnownTools {
    /// Each call, with the weight of what it said (measured when it last said more).
    tools: HashMap<String, (KnownTool, usize)>,
    bytes: usize,
}

impl KnownTools {
    /// Applies `update` to what is known of call `id`, within the bounds. `heavy`: whether
    /// the update carries a title, locations or a raw input (else the call's weight is kept
    /// as it was, not measured again). A new call past [`MAX_KNOWN_TOOLS`] is not remembered.
    pub(crate) fn remember(&mut self, id: &str, heavy: bool, update: impl FnOnce(&mut KnownTool)) {
        let fresh = !self.tools.contains_key(id);
        // A new call's id is weighed too (the agent chooses it, up to a whole line).
        if fresh && (self.is_full() || self.bytes + id.len() > MAX_KNOWN_BYTES) {
            return;
        }
        let (known, weighed) = self.tools.entry(id.to_string()).or_default();
        if fresh {
            *weighed = id.len();
            self.bytes += id.len();
        }
        update(known);
        if !heavy {
            return;
        }
        let before = *weighed;
        let mut after = id.len() + weight(known);
        if self.bytes - before + after > MAX_KNOWN_BYTES {
            known.title = None;
            known.locations = None;
            known.raw_input = None;
            after = id.len();
        }
        *weighed = after;
        self.bytes = self.bytes - before + after;
    }

    /// Whether no new call is remembered any more.
    pub(crate) fn is_full(&self) -> bool {
        self.tools.len() >= MAX_KNOWN_TOOLS
    }

    /// What is known of call `id`.
    pub(crate) fn get(&self, id: &str) -> Option<&KnownTool> {
        self.tools.get(id).map(|(known, _)| known)
    }

    /// What is known of call `id`, to change its flags.
    pub(crate) fn get_mut(&mut self, id: &str) -> Option<&mut KnownTool> {
        self.tools.get_mut(id).map(|(known, _)| known)
    }

    /// Forgets every call (a new turn).
    pub(crate) fn clear(&mut self) {
        self.tools.clear();
        self.bytes = 0;
    }

    /// The bytes remembered.
    #[cfg(test)]
    fn bytes(&self) -> usize {
        self.bytes
    }
}

/// What a call's remembered fields weigh, about as their JSON would.
fn weight(known: &KnownTool) -> usize {
    known.title.as_ref().map_or(0, String::len)
        + known
            .locations
            .as_ref()
            .map_or(0, |l| l.iter().map(|p| p.as_os_str().len() + 3).sum())
        + known.raw_input.as_ref().map_or(0, |v| {
            usize::try_from(legate_core::plan_change::json_size(v)).unwrap_or(usize::MAX)
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use legate_core::ToolKind;

    #[test]
    fn what_calls_said_is_bounded_in_bytes_and_in_count() {
        let mut known = KnownTools::default();
        let big = serde_json::json!({"content": "x".repeat(1 << 20), "list": vec![0; 100_000]});
        for i in 0..40 {
            known.remember(&format!("call-{i}"), true, |k| {
                k.title = Some("t".repeat(1000));
                k.kind = Some(ToolKind::Edit);
                k.raw_input = Some(big.clone());
            });
            assert!(known.bytes() <= MAX_KNOWN_BYTES, "{}", known.bytes());
        }
        // The first calls are kept whole; those past the bytes keep their kind only.
        assert!(known.get("call-0").unwrap().raw_input.is_some());
        let last = known.get("call-39").unwrap();
        assert!(last.raw_input.is_none() && last.title.is_none());
        assert_eq!(last.kind, Some(ToolKind::Edit));
        // An update that shrinks a call gives its bytes back.
        let before = known.bytes();
        known.remember("call-0", true, |k| k.raw_input = None);
        assert!(known.bytes() < before);
        known.clear();
        assert_eq!(known.bytes(), 0);
        for i in 0..MAX_KNOWN_TOOLS + 10 {
            known.remember(&format!("c{i}"), false, |k| k.asked = true);
        }
        assert!(known.is_full());
        assert!(known.get(&format!("c{}", MAX_KNOWN_TOOLS + 5)).is_none());
        // Ids are the agent's too: a call whose id would pass the bytes is not remembered.
        known.clear();
        let long = "i".repeat(MAX_KNOWN_BYTES / 2 + 1);
        known.remember(&long, false, |k| k.asked = true);
        known.remember(&format!("{long}2"), false, |k| k.asked = true);
        assert!(known.get(&long).is_some());
        assert!(known.get(&format!("{long}2")).is_none());
        assert!(known.bytes() <= MAX_KNOWN_BYTES);
    }
}
