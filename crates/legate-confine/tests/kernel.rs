//! The confinement against the real kernel. The test re-runs its own binary as the confined
//! process (no `fork` needed: Landlock restricts the calling thread), which tries writes
//! inside and outside the allowed directory and reports what the kernel said.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_confine::{Confinement, Enforcement, Requirement};
use std::path::Path;
use std::process::Command;

const CHILD: &str = "LEGATE_SANDBOX_TEST_CHILD";

fn try_write(path: &Path) -> String {
    match std::fs::write(path, "x") {
        Ok(()) => "ok".into(),
        Err(e) => format!("err {}", e.raw_os_error().unwrap_or(0)),
    }
}

/// The confined side: runs only when the parent test started this binary with [`CHILD`].
#[test]
fn confined_child() {
    let Ok(dirs) = std::env::var(CHILD) else {
        return;
    };
    let (inside, outside) = dirs.split_once(':').unwrap();
    let mut prepared = Confinement::new()
        .allow_write(inside)
        .landlock_only()
        .prepare(Requirement::BestEffort)
        .unwrap();
    prepared.apply_in_child().unwrap();
    let again = prepared.apply_in_child().unwrap_err();
    println!("again={}", again.raw_os_error().unwrap_or(0));
    println!("inside={}", try_write(&Path::new(inside).join("f")));
    println!("outside={}", try_write(&Path::new(outside).join("f")));
    println!("devnull={}", try_write(Path::new("/dev/null")));
    let ptmx = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/ptmx");
    println!("ptmx={}", if ptmx.is_ok() { "ok" } else { "err" });
    println!(
        "read={}",
        std::fs::read_to_string("/etc/hostname").is_ok() || std::fs::read_dir("/").is_ok()
    );
}

#[test]
fn writes_outside_the_allowed_paths_fail_with_eacces() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    let enforcement = Confinement::probe();
    let inside = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "confined_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(
            CHILD,
            format!("{}:{}", inside.path().display(), outside.path().display()),
        )
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("inside=ok"), "{stdout}");
    assert!(stdout.contains("devnull=ok"), "{stdout}");
    if Path::new("/dev/ptmx").exists() {
        assert!(stdout.contains("ptmx=ok"), "{stdout}");
    }
    assert!(stdout.contains("read=true"), "{stdout}");
    assert!(
        stdout.contains(&format!("again={}", libc_ealready())),
        "{stdout}"
    );
    match enforcement {
        Enforcement::None => {
            eprintln!("Landlock is not available here: the outside write is not stopped");
            assert!(stdout.contains("outside=ok"), "{stdout}");
        }
        _ => {
            assert!(stdout.contains("outside=err 13"), "{stdout}");
            assert!(!outside.path().join("f").exists());
        }
    }
}

fn libc_ealready() -> i32 {
    114
}

#[test]
fn required_fails_only_when_nothing_is_enforced() {
    let r = Confinement::new().prepare(Requirement::Required);
    match Confinement::probe() {
        Enforcement::None => {
            let e = r.unwrap_err();
            assert_eq!(e.code, legate_core::ErrorCode::ConfinementUnavailable);
        }
        e => assert_eq!(r.unwrap().enforcement(), e),
    }
}

#[cfg(target_os = "linux")]
#[test]
fn this_machine_enforces_landlock() {
    // Legate's CI kernels have Landlock; set LEGATE_NO_LANDLOCK=1 where they do not.
    if std::env::var_os("LEGATE_NO_LANDLOCK").is_some() {
        return;
    }
    assert_ne!(Confinement::probe(), Enforcement::None);
}
