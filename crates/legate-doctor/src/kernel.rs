//! The kernel's side: Landlock and its ABI, the namespaces isolation needs, and whether
//! Legate may make the control groups that hold an agent's process and memory limits.
//!
//! Everything here is a probe `legate-confine` already makes before it spawns; nothing is
//! decided differently from what a real spawn would get.

use crate::{Check, Status};
use legate_confine::Confinement;

/// The kernel's checks, in the order a person reads them.
pub(crate) fn checks() -> Vec<Check> {
    vec![
        landlock(Confinement::landlock_abi()),
        namespaces(
            Confinement::probe_namespaces(),
            Confinement::probe_network_namespace(),
        ),
        limits(Confinement::probe_limits()),
    ]
}

fn landlock(abi: u8) -> Check {
    const NAME: &str = "landlock";
    match abi {
        0 => Check::problem(
            Status::Fail,
            NAME,
            "this kernel has no Landlock (or it is disabled): an agent's writes are not confined",
            "boot Linux 5.13 or newer with CONFIG_SECURITY_LANDLOCK=y and `landlock` in the `lsm=` boot parameter",
        ),
        1..=3 => Check::problem(
            Status::Warn,
            NAME,
            format!(
                "Landlock ABI {abi}: writes are confined, TCP is held only by the network namespace"
            ),
            "Linux 6.7 or newer (ABI 4) adds Landlock's TCP rules, Linux 6.12 (ABI 6) scoped signals",
        ),
        4 | 5 => Check::problem(
            Status::Warn,
            NAME,
            format!(
                "Landlock ABI {abi}: writes and TCP are confined; signals and abstract sockets are not scoped"
            ),
            "Linux 6.12 or newer (ABI 6) scopes signals and abstract Unix sockets to the agent",
        ),
        _ => Check::ok(
            NAME,
            format!("Landlock ABI {abi}: writes, TCP, signals and abstract sockets are confined"),
        ),
    }
}

fn namespaces(mount_pid: bool, network: bool) -> Check {
    const NAME: &str = "namespaces";
    const FIX: &str = "allow unprivileged user namespaces (`sysctl kernel.unprivileged_userns_clone=1`; on Ubuntu 24.04 and later `sysctl kernel.apparmor_restrict_unprivileged_userns=0`), or run Legate as root";
    match (mount_pid, network) {
        (true, true) => Check::ok(
            NAME,
            "mount, PID and network namespaces: Legate's home, processes and ports are hidden from agents",
        ),
        (true, false) => Check::problem(
            Status::Fail,
            NAME,
            "no network namespace: agents reach the network and Legate's ports directly",
            FIX,
        ),
        (false, _) => Check::problem(
            Status::Fail,
            NAME,
            "no namespaces: agents see Legate's home, processes and ports (Landlock only)",
            FIX,
        ),
    }
}

fn limits(report: legate_confine::LimitsReport) -> Check {
    const NAME: &str = "limits";
    if report.max_processes.is_some() && report.max_memory_mib.is_some() {
        return Check::ok(
            NAME,
            "Legate may make a control group per agent: max_processes and max_memory_mb hold",
        );
    }
    Check::problem(
        Status::Warn,
        NAME,
        format!(
            "Legate may not make the control groups that hold an agent's limits ({}): a fork or memory bomb is stopped only by the machine's own limits",
            report.describe()
        ),
        "run Legate as root with a writable cgroup file system, or under cgroup v2 in a group whose cgroup.subtree_control lists pids and memory (a systemd unit with Delegate=yes)",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_landlock_abi_gets_its_status() {
        assert_eq!(landlock(0).status, Status::Fail);
        assert_eq!(landlock(3).status, Status::Warn);
        assert_eq!(landlock(5).status, Status::Warn);
        let ok = landlock(6);
        assert_eq!((ok.status, ok.fix), (Status::Ok, None));
    }

    #[test]
    fn missing_namespaces_and_limits_say_how_to_fix_them() {
        assert_eq!(namespaces(true, true).status, Status::Ok);
        for c in [namespaces(true, false), namespaces(false, false)] {
            assert_eq!(c.status, Status::Fail);
            assert!(c.fix.unwrap().contains("userns"));
        }
        let none = limits(legate_confine::LimitsReport::default());
        assert_eq!(none.status, Status::Warn);
        assert!(none.found.contains("not limited"), "{}", none.found);
        let held = limits(legate_confine::LimitsReport {
            max_processes: Some(1),
            max_memory_mib: Some(1),
        });
        assert_eq!(held.status, Status::Ok);
    }
}
