//! Starting an agent's local process, and the notice that says how it is confined: shared by
//! every driver that spawns one (ACP agents, each `agy` run and probe).
//!
//! An [`AgentCommand`] is always started the same way: an empty environment plus exactly
//! the variables the driver filtered, in the workspace root, in a process group of its own
//! (so that stopping it stops what it started), killed when its handle is dropped, dying with
//! the Legate thread that spawned it (`PR_SET_PDEATHSIG`), and confined by the prepared
//! Landlock ruleset and isolation plan between `fork` and `exec`. The marker
//! (`LEGATE_RUN`, see [`crate::cleanup`]) is set last, so no variable of the agent's spec can
//! forge it; a process started without one (a probe) carries none, whatever its
//! environment said. [`confinement_notice`] is the one `notice` event that reports a confinement
//! before the process starts.
//!
//! This module never decides what a process may write (the drivers' `launch` and `confine`
//! do), and never maps a spawn failure to an error code: each driver has its own codes.

use crate::acp::sys;
use crate::cleanup;
use legate_confine::{
    Confinement, Enforcement, IsolationReport, LegatePorts, LimitsReport, Prepared, Signals,
};
use legate_core::EventKind;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use tokio::process::{Child, Command};

/// A local agent process about to start.
#[derive(Debug)]
pub(crate) struct AgentCommand {
    cmd: Command,
}

impl AgentCommand {
    /// `program` with `args` in `cwd`, with exactly `env` (nothing inherited) but never its
    /// `LEGATE_RUN` (only [`AgentCommand::marker`] sets one), stdin, stdout and stderr piped.
    pub(crate) fn new<I, S>(
        program: impl AsRef<OsStr>,
        args: I,
        cwd: &Path,
        env: impl IntoIterator<Item = (OsString, OsString)>,
    ) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut cmd = Command::new(program);
        cmd.args(args)
            .current_dir(cwd)
            .env_clear()
            .envs(env.into_iter().filter(|(k, _)| k != cleanup::RUN_ENV))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        Self { cmd }
    }

    /// With `LEGATE_RUN=<marker>`, whatever the environment said.
    pub(crate) fn marker(mut self, marker: &str) -> Self {
        self.cmd.env(cleanup::RUN_ENV, marker);
        self
    }

    /// With stdin from `/dev/null` (probes, which read nothing).
    pub(crate) fn no_stdin(mut self) -> Self {
        self.cmd.stdin(Stdio::null());
        self
    }

    /// Starts it, confined by `confinement` (`None`: unconfined, for the callers that
    /// decided so). The death signal's hook is registered before the confinement's: hooks
    /// run in order.
    pub(crate) fn spawn(mut self, confinement: Option<Prepared>) -> std::io::Result<Child> {
        sys::die_with_parent(&mut self.cmd);
        if let Some(prepared) = confinement {
            sys::confine(&mut self.cmd, prepared);
        }
        self.cmd.spawn()
    }
}

/// What a confinement enforces, as the notice reports it.
#[derive(Debug, Clone)]
pub(crate) struct Facts {
    enforcement: Enforcement,
    legate_ports: LegatePorts,
    signals: Signals,
    isolation: IsolationReport,
    /// Whether the process's network namespace holds an egress listener Legate serves.
    egress: bool,
    /// What holds of the process tree's limits.
    limits: LimitsReport,
}

impl Facts {
    /// The facts of a ruleset prepared for one process.
    pub(crate) fn of(prepared: &Prepared) -> Self {
        Self {
            enforcement: prepared.enforcement(),
            legate_ports: prepared.legate_ports(),
            signals: prepared.signals(),
            isolation: prepared.isolation(),
            egress: prepared.egress_requested(),
            limits: prepared.limits(),
        }
    }

    /// Which network confinement holds, for a person.
    fn network(&self) -> &'static str {
        match (self.isolation.network_isolated, self.egress) {
            (true, true) => "own namespace (egress through Legate's proxy only)",
            (true, false) => "own namespace (no egress)",
            (false, _) => "not confined",
        }
    }

    /// The facts of `confinement` as this kernel would enforce it, for drivers that prepare
    /// a ruleset per process later (agy: one per run).
    pub(crate) fn probed(confinement: &Confinement) -> Self {
        let (legate_ports, signals) = Confinement::probe_reach();
        let prepared = confinement
            .prepare(legate_confine::Requirement::BestEffort)
            .ok();
        Self {
            enforcement: Confinement::probe(),
            legate_ports,
            signals,
            isolation: prepared
                .as_ref()
                .map(Prepared::isolation)
                .unwrap_or_default(),
            egress: prepared.as_ref().is_some_and(Prepared::egress_requested),
            limits: prepared.as_ref().map(Prepared::limits).unwrap_or_default(),
        }
    }
}

/// The `notice` that reports how `subject`'s process (`agent`, `agy`) is confined: what the
/// kernel enforces, and the directories it may write (`writable`, then the writable devices).
pub(crate) fn confinement_notice(
    subject: &str,
    facts: &Facts,
    writable: &[PathBuf],
    tmp_dir: Option<&Path>,
) -> EventKind {
    let Facts {
        enforcement,
        legate_ports,
        signals,
        isolation,
        egress,
        limits,
    } = facts;
    let network = facts.network();
    EventKind::Notice {
        message: format!(
            "{subject} process confinement: {enforcement}; {isolation}; network: {network}; Legate's ports: {legate_ports}; signals: {signals}; {}; writable: {}",
            limits.describe(),
            writable
                .iter()
                .map(|p| p.display().to_string())
                .chain(
                    legate_confine::WRITABLE_DEVICES
                        .iter()
                        .map(|d| d.to_string())
                )
                .collect::<Vec<_>>()
                .join(", ")
        ),
        detail: serde_json::json!({
            "confinement": enforcement.as_str(),
            "legatePorts": legate_ports.as_str(),
            "network": if isolation.network_isolated { "namespace" } else { "open" },
            "egress": egress,
            "signals": signals.as_str(),
            "writable": writable,
            "tmpDir": tmp_dir,
            "isolation": isolation,
            "limits": limits,
        }),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A variable of the agent's own environment cannot forge the run marker, and nothing of
    /// Legate's environment leaks in.
    #[tokio::test]
    async fn the_marker_wins_and_nothing_is_inherited() {
        let dir = tempfile::tempdir().unwrap();
        let env = vec![
            (OsString::from(cleanup::RUN_ENV), OsString::from("forged")),
            (OsString::from("PATH"), OsString::from("/usr/bin:/bin")),
        ];
        let child = AgentCommand::new("/usr/bin/env", Vec::<&str>::new(), dir.path(), env)
            .marker("real")
            .no_stdin()
            .spawn(None)
            .unwrap();
        let out = child.wait_with_output().await.unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        let mut lines: Vec<_> = text.lines().collect();
        lines.sort_unstable();
        assert_eq!(
            lines,
            [
                format!("{}=real", cleanup::RUN_ENV).as_str(),
                "PATH=/usr/bin:/bin"
            ]
        );
    }

    /// A process started without a marker (a probe) carries none either: a `LEGATE_RUN`
    /// in the environment it was handed (the spec's `env`, an `inherit_env` opt-in) is
    /// dropped, so no process can pass for another run's and be stopped or blocked as one.
    #[tokio::test]
    async fn without_a_marker_no_forged_one_gets_through() {
        let dir = tempfile::tempdir().unwrap();
        let env = vec![
            (OsString::from(cleanup::RUN_ENV), OsString::from("forged")),
            (OsString::from("KEPT"), OsString::from("1")),
        ];
        let child = AgentCommand::new("/usr/bin/env", Vec::<&str>::new(), dir.path(), env)
            .no_stdin()
            .spawn(None)
            .unwrap();
        let out = child.wait_with_output().await.unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        assert_eq!(text.lines().collect::<Vec<_>>(), ["KEPT=1"]);
    }

    #[test]
    fn the_notice_names_the_subject_and_every_writable_directory() {
        let facts = Facts::probed(&Confinement::new().allow_write("/w"));
        let EventKind::Notice { message, detail } =
            confinement_notice("agy", &facts, &[PathBuf::from("/w")], Some(Path::new("/t")))
        else {
            panic!("not a notice");
        };
        assert!(
            message.starts_with("agy process confinement: "),
            "{message}"
        );
        assert!(message.contains("writable: /w, /dev/null"), "{message}");
        assert_eq!(detail["writable"][0], "/w");
        assert_eq!(detail["tmpDir"], "/t");
        let isolated = Confinement::probe_network_namespace();
        assert_eq!(
            detail["network"],
            if isolated { "namespace" } else { "open" }
        );
        assert_eq!(detail["egress"], false);
        assert!(
            message.contains(if isolated {
                "network: own namespace (no egress)"
            } else {
                "network: not confined"
            }),
            "{message}"
        );
        let facts = Facts::probed(&Confinement::new().egress(3128));
        let EventKind::Notice { message, detail } = confinement_notice("agent", &facts, &[], None)
        else {
            panic!("not a notice");
        };
        assert_eq!(detail["egress"], isolated);
        if isolated {
            assert!(
                message.contains("network: own namespace (egress through Legate's proxy only)"),
                "{message}"
            );
        }
    }
}
