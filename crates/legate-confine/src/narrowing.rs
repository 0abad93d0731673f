//! What a test's sandbox selection narrows beyond an agent's confinement: the system
//! directories a read-restricted process may still read, and whether a process that may not
//! start others is held to it. The rules themselves are built in `kernel` (reads) and
//! `seccomp` (children); this module only names them and never enforces anything.

use serde::{Deserialize, Serialize};

/// The system directories a read-restricted confinement may read and execute beneath (those
/// missing on this machine are left out). No home directory, no `/run` (where per-user
/// sockets and keyrings live), no `/tmp`, no `/var`: anything else is a read root the
/// caller names.
pub const SYSTEM_READABLE: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
    "/opt",
    "/nix/store",
    "/proc",
    "/sys",
    "/dev",
];

/// Whether a confinement that denies child processes holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Children {
    /// Not asked: the process may start others.
    Allowed,
    /// Refused by the seccomp filter (`fork`, `vfork`, `clone3`, a `clone` without
    /// `CLONE_THREAD`).
    DeniedSeccomp,
    /// Asked, but this build has no filter for the architecture.
    NotEnforced,
}

impl Children {
    /// The wire form: `allowed`, `denied-seccomp`, `not-enforced`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Allowed => "allowed",
            Self::DeniedSeccomp => "denied-seccomp",
            Self::NotEnforced => "not-enforced",
        }
    }
}
