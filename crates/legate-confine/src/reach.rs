//! What a confined process can reach and touch of Legate itself, as reported: Legate's
//! listening ports ([`LegatePorts`]) and processes outside its Landlock domain ([`Signals`]).
//!
//! These are reports only: what the kernel is asked to hold is built in `kernel`, and which
//! ports are Legate's is `ports`. Nothing here decides or applies anything.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Whether a confined process can open a TCP connection to Legate's listening ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LegatePorts {
    /// TCP `connect` to every port Legate listened on when the process started is refused
    /// (Landlock ABI 4, the port layer; or no TCP at all with `deny_network`). Ports a
    /// `legate serve` opens later are not in the process's ruleset.
    Unreachable,
    /// Not enforced: no Landlock, or no Landlock network rules (before ABI 4, Linux 6.7).
    NotEnforced,
}

impl LegatePorts {
    /// The wire form: `unreachable`, `not-enforced`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unreachable => "unreachable",
            Self::NotEnforced => "not-enforced",
        }
    }
}

impl fmt::Display for LegatePorts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether a confined process is held to its own Landlock domain for signals and abstract
/// Unix sockets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Signals {
    /// It can signal, and connect to abstract Unix sockets of, only processes of its own
    /// domain (its own tree): not Legate, not other agents (Landlock ABI 6, Linux 6.12).
    Scoped,
    /// Not enforced: no Landlock, or no Landlock scopes (before ABI 6).
    NotEnforced,
}

impl Signals {
    /// The wire form: `scoped`, `not-enforced`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Scoped => "scoped",
            Self::NotEnforced => "not-enforced",
        }
    }
}

impl fmt::Display for Signals {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_forms() {
        assert_eq!(LegatePorts::Unreachable.to_string(), "unreachable");
        assert_eq!(LegatePorts::NotEnforced.as_str(), "not-enforced");
        assert_eq!(Signals::Scoped.to_string(), "scoped");
        assert_eq!(Signals::NotEnforced.as_str(), "not-enforced");
    }
}
