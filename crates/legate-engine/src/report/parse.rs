//! Finding the JSON report in an agent's answer text: the last complete JSON object, in a
//! ```` ```json ```` fence or bare.
//!
//! The answer is hostile text of the agent's choosing, so the search is bounded and linear:
//! it looks only at lines that end with `}` (a fence's closing backticks after it allowed),
//! from the last one up, at most [`MAX_CANDIDATES`] of them; from each such `}` it walks back
//! to the `{` that opens it (JSON strings and their escapes understood), at most
//! [`MAX_REPORT_BYTES`] back, and parses that span once. The first span (from the end) that is
//! one complete JSON object is the report, and it is then validated strictly: an invalid
//! last object is refused, never replaced by an earlier one. Work is at most
//! `len + MAX_CANDIDATES × 3 × MAX_REPORT_BYTES` bytes, whatever the text.
//!
//! This module only finds and parses; it never interprets the object (see `validate`).

use super::invalid;
use legate_core::Result;
use serde_json::Value;

/// The largest report accepted, in bytes.
pub(crate) const MAX_REPORT_BYTES: usize = 256 * 1024;

/// How many lines ending with `}` are tried, from the end.
pub(crate) const MAX_CANDIDATES: usize = 16;

/// The last complete JSON object of `text`, or `REPORT_INVALID`.
pub(crate) fn last_object(text: &str) -> Result<Value> {
    scan(text).0
}

/// [`last_object`], and the bytes it looked at (for the bound's test).
fn scan(text: &str) -> (Result<Value>, usize) {
    let bytes = text.as_bytes();
    let mut work = 0usize;
    let mut tried = 0usize;
    let mut first_error: Option<String> = None;
    let mut end = bytes.len();
    loop {
        let start = bytes[..end]
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        work += end - start;
        // `start` and `end` sit at a newline or an end of the text: char boundaries.
        let line = text[start..end].trim_end();
        let line = line.strip_suffix("```").unwrap_or(line).trim_end();
        if line.ends_with('}') {
            tried += 1;
            let close = start + line.len() - 1;
            match object_ending_at(bytes, close, &mut work) {
                Ok(value) => return (Ok(value), work),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
            if tried == MAX_CANDIDATES {
                break;
            }
        }
        if start == 0 {
            break;
        }
        end = start - 1;
    }
    let why = first_error.unwrap_or_else(|| "no JSON object ends a line of the answer".into());
    (
        Err(invalid(format!(
            "no JSON report was found in the answer ({why}); the report must be one JSON object, the last thing in the answer"
        ))),
        work,
    )
}

/// The JSON object whose closing brace is at `close`, parsed.
fn object_ending_at(
    bytes: &[u8],
    close: usize,
    work: &mut usize,
) -> std::result::Result<Value, String> {
    let Some(open) = opening(bytes, close, work) else {
        return Err(if close >= MAX_REPORT_BYTES {
            format!("no object of at most {MAX_REPORT_BYTES} bytes ends at the last brace")
        } else {
            "a closing brace has no opening one".into()
        });
    };
    let span = &bytes[open..=close];
    *work += span.len();
    match serde_json::from_slice::<Value>(span) {
        Ok(v) if v.is_object() => Ok(v),
        Ok(_) => Err("the last braces hold no JSON object".into()),
        Err(e) => Err(format!("the last object is not valid JSON: {e}")),
    }
}

/// Where the `{` matching the `}` at `close` stands, walking back at most
/// [`MAX_REPORT_BYTES`]; braces inside JSON strings are skipped.
fn opening(bytes: &[u8], close: usize, work: &mut usize) -> Option<usize> {
    let floor = (close + 1).saturating_sub(MAX_REPORT_BYTES);
    let mut depth = 0usize;
    let mut in_string = false;
    let mut i = close + 1;
    while i > floor {
        i -= 1;
        *work += 1;
        match bytes[i] {
            b'"' if !escaped(bytes, i, floor, work) => in_string = !in_string,
            _ if in_string => {}
            b'}' => depth += 1,
            b'{' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// Whether the quote at `i` is escaped: preceded by an odd run of backslashes. Each run is
/// counted only for the quote that follows it, so the walk stays linear.
fn escaped(bytes: &[u8], i: usize, floor: usize, work: &mut usize) -> bool {
    let run = bytes[floor..i]
        .iter()
        .rev()
        .take_while(|&&b| b == b'\\')
        .count();
    *work += run;
    run % 2 == 1
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn a_fenced_or_bare_object_is_found_and_the_last_wins() {
        let fenced = "Here is the plan.\n```json\n{\"summary\": \"a\", \"n\": {\"x\": 1}}\n```\n";
        assert_eq!(last_object(fenced).unwrap()["summary"], "a");
        let bare = "{\"first\": 1}\nthen\n{\n  \"second\": \"} {\\\" }\"\n}\n";
        assert_eq!(last_object(bare).unwrap(), json!({"second": "} {\" }"}));
        let one_line = "done ```json {\"k\": [1, {\"a\": 2}]} ```";
        assert_eq!(last_object(one_line).unwrap(), json!({"k": [1, {"a": 2}]}));
    }

    #[test]
    fn prose_braces_and_broken_objects_are_not_reports() {
        assert!(last_object("I used {braces} in prose").is_err());
        assert!(last_object("no json here").is_err());
        let err = last_object("```json\n{\"a\": 1,}\n```").unwrap_err();
        assert_eq!(err.code, legate_core::ErrorCode::ReportInvalid);
        assert!(err.message.contains("not valid JSON"), "{}", err.message);
        // A broken last object is not complete: the last complete one is the one before.
        let two = "{\"summary\": \"before\"}\n\n{\"summary\": \"last\" \"broken\"}";
        assert_eq!(last_object(two).unwrap()["summary"], "before");
    }

    #[test]
    fn an_object_larger_than_the_bound_is_refused() {
        let big = format!("{{\"s\": \"{}\"}}", "x".repeat(MAX_REPORT_BYTES));
        let err = last_object(&big).unwrap_err();
        assert!(err.message.contains("at most"), "{}", err.message);
    }

    #[test]
    fn hostile_brace_storms_stay_within_the_work_bound() {
        for text in [
            "}\n".repeat(200_000),
            format!("{}}}", "{".repeat(300_000)),
            format!("\"{}\"}}", "\\".repeat(300_000)),
            "{\"a\":\"\\\"}\n".repeat(50_000),
        ] {
            let (_, work) = scan(&text);
            assert!(
                work <= text.len() + MAX_CANDIDATES * 3 * MAX_REPORT_BYTES,
                "work {work} for {} bytes",
                text.len()
            );
        }
    }

    fn object() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            any::<i64>().prop_map(Value::from),
            "\\PC{0,12}".prop_map(Value::from),
            any::<bool>().prop_map(Value::from),
        ];
        let value = leaf.prop_recursive(3, 16, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
                prop::collection::btree_map("\\PC{0,6}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        });
        prop::collection::btree_map("[a-z{}\"\\\\]{1,6}", value, 1..4)
            .prop_map(|m| Value::Object(m.into_iter().collect()))
    }

    proptest! {
        #[test]
        fn any_text_is_scanned_without_panic(text in "\\PC{0,400}") {
            let (_, work) = scan(&text);
            prop_assert!(work <= text.len() * (3 * MAX_CANDIDATES + 1) + 1);
        }

        #[test]
        fn the_last_object_is_found_after_any_prose(
            prose in "[^{}`]{0,80}",
            first in object(),
            last in object(),
            pretty in any::<bool>(),
            fence in any::<bool>(),
        ) {
            let render = |v: &Value| if pretty {
                serde_json::to_string_pretty(v).unwrap()
            } else {
                serde_json::to_string(v).unwrap()
            };
            let last_text = if fence {
                format!("```json\n{}\n```\n", render(&last))
            } else {
                format!("{}\n", render(&last))
            };
            let text = format!("{prose}\n{}\n{prose}\n{last_text}", render(&first));
            prop_assert_eq!(last_object(&text).unwrap(), last);
        }
    }
}
