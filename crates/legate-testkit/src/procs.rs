//! Agent processes as tests see them: which live processes carry a marker in their
//! environment or run in a directory, how many run a given command line, which descend from a
//! process, and a wait for a process to exit that the kernel signals (a pidfd becomes
//! readable), so a test never polls `/proc` with sleeps.
//!
//! This module only reads `/proc` and opens pidfds; it never signals or kills a process.

use legate_core::proc_stat::ProcStat;
use std::path::PathBuf;
use std::time::Duration;

/// Every process `/proc` lists now, with its directory there.
fn processes() -> Vec<(u32, PathBuf)> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse::<u32>().ok()?;
            Some((pid, entry.path()))
        })
        .collect()
}

/// Live processes whose environment holds `marker` exactly (`NAME=value`), with the
/// directory each runs in (`None` when it cannot be read, as for a zombie).
pub fn with_env(marker: &str) -> Vec<(u32, Option<PathBuf>)> {
    processes()
        .into_iter()
        .filter(|(_, dir)| {
            std::fs::read(dir.join("environ"))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|kv| kv == marker.as_bytes()))
        })
        .map(|(pid, dir)| (pid, std::fs::read_link(dir.join("cwd")).ok()))
        .collect()
}

/// How many live processes have exactly this command line (arguments joined by spaces).
pub fn with_cmdline(cmdline: &str) -> usize {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .filter(|raw| {
            let args: Vec<&[u8]> = raw.split(|b| *b == 0).filter(|a| !a.is_empty()).collect();
            args.join(&b' ') == cmdline.as_bytes()
        })
        .count()
}

/// Waits until process `pid` has exited (or is a zombie), as the kernel reports it through a
/// pidfd; true when it did within `limit`. A process that is already gone counts as exited.
pub async fn exited(pid: u32, limit: Duration) -> bool {
    tokio::task::spawn_blocking(move || wait_exited(pid, limit))
        .await
        .unwrap_or(false)
}

/// [`exited`], blocking the calling thread: `poll` on the process's pidfd returns when it
/// exits.
#[must_use]
pub fn wait_exited(pid: u32, limit: Duration) -> bool {
    let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return true;
    };
    let fd = match rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()) {
        Ok(fd) => fd,
        // ESRCH: no such process, it has already gone.
        Err(_) => return true,
    };
    let timeout = rustix::event::Timespec {
        tv_sec: i64::try_from(limit.as_secs()).unwrap_or(i64::MAX),
        tv_nsec: i64::from(limit.subsec_nanos()),
    };
    let mut fds = [rustix::event::PollFd::new(
        &fd,
        rustix::event::PollFlags::IN,
    )];
    loop {
        match rustix::event::poll(&mut fds, Some(&timeout)) {
            Ok(n) => return n > 0,
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return false,
        }
    }
}

/// Waits, up to `limit` in all, until each of `pids` has exited (as [`wait_exited`]); returns
/// those still running then.
#[must_use]
pub fn until_exited(pids: &[u32], limit: Duration) -> Vec<u32> {
    let deadline = std::time::Instant::now() + limit;
    pids.iter()
        .copied()
        .filter(|&pid| {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            !wait_exited(pid, left)
        })
        .collect()
}

/// Every live process descended from `pid` (children, their children, …), as `/proc` shows
/// them now: the parent of each is read from `/proc/<pid>/stat`.
#[must_use]
pub fn descendants(pid: u32) -> Vec<u32> {
    let mut children: std::collections::BTreeMap<u32, Vec<u32>> = Default::default();
    for (child, dir) in processes() {
        let parent = std::fs::read(dir.join("stat"))
            .ok()
            .and_then(|line| ProcStat::parse(&line))
            .and_then(|stat| u32::try_from(stat.ppid).ok());
        if let Some(parent) = parent {
            children.entry(parent).or_default().push(child);
        }
    }
    let mut found = Vec::new();
    let mut next = vec![pid];
    while let Some(p) = next.pop() {
        for &c in children.get(&p).map(Vec::as_slice).unwrap_or_default() {
            if !found.contains(&c) {
                found.push(c);
                next.push(c);
            }
        }
    }
    found
}

/// Waits until no live process carries `marker` (each found one exits, as its pidfd says);
/// true when that happened within `limit`.
pub async fn until_none_with_env(marker: &str, limit: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let live = with_env(marker);
        if live.is_empty() {
            return true;
        }
        for (pid, _) in live {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if !exited(pid, left).await {
                return false;
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_live_process_has_not_exited_and_a_killed_one_has() {
        let marker = format!("LEGATE_PROCS_TEST={}", std::process::id());
        let (key, value) = marker.split_once('=').unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .env(key, value)
            .spawn()
            .unwrap();
        let pid = child.id();
        // Right after `spawn` the child may still be in `exec`, its environment empty.
        let found = || -> Vec<u32> { with_env(&marker).into_iter().map(|(p, _)| p).collect() };
        let began = std::time::Instant::now();
        while found().is_empty() && began.elapsed() < Duration::from_secs(10) {
            std::thread::yield_now();
        }
        assert_eq!(found(), [pid]);
        // Still running: the wait gives up at its limit and says so.
        assert!(!exited(pid, Duration::from_millis(200)).await);
        assert!(!until_none_with_env(&marker, Duration::from_millis(200)).await);
        child.kill().unwrap();
        // Killed but not yet reaped (a zombie): exited, and no longer carries the marker.
        assert!(exited(pid, Duration::from_secs(10)).await);
        assert!(until_none_with_env(&marker, Duration::from_secs(10)).await);
        child.wait().unwrap();
        // Reaped: no such process is exited too.
        assert!(exited(pid, Duration::from_secs(1)).await);
    }
}
