//! JSON on standard output (every command's `--json`): what serde writes, with every
//! [unseen](legate_core::text::is_unseen) character outside ASCII (a C1 control, a
//! bidirectional override, a zero-width or tag character) written as a `\uXXXX` escape. The
//! value is the same JSON; nothing in it is a byte a terminal acts on, whatever an agent or a
//! remote put in a task's text. serde_json escapes the ASCII controls itself.
//!
//! This module only encodes; it never drops or changes a value.

use serde::Serialize;

/// `value` as one line of inert JSON.
pub(crate) fn line<T: Serialize + ?Sized>(value: &T) -> serde_json::Result<String> {
    serde_json::to_string(value).map(|j| inert(&j))
}

/// `value` as indented, inert JSON.
pub(crate) fn pretty<T: Serialize + ?Sized>(value: &T) -> serde_json::Result<String> {
    serde_json::to_string_pretty(value).map(|j| inert(&j))
}

/// `json` (serde's output) with its unseen characters escaped.
pub(crate) fn inert(json: &str) -> String {
    if json.is_ascii() {
        return json.to_string();
    }
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        if !c.is_ascii() && legate_core::text::is_unseen(c) {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn what_a_terminal_would_act_on_is_escaped_and_decodes_the_same() {
        let text = "a\u{1b}[2J b\u{9b}31m c\u{202e}d e\u{e0041}f é";
        for json in [line(text).unwrap(), pretty(&[text]).unwrap()] {
            assert!(
                json.chars()
                    .all(|c| c.is_ascii() || !legate_core::text::is_unseen(c)),
                "{json}"
            );
            assert!(
                json.contains("\\u009b") && json.contains("\\udb40\\udc41"),
                "{json}"
            );
            assert!(json.contains('é'), "{json}");
        }
        assert_eq!(
            serde_json::from_str::<String>(&line(text).unwrap()).unwrap(),
            text
        );
    }

    proptest! {
        #[test]
        fn any_text_comes_back_the_same_and_inert(text in "\\PC*|[\\u{80}-\\u{9f}\\u{200b}-\\u{202e}\\u{2066}-\\u{2069}a ]*") {
            let json = line(&text).unwrap();
            prop_assert!(json.chars().all(|c| (c.is_ascii() && !c.is_ascii_control()) || (!c.is_ascii() && !legate_core::text::is_unseen(c))));
            prop_assert_eq!(serde_json::from_str::<String>(&json).unwrap(), text);
        }
    }
}
