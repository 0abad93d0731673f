//! Finding peer-message envelopes in a node's public answer:
//! `<legate-peer-message>{"messageId":"…","toNode":"…","text":"…"}</legate-peer-message>`.
//!
//! The answer is the agent's and hostile. The scan is linear, looks at a bounded number of
//! envelopes with a bounded body each, and never fails: a malformed envelope becomes a
//! [`Found::Malformed`] (a notice for the caller), one too large or past the count becomes
//! [`Found::OverLimit`] (the group pauses with `PEER_LIMIT_EXCEEDED`: nothing is truncated
//! silently). This module only reads text; it never checks routes, stores or delivers.

use serde::Deserialize;

/// The opening tag.
pub(crate) const OPEN: &str = "<legate-peer-message>";
/// The closing tag.
pub(crate) const CLOSE: &str = "</legate-peer-message>";
/// The most characters a message's text may have (the seed's limit).
pub const MAX_TEXT_CHARS: usize = 2_000;
/// The most bytes an envelope's JSON body may have: room for 2,000 characters each escaped
/// as `\uXXXX\uXXXX`, plus the id and the node.
pub(crate) const MAX_BODY_BYTES: usize = MAX_TEXT_CHARS * 12 + 1_024;
/// The most envelopes one answer is read for: one past the per-source limit, so that an
/// answer carrying more than a node may ever send is seen to pass it.
pub(crate) const MAX_ENVELOPES: usize = super::MAX_MESSAGES_PER_SOURCE as usize + 1;
/// The longest message id.
pub(crate) const MAX_ID_CHARS: usize = 128;
/// The longest node name an envelope may address.
pub(crate) const MAX_NODE_CHARS: usize = 64;

/// A well-formed envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope {
    /// The id the agent chose (ASCII letters, digits, `-`, `_`, `.`, `:`; 1 to 128).
    pub message_id: String,
    /// The node it is for.
    pub to_node: String,
    /// What it says (1 to 2,000 characters, no control characters but tab and newlines).
    pub text: String,
}

/// One thing the scan found, in answer order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// A well-formed envelope.
    Envelope(Envelope),
    /// An envelope Legate ignores, and why (for a person; never quotes the body).
    Malformed(String),
    /// An envelope past a limit (too long a text or body, or more envelopes than a node may
    /// send), and which.
    OverLimit(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Body {
    message_id: String,
    to_node: String,
    text: String,
}

/// The envelopes of `answer`. When the answer is a JSON object with a string `summary`
/// (an implementer's `{"summary": "…"}`), that summary is what is scanned.
pub fn take_envelopes(answer: &str) -> Vec<Found> {
    match summary_of(answer) {
        Some(summary) => scan(&summary),
        None => scan(answer),
    }
}

fn summary_of(answer: &str) -> Option<String> {
    let trimmed = answer.trim();
    if !trimmed.starts_with('{') || !trimmed.contains(OPEN) {
        return None;
    }
    match serde_json::from_str::<serde_json::Value>(trimmed).ok()? {
        serde_json::Value::Object(map) => match map.get("summary") {
            Some(serde_json::Value::String(s)) => Some(s.clone()),
            _ => None,
        },
        _ => None,
    }
}

fn scan(text: &str) -> Vec<Found> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find(OPEN) {
        if found.len() == MAX_ENVELOPES {
            found.push(Found::OverLimit(format!(
                "the answer carries more than {} peer-message envelopes",
                MAX_ENVELOPES - 1
            )));
            break;
        }
        let after_open = &rest[start + OPEN.len()..];
        let Some(end) = after_open.find(CLOSE) else {
            found.push(Found::Malformed(
                "a peer-message envelope is not closed".into(),
            ));
            break;
        };
        let body = &after_open[..end];
        rest = &after_open[end + CLOSE.len()..];
        found.push(parse_body(body));
    }
    found
}

fn parse_body(body: &str) -> Found {
    if body.len() > MAX_BODY_BYTES {
        return Found::OverLimit(format!(
            "a peer-message envelope is {} bytes; the limit is {MAX_BODY_BYTES}",
            body.len()
        ));
    }
    if body.contains(OPEN) {
        return Found::Malformed("a peer-message envelope contains another one".into());
    }
    let parsed: Body = match serde_json::from_str(body.trim()) {
        Ok(b) => b,
        Err(e) => {
            // serde_json's message names the line and column, never the input.
            return Found::Malformed(format!(
                "a peer-message envelope is not the JSON object {{messageId, toNode, text}} ({})",
                e.classify_name()
            ));
        }
    };
    if !valid_id(&parsed.message_id) {
        return Found::Malformed(format!(
            "a peer message's messageId must be 1 to {MAX_ID_CHARS} ASCII letters, digits, '-', '_', '.' or ':'"
        ));
    }
    if !valid_node(&parsed.to_node) {
        return Found::Malformed(format!(
            "a peer message's toNode must be 1 to {MAX_NODE_CHARS} ASCII letters, digits, '-' or '_'"
        ));
    }
    let chars = parsed.text.chars().count();
    if chars > MAX_TEXT_CHARS {
        return Found::OverLimit(format!(
            "peer message {:?} has {chars} characters; the limit is {MAX_TEXT_CHARS}",
            parsed.message_id
        ));
    }
    if parsed.text.trim().is_empty() {
        return Found::Malformed(format!("peer message {:?} is empty", parsed.message_id));
    }
    if parsed
        .text
        .chars()
        .any(|c| c.is_control() && !matches!(c, '\n' | '\r' | '\t'))
    {
        return Found::Malformed(format!(
            "peer message {:?} contains control characters",
            parsed.message_id
        ));
    }
    Found::Envelope(Envelope {
        message_id: parsed.message_id,
        to_node: parsed.to_node,
        text: parsed.text,
    })
}

trait Classify {
    fn classify_name(&self) -> &'static str;
}

impl Classify for serde_json::Error {
    fn classify_name(&self) -> &'static str {
        match self.classify() {
            serde_json::error::Category::Io => "unreadable",
            serde_json::error::Category::Syntax => "a syntax error",
            serde_json::error::Category::Data => "a missing, unknown or mistyped field",
            serde_json::error::Category::Eof => "cut short",
        }
    }
}

fn valid_id(id: &str) -> bool {
    (1..=MAX_ID_CHARS).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'))
}

fn valid_node(node: &str) -> bool {
    (1..=MAX_NODE_CHARS).contains(&node.len())
        && node
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_'))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn env(id: &str, to: &str, text: &str) -> String {
        format!(
            "{OPEN}{}{CLOSE}",
            serde_json::json!({"messageId": id, "toNode": to, "text": text})
        )
    }

    #[test]
    fn envelopes_are_found_in_order_around_prose() {
        let answer = format!(
            "Done.\n{}\nmore prose {} end",
            env("m-1", "review", "look at src/a.rs"),
            env("m-2", "synth", "line two\nand three")
        );
        let found = take_envelopes(&answer);
        assert_eq!(
            found,
            vec![
                Found::Envelope(Envelope {
                    message_id: "m-1".into(),
                    to_node: "review".into(),
                    text: "look at src/a.rs".into()
                }),
                Found::Envelope(Envelope {
                    message_id: "m-2".into(),
                    to_node: "synth".into(),
                    text: "line two\nand three".into()
                }),
            ]
        );
    }

    #[test]
    fn an_envelope_inside_a_json_summary_is_found() {
        let answer =
            serde_json::json!({"summary": format!("ok {}", env("s1", "review", "hi"))}).to_string();
        assert!(
            matches!(&take_envelopes(&answer)[..], [Found::Envelope(e)] if e.message_id == "s1")
        );
    }

    #[test]
    fn malformed_envelopes_are_notices_not_failures() {
        for body in [
            "not json",
            r#"{"messageId":"a","toNode":"b"}"#,
            r#"{"messageId":"a","toNode":"b","text":"x","grant":"all"}"#,
            r#"{"messageId":"a b","toNode":"b","text":"x"}"#,
            r#"{"messageId":"a","toNode":"../b","text":"x"}"#,
            r#"{"messageId":"a","toNode":"b","text":"   "}"#,
            r#"{"messageId":"a","toNode":"b","text":"\u001b[2Jclear"}"#,
            r#"{"messageId":"a","toNode":"b","text":1}"#,
        ] {
            let found = take_envelopes(&format!("{OPEN}{body}{CLOSE}"));
            assert!(
                matches!(&found[..], [Found::Malformed(_)]),
                "{body}: {found:?}"
            );
        }
        let unclosed = take_envelopes(&format!("{OPEN}{{\"messageId\":\"a\""));
        assert!(matches!(&unclosed[..], [Found::Malformed(_)]));
        let nested = take_envelopes(&format!("{OPEN}{OPEN}{{}}{CLOSE}"));
        assert!(matches!(&nested[..], [Found::Malformed(_)]));
    }

    #[test]
    fn limits_are_over_limit_not_truncation() {
        let long = "é".repeat(MAX_TEXT_CHARS + 1);
        assert!(matches!(
            &take_envelopes(&env("a", "b", &long))[..],
            [Found::OverLimit(_)]
        ));
        let exact = "é".repeat(MAX_TEXT_CHARS);
        assert!(matches!(
            &take_envelopes(&env("a", "b", &exact))[..],
            [Found::Envelope(_)]
        ));
        let huge = format!("{OPEN}{}{CLOSE}", " ".repeat(MAX_BODY_BYTES + 1));
        assert!(matches!(&take_envelopes(&huge)[..], [Found::OverLimit(_)]));
        let many: String = (0..MAX_ENVELOPES + 5)
            .map(|i| env(&format!("m{i}"), "b", "x"))
            .collect();
        let found = take_envelopes(&many);
        assert_eq!(found.len(), MAX_ENVELOPES + 1);
        assert!(matches!(found.last(), Some(Found::OverLimit(_))));
    }

    proptest! {
        #[test]
        fn any_answer_is_scanned_without_panic_and_within_bounds(answer in ".{0,400}", cut in 0usize..64) {
            let found = take_envelopes(&answer);
            prop_assert!(found.len() <= MAX_ENVELOPES + 1);
            let framed = format!("{OPEN}{answer}{CLOSE}");
            let end = framed.char_indices().nth(cut).map_or(framed.len(), |(i, _)| i);
            let _ = take_envelopes(&framed[..end]);
            for f in take_envelopes(&framed) {
                if let Found::Envelope(e) = f {
                    prop_assert!(valid_id(&e.message_id) && valid_node(&e.to_node));
                    prop_assert!(e.text.chars().count() <= MAX_TEXT_CHARS);
                }
            }
        }

        #[test]
        fn a_valid_envelope_round_trips(id in "[A-Za-z0-9._:-]{1,128}", to in "[a-z0-9_-]{1,64}", text in "[^\\p{Cc}]{1,200}") {
            prop_assume!(!text.trim().is_empty());
            prop_assume!(!text.contains(OPEN) && !text.contains(CLOSE));
            let found = take_envelopes(&format!("prose {}", env(&id, &to, &text)));
            prop_assert_eq!(found, vec![Found::Envelope(Envelope { message_id: id, to_node: to, text })]);
        }
    }
}
