//! `agy models`: the models the CLI offers, as id and name.
//!
//! One model per line, `<id><whitespace><name>`, where the id matches
//! `[a-zA-Z0-9][a-zA-Z0-9._-]*`; other lines (headings, blanks) are skipped. A login phrase
//! anywhere in the output, or no model at all, is `AGY_AUTH_REQUIRED`.

use super::discovery::probe;
use legate_core::{Error, ErrorCode, Result};
use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

pub use crate::selection::Model;

/// Whether `text` says the user must log in (any case).
pub fn is_login_phrase(text: &str) -> bool {
    let lower = text.to_lowercase();
    [
        "authentication required",
        "not logged in",
        "login required",
        "please log in",
    ]
    .iter()
    .any(|p| lower.contains(p))
}

/// Whether a stderr line is agy's own refusal of an MCP tool call it would have had to ask
/// about: headless agy cannot prompt for its native `mcp(<server>/<tool>)` permission, so it
/// denies the call and says so (`no output produced — a tool required the "mcp" permission
/// that headless mode cannot prompt for, so it was auto-denied`). The words are matched in
/// that order, in any case, on one line, so a line that only mentions MCP does not count.
pub fn is_mcp_permission_denial(line: &str) -> bool {
    let lower = line.to_lowercase();
    let mut rest = lower.as_str();
    for word in ["no output produced", "mcp", "permission", "headless"] {
        let found = if word == "mcp" {
            ["\"mcp\"", "'mcp'"]
                .iter()
                .filter_map(|q| rest.find(q).map(|i| i + q.len()))
                .min()
        } else {
            rest.find(word).map(|i| i + word.len())
        };
        match found {
            Some(end) => rest = &rest[end..],
            None => return false,
        }
    }
    true
}

fn is_id(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

fn auth_required() -> Error {
    Error::new(
        ErrorCode::AgyAuthRequired,
        "agy needs you to log in: run `agy` interactively and log in, then try again",
    )
}

/// Parses `agy models` output.
pub fn parse_models(text: &str) -> Result<Vec<Model>> {
    if is_login_phrase(text) {
        return Err(auth_required());
    }
    let models: Vec<Model> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.ends_with(':'))
        .filter_map(|l| {
            let (id, rest) = match l.find(char::is_whitespace) {
                Some(i) => (&l[..i], l[i..].trim()),
                None => (l, ""),
            };
            is_id(id).then(|| Model {
                id: id.to_string(),
                name: if rest.is_empty() {
                    id.to_string()
                } else {
                    rest.to_string()
                },
            })
        })
        .collect();
    if models.is_empty() {
        return Err(auth_required());
    }
    Ok(models)
}

/// Runs `agy models` (confined by `fence`) and parses it. A non-zero exit with a login phrase is
/// `AGY_AUTH_REQUIRED`; any other non-zero exit is `AGY_PROCESS_FAILED`.
pub async fn list_models(
    exe: &Path,
    env: &[(OsString, OsString)],
    cwd: &Path,
    limit: Duration,
    fence: super::discovery::Fenced<'_>,
) -> Result<Vec<Model>> {
    let p = probe(exe, &["models"], env, cwd, limit, fence).await?;
    let all = format!("{}\n{}", p.stdout, p.stderr);
    if is_login_phrase(&all) {
        return Err(auth_required());
    }
    if p.code != Some(0) {
        return Err(Error::new(
            ErrorCode::AgyProcessFailed,
            format!(
                "`agy models` exited with {}: {}",
                p.code
                    .map_or_else(|| "a signal".into(), |c| format!("code {c}")),
                super::translate::truncate(p.stderr.trim(), 300)
            ),
        ));
    }
    parse_models(&p.stdout)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn only_agys_own_mcp_denial_line_counts() {
        assert!(is_mcp_permission_denial(
            "jetski: no output produced — a tool required the \"mcp\" permission that headless mode cannot prompt for, so it was auto-denied."
        ));
        assert!(is_mcp_permission_denial(
            "No Output Produced: the 'MCP' PERMISSION is needed, headless"
        ));
        assert!(!is_mcp_permission_denial(
            "Documentation mentions mcp permission in headless mode."
        ));
        assert!(!is_mcp_permission_denial(
            "headless: the \"mcp\" permission; no output produced"
        ));
    }

    #[test]
    fn lines_become_models_and_login_phrases_are_auth_errors() {
        let m = parse_models("Available models:\nmock-pro   Mock Pro\n\nmock-flash\tMock Flash (fast)\nv1.5_x\n-bad x\n").unwrap();
        let ids: Vec<&str> = m.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(ids, ["mock-pro", "mock-flash", "v1.5_x"]);
        assert_eq!(m[1].name, "Mock Flash (fast)");
        assert_eq!(m[2].name, "v1.5_x");
        for text in [
            "Error: Authentication Required",
            "you are NOT LOGGED IN",
            "",
            "  \n",
        ] {
            assert_eq!(
                parse_models(text).unwrap_err().code,
                ErrorCode::AgyAuthRequired,
                "{text:?}"
            );
        }
    }
}
