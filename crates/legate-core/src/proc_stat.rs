//! One process's line of `/proc/<pid>/stat`, read: the few fields Legate decides on (its
//! state, parent, process group, flags, thread count, start time, and where its environment
//! lies).
//!
//! This module owns the parse, in one place for every crate that looks at processes. It reads
//! no file (callers read `/proc/<pid>/stat` themselves) and must never trust the command name:
//! `pid (comm) state ppid pgrp …` has a `comm` an agent chooses, which may hold spaces,
//! parentheses, newlines and bytes that are not UTF-8, so the fields are read after its
//! **last** `)`.
//!
//! ```
//! use legate_core::proc_stat::ProcStat;
//!
//! let stat = ProcStat::parse(b"42 (a) b) S 1 42 42 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 777 0")
//!     .unwrap();
//! assert_eq!((stat.ppid, stat.pgrp, stat.num_threads, stat.start_ticks), (1, 42, 1, 777));
//! assert!(stat.is_alive() && !stat.is_kernel_thread());
//! ```

/// `PF_KTHREAD` in the stat line's flags: a kernel thread.
const KERNEL_THREAD: u64 = 0x0020_0000;

/// The fields of one `/proc/<pid>/stat` line that Legate reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    /// The state letter (`R`, `S`, `D`, `Z`, `X`, …).
    pub state: u8,
    /// The parent's process id.
    pub ppid: i32,
    /// The process group id.
    pub pgrp: i32,
    /// The kernel's `PF_*` flags.
    pub flags: u64,
    /// How many threads the process has.
    pub num_threads: u64,
    /// When the process was forked, in clock ticks since boot (`CLOCK_BOOTTIME`).
    pub start_ticks: u64,
    /// Where its environment lies in its memory (`env_start`, `env_end`; Linux 3.5 and
    /// later, else `None`).
    pub env_span: Option<(u64, u64)>,
}

impl ProcStat {
    /// Reads the fields from a stat line; `None` when it does not have their shape (no `)`,
    /// a field missing or not a number).
    pub fn parse(line: &[u8]) -> Option<Self> {
        let at = line.iter().rposition(|b| *b == b')')?;
        let rest = std::str::from_utf8(&line[at + 1..]).ok()?;
        // After comm: state(0) ppid(1) pgrp(2) session(3) tty_nr(4) tpgid(5) flags(6) minflt
        // cminflt majflt cmajflt utime stime cutime cstime priority nice num_threads(17)
        // itrealvalue starttime(19) …
        let mut fields = rest.split_ascii_whitespace();
        let state = fields.next()?;
        let [state] = state.as_bytes() else {
            return None;
        };
        let ppid = fields.next()?.parse().ok()?;
        let pgrp = fields.next()?.parse().ok()?;
        let flags = fields.nth(3)?.parse().ok()?;
        let num_threads = fields.nth(10)?.parse().ok()?;
        let start_ticks = fields.nth(1)?.parse().ok()?;
        let env_start = fields.nth(25).and_then(|f| f.parse().ok());
        let env_end = fields.next().and_then(|f| f.parse().ok());
        Some(Self {
            state: *state,
            ppid,
            pgrp,
            flags,
            num_threads,
            start_ticks,
            env_span: env_start.zip(env_end),
        })
    }

    /// Whether this process (or thread, for a `task/<tid>/stat` line) runs or may run again:
    /// not a zombie, not dead.
    pub fn runs(&self) -> bool {
        !matches!(self.state, b'Z' | b'X' | b'x')
    }

    /// Whether it is a process whose main thread has exited while it has other threads: it
    /// shows `Z`, and whether it is alive is its threads' to say (`task/<tid>/stat`; a
    /// thread that exited under a tracer stays a zombie until the tracer reaps it).
    pub fn is_headless(&self) -> bool {
        self.state == b'Z' && self.num_threads > 1
    }

    /// Whether the process may be alive: it [runs](Self::runs) or is
    /// [headless](Self::is_headless) (an agent could otherwise hide a process by ending its
    /// main thread). Where a headless one's zombie threads matter, read them.
    pub fn is_alive(&self) -> bool {
        self.runs() || self.is_headless()
    }

    /// Whether it is a kernel thread (never an agent's process).
    pub fn is_kernel_thread(&self) -> bool {
        self.flags & KERNEL_THREAD != 0
    }

    /// Whether a read of this process's environment that gave `read` bytes may have met an
    /// `exec` under way, and is worth taking again: the process runs, is not a kernel thread,
    /// and the stat shows the environment not placed yet (`exec` under way), or the read is
    /// empty while the stat does not show an environment empty in place (`env_start ==
    /// env_end`, not 0: what `env -i` leaves), or shorter than the environment the stat
    /// places (a read cut short when the old memory went). A process between `exec`'s new
    /// memory and its environment reads empty or cut for that moment.
    pub fn environment_unsettled(&self, read: usize) -> bool {
        if !self.runs() || self.is_kernel_thread() {
            return false;
        }
        let read = u64::try_from(read).unwrap_or(u64::MAX);
        match self.env_span {
            Some((start, end)) if start == end && start != 0 => false,
            // Not placed yet (0, or its start set and its end not): `exec` is under way.
            Some((start, end)) if end == 0 || end < start => true,
            Some((start, end)) => read == 0 || read < end - start,
            None => read == 0,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    fn line(
        comm: &[u8],
        state: u8,
        ppid: i32,
        pgrp: i32,
        flags: u64,
        threads: u64,
        start: u64,
    ) -> Vec<u8> {
        let mut out = b"4242 (".to_vec();
        out.extend_from_slice(comm);
        out.push(b')');
        out.extend_from_slice(
            format!(
                " {} {ppid} {pgrp} 4242 0 -1 {flags} 1 2 3 4 5 6 7 8 20 0 {threads} 0 {start} 123 456 \
                 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 9000 9100 0 0\n",
                state as char
            )
            .as_bytes(),
        );
        out
    }

    #[test]
    fn a_real_line_is_read() {
        let stat = std::fs::read("/proc/self/stat").unwrap();
        let parsed = ProcStat::parse(&stat).unwrap();
        assert!(parsed.is_alive());
        assert!(!parsed.is_kernel_thread());
        assert!(parsed.num_threads >= 1);
        // This process has an environment (the test harness's).
        let (start, end) = parsed.env_span.unwrap();
        assert!(end > start, "{start} {end}");
        // A line without the environment's fields (before Linux 3.5) still reads.
        let short = b"42 (a) S 1 42 42 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 777 0";
        assert_eq!(ProcStat::parse(short).unwrap().env_span, None);
        assert_eq!(
            parsed.ppid,
            i32::try_from(std::os::unix::process::parent_id()).unwrap()
        );
    }

    #[test]
    fn lines_without_the_shape_are_refused() {
        for bad in [
            &b""[..],
            b"42 (sh S 1 42",
            b"42 (sh) S 1",
            b"42 (sh) S x 42 42 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 7",
            b"42 (sh) SS 1 42 42 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 7",
            b"42 (sh) S 1 42 42 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0",
        ] {
            assert_eq!(
                ProcStat::parse(bad),
                None,
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn zombies_and_kernel_threads_are_told_apart() {
        let zombie = ProcStat::parse(&line(b"z", b'Z', 1, 2, 0, 1, 3)).unwrap();
        assert!(!zombie.is_alive());
        // Its main thread exited, another runs: alive.
        let headless = ProcStat::parse(&line(b"z", b'Z', 1, 2, 0, 2, 3)).unwrap();
        assert!(headless.is_alive() && headless.is_headless() && !headless.runs());
        assert!(!zombie.is_headless());
        // A read of the environment that may have met an `exec`: empty without an environment
        // empty in place, or shorter than the stat places it; never a process that cannot be
        // in `exec`.
        assert!(!headless.environment_unsettled(0) && !zombie.environment_unsettled(0));
        // Its stat places 100 bytes of environment (9000 to 9100).
        let running = ProcStat::parse(&line(b"r", b'R', 1, 2, 0, 1, 3)).unwrap();
        assert!(running.environment_unsettled(0));
        assert!(running.environment_unsettled(99), "cut short");
        assert!(!running.environment_unsettled(100));
        let cleared = ProcStat {
            env_span: Some((7, 7)),
            ..running
        };
        assert!(!cleared.environment_unsettled(0));
        let mid_exec = ProcStat {
            env_span: Some((0, 0)),
            ..running
        };
        assert!(mid_exec.environment_unsettled(0));
        assert!(
            mid_exec.environment_unsettled(5),
            "its environment not placed yet"
        );
        let being_placed = ProcStat {
            env_span: Some((9000, 0)),
            ..running
        };
        assert!(
            being_placed.environment_unsettled(32),
            "a read cut by the exec"
        );
        let old_kernel = ProcStat {
            env_span: None,
            ..running
        };
        assert!(old_kernel.environment_unsettled(0) && !old_kernel.environment_unsettled(1));
        let kthread = ProcStat {
            flags: 0x0020_0000,
            ..mid_exec
        };
        assert!(!kthread.environment_unsettled(0));
        let dead = ProcStat::parse(&line(b"x", b'X', 1, 2, 0, 2, 3)).unwrap();
        assert!(!dead.is_alive());
        let kthread =
            ProcStat::parse(&line(b"kworker/0:1", b'I', 2, 0, 0x0020_8040, 1, 3)).unwrap();
        assert!(kthread.is_alive() && kthread.is_kernel_thread());
    }

    proptest! {
        /// Whatever bytes the command name holds (an agent names what it runs), the fields
        /// are the ones after it.
        #[test]
        fn any_command_name_leaves_the_fields_readable(
            comm in proptest::collection::vec(any::<u8>(), 0..64),
            state in prop::sample::select(b"RSDZXxItT".to_vec()),
            ppid in 0..i32::MAX,
            pgrp in 0..i32::MAX,
            flags in any::<u64>(),
            threads in any::<u64>(),
            start in any::<u64>(),
        ) {
            let parsed = ProcStat::parse(&line(&comm, state, ppid, pgrp, flags, threads, start));
            prop_assert_eq!(
                parsed,
                Some(ProcStat {
                    state,
                    ppid,
                    pgrp,
                    flags,
                    num_threads: threads,
                    start_ticks: start,
                    env_span: Some((9000, 9100)),
                })
            );
        }
    }
}
