//! What a confined process may see of Legate, decided in the parent: which paths are hidden,
//! which are kept visible beneath them, and the exact list of mount operations the child
//! performs ([`Plan`]), with every path already a `CString`.
//!
//! The child side (namespaces, the tiny init, capabilities) is `init`; this module owns the
//! policy and its translation into operations (and, for [`crate::Confinement::prepare`],
//! chooses what the child does from what the kernel allows: which namespaces, which
//! handoff), and never makes a system call that changes anything itself. See
//! `docs/permissions.md`, "What an agent can read, reach and see of Legate".

use crate::network::{self, EgressHandoff};
use crate::{Requirement, init};
use legate_core::{Error, ErrorCode, Result};
use serde::{Deserialize, Serialize};
use std::ffi::CString;
use std::fmt;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// What isolation a confinement asks for (a block of its own in [`crate::Confinement`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Spec {
    /// Landlock only: no namespaces, no init, no capability drop.
    pub(crate) off: bool,
    /// Paths (directories or files) the process must not see: `$LEGATE_HOME`, token files.
    pub(crate) hidden: Vec<PathBuf>,
    /// Paths kept visible even beneath a hidden one (besides the writable paths).
    pub(crate) visible: Vec<PathBuf>,
}

/// What holds of the isolation of one confined process, reported with its confinement.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IsolationReport {
    /// `$LEGATE_HOME` (and the other hidden paths) are covered in the process's own mount
    /// namespace: only its workspace and its own directories are visible there.
    pub home_hidden: bool,
    /// The process runs in its own PID namespace with a fresh `/proc`: Legate's processes
    /// (and their environment) cannot be named, read, signalled or traced.
    pub processes_hidden: bool,
    /// The process runs in its own network namespace with a loopback device only: nothing
    /// reaches the host's loopback (Legate's ports), the LAN or the internet, except through
    /// the egress listener Legate serves, when there is one.
    pub network_isolated: bool,
    /// The process tree is killed when Legate dies (an init in its PID namespace that
    /// watches Legate's lifeline), whatever it does with its process group.
    pub dies_with_legate: bool,
    /// The capabilities an agent does not need were dropped from every set, bounding set
    /// included, and `no_new_privs` is set.
    pub caps_dropped: bool,
}

fn yes_no(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

impl fmt::Display for IsolationReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "home hidden: {}; processes hidden: {}; network isolated: {}; dies with Legate: {}; capabilities dropped: {}",
            yes_no(self.home_hidden),
            yes_no(self.processes_hidden),
            yes_no(self.network_isolated),
            yes_no(self.dies_with_legate),
            yes_no(self.caps_dropped)
        )
    }
}

impl crate::Confinement {
    /// The isolation part of [`Confinement::prepare`]: what the child will do, what will
    /// hold, and Legate's side of the egress handoff. With [`Requirement::Required`], a home
    /// that cannot be hidden, or a process that would keep the host's network, is
    /// `CONFINEMENT_UNAVAILABLE`.
    pub(crate) fn prepare_isolation(
        &self,
        requirement: Requirement,
    ) -> Result<(Option<init::Child>, IsolationReport, Option<EgressHandoff>)> {
        if self.isolation.off {
            return Ok((None, IsolationReport::default(), None));
        }
        let required = requirement == Requirement::Required;
        let (Some(lifeline), Some(ns)) = (init::lifeline(), crate::namespaces::probe()) else {
            if required {
                return Err(Error::new(
                    ErrorCode::ConfinementUnavailable,
                    if self.isolation.hidden.is_empty() {
                        "confinement = \"required\", but the process would keep the host's network: this process may not create namespaces"
                    } else {
                        "confinement = \"required\", but Legate's home cannot be hidden from the process: this process may not create mount and PID namespaces"
                    },
                ));
            }
            tracing::warn!(
                "namespaces unavailable: the process will see Legate's home, processes and ports, and may outlive Legate"
            );
            let report = IsolationReport {
                caps_dropped: true,
                ..IsolationReport::default()
            };
            return Ok((None, report, None));
        };
        if !ns.net && required {
            return Err(Error::new(
                ErrorCode::ConfinementUnavailable,
                "confinement = \"required\", but the process would keep the host's network (and reach Legate's ports): this process may not create a network namespace",
            ));
        }
        let (egress, sender) = match self.egress.filter(|_| ns.net) {
            Some(port) => network::pair(port)
                .map(|(e, s)| (Some(e), Some(s)))
                .map_err(|e| {
                    Error::quoting(
                        ErrorCode::ConfinementUnavailable,
                        "could not prepare the egress listener's handoff",
                        e,
                    )
                })?,
            None => (None, None),
        };
        let mut kept: Vec<PathBuf> = self
            .writable
            .iter()
            .chain(&self.isolation.visible)
            .cloned()
            .collect();
        let home_hidden = Plan::build(&self.isolation.hidden, &kept).hides;
        let mut hidden = self.isolation.hidden.clone();
        hidden.extend(session_sockets());
        kept.extend(kept_resolver(Path::new("/etc/resolv.conf")));
        let mut plan = Plan::build(&hidden, &kept);
        plan.seal(&self.writable);
        let report = IsolationReport {
            home_hidden,
            processes_hidden: true,
            network_isolated: ns.net,
            dies_with_legate: true,
            caps_dropped: true,
        };
        let child = init::Child::new(plan, lifeline, ns, sender);
        Ok((Some(child), report, egress))
    }
}

/// One mount-namespace operation of the child, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Op {
    /// Mount an empty tmpfs (mode 0711) over this directory.
    Tmpfs(CString),
    /// Bind `/dev/null` over this file.
    NullFile(CString),
    /// Create this directory (mode 0711) in a tmpfs; it may exist.
    MkDir(CString),
    /// Create this empty file in a tmpfs (a mount point for a kept file); it may exist.
    MkFile(CString),
    /// Move the clone number `.0` (of [`Plan::clones`]) to this path.
    Move(usize, CString),
}

/// The prepared mount operations of one child.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Plan {
    /// Trees cloned (`open_tree(OPEN_TREE_CLONE | AT_RECURSIVE)`) before anything is hidden.
    pub(crate) clones: Vec<CString>,
    /// Then these, in order.
    pub(crate) ops: Vec<Op>,
    /// Then these hidden mounts are made read-only, in order.
    pub(crate) read_only: Vec<CString>,
    /// Whether anything is hidden at all.
    pub(crate) hides: bool,
    /// Then the namespace is sealed ([`Seal`]).
    pub(crate) seal: Seal,
}

/// Where the sockets of the users' sessions and of the machine's daemons are, covered like
/// Legate's home (each that exists): the session buses, Wayland and PulseAudio sockets of
/// every user (`/run/user`: through the session D-Bus `systemd-run --user` starts a command
/// outside any sandbox), the system bus and systemd's own sockets (`/run/dbus`,
/// `/run/systemd`, but the resolver file `/etc/resolv.conf` leads to), Docker's,
/// containerd's, Podman's, snapd's and screen's, X11's and ICE's socket directories (an X
/// server takes keystrokes for your terminal), and, in `/tmp`, tmux's (`tmux send-keys`
/// types into your shell), Emacs's server's and ssh-agent's (it signs as you), plus the
/// socket `SSH_AUTH_SOCK` names. Connecting to a socket by its path is a right no Landlock
/// rule governs. The rest of `/run` stays (NixOS's `/run/current-system` and
/// `/run/wrappers` hold the system's programs).
///
/// A path in `/tmp` counts only when it is a directory (or, for `SSH_AUTH_SOCK`, a socket)
/// itself, not a link, and owned by this user or root: another user's `/tmp/ssh-x -> /usr`
/// must not make Legate cover `/usr` for every agent.
fn session_sockets() -> Vec<PathBuf> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let uid = rustix::process::getuid().as_raw();
    let ours = |p: &Path, socket: bool| {
        std::fs::symlink_metadata(p).is_ok_and(|m| {
            let kind = m.file_type();
            (m.uid() == uid || m.uid() == 0)
                && if socket {
                    kind.is_socket()
                } else {
                    kind.is_dir()
                }
        })
    };
    let in_tmp = std::fs::read_dir("/tmp")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned());
            name.is_some_and(|n| {
                n.starts_with("ssh-")
                    || n == format!("tmux-{uid}")
                    || n == format!("emacs{uid}")
                    || n == ".X11-unix"
                    || n == ".ICE-unix"
            })
        })
        .filter(|p| ours(p, false));
    let auth_sock = std::env::var_os("SSH_AUTH_SOCK")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute() && ours(p, true));
    [
        "/run/user",
        "/run/dbus",
        "/run/systemd",
        "/run/docker.sock",
        "/run/docker",
        "/run/containerd",
        "/run/podman",
        "/run/snapd.socket",
        "/run/snapd-snap.socket",
        "/run/screen",
    ]
    .into_iter()
    .map(PathBuf::from)
    .filter(|p| std::fs::symlink_metadata(p).is_ok())
    .chain(in_tmp)
    .chain(auth_sock)
    .collect()
}

/// The resolver file `resolv` (`/etc/resolv.conf`) leads to, when it is a file under a
/// covered directory (systemd-resolved's, in `/run/systemd/resolve`): that one file stays in
/// sight, read-only, never the resolver's socket beside it.
fn kept_resolver(resolv: &Path) -> Option<PathBuf> {
    resolv
        .canonicalize()
        .ok()
        .filter(|f| f.starts_with("/run/systemd") && f.is_file())
}

/// The device nodes a confined process keeps on its `nodev` `/dev`, those that exist.
pub(crate) const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
];

/// What sealing the mount namespace does once the hidden paths are covered, in order:
///
/// 1. each writable tree and each kept device node is cloned;
/// 2. every mount turns read-only (recursively from `/`), so that what Landlock does not
///    govern (`chmod`, `chown`, `utimensat`, `setxattr`: a host file's modes, owner, times,
///    set-id bits and file capabilities) fails with `EROFS` everywhere the process may not
///    write;
/// 3. `/dev` turns `nodev` with every mount beneath it (a mount of its own first where it is
///    a plain directory): no block device (a raw disk would show Legate's hidden home, a
///    root process keeping `CAP_DAC_OVERRIDE`), no host terminal, nothing else opens through
///    it; the kept device nodes are put back over their names, cloned read-only (a root
///    process keeps `CAP_CHOWN` and `CAP_FOWNER`: no `chmod 000 /dev/null` of the host's);
/// 4. a devpts of its own (`newinstance`) covers `/dev/pts`, its `ptmx` over `/dev/ptmx`:
///    the process may open terminals of its own and sees none of the host's (the user's
///    terminal among them, where it could write escape sequences); stacked over the host's,
///    so the Landlock rules on `/dev/pts` and `/dev/ptmx` still hold for the new ones;
/// 5. an empty tmpfs covers `/dev/shm` (the host's POSIX shared memory), and the IPC
///    namespace's own `mqueue` covers `/dev/mqueue` (the host's POSIX message queues);
/// 6. the writable trees are moved back, read-write, outermost first.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Seal {
    /// The writable paths that exist, none beneath another, outermost first.
    pub(crate) writable: Vec<CString>,
    /// The [`DEVICES`] that exist.
    pub(crate) devices: Vec<CString>,
    /// Whether `/dev/pts` is a directory and `/dev/ptmx` exists (a devpts of its own then).
    pub(crate) pts: bool,
    /// Whether `/dev/shm` is a directory (covered then).
    pub(crate) shm: bool,
    /// Whether `/dev/mqueue` is a directory (covered then).
    pub(crate) mqueue: bool,
    /// Whether `/dev` is a mount point (else it is bound onto itself first).
    pub(crate) dev_mount: bool,
    /// Whether mounts turn read-only (not when `/` itself is writable).
    pub(crate) read_only: bool,
}

fn cstring(path: &Path) -> Option<CString> {
    CString::new(path.as_os_str().as_bytes()).ok()
}

/// The paths that exist, resolved, each once.
fn resolved(paths: &[PathBuf]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for p in paths {
        match std::fs::canonicalize(p) {
            Ok(r) if !out.contains(&r) => out.push(r),
            Ok(_) => {}
            Err(e) => {
                tracing::debug!(path = %p.display(), error = %e, "an isolation path is missing; left out");
            }
        }
    }
    out
}

/// Whether `path` is where a mount of this process's namespace is (`/proc/self/mountinfo`,
/// its fifth field; octal escapes as the kernel writes them are not undone, so a path with a
/// space is never found, and is bound onto itself, which is harmless).
fn is_mount_point(path: &str) -> bool {
    std::fs::read_to_string("/proc/self/mountinfo")
        .is_ok_and(|info| info.lines().any(|l| l.split(' ').nth(4) == Some(path)))
}

/// Whether `p` lies strictly beneath `dir`.
fn strictly_beneath(p: &Path, dir: &Path) -> bool {
    p != dir && p.starts_with(dir)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Hidden,
    Kept,
}

/// The deepest path of `all` strictly above `p`, with its kind.
fn cover<'a>(p: &Path, all: &'a [(PathBuf, Kind)]) -> Option<&'a (PathBuf, Kind)> {
    all.iter()
        .filter(|(q, _)| strictly_beneath(p, q))
        .max_by_key(|(q, _)| q.components().count())
}

impl Plan {
    /// The operations that hide `hidden` and keep `kept` visible (paths that do not exist are
    /// left out; a kept path equal to a hidden one wins). A kept path beneath no hidden path
    /// needs nothing; a hidden path beneath a kept one is hidden again once that tree is back.
    pub(crate) fn build(hidden: &[PathBuf], kept: &[PathBuf]) -> Self {
        let kept = resolved(kept);
        let hidden: Vec<PathBuf> = resolved(hidden)
            .into_iter()
            .filter(|h| !kept.contains(h) && h != Path::new("/"))
            .collect();
        let mut all: Vec<(PathBuf, Kind)> = hidden
            .iter()
            .map(|h| (h.clone(), Kind::Hidden))
            .chain(kept.iter().map(|k| (k.clone(), Kind::Kept)))
            .collect();
        all.sort_by_key(|(p, _)| p.components().count());
        let mut plan = Plan::default();
        for (path, kind) in &all {
            let Some(c) = cstring(path) else {
                continue;
            };
            let above = cover(path, &all);
            match kind {
                Kind::Hidden => {
                    if matches!(above, Some((_, Kind::Hidden))) {
                        continue; // already covered by the hidden path above it
                    }
                    plan.hides = true;
                    plan.ops.push(if path.is_dir() {
                        Op::Tmpfs(c.clone())
                    } else {
                        Op::NullFile(c.clone())
                    });
                    plan.read_only.push(c);
                }
                Kind::Kept => {
                    let Some((top, Kind::Hidden)) = above else {
                        continue; // visible already, or inside a kept tree
                    };
                    let index = plan.clones.len();
                    plan.clones.push(c.clone());
                    let mut at = top.clone();
                    let rest: Vec<_> = path
                        .strip_prefix(top)
                        .map(|r| r.components().collect())
                        .unwrap_or_default();
                    for (i, part) in rest.iter().enumerate() {
                        at.push(part);
                        let Some(ac) = cstring(&at) else { break };
                        let last = i + 1 == rest.len();
                        plan.ops.push(if last && !path.is_dir() {
                            Op::MkFile(ac)
                        } else {
                            Op::MkDir(ac)
                        });
                    }
                    plan.ops.push(Op::Move(index, c));
                }
            }
        }
        plan.read_only.reverse();
        plan
    }

    /// Prepares the seal ([`Seal`]) that keeps `writable` (directories or files) writable.
    pub(crate) fn seal(&mut self, writable: &[PathBuf]) {
        let mut outer: Vec<PathBuf> = Vec::new();
        let mut all = resolved(writable);
        let read_only = !all.iter().any(|p| p == Path::new("/"));
        all.sort_by_key(|p| p.components().count());
        for p in all {
            if p != Path::new("/") && !outer.iter().any(|o| p.starts_with(o)) {
                outer.push(p);
            }
        }
        self.seal = Seal {
            writable: outer.iter().filter_map(|p| cstring(p)).collect(),
            devices: DEVICES
                .iter()
                .map(Path::new)
                .filter(|p| p.exists())
                .filter_map(cstring)
                .collect(),
            pts: Path::new("/dev/pts").is_dir() && Path::new("/dev/ptmx").exists(),
            shm: Path::new("/dev/shm").is_dir(),
            mqueue: Path::new("/dev/mqueue").is_dir(),
            dev_mount: is_mount_point("/dev"),
            read_only,
        };
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn c(p: &Path) -> CString {
        cstring(p).unwrap()
    }

    #[test]
    fn kept_trees_are_cloned_then_moved_back_into_the_tmpfs() {
        let d = tempfile::tempdir().unwrap();
        let home = d.path().canonicalize().unwrap().join("home");
        let root = home.join("sandboxes/s1");
        let state = home.join("agents/a");
        let token = d.path().canonicalize().unwrap().join("tok");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(state.join("tmp")).unwrap();
        std::fs::write(&token, "t").unwrap();
        let plan = Plan::build(
            &[home.clone(), token.clone(), d.path().join("missing")],
            &[root.clone(), state.clone(), state.join("tmp")],
        );
        assert!(plan.hides);
        assert_eq!(plan.clones, [c(&root), c(&state)]);
        assert_eq!(
            plan.ops,
            [
                Op::Tmpfs(c(&home)),
                Op::NullFile(c(&token)),
                Op::MkDir(c(&home.join("sandboxes"))),
                Op::MkDir(c(&root)),
                Op::Move(0, c(&root)),
                Op::MkDir(c(&home.join("agents"))),
                Op::MkDir(c(&state)),
                Op::Move(1, c(&state)),
            ]
        );
        assert_eq!(plan.read_only, [c(&token), c(&home)]);
    }

    proptest::proptest! {
        /// Whatever the hidden and kept paths, in a real tree: every kept path beneath a
        /// hidden one is moved back after a cover was mounted above it, every hidden path
        /// is covered (itself or a hidden ancestor), nothing covers `/` or the tree's base,
        /// and every path an operation names lies under the hidden paths.
        #[test]
        fn plans_cover_every_hidden_path_and_bring_back_every_kept_one(
            hidden in proptest::collection::vec("[ab]{1,2}(/[ab]{1,2}){0,2}", 1..4),
            kept in proptest::collection::vec("[ab]{1,2}(/[ab]{1,2}){0,3}", 0..4),
        ) {
            let d = tempfile::tempdir().unwrap();
            let base = d.path().canonicalize().unwrap();
            let hidden: Vec<PathBuf> = hidden.iter().map(|h| base.join(h)).collect();
            let kept: Vec<PathBuf> = kept.iter().map(|k| base.join(k)).collect();
            for p in hidden.iter().chain(&kept) {
                std::fs::create_dir_all(p).unwrap();
            }
            let plan = Plan::build(&hidden, &kept);
            let target = |op: &Op| match op {
                Op::Tmpfs(p) | Op::NullFile(p) | Op::MkDir(p) | Op::MkFile(p) | Op::Move(_, p) => {
                    PathBuf::from(p.to_str().unwrap())
                }
            };
            for op in &plan.ops {
                let t = target(op);
                proptest::prop_assert!(t != Path::new("/") && t != base);
                proptest::prop_assert!(hidden.iter().any(|h| t.starts_with(h)), "{t:?}");
            }
            for h in &hidden {
                if kept.contains(h) {
                    continue;
                }
                let covered_by_kept = kept.iter().any(|k| h.starts_with(k) && h != k);
                let covered = plan.ops.iter().any(|op| {
                    matches!(op, Op::Tmpfs(_)) && h.starts_with(target(op))
                });
                proptest::prop_assert!(covered, "{h:?} not covered ({covered_by_kept})");
            }
            for k in &kept {
                let under_hidden = hidden.iter().any(|h| k.starts_with(h) && h != k);
                let inside_kept = kept.iter().any(|o| k.starts_with(o) && o != k);
                if !under_hidden || inside_kept {
                    continue;
                }
                let moved = plan.ops.iter().position(|op| {
                    matches!(op, Op::Move(_, _)) && target(op) == *k
                });
                let hidden_above = hidden.iter().any(|h| k.starts_with(h) && h != k
                    && !kept.iter().any(|o| h.starts_with(o) && o != h && k.starts_with(o)));
                if !hidden_above {
                    continue;
                }
                let Some(at) = moved else {
                    return Err(proptest::test_runner::TestCaseError::fail(format!("{k:?} never moved back: {plan:?}")));
                };
                let covered_before = plan.ops[..at].iter().any(|op| {
                    matches!(op, Op::Tmpfs(_)) && k.ancestors().any(|a| a == target(op))
                });
                proptest::prop_assert!(covered_before, "{k:?} moved before its cover");
            }
        }
    }

    /// A `/tmp` entry another user planted (a link to `/usr`) is never covered, nor one
    /// owned by another user; the resolver file under `/run/systemd` is kept, alone.
    #[test]
    fn only_this_users_own_socket_directories_in_tmp_are_covered() {
        let link = PathBuf::from(format!("/tmp/ssh-legate-test-link-{}", std::process::id()));
        let dir = PathBuf::from(format!("/tmp/ssh-legate-test-dir-{}", std::process::id()));
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink("/usr", &link).unwrap();
        std::fs::create_dir_all(&dir).unwrap();
        let covered = session_sockets();
        std::fs::remove_file(&link).unwrap();
        std::fs::remove_dir(&dir).unwrap();
        assert!(
            !covered.contains(&link),
            "a planted link is covered: {covered:?}"
        );
        assert!(covered.contains(&dir), "{covered:?}");
        assert!(
            !covered.iter().any(|p| p == Path::new("/run")),
            "{covered:?}"
        );
        let tmp = tempfile::tempdir().unwrap();
        let resolv = tmp.path().join("resolv.conf");
        std::fs::write(&resolv, "nameserver 127.0.0.53\n").unwrap();
        assert_eq!(kept_resolver(&resolv), None, "a file outside /run/systemd");
    }

    /// The seal keeps each writable tree once (the outermost of nested ones), files too, and
    /// makes nothing read-only when `/` itself is writable; missing paths are left out.
    #[test]
    fn the_seal_keeps_outermost_writable_trees_and_files() {
        let d = tempfile::tempdir().unwrap();
        let base = d.path().canonicalize().unwrap();
        let (root, inner, file) = (base.join("w"), base.join("w/inner"), base.join("f"));
        std::fs::create_dir_all(&inner).unwrap();
        std::fs::write(&file, "x").unwrap();
        let mut plan = Plan::default();
        plan.seal(&[
            inner.clone(),
            root.clone(),
            file.clone(),
            base.join("missing"),
        ]);
        assert_eq!(plan.seal.writable, [c(&root), c(&file)]);
        assert!(plan.seal.read_only);
        assert!(
            plan.seal
                .devices
                .iter()
                .all(|d| Path::new(d.to_str().unwrap()).exists())
        );
        plan.seal(&[root, "/".into()]);
        assert!(!plan.seal.read_only, "a writable / is never made read-only");
    }

    #[test]
    fn a_hidden_path_inside_a_kept_tree_is_hidden_again_and_root_is_never_hidden() {
        let d = tempfile::tempdir().unwrap();
        let base = d.path().canonicalize().unwrap();
        let project = base.join("project");
        let home = project.join(".legate");
        std::fs::create_dir_all(&home).unwrap();
        // The project is not beneath anything hidden: nothing to clone; the home is covered.
        let plan = Plan::build(&[home.clone(), "/".into()], std::slice::from_ref(&project));
        assert!(plan.clones.is_empty());
        assert_eq!(plan.ops, [Op::Tmpfs(c(&home))]);
        // A kept path equal to a hidden one wins.
        let plan = Plan::build(std::slice::from_ref(&home), std::slice::from_ref(&home));
        assert!(!plan.hides && plan.ops.is_empty());
    }
}
