//! The wire tap's answer to a credential split across streamed chunks: an agent streams its
//! answer and reasoning in small ACP `session/update` frames (`agent_message_chunk`,
//! `agent_thought_chunk`), and a token printed that way lands a few characters a frame, where
//! no one frame shows the detector a credential.
//!
//! While the text of the chunk frames seen last ends in a character a credential may be made
//! of, those frames are held ([`Held`]); once a chunk ends otherwise (or another frame comes,
//! or the recorder ends, or [`MAX_HELD_FRAMES`] / [`MAX_HELD_BYTES`] are held) their texts are
//! joined and scanned as one. When the detector finds nothing, the frames go on as they came;
//! when it finds a credential, the first frame carries the joined text redacted and the others
//! an empty text, so that no part of the credential is kept. Each frame is then redacted,
//! cut and counted on its own as any other ([`super::tap`]).
//!
//! This module only decides what of a run of chunk frames is kept; it never stores anything.

use serde_json::Value;

/// At most this many chunk frames are held at once.
pub(crate) const MAX_HELD_FRAMES: usize = 512;
/// At most this many bytes of chunk frames are held at once.
pub(crate) const MAX_HELD_BYTES: usize = 64 << 10;

/// A chunk frame held: as it came, parsed, and its text.
#[derive(Debug)]
struct Chunk {
    frame: String,
    parsed: Value,
    text: String,
}

/// The chunk frames held while a credential may run on into the next one.
#[derive(Debug, Default)]
pub(crate) struct Held {
    chunks: Vec<Chunk>,
    bytes: usize,
}

/// Whether `c` may be part of a credential (the detector's own alphabet of a token).
fn in_token(c: char) -> bool {
    c.is_ascii_alphanumeric() || "+/=_-.~:%$".contains(c)
}

/// The parsed frame and its text, when `frame` is an ACP text chunk of the agent's answer or
/// reasoning.
pub(crate) fn chunk_text(frame: &str) -> Option<(Value, String)> {
    if !frame.contains("_chunk") {
        return None;
    }
    let parsed: Value = serde_json::from_str(frame).ok()?;
    if parsed.get("method")?.as_str()? != "session/update" {
        return None;
    }
    let update = parsed.pointer("/params/update")?;
    let kind = update.get("sessionUpdate")?.as_str()?;
    if !matches!(kind, "agent_message_chunk" | "agent_thought_chunk") {
        return None;
    }
    let text = update.pointer("/content/text")?.as_str()?.to_string();
    Some((parsed, text))
}

impl Held {
    /// Holds a chunk frame; whether the held run must be released now (its text ends where
    /// no credential goes on, or the bounds are reached).
    pub(crate) fn hold(&mut self, frame: &str, parsed: Value, text: String) -> bool {
        let open =
            text.chars().next_back().is_some_and(in_token) || (text.is_empty() && self.is_open());
        self.bytes += frame.len();
        self.chunks.push(Chunk {
            frame: frame.to_string(),
            parsed,
            text,
        });
        !open || self.chunks.len() >= MAX_HELD_FRAMES || self.bytes >= MAX_HELD_BYTES
    }

    /// Whether the last text held ends in a character a credential may be made of.
    fn is_open(&self) -> bool {
        self.chunks
            .iter()
            .rev()
            .find_map(|c| c.text.chars().next_back())
            .is_some_and(in_token)
    }

    /// Whether anything is held.
    pub(crate) fn holds(&self) -> bool {
        !self.chunks.is_empty()
    }

    /// The held frames, in order, each with its size on the wire: as they came, or rewritten
    /// when their joined text held a credential.
    pub(crate) fn release(&mut self) -> Vec<(String, u64)> {
        self.bytes = 0;
        let chunks = std::mem::take(&mut self.chunks);
        let as_they_came = |chunks: Vec<Chunk>| {
            chunks
                .into_iter()
                .map(|c| {
                    let wire = c.frame.len() as u64;
                    (c.frame, wire)
                })
                .collect()
        };
        if chunks.len() < 2 {
            // One frame is scanned whole on its own.
            return as_they_came(chunks);
        }
        let joined: String = chunks.iter().map(|c| c.text.as_str()).collect();
        let redacted = legate_credentials::redact(&joined);
        if redacted == joined {
            return as_they_came(chunks);
        }
        let redacted = redacted.into_owned();
        chunks
            .into_iter()
            .enumerate()
            .map(|(i, mut c)| {
                let wire = c.frame.len() as u64;
                let text = if i == 0 {
                    redacted.clone()
                } else {
                    String::new()
                };
                if let Some(slot) = c.parsed.pointer_mut("/params/update/content/text") {
                    *slot = Value::String(text);
                }
                // A value just parsed from JSON serializes; were it not to, nothing of it is kept.
                let frame = serde_json::to_string(&c.parsed)
                    .unwrap_or_else(|_| legate_credentials::marker("unserializable"));
                (frame, wire)
            })
            .collect()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn chunk(text: &str) -> String {
        serde_json::json!({
            "jsonrpc": "2.0",
            "method": "session/update",
            "params": {"sessionId": "s", "update": {
                "sessionUpdate": "agent_message_chunk",
                "content": {"type": "text", "text": text},
            }},
        })
        .to_string()
    }

    fn feed(held: &mut Held, texts: &[&str]) -> Vec<String> {
        let mut out = Vec::new();
        for t in texts {
            let frame = chunk(t);
            let (parsed, text) = chunk_text(&frame).unwrap();
            if held.hold(&frame, parsed, text) {
                out.extend(held.release().into_iter().map(|(f, _)| f));
            }
        }
        out.extend(held.release().into_iter().map(|(f, _)| f));
        out
    }

    #[test]
    fn a_credential_split_across_chunks_leaves_no_part_of_it() {
        let mut held = Held::default();
        let out = feed(
            &mut held,
            &[
                "your token: ghp_R8kq2Zx",
                "P0vLm7TnW4sYb9Q",
                "eHc3UjDf6GaK1o",
                " done\n",
            ],
        );
        assert_eq!(out.len(), 4);
        let all = out.join("\n");
        for part in ["R8kq2Zx", "P0vLm7TnW4sYb9Q", "eHc3UjDf6GaK1o"] {
            assert!(!all.contains(part), "{all}");
        }
        assert!(out[0].contains("[REDACTED:github-token]"), "{}", out[0]);
        assert!(out[0].contains("your token: "), "{}", out[0]);
        // Still JSON-RPC, still chunks: a reader sees where each frame was.
        for f in &out {
            assert!(chunk_text(f).is_some(), "{f}");
        }
    }

    #[test]
    fn chunks_without_a_credential_go_on_as_they_came() {
        let mut held = Held::default();
        let texts = ["hello wor", "ld, and ", "more"];
        let out = feed(&mut held, &texts);
        assert_eq!(out, texts.iter().map(|t| chunk(t)).collect::<Vec<_>>());
        assert!(!held.holds());
    }

    #[test]
    fn holding_is_bounded_and_other_frames_are_not_chunks() {
        let mut held = Held::default();
        let frame = chunk("a");
        let mut released = 0;
        for _ in 0..2 * MAX_HELD_FRAMES {
            let (parsed, text) = chunk_text(&frame).unwrap();
            if held.hold(&frame, parsed, text) {
                released += held.release().len();
            }
            assert!(held.chunks.len() < MAX_HELD_FRAMES);
            assert!(held.bytes < MAX_HELD_BYTES);
        }
        assert!(released > 0);
        assert_eq!(released + held.release().len(), 2 * MAX_HELD_FRAMES);
        assert!(chunk_text(r#"{"jsonrpc":"2.0","id":1,"result":{"_chunk":1}}"#).is_none());
        assert!(chunk_text("not json _chunk").is_none());
    }
}
