//! How much of the machine one agent's process tree may take: its processes (threads
//! included, as the kernel counts them) and its memory.
//!
//! This module owns the limits as data, with their defaults and bounds, checked when the
//! configuration is read. It never enforces them: `legate-confine` turns them into a control
//! group per process tree where the kernel lets Legate make one, and says when it cannot.

use serde::{Deserialize, Serialize};

/// The processes (and threads) one agent's tree may have at once by default: room for a
/// real agent's tools, builds and language servers, far below what would starve the machine.
pub const DEFAULT_MAX_PROCESSES: u32 = 4096;
/// The memory one agent's tree may use by default, in MiB (8 GiB).
pub const DEFAULT_MAX_MEMORY_MIB: u64 = 8192;
/// The fewest processes a limit may allow: the confinement's own two plus an agent and its
/// runtime's threads.
pub const MIN_MAX_PROCESSES: u32 = 16;
/// The most processes a limit may name: the kernel's own ceiling on pids (`PID_MAX_LIMIT`);
/// beyond it `pids.max` refuses the value.
pub const MAX_MAX_PROCESSES: u32 = 4_194_304;
/// The least memory a limit may allow, in MiB.
pub const MIN_MAX_MEMORY_MIB: u64 = 32;
/// The most memory a limit may name, in MiB (1 PiB): beyond it the byte count would not be a
/// limit any kernel keeps.
pub const MAX_MAX_MEMORY_MIB: u64 = 1 << 30;

/// The limits of one agent's process tree (`max_processes`, `max_memory_mb`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessLimits {
    /// Processes and threads at once; a `fork` past it fails (`EAGAIN`).
    pub max_processes: u32,
    /// Memory in MiB; past it the kernel reclaims, then kills a process of the tree.
    pub max_memory_mib: u64,
}

impl Default for ProcessLimits {
    fn default() -> Self {
        Self {
            max_processes: DEFAULT_MAX_PROCESSES,
            max_memory_mib: DEFAULT_MAX_MEMORY_MIB,
        }
    }
}

impl ProcessLimits {
    /// Whether these are the defaults (skipped when serialized).
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }

    /// The memory limit in bytes.
    pub fn max_memory_bytes(&self) -> u64 {
        self.max_memory_mib.saturating_mul(1 << 20)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_within_bounds_and_bytes_do_not_overflow() {
        let d = ProcessLimits::default();
        assert!(d.is_default());
        assert!(d.max_processes >= MIN_MAX_PROCESSES);
        assert!((MIN_MAX_MEMORY_MIB..=MAX_MAX_MEMORY_MIB).contains(&d.max_memory_mib));
        assert_eq!(d.max_memory_bytes(), 8 << 30);
        let most = ProcessLimits {
            max_processes: u32::MAX,
            max_memory_mib: MAX_MAX_MEMORY_MIB,
        };
        assert_eq!(most.max_memory_bytes(), 1 << 50);
    }
}
