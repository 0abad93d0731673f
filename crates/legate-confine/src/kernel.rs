//! The translation of a confinement into Landlock, and the probe of what the kernel enforces.
//!
//! Legate handles the write rights of Landlock ABI 3 (writing, truncating, creating, removing
//! and linking or renaming files, and making directories, devices, sockets, pipes and
//! symlinks); reads and execution are not handled, so they stay open. A kernel with ABI 3 or
//! newer enforces all of it ([`Enforcement::Full`]); ABI 1 or 2 enforces all but truncation
//! ([`Enforcement::Partial`]). Moving or linking across directories needs `REFER`, which ABI 2
//! brings and which is granted beneath the writable paths; ABI 1 has no such right, so the
//! kernel refuses every such move. When asked, the TCP rights of ABI 4 (`bind`, `connect`) are
//! handled too, with no port allowed, on kernels that have them.
//!
//! A confinement that restricts reads (a test run under a sandbox selection) also handles the
//! read rights of ABI 1 (reading files, listing directories, executing): they are allowed
//! beneath the readable paths only (the system directories, the selection's read roots) and
//! beneath every writable path.
//!
//! Paths a caller named (a selection's roots: `strict`) are opened without following any
//! symlink, from `/` down (`legate-beneath`), so a root swapped for a link after it was
//! checked is refused (`SANDBOX_SELECTION_DENIED`) instead of granting the link's target; and
//! a strict path that is missing is an error, never left out quietly.
//!
//! The scopes of ABI 6 (`LANDLOCK_SCOPE_SIGNAL`, `LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET`) ride
//! along where the kernel has them: the process may not signal, nor connect to an abstract
//! Unix socket of, any process outside its own Landlock domain, Legate included. (Legate's
//! listening ports are out of reach through the network namespace, not Landlock: `init`.)
//!
//! Nothing here spawns or registers hooks.

use crate::Enforcement;
#[cfg(target_os = "linux")]
pub(crate) use linux::{Ruleset, abi, probe, probe_network, probe_scopes};
#[cfg(not(target_os = "linux"))]
pub(crate) use other::{Ruleset, abi, probe, probe_network, probe_scopes};

/// `EALREADY`: the prepared ruleset was already applied.
pub(crate) const EALREADY: i32 = libc::EALREADY;

#[cfg(target_os = "linux")]
mod linux {
    use super::Enforcement;
    use landlock::{
        ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd,
        RulesetAttr, RulesetCreated, RulesetCreatedAttr, Scope,
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

    /// Whether the kernel has Landlock's scopes (ABI 6: signals, abstract Unix sockets);
    /// probed once per process.
    pub(crate) fn probe_scopes() -> bool {
        static PROBED: OnceLock<bool> = OnceLock::new();
        *PROBED.get_or_init(|| {
            let ok = landlock::Ruleset::default()
                .set_compatibility(CompatLevel::HardRequirement)
                .scope(Scope::from_all(ABI::V6))
                .and_then(|r| r.create())
                .is_ok();
            tracing::debug!(scopes = ok, "landlock scopes probed");
            ok
        })
    }

    /// The running kernel's Landlock ABI version (0: none), as far as this crate knows the
    /// ABIs (up to 6); probed once per process by asking for each ABI's newest rights.
    pub(crate) fn abi() -> u8 {
        static PROBED: OnceLock<u8> = OnceLock::new();
        *PROBED.get_or_init(|| {
            let fs = |abi: ABI| {
                landlock::Ruleset::default()
                    .set_compatibility(CompatLevel::HardRequirement)
                    .handle_access(AccessFs::from_all(abi))
                    .and_then(|r| r.create())
                    .is_ok()
            };
            let v = if probe_scopes() {
                6
            } else if fs(ABI::V5) {
                5
            } else if probe_network() {
                4
            } else if fs(ABI::V3) {
                3
            } else if fs(ABI::V2) {
                2
            } else if fs(ABI::V1) {
                1
            } else {
                0
            };
            tracing::debug!(abi = v, "landlock ABI probed");
            v
        })
    }

    /// A ruleset ready to restrict one process, or nothing when the kernel enforces nothing.
    pub(crate) struct Ruleset {
        fs: Option<RulesetCreated>,
        /// The rights on terminals, when `/dev/pts` is writable: given again to the
        /// terminals of the process's own devpts ([`Ruleset::allow_own_terminals`]).
        terminals: Option<BitFlags<AccessFs>>,
    }

    /// A caller-named directory, opened `O_PATH` from `/` without following any symlink on
    /// the way or at the end.
    fn open_strict(path: &Path) -> Result<std::os::fd::OwnedFd> {
        let denied = |why: String| {
            Error::new(
                ErrorCode::SandboxSelectionDenied,
                format!(
                    "the sandbox root {} {why}; it was checked, then changed",
                    path.display()
                ),
            )
        };
        let rel = path
            .strip_prefix("/")
            .map_err(|_| denied("is not absolute".into()))?;
        // The sentence with the kernel's refusal in parentheses, kept as the cause.
        let denied_by = |what: &str, e: legate_beneath::BeneathError| {
            let before = format!("the sandbox root {} {what} (", path.display());
            let after = "); it was checked, then changed";
            Error::quoting_between(ErrorCode::SandboxSelectionDenied, before, e, after)
        };
        let root = legate_beneath::Root::open(Path::new("/"))
            .map_err(|e| denied_by("could not be opened", e))?;
        root.open_dir(rel)
            .map_err(|e| denied_by("is not a directory reached without links", e))
    }

    fn failed(what: String, e: impl std::fmt::Display) -> Error {
        Error::new(
            ErrorCode::ConfinementUnavailable,
            format!("could not confine the process: {what}: {e}"),
        )
    }

    impl Ruleset {
        /// Builds the ruleset allowing writes beneath each of `writable` (paths that do not
        /// exist are left out); with `readable`, reads are handled too and allowed beneath
        /// those paths and the writable ones only; and, with `deny_network`, no TCP `bind` or `connect` at all
        /// (the caller checked [`probe_network`]). With `scoped`, the ABI 6 scopes too (the
        /// caller checked [`probe_scopes`]).
        pub(crate) fn build(
            writable: &[&Path],
            readable: Option<&[&Path]>,
            strict: &[&Path],
            enforcement: Enforcement,
            deny_network: bool,
            scoped: bool,
        ) -> Result<Self> {
            if enforcement == Enforcement::None {
                return Ok(Self {
                    fs: None,
                    terminals: None,
                });
            }
            let read = AccessFs::from_read(ABI::V1);
            let all = match readable {
                Some(_) => handled(TARGET) | read,
                None => handled(TARGET),
            };
            let mut ruleset = landlock::Ruleset::default().handle_access(all);
            if scoped {
                ruleset = ruleset.and_then(|r| {
                    r.set_compatibility(CompatLevel::HardRequirement)
                        .scope(Scope::from_all(ABI::V6))
                        .map(|r| r.set_compatibility(CompatLevel::BestEffort))
                });
            }
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
                if strict.contains(path) {
                    let fd = open_strict(path)?;
                    ruleset = ruleset
                        .add_rule(PathBeneath::new(fd, all))
                        .map_err(|e| failed(format!("allowing writes to {}", path.display()), e))?;
                    continue;
                }
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
            for path in readable.unwrap_or_default() {
                if strict.contains(path) {
                    let fd = open_strict(path)?;
                    ruleset = ruleset
                        .add_rule(PathBeneath::new(fd, read))
                        .map_err(|e| failed(format!("allowing reads of {}", path.display()), e))?;
                    continue;
                }
                let Ok(fd) = PathFd::new(path) else {
                    // A system directory this machine does not have (`/lib32`, `/nix/store`).
                    tracing::debug!(path = %path.display(), "a readable path is missing; left out");
                    continue;
                };
                let access = if path.is_dir() {
                    read
                } else {
                    read & AccessFs::from_file(ABI::V1)
                };
                ruleset = ruleset
                    .add_rule(PathBeneath::new(fd, access))
                    .map_err(|e| failed(format!("allowing reads of {}", path.display()), e))?;
            }
            let terminals = writable
                .contains(&Path::new("/dev/pts"))
                .then(|| all & AccessFs::from_file(TARGET));
            // `restrict_self` also sets `PR_SET_NO_NEW_PRIVS` (the crate's default).
            Ok(Self {
                fs: Some(ruleset),
                terminals,
            })
        }

        /// In the child, once it mounted a devpts of its own over `/dev/pts` and its `ptmx`
        /// over `/dev/ptmx` (`init`): the rights the host's terminals had, on the new ones.
        /// Landlock holds a rule on the inode opened in the parent, and a walk from a file
        /// beneath a mount stacked over that inode never looks at it. Async-signal-safe on
        /// success (`open`, `landlock_add_rule`, `close` per path); a failure leaves no
        /// ruleset, so it is the spawn's error, never an unconfined process.
        #[allow(unsafe_code)]
        pub(crate) fn allow_own_terminals(&mut self) -> std::io::Result<()> {
            let Some(access) = self.terminals else {
                return Ok(());
            };
            for path in [c"/dev/pts", c"/dev/ptmx"] {
                let Some(fs) = self.fs.take() else {
                    return Ok(());
                };
                // SAFETY: `open` of a static C string; the fd is borrowed for the one call
                // below and closed after it.
                let fd = unsafe { libc::open(path.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // SAFETY: `fd` is open until the `close` below.
                let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
                let added = fs.add_rule(PathBeneath::new(borrowed, access));
                // SAFETY: closing the fd opened above, no longer borrowed.
                unsafe { libc::close(fd) };
                match added {
                    Ok(fs) => self.fs = Some(fs),
                    Err(_) => return Err(std::io::Error::from_raw_os_error(libc::EPERM)),
                }
            }
            Ok(())
        }

        /// Restricts the calling process. Async-signal-safe: three system calls (`prctl`,
        /// `landlock_restrict_self`, `close`), no allocation.
        pub(crate) fn restrict_self(&mut self) -> std::io::Result<()> {
            if let Some(layer) = self.fs.take()
                && layer.restrict_self().is_err()
            {
                // The failed call left its errno; reading it does not allocate.
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
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

    /// No scopes outside Linux.
    pub(crate) fn probe_scopes() -> bool {
        false
    }

    /// No Landlock outside Linux.
    pub(crate) fn abi() -> u8 {
        0
    }

    /// Nothing to apply.
    pub(crate) struct Ruleset;

    impl Ruleset {
        pub(crate) fn build(
            _writable: &[&Path],
            _readable: Option<&[&Path]>,
            _strict: &[&Path],
            _enforcement: Enforcement,
            _deny_network: bool,
            _scoped: bool,
        ) -> Result<Self> {
            Ok(Self)
        }

        pub(crate) fn restrict_self(&mut self) -> std::io::Result<()> {
            Ok(())
        }

        pub(crate) fn allow_own_terminals(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
}
