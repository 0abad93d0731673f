//! Hardening of Legate's own process, the first thing `main` does, while the process has one
//! thread: agents must not read Legate's environment, whatever they can name in `/proc`.
//!
//! * **Not dumpable** (`prctl(PR_SET_DUMPABLE, 0)`): `/proc/<pid>/environ`, `mem`, `maps`,
//!   `fd/` and ptrace need `CAP_SYS_PTRACE` (which confined agents lose), even for a process of
//!   the same user. It is reset at `exec`, so the agents and commands Legate starts are
//!   ordinary processes; it also means Legate writes no core dump.
//! * **Secrets kept out of the environment**: the bearer tokens given in the environment
//!   ([`SECRETS`]) are read once, into this process's memory ([`var`]), and removed.
//! * **The original environment block scrubbed**: `/proc/<pid>/environ` shows the block the
//!   kernel copied at `exec`, whatever `unsetenv` did. The environment is copied onto the heap
//!   (where the C library and `std::env` keep working), then the original block is zeroed, so
//!   a reader with `CAP_SYS_PTRACE` still finds nothing there. The heap copy is readable only
//!   through `/proc/<pid>/mem` (ptrace attach), which Landlock refuses to any confined process.
//!
//! Two things stay visible, because cleanup finds an agent's processes by them: the markers
//! `LEGATE_RUN` and `LEGATE_RUNNER` ([`MARKERS`], not secrets) are written back at the start of
//! the zeroed block, so a `legate` started inside an agent's tree is still found and stopped
//! with it; and such a process (it carries `LEGATE_RUN`) stays dumpable, so that the Legate
//! that started the agent can still read its markers without `CAP_SYS_PTRACE`. The built-in
//! agents (`legate agent …`) are agents, not Legate: `main` does not harden them.
//!
//! This module owns these steps and nothing else. It must never log a value, and never run
//! once a second thread exists (changing the environment then is undefined behaviour).
#![allow(unsafe_code)]

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::sync::OnceLock;

/// Environment variables that hold Legate's own secrets: read once, then gone.
pub const SECRETS: &[&str] = &[
    "LEGATE_MCP_TOKEN",
    "LEGATE_A2A_TOKEN",
    legate_token::bearer::SUPERVISOR_TOKEN_ENV,
];

/// Markers by which cleanup recognises an agent's processes; kept readable in the block.
pub const MARKERS: &[&str] = &[
    legate_backend::cleanup::RUN_ENV,
    legate_engine::runner::RUNNER_ENV,
];

static KEPT: OnceLock<BTreeMap<&'static str, String>> = OnceLock::new();

/// What hardening did, for the log (no values).
#[derive(Debug, Default)]
pub struct Hardened {
    /// `PR_SET_DUMPABLE` succeeded.
    pub non_dumpable: bool,
    /// Secret variables found and removed.
    pub secrets: Vec<&'static str>,
    /// Bytes of the original environment block zeroed (0: not scrubbed).
    pub scrubbed: usize,
    /// Why the block was not scrubbed, if it was not.
    pub not_scrubbed: Option<String>,
}

/// An environment variable as configuration reads it: a secret kept by [`process`], else the
/// environment.
pub fn var(name: &str) -> Option<String> {
    if let Some(v) = KEPT.get().and_then(|k| k.get(name)) {
        return Some(v.clone());
    }
    std::env::var(name).ok()
}

/// Hardens this process. Call it first in `main`, before any thread is started.
pub fn process() -> Hardened {
    let mut done = Hardened::default();
    // Inside an agent's tree, the Legate that started the agent must keep reading our markers.
    let inside_an_agent = std::env::var_os(legate_backend::cleanup::RUN_ENV).is_some();
    #[cfg(target_os = "linux")]
    if !inside_an_agent {
        // SAFETY: prctl with integer arguments only.
        done.non_dumpable = unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } == 0;
    }
    let mut kept = BTreeMap::new();
    let env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    for (k, v) in &env {
        if let Some(name) = SECRETS.iter().find(|s| k == **s) {
            // Not text: configuration sees it as missing; it still leaves the environment.
            if let Some(v) = v.to_str() {
                kept.insert(*name, v.to_string());
            }
            done.secrets.push(*name);
        }
    }
    let _ = KEPT.set(kept);
    // What `set_var` accepts (it panics on the rest; the kernel's block may hold anything).
    let keep: Vec<&(OsString, OsString)> = env
        .iter()
        .filter(|(k, _)| !SECRETS.iter().any(|s| k == *s))
        .filter(|(k, v)| {
            let k = k.as_encoded_bytes();
            !k.is_empty()
                && !k.contains(&b'=')
                && !k.contains(&0)
                && !v.as_encoded_bytes().contains(&0)
        })
        .collect();
    // The markers, as `NAME=value\0` entries, to write back at the start of the block. They
    // were in it, so they fit.
    let markers: Vec<u8> = env
        .iter()
        .filter(|(k, _)| MARKERS.iter().any(|m| k == *m))
        .flat_map(|(k, v)| {
            [k.as_encoded_bytes(), b"=", v.as_encoded_bytes(), b"\0"]
                .concat()
                .into_iter()
        })
        .collect();
    #[cfg(target_os = "linux")]
    match block::locate() {
        Ok((start, len)) => {
            // SAFETY: one thread (the caller's promise). `clearenv` empties `environ`; a
            // pointer into the block kept elsewhere before `main` (the dynamic loader keeps a
            // few for `LD_*` variables) reads zeros afterwards, never freed memory: the block
            // stays mapped and is only overwritten in place. `locate` checked that
            // [start, start+len) is the kernel's environment block inside a writable mapping
            // of this process; the markers are at most `len` bytes (checked), copied from a
            // buffer of ours; `set_var` then builds a heap copy from owned strings.
            unsafe {
                libc::clearenv();
                std::ptr::write_bytes(start as *mut u8, 0, len);
                if markers.len() <= len {
                    std::ptr::copy_nonoverlapping(
                        markers.as_ptr(),
                        start as *mut u8,
                        markers.len(),
                    );
                }
                for (k, v) in keep {
                    std::env::set_var(k, v);
                }
            }
            done.scrubbed = len;
        }
        Err(why) => {
            // Without the block, at least the secrets leave `environ` (and so children).
            for name in &done.secrets {
                // SAFETY: one thread (the caller's promise).
                unsafe { std::env::remove_var(name) };
            }
            done.not_scrubbed = Some(why);
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = keep;
        for name in &done.secrets {
            // SAFETY: one thread (the caller's promise).
            unsafe { std::env::remove_var(name) };
        }
    }
    done
}

#[cfg(target_os = "linux")]
mod block {
    /// The biggest environment block scrubbed; the kernel's own limit is far below.
    const MAX_BLOCK: usize = 64 << 20;

    /// The original environment block `(start, len)`: `env_start`/`env_end` of
    /// `/proc/self/stat`, checked to lie in one writable mapping of `/proc/self/maps`.
    ///
    /// Errors are text: this runs before `main` has a runtime or a logger; the caller keeps
    /// the sentence (`not_scrubbed`) for a warning once logging is up, and goes on with the
    /// secrets only removed from `environ`.
    pub(super) fn locate() -> Result<(usize, usize), String> {
        let stat = std::fs::read_to_string("/proc/self/stat").map_err(|e| e.to_string())?;
        let (start, end) = parse_stat(&stat).ok_or("no env_start/env_end in /proc/self/stat")?;
        if end <= start || end - start > MAX_BLOCK {
            return Err(format!(
                "implausible environment block {start:#x}..{end:#x}"
            ));
        }
        let maps = std::fs::read_to_string("/proc/self/maps").map_err(|e| e.to_string())?;
        if !writable(&maps, start, end) {
            return Err("the environment block is not in one writable mapping".into());
        }
        Ok((start, end - start))
    }

    /// Fields 50 and 51 (`env_start`, `env_end`), counted after the command name, which may
    /// hold spaces and parentheses.
    pub(super) fn parse_stat(stat: &str) -> Option<(usize, usize)> {
        let rest = &stat[stat.rfind(')')? + 1..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // `rest` starts at field 3.
        let start = fields.get(50 - 3)?.parse().ok()?;
        let end = fields.get(51 - 3)?.parse().ok()?;
        Some((start, end))
    }

    /// Whether [start, end) lies inside one mapping with write permission.
    pub(super) fn writable(maps: &str, start: usize, end: usize) -> bool {
        maps.lines().any(|line| {
            let mut parts = line.split_whitespace();
            let (Some(range), Some(perms)) = (parts.next(), parts.next()) else {
                return false;
            };
            let Some((lo, hi)) = range.split_once('-') else {
                return false;
            };
            let (Ok(lo), Ok(hi)) = (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
            else {
                return false;
            };
            perms.as_bytes().get(1) == Some(&b'w') && lo <= start && end <= hi
        })
    }
}

#[cfg(all(test, target_os = "linux"))]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::block::*;
    use proptest::prelude::*;

    #[test]
    fn stat_fields_are_counted_after_the_last_parenthesis() {
        let mut fields: Vec<String> = (3..=52).map(|i| i.to_string()).collect();
        fields[50 - 3] = "1000".into();
        fields[51 - 3] = "2000".into();
        let stat = format!("42 (a) b) (c) {}", fields.join(" "));
        assert_eq!(parse_stat(&stat), Some((1000, 2000)));
        assert_eq!(parse_stat("42 (x) R 1 2"), None);
        assert_eq!(parse_stat("no parenthesis"), None);
        // This process's own block is found and writable.
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
        let (s, e) = parse_stat(&stat).unwrap();
        assert!(e > s);
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        assert!(writable(&maps, s, e));
    }

    #[test]
    fn only_a_writable_mapping_holding_the_whole_block_counts() {
        let maps = "1000-2000 r-xp 0 00:00 0 /bin/x\n3000-5000 rw-p 0 00:00 0 [stack]\n";
        assert!(writable(maps, 0x3000, 0x4000));
        assert!(!writable(maps, 0x1000, 0x1800), "read-only");
        assert!(!writable(maps, 0x4000, 0x6000), "runs past the end");
        assert!(!writable("garbage\n", 1, 2));
    }

    proptest! {
        /// Hostile or truncated stat text never panics the parser.
        #[test]
        fn stat_parsing_never_panics(s in ".{0,400}") {
            let _ = parse_stat(&s);
            let _ = writable(&s, 0, 1);
        }
    }
}
