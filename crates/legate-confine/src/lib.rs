//! Kernel confinement of the processes Legate spawns (agents today, test commands next).
//!
//! The supervisor only sees what an agent asks about. This crate makes the kernel hold the
//! line for everything else: on Linux, a [`Confinement`] becomes a Landlock ruleset under
//! which writes are allowed only beneath the paths it names (the workspace root, the agent's
//! state directories, a private temp directory), to `/dev/null` and to pseudo-terminals
//! ([`WRITABLE_DEVICES`]). Reads and execution stay open.
//!
//! The ruleset is built in the parent ([`Confinement::prepare`]), where allocating and
//! opening paths is safe, and applied in the child between `fork` and `exec`
//! ([`Prepared::apply_in_child`]), where only two system calls happen. Whether the kernel
//! enforces it fully, partly or not at all is an [`Enforcement`], known before anything is
//! spawned, so it can be reported and, when [`Requirement::Required`], refused.
//!
//! A confinement may also deny the network ([`Confinement::deny_network`]): TCP `bind` and
//! `connect` are refused where the kernel's Landlock has network rules (ABI 4, Linux 6.7);
//! elsewhere that part is [`Network::NotEnforced`], and said so. UDP, Unix sockets and other
//! protocols are not restricted by Landlock (the network namespace below holds them).
//!
//! A confinement may also restrict reads ([`Confinement::allow_read`]): reading and executing
//! are then allowed only beneath the [`SYSTEM_READABLE`] directories, the paths it names and
//! the writable paths; and deny child processes ([`Confinement::deny_children`], a seccomp
//! filter: `fork`, `vfork`, `clone3` and a `clone` that makes no thread are refused). Both are
//! what a test's sandbox selection asks for; agents are confined without them.
//!
//! Every confinement also keeps the process away from Legate itself where the kernel can
//! ([`LegatePorts`], [`Signals`]): Legate's listening ports are unreachable from a process
//! with a network namespace of its own (or under an enforced `deny_network`), and signals and
//! abstract Unix sockets are scoped to the process's own Landlock domain (ABI 6).
//!
//! Unless it is [`Confinement::landlock_only`], a confinement also isolates the process from
//! Legate (modules `isolation`, the plan made in the parent, and `init`, the child side): in
//! mount and PID namespaces of its own, the paths given to [`Confinement::hide`]
//! (`$LEGATE_HOME`, token files) are covered except for the writable paths beneath them,
//! Legate's processes cannot be seen, an init ties the process tree to Legate's life, and
//! capabilities an agent does not need are dropped. In a network namespace of its own
//! (module `network`), the process has a loopback device and nothing else: no route to the
//! host's loopback (Legate's ports), the LAN or the internet. When asked
//! ([`Confinement::egress`]), that namespace holds one listening TCP socket on
//! `127.0.0.1:<port>`, created in the child and handed to Legate ([`Prepared::take_egress`],
//! [`EgressHandoff::receive`]), which serves its egress proxy there: the one way out.
//! What holds is an [`IsolationReport`], known before anything is spawned; where the
//! namespaces are not allowed, the process runs with Landlock only, or without a network
//! namespace (and the report says so), or, when [`Requirement::Required`], is refused.
//!
//! Where the namespaces are not allowed, a confined process is Legate's own child, and a
//! thread of it may make Legate its tracer (`PTRACE_TRACEME`): [`tracees`] reaps such threads,
//! for the agents' waits (`legate-backend`'s sessions and runs) and the test runner's.
//!
//! This crate owns the policy and its translation to Landlock. It never spawns and never
//! decides permissions; [`confine_command`] is the one place that registers the pre-exec
//! hook on a `std::process::Command` (and, through `as_std_mut`, a Tokio one).

mod hook;
mod kernel;
mod seccomp;

// Reaching Legate: what is reported of it.
mod reach;
pub use reach::{LegatePorts, Signals};
// Isolation from Legate (namespaces, the init, capabilities): a block of its own.
mod caps;
mod init;
mod isolation;
mod namespaces;
pub use isolation::IsolationReport;
// The network namespace and the egress listener's handoff; Landlock's network denial.
mod network;
pub use network::{EgressHandoff, Network};

pub use hook::confine_command;
// Limits on the process tree's processes and memory (a control group of its own).
mod limits;
pub use limits::{LimitGroup, LimitsReport};
// What a test's sandbox selection narrows beyond an agent's confinement.
mod narrowing;
pub use narrowing::{Children, SYSTEM_READABLE};

pub mod tracees;

// What the services Legate runs for a confined process must not reach beneath its root.
mod covered;
pub use covered::Covered;

use legate_core::{Error, ErrorCode, Result};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::{Path, PathBuf};

/// The device every process may write to.
pub const DEV_NULL: &str = "/dev/null";

/// Devices a confined process may also open for writing: `/dev/null`, and the pseudo-terminal
/// multiplexer and its terminals, which agents open to run shells (gemini-cli's `node-pty`:
/// `forkpty(3) failed` without them). Writing a terminal writes no file.
pub const WRITABLE_DEVICES: &[&str] = &[DEV_NULL, "/dev/ptmx", "/dev/pts"];

/// How much of a [`Confinement`] the running kernel enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Enforcement {
    /// Every write right Legate restricts is enforced (Landlock ABI 3 or newer).
    Full,
    /// Landlock is on but older than ABI 3 (Linux 6.2): writes outside the allowed paths are
    /// refused, but truncating an existing file (`truncate(2)`) is not restricted anywhere.
    /// Moving or linking a file into another directory differs by ABI: ABI 1 (Linux 5.13)
    /// always refuses it, even between allowed paths; ABI 2 (Linux 5.19) adds the right that
    /// allows it (`REFER`), which Legate grants beneath the allowed paths only.
    Partial,
    /// Not enforced: no Landlock in this kernel (or it is disabled), or not Linux.
    None,
}

impl Enforcement {
    /// The wire form: `full`, `partial`, `none`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Full => "full",
            Self::Partial => "partial",
            Self::None => "none",
        }
    }

    /// For a person: `fully enforced`, `partly enforced`, `not enforced`.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Full => "fully enforced",
            Self::Partial => "partly enforced",
            Self::None => "not enforced",
        }
    }
}

impl fmt::Display for Enforcement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

/// Whether confinement that the kernel cannot enforce is an error.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Requirement {
    /// Confine when the kernel can; run unconfined (and say so) when it cannot.
    #[default]
    BestEffort,
    /// Refuse to start a process the kernel cannot confine (`CONFINEMENT_UNAVAILABLE`).
    /// Partial enforcement is accepted.
    Required,
}

impl Requirement {
    /// The configuration form: `best-effort`, `required`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::BestEffort => "best-effort",
            Self::Required => "required",
        }
    }

    /// Parses the configuration form.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "best-effort" => Some(Self::BestEffort),
            "required" => Some(Self::Required),
            _ => None,
        }
    }
}

/// What a confined process may write: beneath these paths, and the [`WRITABLE_DEVICES`]
/// (only [`DEV_NULL`] after [`Confinement::without_terminals`]). Everything else it may read
/// and execute, and not write, except what [`Confinement::hide`] covers. With
/// [`Confinement::deny_network`], no TCP either.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Confinement {
    writable: Vec<PathBuf>,
    // `Some`: reads are restricted to these (and the system directories, and `writable`).
    readable: Option<Vec<PathBuf>>,
    // Caller-named paths (a selection's roots): opened without following links, required.
    strict: Vec<PathBuf>,
    deny_children: bool,
    deny_network: bool,
    no_terminals: bool,
    // A listener on the namespace's 127.0.0.1 at this port, handed to Legate.
    egress: Option<u16>,
    // Isolation from Legate (see the `isolation` module).
    isolation: isolation::Spec,
    // The process tree's limits (see the `limits` module).
    limits: Option<legate_core::ProcessLimits>,
}

impl Confinement {
    /// A confinement under which nothing but the [`WRITABLE_DEVICES`] is writable.
    pub fn new() -> Self {
        Self::default()
    }

    /// Also allows writes beneath `path` (a directory) or to it (a file). Paths that do not
    /// exist when the ruleset is prepared are left out: create them first.
    pub fn allow_write(mut self, path: impl Into<PathBuf>) -> Self {
        let path = path.into();
        if !self.writable.contains(&path) {
            self.writable.push(path);
        }
        self
    }

    /// Restricts reads and execution to beneath the [`SYSTEM_READABLE`] directories, the
    /// writable paths and every directory given here, where the kernel enforces Landlock.
    /// A directory given here is caller-named: it is opened without following any link,
    /// and if it is missing or a link when prepared, preparing fails
    /// (`SANDBOX_SELECTION_DENIED`).
    pub fn allow_read(mut self, path: impl Into<PathBuf>) -> Self {
        let path = path.into();
        if !self.strict.contains(&path) {
            self.strict.push(path.clone());
        }
        let readable = self
            .readable
            .get_or_insert_with(|| SYSTEM_READABLE.iter().map(PathBuf::from).collect());
        if !readable.contains(&path) {
            readable.push(path);
        }
        self
    }

    /// Restricts reads as [`Confinement::allow_read`] does, with no path beyond the system
    /// directories and the writable paths.
    pub fn restrict_reads(mut self) -> Self {
        self.readable
            .get_or_insert_with(|| SYSTEM_READABLE.iter().map(PathBuf::from).collect());
        self
    }

    /// The readable paths when reads are restricted (`None`: reads are open).
    pub fn readable(&self) -> Option<Vec<&Path>> {
        self.readable
            .as_ref()
            .map(|r| r.iter().map(PathBuf::as_path).collect())
    }

    /// Also refuses to let the process start another one ([`Children`]).
    pub fn deny_children(mut self) -> Self {
        self.deny_children = true;
        self
    }

    /// What an agent's process limits would hold here, changing nothing lasting (a v1 group
    /// made and removed at once; no sweep, and Legate does not move itself).
    pub fn probe_limits() -> LimitsReport {
        limits::Limits::probe()
    }

    /// The running kernel's Landlock ABI version (0: no Landlock), up to the newest this
    /// crate knows (6). Cheap after the first call.
    pub fn landlock_abi() -> u8 {
        kernel::abi()
    }

    /// Also allows writes beneath the caller-named directory `path`, opened as
    /// [`Confinement::allow_read`] opens its directories (never left out quietly).
    pub fn allow_write_strict(mut self, path: impl Into<PathBuf>) -> Self {
        let path = path.into();
        if !self.strict.contains(&path) {
            self.strict.push(path.clone());
        }
        self.allow_write(path)
    }

    /// Also refuses TCP `bind` and `connect`, where the kernel can ([`Network`]).
    pub fn deny_network(mut self) -> Self {
        self.deny_network = true;
        self
    }

    /// Leaves the pseudo-terminal devices out: of the devices, only [`DEV_NULL`] is writable.
    pub fn without_terminals(mut self) -> Self {
        self.no_terminals = true;
        self
    }

    /// Also limits the process tree's processes and memory, in a control group of its own
    /// where the kernel lets Legate make one ([`Prepared::limits`] says what holds).
    pub fn limit(mut self, limits: legate_core::ProcessLimits) -> Self {
        self.limits = Some(limits);
        self
    }

    // ---- Isolation from Legate: mount and PID namespaces, the init, capabilities ----

    /// Hides `path` (a directory or a file: `$LEGATE_HOME`, a token file) from the process:
    /// in its own mount namespace an empty read-only tmpfs (or `/dev/null`) covers it; the
    /// writable paths beneath it, and those given to [`Confinement::keep_visible`], stay
    /// visible at their own paths. Paths that do not exist when prepared are left out.
    pub fn hide(mut self, path: impl Into<PathBuf>) -> Self {
        let path = path.into();
        if !self.isolation.hidden.contains(&path) {
            self.isolation.hidden.push(path);
        }
        self
    }

    /// Keeps `path` visible (readable) even beneath a hidden path.
    pub fn keep_visible(mut self, path: impl Into<PathBuf>) -> Self {
        let path = path.into();
        if !self.isolation.visible.contains(&path) {
            self.isolation.visible.push(path);
        }
        self
    }

    /// Asks for the egress listener: a TCP socket listening on `127.0.0.1:<port>` inside the
    /// process's network namespace (0: any port), created in the child before anything runs
    /// there, and handed to Legate ([`Prepared::take_egress`]). Without a network namespace
    /// (Landlock only, or namespaces unavailable) there is none.
    pub fn egress(mut self, port: u16) -> Self {
        self.egress = Some(port);
        self
    }

    /// Landlock only, as before isolation existed: no namespaces, no init, no capability
    /// drop, nothing hidden, the host's network. For comparison (benchmarks) and for confining
    /// the calling process itself, which `apply_in_child` then does without forking.
    pub fn landlock_only(mut self) -> Self {
        self.isolation.off = true;
        self
    }

    /// Whether this kernel and process allow the mount and PID namespaces of isolation.
    /// Cheap after the first call.
    pub fn probe_namespaces() -> bool {
        namespaces::probe().is_some() && init::lifeline().is_some()
    }

    /// Whether isolated processes also get a network namespace of their own (loopback only).
    /// Cheap after the first call.
    pub fn probe_network_namespace() -> bool {
        namespaces::probe().is_some_and(|n| n.net) && init::lifeline().is_some()
    }

    /// The writable paths, in the order given, then the writable devices.
    pub fn writable(&self) -> Vec<&Path> {
        let mut all: Vec<&Path> = self.writable.iter().map(PathBuf::as_path).collect();
        if self.no_terminals {
            all.push(Path::new(DEV_NULL));
        } else {
            all.extend(WRITABLE_DEVICES.iter().map(Path::new));
        }
        all
    }

    /// How much of any confinement the running kernel enforces. Cheap after the first call.
    pub fn probe() -> Enforcement {
        kernel::probe()
    }

    /// Whether the running kernel can deny the network ([`Network::Denied`]): Landlock ABI 4
    /// or newer. Cheap after the first call.
    pub fn probe_network() -> Network {
        if kernel::probe_network() {
            Network::Denied
        } else {
            Network::NotEnforced
        }
    }

    /// Builds the kernel ruleset, in the parent. Fails with `CONFINEMENT_UNAVAILABLE` when
    /// the requirement is [`Requirement::Required`] and the kernel enforces nothing, or the
    /// process would run without a network namespace of its own (unless Landlock only), or
    /// when the kernel refuses a ruleset it said it supports.
    pub fn prepare(&self, requirement: Requirement) -> Result<Prepared> {
        let enforcement = Self::probe();
        if enforcement == Enforcement::None && requirement == Requirement::Required {
            return Err(Error::new(
                ErrorCode::ConfinementUnavailable,
                "confinement = \"required\", but this kernel cannot confine processes (no Landlock, or Landlock is disabled)",
            ));
        }
        let network = if self.deny_network && enforcement != Enforcement::None {
            Self::probe_network()
        } else {
            Network::NotEnforced
        };
        let (child, report, egress) = self.prepare_isolation(requirement)?;
        let (legate_ports, signals) = reach::reach(enforcement, network, report.network_isolated);
        let readable = self.readable();
        let ruleset = kernel::Ruleset::build(
            &self.writable(),
            readable.as_deref(),
            &self.strict.iter().map(PathBuf::as_path).collect::<Vec<_>>(),
            enforcement,
            network == Network::Denied,
            signals == Signals::Scoped,
        )?;
        tracing::debug!(
            enforcement = enforcement.as_str(),
            network = network.as_str(),
            legate_ports = legate_ports.as_str(),
            egress = ?self.egress.filter(|_| egress.is_some()),
            signals = signals.as_str(),
            writable = ?self.writable(),
            readable = ?readable,
            isolation = %report,
            "confinement prepared"
        );
        let children = match (self.deny_children, seccomp::CAN_DENY_CHILDREN) {
            (false, _) => Children::Allowed,
            (true, true) => Children::DeniedSeccomp,
            (true, false) => Children::NotEnforced,
        };
        let limits = self.limits.map(limits::Limits::create).unwrap_or_default();
        Ok(Prepared {
            limits,
            ruleset,
            enforcement,
            reads_restricted: readable.is_some() && enforcement != Enforcement::None,
            children,
            network,
            legate_ports,
            signals,
            egress_requested: egress.is_some(),
            egress,
            applied: false,
            isolation: child,
            report,
        })
    }

    /// What the running kernel holds of Legate's ports and signals for a confinement that
    /// is isolated and does not deny the network, without preparing one (for reports made
    /// before spawning).
    pub fn probe_reach() -> (LegatePorts, Signals) {
        reach::reach(
            Self::probe(),
            Network::NotEnforced,
            Self::probe_network_namespace(),
        )
    }
}

/// A ruleset built in the parent, ready to be applied in one child.
pub struct Prepared {
    ruleset: kernel::Ruleset,
    enforcement: Enforcement,
    reads_restricted: bool,
    children: Children,
    network: Network,
    // Reaching Legate.
    legate_ports: LegatePorts,
    signals: Signals,
    // Legate's side of the egress handoff, until taken; whether there was one.
    egress: Option<EgressHandoff>,
    egress_requested: bool,
    applied: bool,
    // Isolation from Legate: `None` for Landlock only or without namespaces.
    isolation: Option<init::Child>,
    report: IsolationReport,
    // The control groups joined first in the child; Legate's guard until taken.
    limits: limits::Limits,
}

impl fmt::Debug for Prepared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Prepared")
            .field("enforcement", &self.enforcement)
            .field("network", &self.network)
            .field("reads_restricted", &self.reads_restricted)
            .field("children", &self.children)
            .field("legate_ports", &self.legate_ports)
            .field("signals", &self.signals)
            .field("egress", &self.egress_requested)
            .field("applied", &self.applied)
            .field("isolation", &self.report)
            .field("limits", &self.limits.report)
            .finish_non_exhaustive()
    }
}

impl Prepared {
    /// How much of it the kernel enforces.
    pub fn enforcement(&self) -> Enforcement {
        self.enforcement
    }

    /// Whether the network is denied.
    pub fn network(&self) -> Network {
        self.network
    }

    /// Whether reads are restricted (asked, and the kernel enforces Landlock).
    pub fn reads_restricted(&self) -> bool {
        self.reads_restricted
    }

    /// Whether child processes are refused.
    pub fn children(&self) -> Children {
        self.children
    }

    /// Whether Legate's listening ports are unreachable.
    pub fn legate_ports(&self) -> LegatePorts {
        self.legate_ports
    }

    /// Legate's side of the egress listener's handoff, once (`None` afterwards, and when
    /// there is no listener: not asked, Landlock only, or no network namespace). Take it
    /// before spawning (the `Prepared` moves into the pre-exec hook), and receive it after
    /// `spawn` returned successfully.
    pub fn take_egress(&mut self) -> Option<EgressHandoff> {
        self.egress.take()
    }

    /// Whether the child creates an egress listener in its network namespace (asked with
    /// [`Confinement::egress`], and the process gets a network namespace); still `true` once
    /// [`Prepared::take_egress`] took the handoff.
    pub fn egress_requested(&self) -> bool {
        self.egress_requested
    }

    /// Whether signals and abstract Unix sockets are scoped to the process's own domain.
    pub fn signals(&self) -> Signals {
        self.signals
    }

    /// What holds of the isolation from Legate.
    pub fn isolation(&self) -> IsolationReport {
        self.report
    }

    /// What holds of the process tree's limits.
    pub fn limits(&self) -> LimitsReport {
        self.limits.report
    }

    /// The control groups holding the tree's limits, once (`None` afterwards, and when none
    /// was made). Take it before spawning (the `Prepared` moves into the pre-exec hook) and
    /// keep it while the process runs: dropping it removes the groups, killing what is left
    /// in them.
    pub fn take_limits(&mut self) -> Option<LimitGroup> {
        let mut group = self.limits.group.take()?;
        group.kill_on_drop = true;
        Some(group)
    }

    /// Confines the calling process. Meant for a pre-exec hook (between `fork` and `exec`):
    /// it allocates nothing, takes no lock, and its errors carry raw OS codes.
    ///
    /// With isolation (the default), the calling process (C) enters new mount, PID and
    /// network namespaces, brings `lo` up, hands the egress listener over if asked, hides
    /// what is hidden, and forks the namespace's init, which forks the
    /// process that returns from here (the others never return on success: see the `init`
    /// module); that process drops its capabilities. Then, in every case,
    /// `PR_SET_NO_NEW_PRIVS` and `landlock_restrict_self` (nothing with
    /// [`Enforcement::None`]). Isolation needs a single-threaded caller, as a forked child
    /// is; [`Confinement::landlock_only`] confines the calling thread and nothing else.
    ///
    /// A `Prepared` confines one child: a second call fails with `EALREADY` rather than let
    /// a second process run unconfined.
    pub fn apply_in_child(&mut self) -> std::io::Result<()> {
        if self.applied {
            return Err(std::io::Error::from_raw_os_error(kernel::EALREADY));
        }
        self.applied = true;
        // First: everything this process becomes or starts is counted against the limits.
        self.limits.join.join()?;
        init::leave_terminal();
        if let Some(child) = &mut self.isolation {
            child.enter()?;
            if child.own_terminals() {
                self.ruleset.allow_own_terminals()?;
            }
        }
        if self.report.caps_dropped {
            caps::drop_caps()?;
        }
        self.ruleset.restrict_self()?;
        // Last: the filter closes the ways around Landlock's TCP rules (see `seccomp`); no fd
        // but stdio goes through `exec`.
        seccomp::install(self.children == Children::DeniedSeccomp)?;
        init::close_on_exec_above_stdio();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_forms() {
        for (e, s, d) in [
            (Enforcement::Full, "full", "fully enforced"),
            (Enforcement::Partial, "partial", "partly enforced"),
            (Enforcement::None, "none", "not enforced"),
        ] {
            assert_eq!(e.as_str(), s);
            assert_eq!(e.to_string(), d);
        }
        assert_eq!(Requirement::parse("required"), Some(Requirement::Required));
        assert_eq!(
            Requirement::parse("best-effort"),
            Some(Requirement::BestEffort)
        );
        assert_eq!(Requirement::parse("yes"), None);
        assert_eq!(Network::Denied.as_str(), "denied");
        assert_eq!(Network::NotEnforced.to_string(), "not-enforced");
    }

    #[test]
    fn writable_lists_the_devices_last_and_each_path_once() {
        let c = Confinement::new()
            .allow_write("/a")
            .allow_write("/b")
            .allow_write("/a");
        assert_eq!(
            c.writable(),
            [
                Path::new("/a"),
                Path::new("/b"),
                Path::new(DEV_NULL),
                Path::new("/dev/ptmx"),
                Path::new("/dev/pts")
            ]
        );
        let c = Confinement::new().allow_write("/a").without_terminals();
        assert_eq!(c.writable(), [Path::new("/a"), Path::new(DEV_NULL)]);
    }
}
