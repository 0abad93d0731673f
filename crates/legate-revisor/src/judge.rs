//! Revisor as a supervising agent: its deterministic answer to Legate's judge prompt.
//!
//! Legate asks a supervising agent to judge one permission request with a prompt whose first
//! line is exactly [`JUDGE_HEADER`] and whose request is one line, `REQUEST: ` followed by a
//! JSON object (the engine's `supervision::judge` frames it). Revisor answers such a prompt
//! with one JSON object `{"decision", "reason"}` and does nothing else: it allows a call of
//! tool kind `read` and denies every other one.
//!
//! This module owns that rule and nothing else. It is pure: it never touches the file system
//! or the connection, never treats any part of the request as an instruction (the request is
//! data; a prompt carrying a judge header is never read as the instruction language), and
//! never panics, whatever text it is given.

use serde_json::{Value, json};

/// The first line of every judge prompt, byte for byte.
pub const JUDGE_HEADER: &str = "Legate supervision request: judge one permission request";

/// The prefix of the line carrying the request, as one JSON object.
pub const REQUEST_PREFIX: &str = "REQUEST: ";

/// Whether `prompt` is a judge prompt (its first line is [`JUDGE_HEADER`]).
#[must_use]
pub fn is_judge_prompt(prompt: &str) -> bool {
    prompt.lines().next().map(str::trim) == Some(JUDGE_HEADER)
}

/// Revisor's answer to a judge prompt: `allow` for tool kind `read`, `deny` for anything
/// else, including a request it cannot read. `None` when `prompt` is not a judge prompt.
#[must_use]
pub fn answer(prompt: &str) -> Option<String> {
    if !is_judge_prompt(prompt) {
        return None;
    }
    let kind = prompt
        .lines()
        .find_map(|line| line.trim().strip_prefix(REQUEST_PREFIX))
        .and_then(|data| serde_json::from_str::<Value>(data).ok())
        .and_then(|request| {
            request
                .pointer("/tool/kind")
                .and_then(Value::as_str)
                .map(str::to_owned)
        });
    let verdict = match kind.as_deref() {
        Some("read") => json!({
            "decision": "allow",
            "reason": "revisor allows reading",
        }),
        Some(other) => json!({
            "decision": "deny",
            "reason": format!("revisor allows only reads, and this is {}", bounded(other)),
        }),
        None => json!({
            "decision": "deny",
            "reason": "revisor could not read the request",
        }),
    };
    Some(verdict.to_string())
}

/// At most 40 characters of a name that came from the request.
fn bounded(text: &str) -> String {
    text.chars().take(40).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn prompt(kind: &str) -> String {
        format!(
            "{JUDGE_HEADER}\nsome framing\n{REQUEST_PREFIX}{}\n",
            json!({"tool": {"kind": kind, "title": "t"}})
        )
    }

    #[test]
    fn allows_reads_and_denies_everything_else() {
        let read: Value = serde_json::from_str(&answer(&prompt("read")).unwrap()).unwrap();
        assert_eq!(read["decision"], "allow");
        for kind in ["edit", "execute", "fetch", "delete", "other"] {
            let v: Value = serde_json::from_str(&answer(&prompt(kind)).unwrap()).unwrap();
            assert_eq!(v["decision"], "deny", "{kind}");
            assert_eq!(v.as_object().unwrap().len(), 2);
        }
    }

    #[test]
    fn an_unreadable_request_is_denied_and_other_prompts_are_not_judged() {
        let v: Value =
            serde_json::from_str(&answer(&format!("{JUDGE_HEADER}\nREQUEST: {{")).unwrap())
                .unwrap();
        assert_eq!(v["decision"], "deny");
        assert_eq!(answer("write a.txt: x"), None);
        assert_eq!(answer(&format!("hello\n{JUDGE_HEADER}")), None);
    }

    proptest! {
        #[test]
        fn never_panics_and_always_answers_one_object(text in ".{0,400}") {
            let _ = answer(&text);
            let judged = answer(&format!("{JUDGE_HEADER}\n{text}")).unwrap();
            let v: Value = serde_json::from_str(&judged).unwrap();
            prop_assert!(v["decision"] == "allow" || v["decision"] == "deny");
        }
    }
}
