//! The translation of a confinement into Landlock, and the probe of what the kernel enforces.
//!
//! Legate handles the write rights of Landlock ABI 3 (writing, truncating, creating, removing
//! and linking or renaming files, and making directories, devices, sockets, pipes and
//! symlinks); reads and execution are not handled, so they stay open. A kernel with ABI 3 or
//! newer enforces all of it ([`Enforcement::Full`]); ABI 1 or 2 enforces all but truncation
//! ([`Enforcement::Partial`]). Moving or linking across directories needs `REFER`, which ABI 2
//! brings and which is granted beneath the writable paths; ABI 1 has no such right, so the
//! kernel refuses every such move. When asked, the TCP rights of ABI 4 (`bind`, `connect`) are
//! handled too, with no port allowed, on kernels that have them. Nothing here spawns or
//! registers hooks.

use crate::Enforcement;
#[cfg(target_os = "linux")]
pub(crate) use linux::{Ruleset, probe, probe_network};
#[cfg(not(target_os = "linux"))]
pub(crate) use other::{Ruleset, probe, probe_network};

/// `EALREADY`: the prepared ruleset was already applied.
pub(crate) const EALREADY: i32 = libc::EALREADY;

#[cfg(target_os = "linux")]
mod linux {
    use super::Enforcement;
    use landlock::{
        ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd,
        RulesetAttr, RulesetCreated, RulesetCreatedAttr,
    };
    use legate_core::{Error, ErrorCode, Result};
    use std::path::Path;
    use std::sync::OnceLock;

    /// The newest ABI whose write rights Legate handles.
    const TARGET: ABI = ABI::V3;

    fn handled(abi: ABI) -> BitFlags<AccessFs> {
        AccessFs::from_write(abi)
    }

    /// Whether the kernel accepts a ruleset handling the write rights of `abi`, checked
    /// without restricting anything.
    fn accepts(abi: ABI) -> bool {
        landlock::Ruleset::default()
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(handled(abi))
            .and_then(|r| r.create())
            .is_ok()
    }

    /// What the running kernel enforces; probed once per process.
    pub(crate) fn probe() -> Enforcement {
        static PROBED: OnceLock<Enforcement> = OnceLock::new();
        *PROBED.get_or_init(|| {
            let e = if accepts(TARGET) {
                Enforcement::Full
            } else if accepts(ABI::V1) {
                Enforcement::Partial
            } else {
                Enforcement::None
            };
            tracing::debug!(enforcement = e.as_str(), "landlock probed");
            e
        })
    }

    /// Whether the kernel has Landlock's TCP rights (ABI 4); probed once per process.
    pub(crate) fn probe_network() -> bool {
        static PROBED: OnceLock<bool> = OnceLock::new();
        *PROBED.get_or_init(|| {
            let ok = landlock::Ruleset::default()
                .set_compatibility(CompatLevel::HardRequirement)
                .handle_access(AccessNet::from_all(ABI::V4))
                .and_then(|r| r.create())
                .is_ok();
            tracing::debug!(network = ok, "landlock network rights probed");
            ok
        })
    }

    /// A ruleset ready to restrict one process, or nothing when the kernel enforces nothing.
    pub(crate) struct Ruleset(Option<RulesetCreated>);

    fn failed(what: String, e: impl std::fmt::Display) -> Error {
        Error::new(
            ErrorCode::ConfinementUnavailable,
            format!("could not confine the process: {what}: {e}"),
        )
    }

    impl Ruleset {
        /// Builds the ruleset allowing writes beneath each of `writable` (paths that do not
        /// exist are left out), and, with `deny_network`, no TCP `bind` or `connect` at all
        /// (the caller checked [`probe_network`]).
        pub(crate) fn build(
            writable: &[&Path],
            enforcement: Enforcement,
            deny_network: bool,
        ) -> Result<Self> {
            if enforcement == Enforcement::None {
                return Ok(Self(None));
            }
            let all = handled(TARGET);
            let mut ruleset = landlock::Ruleset::default().handle_access(all);
            if deny_network {
                ruleset = ruleset.and_then(|r| {
                    r.set_compatibility(CompatLevel::HardRequirement)
                        .handle_access(AccessNet::from_all(ABI::V4))
                        .map(|r| r.set_compatibility(CompatLevel::BestEffort))
                });
            }
            let mut ruleset = ruleset
                .and_then(|r| r.create())
                .map_err(|e| failed("creating the Landlock ruleset".into(), e))?;
            for path in writable {
                let fd = match PathFd::new(path) {
                    Ok(fd) => fd,
                    Err(e) => {
                        tracing::warn!(path = %path.display(), error = %e, "a writable path is missing; left out of the confinement");
                        continue;
                    }
                };
                // Devices (and the device directory /dev/pts) get the rights of a file only:
                // writing, truncating; never making or removing entries.
                let access = if path.is_dir() && !path.starts_with("/dev") {
                    all
                } else {
                    all & AccessFs::from_file(TARGET)
                };
                ruleset = ruleset
                    .add_rule(PathBeneath::new(fd, access))
                    .map_err(|e| failed(format!("allowing writes to {}", path.display()), e))?;
            }
            // `restrict_self` also sets `PR_SET_NO_NEW_PRIVS` (the crate's default).
            Ok(Self(Some(ruleset)))
        }

        /// Restricts the calling process. Async-signal-safe: two system calls, no allocation.
        pub(crate) fn restrict_self(&mut self) -> std::io::Result<()> {
            let Some(ruleset) = self.0.take() else {
                return Ok(());
            };
            match ruleset.restrict_self() {
                Ok(_) => Ok(()),
                // The failed call left its errno; reading it does not allocate.
                Err(_) => Err(std::io::Error::last_os_error()),
            }
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod other {
    use super::Enforcement;
    use legate_core::Result;
    use std::path::Path;

    /// No kernel confinement outside Linux.
    pub(crate) fn probe() -> Enforcement {
        Enforcement::None
    }

    /// No network rules outside Linux.
    pub(crate) fn probe_network() -> bool {
        false
    }

    /// Nothing to apply.
    pub(crate) struct Ruleset;

    impl Ruleset {
        pub(crate) fn build(
            _writable: &[&Path],
            _enforcement: Enforcement,
            _deny_network: bool,
        ) -> Result<Self> {
            Ok(Self)
        }

        pub(crate) fn restrict_self(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
}
