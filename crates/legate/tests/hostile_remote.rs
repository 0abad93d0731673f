//! A hostile remote agent against the real `legate` binary (issue 29, finding 3): the front is
//! `legate run` delegating to a remote A2A agent (`kind = "a2a"`) that is
//! `legate_testkit::hostile_remote`, a real HTTP server on 127.0.0.1 that sends a patch over
//! the transfer bound, a patch that expands a hundredfold, an answer of 1.5 GiB (to `GetTask`
//! and as one streamed event), an answer that never ends, one that drips a byte at a time (and
//! a card that does), and a task that ignores `CancelTask`.
//!
//! Each case asserts that the local task ends within its timeout with the right code, that
//! the user's files are unchanged, and that the front's peak memory (`VmHWM` of the `legate`
//! process, read from `/proc` while it runs) stays under 512 MiB. The huge answers are made
//! as they are written; the test never holds them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_core::remote::{PostState, sha256_hex};
use legate_frontkit::cli::CliHome;
use legate_testkit::git;
use legate_testkit::hostile_remote::{HostileRemote, Hostility};
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const LEGATE: &str = env!("CARGO_BIN_EXE_legate");

/// The front's memory bound the suite holds it to.
const MAX_PEAK_KIB: u64 = 512 * 1024;
/// The transfer bound the front's remote agent is given (1 MiB).
const MAX_TRANSFER: u64 = 1 << 20;
/// An answer far past every bound.
const HUGE: u64 = 1536 << 20;
/// The task timeout of the cases that never end, in seconds.
const TIMEOUT: u64 = 3;
/// How long past its timeout a task may take to end: the engine's cancel grace (5 s),
/// start-up and a busy machine.
const SLACK: Duration = Duration::from_secs(15);

/// A front home whose agent `far` is `remote`, with `max_transfer_bytes` when given.
fn front(remote: &HostileRemote, max_transfer: Option<u64>) -> CliHome {
    let bound = max_transfer
        .map(|b| format!("max_transfer_bytes = {b}\n"))
        .unwrap_or_default();
    CliHome::with_config(
        LEGATE,
        &format!(
            "[agents.far]\nkind = \"a2a\"\nurl = \"{}/.well-known/agent-card.json\"\n{bound}",
            remote.url
        ),
    )
    .env("LEGATE_LOG", "warn")
}

/// The peak resident memory of process `pid` so far, in KiB.
fn peak_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// How a `legate run` went: how long it took, its peak memory, and the task it ran.
struct Ran {
    took: Duration,
    peak_kib: u64,
    task: Value,
}

/// Runs `legate <args>` in `home` to its end, reading its peak memory as it runs.
fn run(home: &CliHome, args: &[&str]) -> Ran {
    let started = Instant::now();
    let mut child = home.spawn_silent(args);
    let mut peak = 0;
    loop {
        // VmHWM only grows: the last reading before the end is the peak, but for the last
        // few milliseconds.
        if let Some(kib) = peak_kib(child.id()) {
            peak = peak.max(kib);
        }
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if started.elapsed() > Duration::from_secs(TIMEOUT) + SLACK * 2 {
            let _ = child.kill();
            panic!("legate {args:?} did not end");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let task = home.tasks_json().into_iter().next().expect("no task");
    Ran {
        took: started.elapsed(),
        peak_kib: peak,
        task,
    }
}

/// Asserts that `ran` ended `state` with `code` in time, its memory under the bound.
fn ended(ran: &Ran, state: &str, code: &str, within: Duration) {
    eprintln!(
        "ended {} {} in {:?}, the front's peak {} KiB",
        ran.task["state"], ran.task["error"]["code"], ran.took, ran.peak_kib
    );
    assert_eq!(ran.task["state"], state, "{}", ran.task);
    assert_eq!(ran.task["error"]["code"], code, "{}", ran.task);
    assert!(ran.took < within, "took {:?}: {}", ran.took, ran.task);
    assert!(
        ran.peak_kib > 0 && ran.peak_kib < MAX_PEAK_KIB,
        "the front peaked at {} KiB",
        ran.peak_kib
    );
}

/// Every file beneath `dir` (not `.git`) with its bytes.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let listed = git(dir, &["ls-files", "-co", "--exclude-standard"]);
    let mut files: Vec<_> = listed
        .lines()
        .map(|p| (p.to_string(), std::fs::read(dir.join(p)).unwrap()))
        .collect();
    files.sort();
    files
}

/// A copy task on `remote` whose patch is `patch`; asserts it ends `COPY_TOO_LARGE` and
/// leaves the project as it was.
fn copy_task_refused(patch: String, post_state: Vec<PostState>) {
    let remote = HostileRemote::start(Hostility::Patch { patch, post_state }).unwrap();
    let home = front(&remote, Some(MAX_TRANSFER));
    let project = home.make_project(&[("README.md", "# Project\n")]);
    let before = snapshot(&project);
    let ran = run(
        &home,
        &[
            "run",
            "--agent",
            "far",
            "--copy",
            project.to_str().unwrap(),
            "add a file",
        ],
    );
    ended(&ran, "failed", "COPY_TOO_LARGE", SLACK);
    assert_eq!(snapshot(&project), before, "the user's files changed");
    assert!(remote.seen().contains(&"GetTask".to_string()));
}

#[test]
fn a_patch_over_the_transfer_bound_is_refused() {
    let lines = "+one line of the oversized file\n".repeat(70_000);
    let patch = format!(
        "diff --git a/big.txt b/big.txt\nnew file mode 100644\n--- /dev/null\n+++ b/big.txt\n@@ -0,0 +1,70000 @@\n{lines}"
    );
    assert!(patch.len() as u64 > MAX_TRANSFER);
    let post = PostState {
        path: "big.txt".into(),
        sha256: Some(sha256_hex(b"unused")),
        executable: false,
    };
    copy_task_refused(patch, vec![post]);
}

#[test]
fn a_patch_that_expands_past_the_bound_is_refused_before_it_is_applied() {
    // 32 MiB of zeros, as a deflated binary patch of a few dozen kilobytes.
    let dir = tempfile::tempdir().unwrap();
    let zeros = vec![0u8; 32 << 20];
    git(dir.path(), &["init", "-q"]);
    std::fs::write(dir.path().join("zeros.bin"), &zeros).unwrap();
    git(dir.path(), &["add", "zeros.bin"]);
    let out = Command::new("git")
        .args(["-c", "core.compression=9", "diff", "--cached", "--binary"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let patch = String::from_utf8(out.stdout).unwrap();
    assert!((patch.len() as u64) < MAX_TRANSFER, "{} bytes", patch.len());
    let post = PostState {
        path: "zeros.bin".into(),
        sha256: Some(sha256_hex(&zeros)),
        executable: false,
    };
    drop(zeros);
    copy_task_refused(patch, vec![post]);
}

/// A read-only task on a remote that is `hostility`, with the suite's timeout and the
/// suite's transfer bound.
fn read_only_task(hostility: Hostility) -> (HostileRemote, Ran) {
    read_only_task_bounded(hostility, Some(MAX_TRANSFER))
}

/// [`read_only_task`] with `max_transfer` as the agent's transfer bound (none: the default).
fn read_only_task_bounded(hostility: Hostility, max_transfer: Option<u64>) -> (HostileRemote, Ran) {
    let remote = HostileRemote::start(hostility).unwrap();
    let home = front(&remote, max_transfer);
    let timeout = TIMEOUT.to_string();
    let ran = run(
        &home,
        &[
            "run",
            "--agent",
            "far",
            "--read-only",
            "--timeout",
            &timeout,
            "hello",
        ],
    );
    (remote, ran)
}

#[test]
fn a_huge_get_task_answer_is_cut_at_its_bound() {
    let (_remote, ran) = read_only_task(Hostility::HugeAnswer { bytes: HUGE });
    ended(&ran, "failed", "REMOTE_PROTOCOL_ERROR", SLACK);
    let said = ran.task["error"]["message"].as_str().unwrap();
    assert!(said.contains("larger than"), "{said}");
}

#[test]
fn valid_answers_just_under_the_bound_keep_the_front_under_its_memory_bound() {
    // The agent's default transfer bound (64 MiB) widens only the answer that brings a patch
    // back: every other answer stays within 16 MiB. A valid one just under it, on every
    // poll, until the timeout.
    let hostility = Hostility::LargeValidAnswer { bytes: 15 << 20 };
    let (_remote, ran) = read_only_task_bounded(hostility, None);
    ended(
        &ran,
        "failed",
        "TASK_TIMEOUT",
        Duration::from_secs(TIMEOUT) + SLACK,
    );
}

#[test]
fn a_huge_streamed_event_is_cut_at_its_bound() {
    let (_remote, ran) = read_only_task(Hostility::HugeEvent { bytes: HUGE });
    ended(&ran, "failed", "REMOTE_PROTOCOL_ERROR", SLACK);
    let said = ran.task["error"]["message"].as_str().unwrap();
    assert!(said.contains("one event"), "{said}");
}

#[test]
fn an_endless_answer_ends_at_the_local_timeout() {
    let (remote, ran) = read_only_task(Hostility::Endless);
    ended(
        &ran,
        "failed",
        "TASK_TIMEOUT",
        Duration::from_secs(TIMEOUT) + SLACK,
    );
    assert!(remote.seen().contains(&"CancelTask".to_string()));
}

#[test]
fn a_dripping_answer_ends_at_the_local_timeout() {
    let (_remote, ran) = read_only_task(Hostility::Drip);
    ended(
        &ran,
        "failed",
        "TASK_TIMEOUT",
        Duration::from_secs(TIMEOUT) + SLACK,
    );
}

#[test]
fn a_remote_that_drips_its_card_is_ended_by_the_local_timeout() {
    let (_remote, ran) = read_only_task(Hostility::DripCard);
    ended(
        &ran,
        "failed",
        "TASK_TIMEOUT",
        Duration::from_secs(TIMEOUT) + SLACK,
    );
}

#[test]
fn a_remote_that_ignores_cancel_is_ended_by_the_local_timeout() {
    let (remote, ran) = read_only_task(Hostility::IgnoresCancel);
    ended(
        &ran,
        "failed",
        "TASK_TIMEOUT",
        Duration::from_secs(TIMEOUT) + SLACK,
    );
    assert!(remote.seen().contains(&"CancelTask".to_string()));
}

#[test]
fn a_remote_that_ignores_cancel_is_ended_by_legate_cancel() {
    let remote = HostileRemote::start(Hostility::IgnoresCancel).unwrap();
    let home = front(&remote, Some(MAX_TRANSFER));
    let mut child = home.spawn_silent(&["run", "--agent", "far", "--read-only", "hello"]);
    let id = legate_frontkit::poll::until(SLACK, "the task to be bound to the remote", || {
        let task = home.tasks_json().into_iter().next()?;
        task["remote"]["taskId"].as_str()?;
        task["id"].as_str().map(str::to_owned)
    });
    let asked = Instant::now();
    let cancel = home.run(&["cancel", &id]);
    assert!(cancel.status.success(), "{cancel:?}");
    assert_eq!(home.wait_for_state("canceled", SLACK), id);
    assert!(asked.elapsed() < SLACK, "took {:?}", asked.elapsed());
    let _ = child.wait();
    let events = serde_json::to_string(&home.events(&id)).unwrap();
    assert!(
        events.contains("remote_cancel_unconfirmed"),
        "no event says the remote did not confirm: {events}"
    );
    assert!(remote.seen().contains(&"CancelTask".to_string()));
}
