//! The npm packages that a Node.js client test drives (the official TypeScript MCP Tasks
//! requester): installed from a committed `package-lock.json` under the target directory the
//! first time a test asks for them, the way [`crate::python`](mod@crate::python) provisions the Python clients.
//!
//! `cargo test --workspace` is the README's test command, so a fresh machine with `node` and
//! `npm` needs nothing more: [`node_modules`] runs `npm ci` for the test's package directory
//! into `<target>/legate-node/<hash>/`, once, under an exclusive lock that parallel test
//! binaries share. The hash is that of `package.json` and `package-lock.json`, so changing a
//! pin installs anew. Nothing outside the target directory is touched.
//!
//! When `node` or `npm` is missing, the test is skipped (saying so), except when Node.js is
//! [required](node_required) (`LEGATE_REQUIRE_NODE` or `CI`): then it fails. A failed install
//! (no registry) always fails, with npm's output. This module never installs anything that the
//! lock file does not pin.

use crate::python::{fnv_hex, run, switched_on, under_target};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The variable that makes the Node.js client tests fail, instead of skipping, when `node` or
/// `npm` is missing. `.ci/run` sets it; `CI` counts too.
pub const REQUIRE_NODE_ENV: &str = "LEGATE_REQUIRE_NODE";

/// Whether the Node.js client tests may be skipped when `node` or `npm` is missing: not when
/// [`REQUIRE_NODE_ENV`] or `CI` is on.
#[must_use]
pub fn node_required() -> bool {
    switched_on(std::env::var_os(REQUIRE_NODE_ENV)) || switched_on(std::env::var_os("CI"))
}

/// The `node_modules` installed from `package_dir`'s `package.json` and `package-lock.json`
/// (`npm ci`), provisioned on first use. `None` after printing `SKIPPED: …` when `node` or
/// `npm` is not installed and Node.js is not [required](node_required). Panics when they are
/// missing but required, and when the install fails.
#[must_use]
pub fn node_modules(package_dir: &Path) -> Option<PathBuf> {
    for tool in ["node", "npm"] {
        match Command::new(tool).arg("--version").output() {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if node_required() {
                    panic!(
                        "{tool} is not installed, and {REQUIRE_NODE_ENV} or CI is set, so the Node.js client tests may not be skipped: install Node.js 20 or newer"
                    );
                }
                eprintln!(
                    "SKIPPED: {tool} is not installed, so this Node.js client test cannot run (set {REQUIRE_NODE_ENV}=1 to make that a failure)"
                );
                return None;
            }
            Err(e) => panic!("could not run {tool}: {e}"),
            Ok(_) => {}
        }
    }
    match provision(&under_target("legate-node"), package_dir) {
        Ok(dir) => Some(dir.join("node_modules")),
        Err(e) => panic!("could not install the Node.js test packages: {e}"),
    }
}

/// Runs `npm ci` for `package_dir`'s manifest and lock into `<dir>/<hash>/` unless that one is
/// complete already (its `complete` marker is written last), holding `<dir>/lock` meanwhile. A
/// half-made one (a test killed while npm ran) is removed and made again.
fn provision(dir: &Path, package_dir: &Path) -> Result<PathBuf, String> {
    let read = |name: &str| {
        let path = package_dir.join(name);
        std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))
    };
    let (manifest, lock_file) = (read("package.json")?, read("package-lock.json")?);
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let lock_path = dir.join("lock");
    let lock = File::create(&lock_path).map_err(|e| format!("{}: {e}", lock_path.display()))?;
    lock.lock()
        .map_err(|e| format!("locking {}: {e}", lock_path.display()))?;
    let env = dir.join(fnv_hex(&[manifest.as_slice(), &lock_file].concat()));
    let marker = env.join("complete");
    if marker.exists() {
        return Ok(env);
    }
    if env.exists() {
        std::fs::remove_dir_all(&env).map_err(|e| format!("{}: {e}", env.display()))?;
    }
    std::fs::create_dir_all(&env).map_err(|e| format!("{}: {e}", env.display()))?;
    eprintln!(
        "installing the pinned Node.js test packages in {} (once)",
        env.display()
    );
    for (name, bytes) in [
        ("package.json", &manifest),
        ("package-lock.json", &lock_file),
    ] {
        let path = env.join(name);
        std::fs::write(&path, bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    run(Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
        .current_dir(&env))?;
    std::fs::write(&marker, "").map_err(|e| format!("{}: {e}", marker.display()))?;
    Ok(env)
}
