//! `legate doctor`: what holds on this machine for Legate, each problem with its fix.
//!
//! A [`Check`] is one fact about the machine, the home or an agent: [`Status::Ok`],
//! [`Status::Warn`] (Legate works, with less protection or room than it could have) or
//! [`Status::Fail`] (something Legate promises does not hold, or the default agent does not
//! start), with one sentence saying what was found and, unless it is fine, one saying how to
//! fix it. The checks here read the kernel (`kernel`), and the files under `$LEGATE_HOME`
//! and the token files the configuration names (`files`); `legate doctor` adds one per
//! agent, started as `legate agents` starts it ([`Check::agent`]), and one of the warm
//! sessions the configuration asks for ([`Check::warm`]).
//!
//! This crate only looks: it never changes a file, a setting or a group it did not make for the
//! look itself (a probe's control group, removed at once), and never prints a token.
//!
//! ```no_run
//! # async fn f() {
//! let checks = legate_doctor::machine(std::path::Path::new("/home/me/.legate"), &[]);
//! for check in &checks {
//!     println!("{} {}: {}", check.status.mark(), check.name, check.found);
//! }
//! assert!(legate_doctor::healthy(&checks) || !checks.is_empty());
//! # }
//! ```

mod files;
mod kernel;
mod warm;

pub use warm::WarmAgent;

use serde::Serialize;
use std::path::{Path, PathBuf};

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// It holds.
    Ok,
    /// Legate works, with less protection or room than it could have.
    Warn,
    /// Something Legate promises does not hold here.
    Fail,
}

impl Status {
    /// The mark a terminal shows before the check.
    pub fn mark(self) -> &'static str {
        match self {
            Self::Ok => "✔",
            Self::Warn => "!",
            Self::Fail => "✗",
        }
    }
}

/// One fact about the machine, with its fix when it is not fine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    /// What was checked (`landlock`, `token file mcp`, `agent claude`).
    pub name: String,
    /// How it came out.
    pub status: Status,
    /// What was found, in one sentence.
    pub found: String,
    /// How to fix it (`None` when it is fine).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Check {
    /// Agent `name`'s check: it starts (`Ok(detail)`) or not (`Err(detail)`), its version
    /// outside its preset's verified range (`warning`), and `hint`, how to install its
    /// adapter. An agent that does not start fails the doctor only when it is the default
    /// one: the built-in presets are configured whether or not their adapters are installed.
    pub fn agent(
        name: &str,
        default: bool,
        started: Result<String, String>,
        warning: Option<String>,
        hint: Option<&str>,
    ) -> Self {
        let label = format!("agent {name}");
        let install = |why: &str| match hint {
            Some(h) => format!("{why}: {h}"),
            None => format!("{why}; `legate agents` shows the whole error"),
        };
        match (started, warning) {
            (Ok(detail), None) => Self::ok(label, detail),
            (Ok(detail), Some(w)) => Self::problem(
                Status::Warn,
                label,
                format!("{detail}; {w}"),
                install("install the verified adapter"),
            ),
            (Err(detail), _) => Self::problem(
                if default { Status::Fail } else { Status::Warn },
                label,
                detail,
                install("install or configure it"),
            ),
        }
    }

    /// A check that holds.
    pub fn ok(name: impl Into<String>, found: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            status: Status::Ok,
            found: found.into(),
            fix: None,
        }
    }

    /// A check that does not hold (`Warn` or `Fail`), with its fix.
    pub fn problem(
        status: Status,
        name: impl Into<String>,
        found: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Self {
            name: name.into(),
            status,
            found: found.into(),
            fix: Some(fix.into()),
        }
    }
}

/// Whether no check failed.
pub fn healthy(checks: &[Check]) -> bool {
    checks.iter().all(|c| c.status != Status::Fail)
}

/// The checks of the kernel and of the files: the confinement features, the process limits,
/// `home` and the disk under it, and each `(label, path)` token file.
pub fn machine(home: &Path, token_files: &[(String, PathBuf)]) -> Vec<Check> {
    let mut checks = kernel::checks();
    checks.extend(files::home(home));
    checks.extend(
        token_files
            .iter()
            .filter_map(|(label, path)| files::token_file(label, path)),
    );
    checks
}
