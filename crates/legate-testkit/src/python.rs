//! The Python SDK clients that the fronts' integration tests drive: a pinned virtual
//! environment, provisioned under the target directory the first time a test asks for it.
//!
//! `cargo test --workspace` is the README's test command, and a fresh machine usually has a
//! `python3` without the `mcp` and `a2a-sdk` packages. So the tests do not expect them to be
//! installed: [`python`] creates `<target>/legate-python/<hash>/` with `python3 -m venv` and
//! installs `python/requirements.txt` (every package pinned) into it, once, under an exclusive
//! lock that parallel test binaries share. The hash is that of the requirements, so changing a
//! pin provisions a new environment. Nothing outside the target directory is touched.
//!
//! When `python3` itself is missing, the test is skipped (saying so), except when Python is
//! [required](python_required) (`LEGATE_REQUIRE_PYTHON` or `CI`): then it fails. A failed
//! provisioning (no registry, no `venv` module) always fails, with pip's output.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The pinned requirements, with every transitive dependency.
const REQUIREMENTS: &str = include_str!("../python/requirements.txt");

/// The variable that makes the Python SDK client tests fail, instead of skipping, when
/// `python3` is missing. `.ci/run` sets it; `CI` (which most CI services set) counts too.
pub const REQUIRE_PYTHON_ENV: &str = "LEGATE_REQUIRE_PYTHON";

/// Whether `value` of a switch-like variable means "on": set, and not empty, `0` or `false`.
pub(crate) fn switched_on(value: Option<std::ffi::OsString>) -> bool {
    value.is_some_and(|v| {
        let v = v.to_string_lossy().trim().to_ascii_lowercase();
        !v.is_empty() && v != "0" && v != "false"
    })
}

/// Whether the Python client tests may be skipped when `python3` is missing: not when
/// [`REQUIRE_PYTHON_ENV`] or `CI` is on.
#[must_use]
pub fn python_required() -> bool {
    switched_on(std::env::var_os(REQUIRE_PYTHON_ENV)) || switched_on(std::env::var_os("CI"))
}

/// The interpreter of the pinned environment, able to `import <imports>` (e.g. `mcp`, or
/// `a2a.client, httpx`), provisioned on first use. `None` after printing `SKIPPED: …` when
/// `python3` is not installed and Python is not [required](python_required). Panics when
/// `python3` is missing but required (in CI a skipped client test is a failed one), and when
/// provisioning or the import fails.
#[must_use]
pub fn python(imports: &str) -> Option<PathBuf> {
    match Command::new("python3").arg("--version").output() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if python_required() {
                panic!(
                    "python3 is not installed, and {REQUIRE_PYTHON_ENV} or CI is set, so the Python client tests may not be skipped: install python3"
                );
            }
            eprintln!(
                "SKIPPED: python3 is not installed, so this Python SDK client test cannot run (set {REQUIRE_PYTHON_ENV}=1 to make that a failure)"
            );
            return None;
        }
        Err(e) => panic!("could not run python3: {e}"),
        Ok(_) => {}
    }
    let env = match provision(&environments_dir()) {
        Ok(env) => env,
        Err(e) => panic!("could not provision the Python test environment: {e}"),
    };
    let interpreter = env.join("bin").join("python");
    let out = match Command::new(&interpreter)
        .args(["-c", &format!("import {imports}")])
        .output()
    {
        Ok(out) => out,
        Err(e) => panic!("could not run {}: {e}", interpreter.display()),
    };
    assert!(
        out.status.success(),
        "{} cannot import {imports}: {}",
        interpreter.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    Some(interpreter)
}

/// `<target>/legate-python`: beside the test binary's `debug/` (or `release/`) directory,
/// found from the running executable (`<target>/<profile>/deps/<test>`), else in the system
/// temporary directory.
fn environments_dir() -> PathBuf {
    under_target("legate-python")
}

/// `<target>/<name>`, the target directory found from the running test executable
/// (`<target>/<profile>/deps/<test>`), else `<system temporary directory>/<name>`.
pub(crate) fn under_target(name: &str) -> PathBuf {
    let target = std::env::current_exe().ok().and_then(|exe| {
        exe.ancestors()
            .find(|a| a.file_name().is_some_and(|n| n == "deps"))
            .and_then(|deps| deps.parent()?.parent())
            .map(Path::to_path_buf)
    });
    target.unwrap_or_else(std::env::temp_dir).join(name)
}

/// FNV-1a of the requirements, in hex: names the environment they produce.
fn requirements_hash() -> String {
    fnv_hex(REQUIREMENTS.as_bytes())
}

/// FNV-1a of `bytes`, in hex.
pub(crate) fn fnv_hex(bytes: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// Creates the environment for the current requirements unless it is complete already (its
/// `complete` marker is written last), holding `<dir>/lock` meanwhile. A half-made one (a test
/// killed while pip ran) is removed and made again.
fn provision(dir: &Path) -> Result<PathBuf, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let lock_path = dir.join("lock");
    let lock = File::create(&lock_path).map_err(|e| format!("{}: {e}", lock_path.display()))?;
    lock.lock()
        .map_err(|e| format!("locking {}: {e}", lock_path.display()))?;
    let env = dir.join(requirements_hash());
    let marker = env.join("complete");
    if marker.exists() {
        return Ok(env);
    }
    if env.exists() {
        std::fs::remove_dir_all(&env).map_err(|e| format!("{}: {e}", env.display()))?;
    }
    eprintln!(
        "provisioning the pinned Python test environment in {} (once)",
        env.display()
    );
    run(Command::new("python3").args(["-m", "venv"]).arg(&env))?;
    let requirements = env.join("requirements.txt");
    std::fs::write(&requirements, REQUIREMENTS)
        .map_err(|e| format!("{}: {e}", requirements.display()))?;
    run(Command::new(env.join("bin").join("python"))
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-input",
            "-r",
        ])
        .arg(&requirements))?;
    std::fs::write(&marker, "").map_err(|e| format!("{}: {e}", marker.display()))?;
    Ok(env)
}

pub(crate) fn run(command: &mut Command) -> Result<(), String> {
    let out = command
        .output()
        .map_err(|e| format!("could not run {command:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{command:?} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_requirement_is_pinned() {
        let pins: Vec<&str> = REQUIREMENTS
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .collect();
        assert!(pins.iter().any(|p| p.starts_with("mcp==")), "{pins:?}");
        assert!(pins.iter().any(|p| p.starts_with("a2a-sdk==")), "{pins:?}");
        for pin in pins {
            assert!(pin.contains("=="), "not pinned: {pin}");
        }
    }

    #[test]
    fn switches_read_like_switches() {
        assert!(!switched_on(None));
        for off in ["", "0", "false", " FALSE "] {
            assert!(!switched_on(Some(off.into())), "{off:?}");
        }
        for on in ["1", "true", "yes"] {
            assert!(switched_on(Some(on.into())), "{on:?}");
        }
    }
}
