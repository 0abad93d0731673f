//! A test run under a confinement selection, against the running kernel: network granted (with
//! no egress proxy given: the namespace's loopback only, or the host's network without a
//! namespace) or refused (a TCP connect to a listener on 127.0.0.1; the proxy itself is
//! `egress`'s unit test and `legate-mcp`'s `mcp_sandbox`), child processes refused by seccomp,
//! reads restricted to the selected roots, writes to a selected write root, and output cut
//! at the selected number of characters. Where the kernel lacks a right, the evidence must
//! say so instead.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_confine::{Confinement, Enforcement, Network, Requirement};
use legate_testrun::{TestCommand, TestConfinement, TestRun, run_test_in};
use std::path::Path;
use std::time::Duration;

fn bash(script: &str) -> TestCommand {
    TestCommand {
        executable: "bash".into(),
        args: vec!["-c".into(), script.into()],
    }
}

fn none() -> TestConfinement {
    TestConfinement {
        read: vec![],
        write: vec![],
        network: false,
        children: true,
        max_output_chars: 4_000,
    }
}

fn run(copy: &Path, scratch: &Path, cmd: &TestCommand, sb: &TestConfinement) -> TestRun {
    run_test_in(
        copy,
        scratch,
        cmd,
        Duration::from_secs(20),
        4_000,
        Requirement::BestEffort,
        &[],
        Some(sb),
        None,
    )
    .unwrap()
}

fn kernel_denies_network() -> bool {
    Confinement::probe() != Enforcement::None && Confinement::probe_network() == Network::Denied
}

#[test]
fn a_selection_granting_network_without_a_proxy_is_loopback_only_and_without_it_tcp_is_refused() {
    let copy = tempfile::tempdir().unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // The command writes a line the listener reads: a connection the kernel let through.
    let cmd = bash(&format!(
        "exec 3<>/dev/tcp/127.0.0.1/{port} && echo hello-from-test >&3 && echo connected"
    ));
    let granted = TestConfinement {
        network: true,
        ..none()
    };
    // The kernel completes the connection into the backlog: accepting after the run sees it.
    listener.set_nonblocking(true).unwrap();
    // Granted without an egress (the runner given no proxy to serve): the host's network
    // where the kernel gives no network namespace; else its namespace's loopback only.
    let r = run(copy.path(), scratch.path(), &cmd, &granted);
    assert_eq!(r.network, "allowed");
    assert!(r.connections.is_empty());
    if r.isolation.network_isolated {
        assert!(!r.passed(), "no way out of the namespace: {r:?}");
        assert!(!r.stdout.contains("connected"));
        assert!(
            listener.accept().is_err(),
            "the host's listener saw a connection"
        );
    } else {
        use std::io::Read;
        assert!(r.passed(), "granted: {r:?}");
        assert!(r.stdout.contains("connected"));
        let (mut s, _) = listener.accept().unwrap();
        s.set_nonblocking(false).unwrap();
        let mut got = String::new();
        s.read_to_string(&mut got).unwrap();
        assert_eq!(got, "hello-from-test\n");
    }

    let r = run(copy.path(), scratch.path(), &cmd, &none());
    eprintln!("landlock ABI {}: {r:?}", r.landlock_abi);
    if kernel_denies_network() {
        assert!(r.landlock_abi >= 4);
        assert_eq!(r.network, "denied");
        assert!(!r.passed(), "the kernel should have refused the connect");
        assert!(!r.stdout.contains("connected"));
        // EACCES: refused by Landlock, not unreachable.
        let eacces = std::io::Error::from_raw_os_error(libc::EACCES).to_string();
        let eacces = eacces.split(" (os error").next().unwrap_or_default();
        assert!(r.stderr.contains(eacces), "{}", r.stderr);
        assert!(listener.accept().is_err(), "the listener saw a connection");
    } else {
        assert_eq!(
            r.network, "not-enforced",
            "the evidence must not claim a denial"
        );
    }
}

#[test]
fn child_processes_are_refused_when_not_selected_and_threads_still_run() {
    let copy = tempfile::tempdir().unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let no_children = TestConfinement {
        children: false,
        ..none()
    };
    // `bash -c` with two commands must fork for the first one.
    let cmd = bash("/bin/true; echo after-child");
    let r = run(copy.path(), scratch.path(), &cmd, &no_children);
    assert_eq!(r.children, "denied-seccomp");
    assert!(!r.stdout.contains("after-child") || !r.passed(), "{r:?}");
    assert!(!r.passed(), "a child process was started: {r:?}");
    // A threaded program still runs (python3 starts a thread).
    let threads = TestCommand {
        executable: "python3".into(),
        args: vec![
            "-c".into(),
            "import threading; t = threading.Thread(target=print, args=('thread-ran',)); t.start(); t.join()".into(),
        ],
    };
    let r = run(copy.path(), scratch.path(), &threads, &no_children);
    assert!(r.passed(), "{r:?}");
    assert!(r.stdout.contains("thread-ran"));
    // The same bash with children allowed.
    let r = run(copy.path(), scratch.path(), &cmd, &none());
    assert_eq!(r.children, "allowed");
    assert!(r.passed(), "{r:?}");
}

#[test]
fn reads_are_restricted_to_selected_roots_and_writes_to_selected_write_roots() {
    let copy = tempfile::tempdir().unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let (data, out) = (
        data.path().canonicalize().unwrap(),
        out.path().canonicalize().unwrap(),
    );
    std::fs::write(data.join("input.txt"), "data-root\n").unwrap();
    let cmd = bash(&format!(
        "cat '{}' && echo written > '{}/result'",
        data.join("input.txt").display(),
        out.display()
    ));
    let unselected = run(copy.path(), scratch.path(), &cmd, &none());
    let selected = TestConfinement {
        read: vec![data.clone()],
        write: vec![out.clone()],
        ..none()
    };
    let granted = run(copy.path(), scratch.path(), &cmd, &selected);
    assert!(granted.passed(), "{granted:?}");
    assert_eq!(granted.stdout, "data-root\n");
    assert_eq!(
        std::fs::read_to_string(out.join("result")).unwrap(),
        "written\n"
    );
    if Confinement::probe() == Enforcement::None {
        assert_eq!(unselected.reads, "open");
        return;
    }
    assert_eq!(unselected.reads, "restricted");
    assert!(
        !unselected.passed(),
        "read outside the selected roots: {unselected:?}"
    );
    assert!(!unselected.stdout.contains("data-root"));
}

#[test]
fn output_is_cut_at_the_selected_number_of_characters() {
    let copy = tempfile::tempdir().unwrap();
    let scratch = tempfile::tempdir().unwrap();
    // 3 000 two-byte characters: 6 000 bytes.
    let cmd = TestCommand {
        executable: "python3".into(),
        args: vec!["-c".into(), "print('é' * 3000, end='')".into()],
    };
    let sb = TestConfinement {
        max_output_chars: 2_500,
        ..none()
    };
    let r = run(copy.path(), scratch.path(), &cmd, &sb);
    assert!(r.passed(), "{r:?}");
    assert!(r.output_truncated);
    assert_eq!(r.stdout.chars().count(), 2_500);
    let sb = TestConfinement {
        max_output_chars: 3_000,
        ..none()
    };
    let r = run(copy.path(), scratch.path(), &cmd, &sb);
    assert!(!r.output_truncated);
    assert_eq!(r.stdout.chars().count(), 3_000);
}

#[test]
fn a_root_swapped_for_a_link_after_its_check_is_refused_not_followed() {
    let copy = tempfile::tempdir().unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let base = tempfile::tempdir().unwrap();
    let base = base.path().canonicalize().unwrap();
    let target = base.join("target");
    std::fs::create_dir(&target).unwrap();
    // The engine checked `root` as a real directory; then it became a link to `target`.
    let root = base.join("root");
    std::os::unix::fs::symlink(&target, &root).unwrap();
    let cmd = bash(&format!("echo pwned > '{}/x'", root.display()));
    for sb in [
        TestConfinement {
            write: vec![root.clone()],
            ..none()
        },
        TestConfinement {
            read: vec![root.clone()],
            ..none()
        },
    ] {
        let r = run_test_in(
            copy.path(),
            scratch.path(),
            &cmd,
            Duration::from_secs(10),
            4_000,
            Requirement::BestEffort,
            &[],
            Some(&sb),
            None,
        );
        if Confinement::probe() == Enforcement::None {
            continue;
        }
        let err = r.unwrap_err();
        assert_eq!(
            err.code,
            legate_core::ErrorCode::SandboxSelectionDenied,
            "{err}"
        );
        assert!(!target.join("x").exists(), "the link's target was written");
    }
}
