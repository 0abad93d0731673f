//! Limits on one confined process tree's processes and memory: a control group of its own.
//!
//! In the parent, [`Limits::create`] finds the control groups Legate itself is in (from
//! `/proc/self/cgroup` and `/proc/self/mountinfo`), makes a child group per controller
//! beside nothing else (`legate-<pid>-<n>`), writes the limits into it, and opens its
//! `cgroup.procs`. The cgroup v2 group is used when Legate's own group delegates both
//! controllers to its children, or can be made to: a group that holds processes cannot hand
//! controllers down (the kernel's "no internal processes" rule), so when Legate's group offers
//! `pids` and `memory` and is writable (a systemd unit with `Delegate=yes`), Legate moves itself
//! into a leaf of its own (`legate-<pid>-self`) and enables both for the group's children, once
//! per process (`adopt`). Otherwise each controller's v1 hierarchy, where it is mounted and
//! writable. In the child, [`Join::join`] writes `0` to each open `cgroup.procs`
//! before anything else happens, so the child and everything it ever starts are counted
//! (one `write` per group: async-signal-safe). [`LimitGroup`], held by whoever watches the
//! process, removes the groups when the tree is gone; groups a killed Legate left are
//! removed by the next Legate that makes one ([`sweep`]).
//!
//! What could not be set is reported ([`LimitsReport`]), never pretended: a machine where
//! Legate may not make a control group (a desktop session without delegation) runs the
//! agent without these limits, and the confinement notice says so.
//!
//! This module never decides the limits (`legate_core::ProcessLimits`, from the agent's
//! configuration) and never kills a process that is not in a group it made.
#![allow(unsafe_code)]

use legate_core::ProcessLimits;
use serde::{Deserialize, Serialize};
use std::fs;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Once, OnceLock};
use std::time::Duration;

/// What holds of a process tree's limits, reported with its confinement.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LimitsReport {
    /// The processes (threads included) the tree may have, when enforced.
    pub max_processes: Option<u32>,
    /// The memory the tree may use, in MiB, when enforced.
    pub max_memory_mib: Option<u64>,
}

impl LimitsReport {
    /// The limits as a person reads them in the confinement notice.
    pub fn describe(&self) -> String {
        let processes = self
            .max_processes
            .map_or_else(|| "not limited".to_string(), |n| n.to_string());
        let memory = self
            .max_memory_mib
            .map_or_else(|| "not limited".to_string(), |m| format!("{m} MiB"));
        format!("processes: {processes}; memory: {memory}")
    }
}

/// The child's side: the open `cgroup.procs` of each group to join.
#[derive(Debug, Default)]
pub(crate) struct Join {
    procs: Vec<OwnedFd>,
}

impl Join {
    /// Moves the calling process into every group. Runs between `fork` and `exec`: one
    /// `write` per open file, no allocation.
    pub(crate) fn join(&self) -> io::Result<()> {
        for fd in &self.procs {
            // SAFETY: writes one byte from a static buffer to an open descriptor.
            let rc = unsafe { libc::write(fd.as_raw_fd(), b"0".as_ptr().cast(), 1) };
            if rc != 1 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

/// The groups of one process tree, removed when dropped. Once taken
/// ([`crate::Prepared::take_limits`]), dropping it also ends what is left of the tree in
/// them: the holder says the tree is over. Never taken (the `Prepared` was dropped), it is
/// removed once the tree leaves it, within a few seconds, or by the next Legate's sweep.
#[derive(Debug)]
pub struct LimitGroup {
    dirs: Vec<PathBuf>,
    limits: ProcessLimits,
    // Set when taken: dropping the holder's guard kills what is left in the groups.
    pub(crate) kill_on_drop: bool,
    // Where the kernel counts the tree's memory kills and refused forks.
    memory_events: Option<PathBuf>,
    pids_events: Option<PathBuf>,
}

impl LimitGroup {
    /// The limits the groups hold.
    pub fn limits(&self) -> ProcessLimits {
        self.limits
    }

    /// How many processes of the tree the kernel killed for passing the memory limit.
    pub fn memory_kills(&self) -> u64 {
        self.memory_events
            .as_deref()
            .and_then(|p| counter(p, "oom_kill"))
            .unwrap_or(0)
    }

    /// How many `fork`s of the tree were refused at the process limit.
    pub fn forks_refused(&self) -> u64 {
        self.pids_events
            .as_deref()
            .and_then(|p| counter(p, "max"))
            .unwrap_or(0)
    }
}

impl Drop for LimitGroup {
    fn drop(&mut self) {
        let dirs = std::mem::take(&mut self.dirs);
        if dirs.iter().all(|d| fs::remove_dir(d).is_ok()) {
            return;
        }
        // Something of the tree is still there (or exiting): try again off the caller's
        // thread (ending what is left, for a guard that was taken, where the kernel can do it
        // atomically: `cgroup.kill`); the next Legate's sweep removes what still stays.
        let kill = self.kill_on_drop;
        let _ = std::thread::Builder::new()
            .name("legate-cgroup-rm".into())
            .spawn(move || {
                for _ in 0..50 {
                    let left: Vec<_> = dirs.iter().filter(|d| d.exists()).collect();
                    if left.is_empty() {
                        return;
                    }
                    for dir in left {
                        if kill {
                            kill_group(dir);
                        }
                        let _ = fs::remove_dir(dir);
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            });
    }
}

/// `name N` from a `key value` lines file (`memory.events`, `pids.events`, `memory.oom_control`).
fn counter(path: &Path, name: &str) -> Option<u64> {
    let text = fs::read_to_string(path).ok()?;
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == name).then(|| v.trim().parse().ok()).flatten()
    })
}

/// Ends every process in `dir` (a group Legate made) at once, where the kernel can
/// (`cgroup.kill`, cgroup v2 since Linux 5.14). Never by pid: a pid read from `cgroup.procs`
/// may be reused by an unrelated process before it is signalled. Elsewhere the tree's own
/// init (its PID namespace) and its process group end it.
fn kill_group(dir: &Path) {
    let kill = dir.join("cgroup.kill");
    if kill.exists() {
        let _ = fs::write(kill, "1");
    }
}

/// The limits for one process tree: the child's [`Join`], Legate's [`LimitGroup`] and what
/// holds.
#[derive(Debug, Default)]
pub(crate) struct Limits {
    pub(crate) join: Join,
    pub(crate) group: Option<LimitGroup>,
    pub(crate) report: LimitsReport,
}

/// Which control-group hierarchy a directory belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Hierarchy {
    /// The unified (v2) hierarchy: one group for both controllers.
    V2(PathBuf),
    /// A v1 hierarchy of one controller (`pids` or `memory`).
    V1 {
        controller: &'static str,
        dir: PathBuf,
    },
}

impl Limits {
    /// Makes the groups for `limits` (nothing enforced where the kernel does not let Legate
    /// make one). Never fails: what could not be set is reported.
    pub(crate) fn create(limits: ProcessLimits) -> Self {
        static SWEPT: Once = Once::new();
        let own = own_groups();
        SWEPT.call_once(|| {
            for h in &own {
                let dir = match h {
                    Hierarchy::V2(d) | Hierarchy::V1 { dir: d, .. } => d,
                };
                sweep(dir);
            }
        });
        if let Some(dir) = delegating_v2(&own) {
            match make_v2(&dir, limits) {
                Ok(m) => return m,
                Err(e) => tracing::debug!(error = %e, dir = %dir.display(), "no cgroup v2 group"),
            }
        }
        Self::v1(&own, limits)
    }

    /// What [`Limits::create`] would hold here, changing nothing lasting: no sweep, no
    /// adoption (a v2 group that offers both controllers and lets Legate write its
    /// `cgroup.subtree_control` counts as holding), a v1 group made and removed at once.
    pub(crate) fn probe() -> LimitsReport {
        let own = own_groups();
        let adoptable = |d: &Path| {
            fs::read_to_string(d.join("cgroup.controllers")).is_ok_and(|c| {
                let c: Vec<_> = c.split_whitespace().collect();
                c.contains(&"pids") && c.contains(&"memory")
            }) && fs::OpenOptions::new()
                .write(true)
                .open(d.join("cgroup.subtree_control"))
                .is_ok()
        };
        let v2 = own.iter().any(|h| match h {
            Hierarchy::V2(d) => delegates(d) || adoptable(d),
            Hierarchy::V1 { .. } => false,
        });
        let limits = ProcessLimits::default();
        if v2 {
            return LimitsReport {
                max_processes: Some(limits.max_processes),
                max_memory_mib: Some(limits.max_memory_mib),
            };
        }
        Self::v1(&own, limits).report
    }

    /// The v1 groups for `limits`, one per controller mounted and writable.
    fn v1(own: &[Hierarchy], limits: ProcessLimits) -> Self {
        let mut made = Self::default();
        let mut dirs = Vec::new();
        let mut memory_events = None;
        let mut pids_events = None;
        for h in own {
            let Hierarchy::V1 { controller, dir } = h else {
                continue;
            };
            match make_v1(dir, controller, limits) {
                Ok((group, fd)) => {
                    made.join.procs.push(fd);
                    if *controller == "pids" {
                        made.report.max_processes = Some(limits.max_processes);
                        pids_events = Some(group.join("pids.events"));
                    } else {
                        made.report.max_memory_mib = Some(limits.max_memory_mib);
                        memory_events = Some(group.join("memory.oom_control"));
                    }
                    dirs.push(group);
                }
                Err(e) => {
                    tracing::debug!(error = %e, controller, dir = %dir.display(), "no cgroup v1 group")
                }
            }
        }
        if !dirs.is_empty() {
            made.group = Some(LimitGroup {
                kill_on_drop: false,
                limits,
                dirs,
                memory_events,
                pids_events,
            });
        }
        made
    }
}

/// A fresh group's name: Legate's pid (for the sweep) and a counter.
fn fresh_name() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "legate-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Writes `value` to the control file `name` of `dir`.
fn set(dir: &Path, name: &str, value: &str) -> io::Result<()> {
    fs::write(dir.join(name), value)
}

fn open_procs(dir: &Path) -> io::Result<OwnedFd> {
    let f = fs::OpenOptions::new()
        .write(true)
        .open(dir.join("cgroup.procs"))?;
    Ok(OwnedFd::from(f))
}

/// Creates `dir/<fresh>` and runs `fill` on it, removing it again when `fill` fails.
fn made<T>(dir: &Path, fill: impl FnOnce(&Path) -> io::Result<T>) -> io::Result<(PathBuf, T)> {
    let group = dir.join(fresh_name());
    fs::create_dir(&group)?;
    match fill(&group) {
        Ok(t) => Ok((group, t)),
        Err(e) => {
            let _ = fs::remove_dir(&group);
            Err(e)
        }
    }
}

fn make_v2(dir: &Path, limits: ProcessLimits) -> io::Result<Limits> {
    let (group, fd) = made(dir, |g| {
        set(g, "pids.max", &limits.max_processes.to_string())?;
        set(g, "memory.max", &limits.max_memory_bytes().to_string())?;
        // Past the limit, no swapping in place of the kill (absent without swap accounting).
        if g.join("memory.swap.max").exists() {
            set(g, "memory.swap.max", "0")?;
        }
        open_procs(g)
    })?;
    Ok(Limits {
        join: Join { procs: vec![fd] },
        group: Some(LimitGroup {
            kill_on_drop: false,
            limits,
            memory_events: Some(group.join("memory.events")),
            pids_events: Some(group.join("pids.events")),
            dirs: vec![group],
        }),
        report: LimitsReport {
            max_processes: Some(limits.max_processes),
            max_memory_mib: Some(limits.max_memory_mib),
        },
    })
}

fn make_v1(dir: &Path, controller: &str, limits: ProcessLimits) -> io::Result<(PathBuf, OwnedFd)> {
    made(dir, |g| {
        if controller == "pids" {
            set(g, "pids.max", &limits.max_processes.to_string())?;
        } else {
            let bytes = limits.max_memory_bytes().to_string();
            set(g, "memory.limit_in_bytes", &bytes)?;
            // With swap accounting, memory and swap together: no swapping in place of the kill.
            if g.join("memory.memsw.limit_in_bytes").exists() {
                set(g, "memory.memsw.limit_in_bytes", &bytes)?;
            }
        }
        open_procs(g)
    })
}

/// The v2 group whose children get `pids` and `memory`: Legate's own when it delegates them
/// already or [`adopt`] made it, decided once per process (after an adoption
/// `/proc/self/cgroup` names the leaf, not the group).
fn delegating_v2(own: &[Hierarchy]) -> Option<PathBuf> {
    static DELEGATING: OnceLock<Option<PathBuf>> = OnceLock::new();
    DELEGATING
        .get_or_init(|| {
            let dir = own.iter().find_map(|h| match h {
                Hierarchy::V2(d) => Some(d.clone()),
                Hierarchy::V1 { .. } => None,
            })?;
            if delegates(&dir) {
                return Some(dir);
            }
            match adopt(&dir, std::process::id()) {
                Ok(()) => Some(dir),
                Err(e) => {
                    tracing::debug!(error = %e, dir = %dir.display(), "the cgroup v2 group was not made to delegate");
                    None
                }
            }
        })
        .clone()
}

/// Makes the v2 group `dir` delegate `pids` and `memory`: it must offer both
/// (`cgroup.controllers`); process `pid` (Legate) moves into the leaf `legate-<pid>-self`, and
/// both are enabled for the group's children. When the group still holds another process,
/// enabling fails (`EBUSY`) and Legate moves back.
fn adopt(dir: &Path, pid: u32) -> io::Result<()> {
    let offered = fs::read_to_string(dir.join("cgroup.controllers"))?;
    let offered: Vec<_> = offered.split_whitespace().collect();
    if !(offered.contains(&"pids") && offered.contains(&"memory")) {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "the group does not offer pids and memory",
        ));
    }
    let leaf = dir.join(format!("legate-{pid}-self"));
    match fs::create_dir(&leaf) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    set(&leaf, "cgroup.procs", &pid.to_string())?;
    if let Err(e) = set(dir, "cgroup.subtree_control", "+pids +memory") {
        let _ = set(dir, "cgroup.procs", &pid.to_string());
        let _ = fs::remove_dir(&leaf);
        return Err(e);
    }
    Ok(())
}

/// Whether the v2 group `dir` hands both controllers to its children.
fn delegates(dir: &Path) -> bool {
    fs::read_to_string(dir.join("cgroup.subtree_control")).is_ok_and(|s| {
        let on: Vec<_> = s.split_whitespace().collect();
        on.contains(&"pids") && on.contains(&"memory")
    })
}

/// Removes the empty groups beneath `dir` that a Legate no longer running made.
pub(crate) fn sweep(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("legate-"))
            .and_then(|n| n.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            // Only an empty group can be removed: a member still running keeps it.
            let _ = fs::remove_dir(entry.path());
        }
    }
}

/// The groups Legate itself is in, for the controllers limits use.
fn own_groups() -> Vec<Hierarchy> {
    let (Ok(cgroup), Ok(mounts)) = (
        fs::read_to_string("/proc/self/cgroup"),
        fs::read_to_string("/proc/self/mountinfo"),
    ) else {
        return Vec::new();
    };
    groups(&cgroup, &mounts)
}

/// [`own_groups`] from the two files' text.
fn groups(cgroup: &str, mountinfo: &str) -> Vec<Hierarchy> {
    let mounts: Vec<(&str, &str, &str, Vec<&str>)> = mountinfo
        .lines()
        .filter_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            let pre: Vec<_> = pre.split(' ').collect();
            let mut post = post.split(' ');
            let (fstype, _source, opts) = (post.next()?, post.next()?, post.next()?);
            Some((
                fstype,
                *pre.get(3)?,
                *pre.get(4)?,
                opts.split(',').collect(),
            ))
        })
        .collect();
    let under = |root: &str, mountpoint: &str, path: &str| -> Option<PathBuf> {
        let rest = path.strip_prefix(root.trim_end_matches('/'))?;
        if !(rest.is_empty() || rest.starts_with('/')) || rest.split('/').any(|c| c == "..") {
            return None;
        }
        Some(Path::new(mountpoint).join(rest.trim_start_matches('/')))
    };
    let mut found = Vec::new();
    for line in cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if controllers.is_empty() {
            if let Some(dir) = mounts
                .iter()
                .find(|m| m.0 == "cgroup2")
                .and_then(|m| under(m.1, m.2, path))
            {
                found.push(Hierarchy::V2(dir));
            }
            continue;
        }
        for controller in ["pids", "memory"] {
            if !controllers.split(',').any(|c| c == controller) {
                continue;
            }
            if let Some(dir) = mounts
                .iter()
                .find(|m| m.0 == "cgroup" && m.3.contains(&controller))
                .and_then(|m| under(m.1, m.2, path))
            {
                found.push(Hierarchy::V1 { controller, dir });
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTS: &str = "\
30 25 0:26 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
31 25 0:27 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
32 25 0:28 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
33 25 0:29 /inner /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu";

    #[test]
    fn finds_each_controllers_own_group_under_its_mount() {
        let cgroup = "8:pids:/\n4:memory:/process_api/abc\n1:cpu:/inner/x\n0::/user.slice\n";
        assert_eq!(
            groups(cgroup, MOUNTS),
            vec![
                Hierarchy::V1 {
                    controller: "pids",
                    dir: "/sys/fs/cgroup/pids".into()
                },
                Hierarchy::V1 {
                    controller: "memory",
                    dir: "/sys/fs/cgroup/memory/process_api/abc".into()
                },
                Hierarchy::V2("/sys/fs/cgroup/unified/user.slice".into()),
            ]
        );
    }

    #[test]
    fn a_path_outside_the_mounted_root_or_climbing_out_is_no_group() {
        let mounts = "33 25 0:29 /inner /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids";
        assert!(groups("8:pids:/other\n", mounts).is_empty());
        assert!(groups("8:pids:/innerx\n", mounts).is_empty());
        assert!(groups("8:pids:/inner/../../etc\n", mounts).is_empty());
        assert_eq!(
            groups("8:pids:/inner/a\n", mounts),
            vec![Hierarchy::V1 {
                controller: "pids",
                dir: "/sys/fs/cgroup/pids/a".into()
            }]
        );
        assert!(groups("garbage\n::\n", "").is_empty());
    }

    #[test]
    fn counters_are_read_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("memory.oom_control");
        fs::write(&f, "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n").unwrap();
        assert_eq!(counter(&f, "oom_kill"), Some(3));
        assert_eq!(counter(&f, "max"), None);
    }

    #[test]
    fn the_report_says_what_is_not_limited() {
        let r = LimitsReport::default();
        assert_eq!(r.describe(), "processes: not limited; memory: not limited");
        let r = LimitsReport {
            max_processes: Some(64),
            max_memory_mib: Some(128),
        };
        assert_eq!(r.describe(), "processes: 64; memory: 128 MiB");
    }

    #[test]
    fn adopting_a_group_moves_legate_into_a_leaf_and_enables_both_controllers() {
        let dir = tempfile::tempdir().unwrap();
        let g = dir.path();
        fs::write(g.join("cgroup.controllers"), "cpu io memory pids\n").unwrap();
        fs::write(g.join("cgroup.subtree_control"), "").unwrap();
        adopt(g, 4242).unwrap();
        assert_eq!(
            fs::read_to_string(g.join("legate-4242-self/cgroup.procs")).unwrap(),
            "4242"
        );
        assert_eq!(
            fs::read_to_string(g.join("cgroup.subtree_control")).unwrap(),
            "+pids +memory"
        );
        let other = tempfile::tempdir().unwrap();
        fs::write(other.path().join("cgroup.controllers"), "cpu io\n").unwrap();
        assert!(adopt(other.path(), 4242).is_err());
        assert!(!other.path().join("legate-4242-self").exists());
    }

    #[test]
    fn the_sweep_removes_only_empty_groups_of_dead_legates() {
        let dir = tempfile::tempdir().unwrap();
        let dead = dir.path().join("legate-4194304000-0");
        let own = dir.path().join(format!("legate-{}-9", std::process::id()));
        let other = dir.path().join("something-else");
        for d in [&dead, &own, &other] {
            fs::create_dir(d).unwrap();
        }
        sweep(dir.path());
        assert!(!dead.exists() && own.exists() && other.exists());
    }
}
