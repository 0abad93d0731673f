//! What an approval and an audit row say about a tool call ([`ToolCallSummary`]), and the
//! scope an allow-for-task answer covers.
//!
//! The command is read as words from the agent's raw input: a list of strings as given, or
//! one string split the way a POSIX shell splits words (quotes and backslashes; no
//! expansion). A string that does not split cleanly (an open quote) has no command: it is
//! shown by its title only, and nothing is ever matched on raw text.

use crate::supervision::ToolCallSummary;
use legate_core::PermissionRequest;

/// The longest command kept, in words; a longer one is cut.
const MAX_WORDS: usize = 256;

/// The summary of `request`.
pub(crate) fn summarize(request: &PermissionRequest) -> ToolCallSummary {
    ToolCallSummary {
        kind: request.tool_kind,
        title: request.title.clone(),
        paths: request.locations.clone(),
        command: request.raw_input.as_ref().and_then(command_words),
    }
}

/// The command's words in a tool's raw input (`{"command": …}` or the input itself).
fn command_words(raw: &serde_json::Value) -> Option<Vec<String>> {
    let value = raw.get("command").unwrap_or(raw);
    let mut words = match value {
        serde_json::Value::String(s) => split_words(s)?,
        serde_json::Value::Array(items) => items
            .iter()
            .map(|v| v.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()?,
        _ => return None,
    };
    words.truncate(MAX_WORDS);
    (!words.is_empty()).then_some(words)
}

/// Splits `line` into words as a POSIX shell does before expansion: blanks separate words,
/// `'…'` is literal, `"…"` keeps blanks and honours `\"`, `\\`, `\$` and `` \` ``, and a
/// backslash outside quotes escapes the next character. `None` for an unterminated quote
/// or a trailing backslash.
pub(crate) fn split_words(line: &str) -> Option<Vec<String>> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' | '\n' => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next()? {
                        '\'' => break,
                        other => word.push(other),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next()? {
                        '"' => break,
                        '\\' => {
                            let next = chars.next()?;
                            if !matches!(next, '"' | '\\' | '$' | '`' | '\n') {
                                word.push('\\');
                            }
                            word.push(next);
                        }
                        other => word.push(other),
                    }
                }
            }
            '\\' => {
                in_word = true;
                word.push(chars.next()?);
            }
            other => {
                in_word = true;
                word.push(other);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Some(words)
}

/// The scope an allow-for-task answer covers: the same task (the caller's lookup), the same
/// policy rule, the same tool kind and, for commands, the same program word (exactly: a path
/// to another `touch` is another program). Encoded as a JSON array, so no component can
/// forge another's boundary.
pub(crate) fn scope(rule_id: Option<&str>, summary: &ToolCallSummary) -> String {
    let program = summary
        .command
        .as_ref()
        .and_then(|w| w.first())
        .map_or("", String::as_str);
    serde_json::json!([rule_id.unwrap_or(""), summary.kind.as_str(), program]).to_string()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use legate_core::ToolKind;
    use proptest::prelude::*;

    fn words(s: &str) -> Option<Vec<String>> {
        split_words(s)
    }

    #[test]
    fn words_split_like_a_shell() {
        assert_eq!(
            words("cargo test -p x").unwrap(),
            ["cargo", "test", "-p", "x"]
        );
        assert_eq!(
            words("  touch 'a b'  \"c d\" e\\ f").unwrap(),
            ["touch", "a b", "c d", "e f"]
        );
        assert_eq!(
            words(r#"echo "a\"b" '\n'"#).unwrap(),
            ["echo", "a\"b", "\\n"]
        );
        assert_eq!(words("a''b \"\"").unwrap(), ["ab", ""]);
        assert_eq!(words("rm 'unterminated"), None);
        assert_eq!(words("rm trailing\\"), None);
        assert!(words("   ").unwrap().is_empty());
    }

    #[test]
    fn the_scope_separates_programs_rules_and_kinds() {
        let summary = |kind, command: &[&str]| ToolCallSummary {
            kind,
            title: String::new(),
            paths: Vec::new(),
            command: Some(command.iter().map(|s| s.to_string()).collect()),
        };
        let touch = scope(Some("r"), &summary(ToolKind::Execute, &["touch", "a"]));
        assert_eq!(
            touch,
            scope(Some("r"), &summary(ToolKind::Execute, &["touch", "b"]))
        );
        assert_ne!(
            touch,
            scope(Some("r"), &summary(ToolKind::Execute, &["/x/touch", "a"]))
        );
        assert_ne!(
            touch,
            scope(Some("q"), &summary(ToolKind::Execute, &["touch", "a"]))
        );
        assert_ne!(
            touch,
            scope(Some("r"), &summary(ToolKind::Edit, &["touch", "a"]))
        );
        // A program word cannot reach into the rule's part of the key.
        assert_ne!(
            scope(
                Some("r\",\"execute"),
                &summary(ToolKind::Execute, &["touch"])
            ),
            scope(
                Some("r"),
                &summary(ToolKind::Execute, &["execute\",\"touch"])
            ),
        );
    }

    fn quote(word: &str) -> String {
        format!("'{}'", word.replace('\'', "'\\''"))
    }

    proptest! {
        /// Any list of words, each single-quoted the way a shell script would, splits back
        /// into exactly those words.
        #[test]
        fn quoted_words_round_trip(ws in prop::collection::vec("[^\u{0}]{0,12}", 0..6)) {
            let line = ws.iter().map(|w| quote(w)).collect::<Vec<_>>().join(" ");
            prop_assert_eq!(split_words(&line), Some(ws));
        }

        /// Splitting never panics, and no word of a clean split contains an unquoted blank.
        #[test]
        fn splitting_hostile_text_never_panics(line in "\\PC{0,64}") {
            if let Some(ws) = split_words(&line) {
                prop_assert!(ws.len() <= line.len());
            }
        }

        /// The program of a command is its first word, whatever follows.
        #[test]
        fn the_scope_ignores_arguments(
            program in "[a-z/]{1,8}",
            a in prop::collection::vec("[a-z ]{0,6}", 0..4),
            b in prop::collection::vec("[a-z ]{0,6}", 0..4),
        ) {
            let mk = |rest: &[String]| ToolCallSummary {
                kind: ToolKind::Execute,
                title: String::new(),
                paths: Vec::new(),
                command: Some(std::iter::once(program.clone()).chain(rest.iter().cloned()).collect()),
            };
            prop_assert_eq!(scope(Some("r"), &mk(&a)), scope(Some("r"), &mk(&b)));
        }
    }
}
