//! What a confined process can reach and touch of Legate itself, as reported: Legate's
//! listening ports ([`LegatePorts`]) and processes outside its Landlock domain ([`Signals`]).
//!
//! These are reports only: what the kernel is asked to hold is built in `kernel` (Landlock)
//! and `init` (the network namespace). Nothing here decides or applies anything.

use crate::{Enforcement, Network, kernel};
use serde::{Deserialize, Serialize};
use std::fmt;

/// Whether a confined process can open a TCP connection to Legate's listening ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LegatePorts {
    /// No port of the host is reachable: the process has a network namespace of its own
    /// (loopback only, no route out), or no TCP at all (`deny_network`, Landlock ABI 4).
    /// Ports a `legate serve` opens later are unreachable too.
    Unreachable,
    /// Not enforced: the process shares the host's network (Landlock only, or no network
    /// namespaces on this kernel) and does not deny TCP.
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

/// What of Legate a process cannot reach: its ports, from a network namespace of its own
/// (`network_isolated`) or under an enforced `deny_network`; its signals, where Landlock
/// has scopes.
pub(crate) fn reach(
    enforcement: Enforcement,
    network: Network,
    network_isolated: bool,
) -> (LegatePorts, Signals) {
    let signals = if enforcement != Enforcement::None && kernel::probe_scopes() {
        Signals::Scoped
    } else {
        Signals::NotEnforced
    };
    let ports = if network_isolated || network == Network::Denied {
        LegatePorts::Unreachable
    } else {
        LegatePorts::NotEnforced
    };
    (ports, signals)
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
