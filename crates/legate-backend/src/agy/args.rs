//! The argument vector of one `agy` run, in the order the interface documents.
//!
//! 1. `--sandbox --input-format stream-json --output-format stream-json --print-timeout <N>s`;
//! 2. `--add-dir <root>` when offered; 3. `--new-project` when offered and not resuming;
//! 4. `--mode plan` for read-only (required), or `--mode accept-edits` when offered;
//! 5. `--model <id>` (two arguments, as the interface documents; an id starting with `-` is
//!    refused, never passed); 6. `--effort <level>` when the task asks for one;
//! 7. `--conversation <id>` to resume;
//! 8. `--json-schema <json or file>` when the task asks for structured output (the JSON
//!    inline up to [`INLINE_SCHEMA_MAX`] bytes, else the path of a 0600 file the caller
//!    wrote).
//!
//! Never `--dangerously-skip-permissions`, never the prompt, never a secret.

use super::discovery::Capabilities;
use legate_core::{Error, ErrorCode, Result};
use std::ffi::OsString;
use std::path::PathBuf;

/// What one run needs beyond the capabilities.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunOptions {
    /// `--print-timeout`, in whole seconds (at least 1).
    pub print_timeout_secs: u64,
    /// Read-only: `--mode plan`.
    pub read_only: bool,
    /// `--add-dir` (the workspace root).
    pub add_dir: Option<PathBuf>,
    /// `--model`; `None` lets the CLI choose.
    pub model: Option<String>,
    /// `--effort`; `None` leaves it to the CLI.
    pub effort: Option<legate_core::Effort>,
    /// `--conversation` to resume; `None` starts a new conversation.
    pub conversation: Option<String>,
    /// `--json-schema`: the schema as compact JSON, or the path of the file holding it.
    pub json_schema: Option<OsString>,
}

/// The longest schema passed inline to `--json-schema`; a longer one goes in a file.
pub const INLINE_SCHEMA_MAX: usize = 8 * 1024;

/// Whether `id` may be passed to `--conversation`: `^[a-zA-Z0-9-]{1,128}$`.
pub fn valid_conversation_id(id: &str) -> bool {
    (1..=128).contains(&id.len()) && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
}

/// The arguments, or `AGY_INCOMPATIBLE` when the run needs something the CLI lacks.
pub fn build(caps: &Capabilities, o: &RunOptions) -> Result<Vec<OsString>> {
    let mut a: Vec<OsString> = [
        "--sandbox",
        "--input-format",
        "stream-json",
        "--output-format",
        "stream-json",
        "--print-timeout",
    ]
    .iter()
    .map(OsString::from)
    .collect();
    a.push(format!("{}s", o.print_timeout_secs.max(1)).into());
    if let (true, Some(dir)) = (caps.add_dir, &o.add_dir) {
        a.push("--add-dir".into());
        a.push(dir.into());
    }
    if caps.new_project && o.conversation.is_none() {
        a.push("--new-project".into());
    }
    if o.read_only {
        if !caps.plan_mode {
            return Err(Error::new(
                ErrorCode::AgyIncompatible,
                "this agy does not offer `--mode plan`, so it cannot run a read-only task",
            ));
        }
        a.push("--mode".into());
        a.push("plan".into());
    } else if caps.accept_edits {
        a.push("--mode".into());
        a.push("accept-edits".into());
    }
    if let Some(model) = &o.model {
        if !caps.model_flag {
            return Err(Error::new(
                ErrorCode::ModelNotAvailable,
                format!("this agy has no `--model`, so model {model} cannot be selected"),
            ));
        }
        // agy documents `--model <id>`, not `--model=<id>`, so the id is an argument of its
        // own; one that starts with `-` would be read as a flag, and is never passed.
        if model.starts_with('-') {
            return Err(Error::invalid_input(format!(
                "model {model} starts with '-', which agy would read as a flag, so it is not passed"
            )));
        }
        a.push("--model".into());
        a.push(model.into());
    }
    if let Some(effort) = o.effort {
        if !caps.effort {
            return Err(Error::new(
                ErrorCode::AgyIncompatible,
                format!(
                    "this agy does not offer `--effort`, so effort {effort} cannot be asked for"
                ),
            ));
        }
        a.push("--effort".into());
        a.push(effort.as_str().into());
    }
    if let Some(id) = &o.conversation {
        if !caps.conversation || !valid_conversation_id(id) {
            return Err(Error::internal(
                "a conversation was resumed that the CLI cannot resume",
            ));
        }
        a.push("--conversation".into());
        a.push(id.into());
    }
    if let Some(schema) = &o.json_schema {
        if !caps.json_schema {
            return Err(Error::new(
                ErrorCode::AgyIncompatible,
                "this agy does not offer `--json-schema`, so it cannot answer with structured output",
            ));
        }
        a.push("--json-schema".into());
        a.push(schema.clone());
    }
    Ok(a)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn all() -> Capabilities {
        Capabilities::from_help(
            "--sandbox --output-format stream-json --mode plan accept-edits models --model --conversation --add-dir --new-project --json-schema --effort",
        )
    }

    fn strs(v: &[OsString]) -> Vec<&str> {
        v.iter().map(|s| s.to_str().unwrap()).collect()
    }

    #[test]
    fn a_new_write_run_in_order() {
        let a = build(
            &all(),
            &RunOptions {
                print_timeout_secs: 90,
                add_dir: Some("/w".into()),
                model: Some("mock-pro".into()),
                ..RunOptions::default()
            },
        )
        .unwrap();
        assert_eq!(
            strs(&a),
            [
                "--sandbox",
                "--input-format",
                "stream-json",
                "--output-format",
                "stream-json",
                "--print-timeout",
                "90s",
                "--add-dir",
                "/w",
                "--new-project",
                "--mode",
                "accept-edits",
                "--model",
                "mock-pro"
            ]
        );
        assert!(!strs(&a).contains(&"--dangerously-skip-permissions"));
    }

    /// The model is passed as `--model <id>`, two arguments (agy documents no `--model=<id>`),
    /// so an id that starts with `-` is refused rather than passed where agy reads a flag.
    #[test]
    fn a_model_is_its_own_argument_and_never_a_flag() {
        let with = |model: &str| {
            build(
                &all(),
                &RunOptions {
                    print_timeout_secs: 5,
                    model: Some(model.into()),
                    ..RunOptions::default()
                },
            )
        };
        let a = with("mock-pro").unwrap();
        let at = strs(&a).iter().position(|s| *s == "--model").unwrap();
        assert_eq!(strs(&a)[at..at + 2], ["--model", "mock-pro"]);
        for m in ["--dangerously-skip-permissions", "-x"] {
            let e = with(m).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidInput, "{m}");
        }
    }

    #[test]
    fn a_read_only_resume() {
        let a = build(
            &all(),
            &RunOptions {
                print_timeout_secs: 5,
                read_only: true,
                conversation: Some("conv-1".into()),
                ..RunOptions::default()
            },
        )
        .unwrap();
        assert_eq!(
            strs(&a)[6..],
            ["5s", "--mode", "plan", "--conversation", "conv-1"]
        );
        let minimal = Capabilities::from_help("--sandbox --output-format stream-json");
        let e = build(
            &minimal,
            &RunOptions {
                read_only: true,
                ..RunOptions::default()
            },
        )
        .unwrap_err();
        assert_eq!(e.code, ErrorCode::AgyIncompatible);
        assert!(valid_conversation_id("abc-DEF-123"));
        assert!(!valid_conversation_id("a b"));
        assert!(!valid_conversation_id(""));
        assert!(!valid_conversation_id(&"a".repeat(129)));
    }

    #[test]
    fn a_schema_comes_last_and_needs_the_capability() {
        let o = RunOptions {
            print_timeout_secs: 5,
            json_schema: Some("{\"type\":\"object\"}".into()),
            ..RunOptions::default()
        };
        let a = build(&all(), &o).unwrap();
        assert_eq!(
            strs(&a)[a.len() - 2..],
            ["--json-schema", "{\"type\":\"object\"}"]
        );
        let old = Capabilities::from_help("--sandbox --output-format stream-json");
        assert_eq!(
            build(&old, &o).unwrap_err().code,
            ErrorCode::AgyIncompatible
        );
    }

    #[test]
    fn an_effort_follows_the_model_and_needs_the_capability() {
        let o = RunOptions {
            print_timeout_secs: 5,
            model: Some("m".into()),
            effort: Some(legate_core::Effort::Xhigh),
            conversation: Some("c".into()),
            ..RunOptions::default()
        };
        let a = build(&all(), &o).unwrap();
        let at = strs(&a).iter().position(|s| *s == "--effort").unwrap();
        assert_eq!(
            strs(&a)[at - 2..at + 3],
            ["--model", "m", "--effort", "xhigh", "--conversation"]
        );
        let old =
            Capabilities::from_help("--sandbox --output-format stream-json --model --conversation");
        assert_eq!(
            build(&old, &o).unwrap_err().code,
            ErrorCode::AgyIncompatible
        );
    }
}
