//! The instruction language: turning prompt text into [`Line`]s and [`Instruction`]s.
//!
//! This module owns parsing only. It is pure: it never touches the file system, the
//! connection or the clock, and it never panics, whatever text it is given (a property test
//! checks this). Paths are returned exactly as written; resolving them against the session's
//! working directory is the turn's job.

use std::fmt;

/// One recognised instruction line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Instruction {
    /// `write <path>: <content>`: create or overwrite a file with exactly `content`.
    Write {
        /// The path as written.
        path: String,
        /// The content, with escapes (`\n`, `\t`, `\\`) already decoded.
        content: String,
    },
    /// `append <path>: <text>`: add exactly `text` to the end of a file (creating it).
    Append {
        /// The path as written.
        path: String,
        /// The text, escapes decoded.
        text: String,
    },
    /// `replace <path>: <old> => <new>`: replace every occurrence of `old` with `new`.
    Replace {
        /// The path as written.
        path: String,
        /// The text to find, escapes decoded; never empty.
        old: String,
        /// Its replacement, escapes decoded.
        new: String,
    },
    /// `delete <path>`: remove a file, or a directory with everything in it.
    Delete {
        /// The path as written.
        path: String,
    },
    /// `move <from> -> <to>`: rename a file or directory.
    Move {
        /// The source path as written.
        from: String,
        /// The destination path as written.
        to: String,
    },
    /// `run <command>`: run `sh -c <command>` in the session's directory.
    Run {
        /// The command line.
        command: String,
    },
    /// `fetch <url>`: ask to fetch a URL (revisor has no network, so it always fails).
    Fetch {
        /// The URL as written.
        url: String,
    },
    /// `read <path>`: read a file and quote its first lines in the answer.
    Read {
        /// The path as written.
        path: String,
    },
    /// `recite <path>`: read a file and send all of it back in pieces of 5 bytes, each piece
    /// as an answer chunk and then as a reasoning chunk (an agent printing a file it read).
    Recite {
        /// The path as written.
        path: String,
    },
    /// `plan: <text>`: propose this plan and ask to leave plan mode.
    Plan {
        /// The plan, escapes decoded.
        text: String,
    },
    /// `think: <text>`: send the text as a thought.
    Think {
        /// The thought, escapes decoded.
        text: String,
    },
    /// `mode <id>`: switch the session's mode.
    Mode {
        /// The mode id as written.
        id: String,
    },
}

impl Instruction {
    /// A short human title, used for the plan entry and the tool call.
    #[must_use]
    pub fn title(&self) -> String {
        match self {
            Self::Write { path, .. } => format!("Write {path}"),
            Self::Append { path, .. } => format!("Append to {path}"),
            Self::Replace { path, .. } => format!("Edit {path}"),
            Self::Delete { path } => format!("Delete {path}"),
            Self::Move { from, to } => format!("Move {from} to {to}"),
            Self::Run { command } => command.clone(),
            Self::Fetch { url } => format!("Fetch {url}"),
            Self::Read { path } => format!("Read {path}"),
            Self::Recite { path } => format!("Recite {path}"),
            Self::Plan { .. } => "Ready to code?".to_owned(),
            Self::Think { .. } => "Think".to_owned(),
            Self::Mode { id } => format!("Switch to mode {id}"),
        }
    }

    /// Whether this instruction changes something (and so is refused in plan mode).
    #[must_use]
    pub fn changes_files_or_runs(&self) -> bool {
        matches!(
            self,
            Self::Write { .. }
                | Self::Append { .. }
                | Self::Replace { .. }
                | Self::Delete { .. }
                | Self::Move { .. }
                | Self::Run { .. }
        )
    }
}

impl fmt::Display for Instruction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.title())
    }
}

/// One line of a prompt after parsing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// A recognised instruction.
    Instruction(Instruction),
    /// Anything else: part of the question the answer responds to.
    Question(String),
}

/// Parses a whole prompt, one [`Line`] per line of text. Blank lines are dropped.
#[must_use]
pub fn parse_prompt(text: &str) -> Vec<Line> {
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| match parse_line(line) {
            Some(instruction) => Line::Instruction(instruction),
            None => Line::Question(line.trim().to_owned()),
        })
        .collect()
}

/// Parses one line. Returns `None` when the line is not a well-formed instruction; such a
/// line is part of the question instead. The verb is case-insensitive; leading and trailing
/// whitespace is ignored.
#[must_use]
pub fn parse_line(line: &str) -> Option<Instruction> {
    let line = line.trim();
    // The verb ends at the first whitespace or ':' (for `plan:` and `think:`).
    let verb_end = line
        .find(|c: char| c.is_whitespace() || c == ':')
        .unwrap_or(line.len());
    let (verb, rest) = line.split_at(verb_end);
    let verb = verb.to_ascii_lowercase();
    match verb.as_str() {
        "write" => {
            let (path, content) = path_and_text(rest)?;
            Some(Instruction::Write {
                path,
                content: unescape(content),
            })
        }
        "append" => {
            let (path, text) = path_and_text(rest)?;
            Some(Instruction::Append {
                path,
                text: unescape(text),
            })
        }
        "replace" => {
            let (path, text) = path_and_text(rest)?;
            let (old, new) = text.split_once("=>")?;
            let old = unescape(old.trim());
            if old.is_empty() {
                return None;
            }
            Some(Instruction::Replace {
                path,
                old,
                new: unescape(new.trim()),
            })
        }
        "delete" => Some(Instruction::Delete {
            path: single_word_rest(rest)?,
        }),
        "move" => {
            let rest = whitespace_then(rest)?;
            let (from, to) = rest.split_once("->")?;
            let (from, to) = (from.trim(), to.trim());
            if from.is_empty() || to.is_empty() {
                return None;
            }
            Some(Instruction::Move {
                from: from.to_owned(),
                to: to.to_owned(),
            })
        }
        "run" => {
            let command = whitespace_then(rest)?.trim();
            (!command.is_empty()).then(|| Instruction::Run {
                command: command.to_owned(),
            })
        }
        "fetch" => Some(Instruction::Fetch {
            url: single_word_rest(rest)?,
        }),
        "read" => Some(Instruction::Read {
            path: single_word_rest(rest)?,
        }),
        "recite" => Some(Instruction::Recite {
            path: single_word_rest(rest)?,
        }),
        "plan" => Some(Instruction::Plan {
            text: colon_text(rest)?,
        }),
        "think" => Some(Instruction::Think {
            text: colon_text(rest)?,
        }),
        "mode" => {
            let id = single_word_rest(rest)?;
            (!id.contains(char::is_whitespace)).then_some(Instruction::Mode { id })
        }
        _ => None,
    }
}

/// `rest` must start with whitespace (so `writer x` is not `write`); returns what follows.
fn whitespace_then(rest: &str) -> Option<&str> {
    rest.starts_with(char::is_whitespace)
        .then(|| rest.trim_start())
}

/// `<path>: <text>`; the path is everything before the first `": "` or a final `:`.
fn path_and_text(rest: &str) -> Option<(String, &str)> {
    let rest = whitespace_then(rest)?;
    let (path, text) = match rest.split_once(": ") {
        Some(split) => split,
        None => (rest.strip_suffix(':')?, ""),
    };
    let path = path.trim();
    if path.is_empty() {
        return None;
    }
    Some((path.to_owned(), text))
}

/// The rest of the line after whitespace, which must not be empty.
fn single_word_rest(rest: &str) -> Option<String> {
    let rest = whitespace_then(rest)?.trim();
    (!rest.is_empty()).then(|| rest.to_owned())
}

/// `: <text>` (for `plan:` and `think:`), text not empty.
fn colon_text(rest: &str) -> Option<String> {
    let text = rest.strip_prefix(':')?.trim();
    (!text.is_empty()).then(|| unescape(text))
}

/// Decodes `\n`, `\t`, `\r` and `\\`; any other backslash is kept as written.
#[must_use]
pub fn unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.peek() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some('\\') => out.push('\\'),
            _ => {
                out.push('\\');
                continue;
            }
        }
        chars.next();
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_each_verb() {
        assert_eq!(
            parse_line("write notes/a.txt: hello\\nworld"),
            Some(Instruction::Write {
                path: "notes/a.txt".into(),
                content: "hello\nworld".into()
            })
        );
        assert_eq!(
            parse_line("  APPEND log.txt: more"),
            Some(Instruction::Append {
                path: "log.txt".into(),
                text: "more".into()
            })
        );
        assert_eq!(
            parse_line("Replace src/lib.rs: foo => bar baz"),
            Some(Instruction::Replace {
                path: "src/lib.rs".into(),
                old: "foo".into(),
                new: "bar baz".into()
            })
        );
        assert_eq!(
            parse_line("delete old.txt"),
            Some(Instruction::Delete {
                path: "old.txt".into()
            })
        );
        assert_eq!(
            parse_line("move a.txt -> b/c.txt"),
            Some(Instruction::Move {
                from: "a.txt".into(),
                to: "b/c.txt".into()
            })
        );
        assert_eq!(
            parse_line("run echo hi && ls -la"),
            Some(Instruction::Run {
                command: "echo hi && ls -la".into()
            })
        );
        assert_eq!(
            parse_line("fetch https://example.com/x"),
            Some(Instruction::Fetch {
                url: "https://example.com/x".into()
            })
        );
        assert_eq!(
            parse_line("read README.md"),
            Some(Instruction::Read {
                path: "README.md".into()
            })
        );
        assert_eq!(
            parse_line("recite notes.txt"),
            Some(Instruction::Recite {
                path: "notes.txt".into()
            })
        );
        assert_eq!(
            parse_line("plan: do it\\nthen test"),
            Some(Instruction::Plan {
                text: "do it\nthen test".into()
            })
        );
        assert_eq!(
            parse_line("Think: hmm"),
            Some(Instruction::Think { text: "hmm".into() })
        );
        assert_eq!(
            parse_line("mode plan"),
            Some(Instruction::Mode { id: "plan".into() })
        );
    }

    #[test]
    fn empty_content_is_allowed_for_write() {
        assert_eq!(
            parse_line("write empty.txt:"),
            Some(Instruction::Write {
                path: "empty.txt".into(),
                content: String::new()
            })
        );
    }

    #[test]
    fn non_instructions_are_questions() {
        for line in [
            "what does main.rs do?",
            "writer x: y",
            "write",
            "write : x",
            "write nopath",
            "replace a.txt: no arrow",
            "replace a.txt:  => new",
            "move a.txt b.txt",
            "move -> b",
            "run",
            "run   ",
            "plan",
            "plan:",
            "think: ",
            "mode a b",
            "readme please",
        ] {
            assert_eq!(parse_line(line), None, "{line:?}");
        }
    }

    #[test]
    fn prompt_mixes_instructions_and_questions() {
        let lines = parse_prompt("How big is it?\n\nwrite a: b\n  and lib.rs?  \n");
        assert_eq!(
            lines,
            vec![
                Line::Question("How big is it?".into()),
                Line::Instruction(Instruction::Write {
                    path: "a".into(),
                    content: "b".into()
                }),
                Line::Question("and lib.rs?".into()),
            ]
        );
    }

    #[test]
    fn unescape_keeps_unknown_escapes() {
        assert_eq!(unescape(r"a\nb\tc\\n\q\"), "a\nb\tc\\n\\q\\");
    }

    proptest! {
        #[test]
        fn parsing_arbitrary_text_never_panics(text in any::<String>()) {
            let _ = parse_prompt(&text);
            let _ = parse_line(&text);
            let _ = unescape(&text);
        }

        #[test]
        fn parsing_instruction_shaped_text_never_panics(
            verb in prop::sample::select(vec![
                "write", "APPEND", "replace", "delete", "move", "run", "fetch", "read",
                "plan", "think", "mode", "Write",
            ]),
            rest in "[ :=>\\-\\\\a-z/.\u{e9}\u{1F600}]{0,40}",
        ) {
            let line = format!("{verb}{rest}");
            if let Some(instruction) = parse_line(&line) {
                let _ = instruction.title();
            }
        }
    }
}
