//! What each preset needs when its agent is launched, and what it must not get.
//!
//! For every preset this module owns: the variables set for the agent (unless its spec sets
//! the same name), the variables of Legate's environment passed to it when set (its
//! credentials and endpoints, never another vendor's), the variables kept from it even when
//! a spec opts them in, its private temp directory, the directories it may write besides its
//! workspace (its state directory), and whether the `fs` client capability is advertised.
//! These facts come from `/work/shared/ACP-ADAPTERS.md`.
//!
//! It never spawns and never decides permissions; it only creates the private directories
//! the launch needs (mode 0700), and removes the one it made inside a workspace root
//! ([`SessionTmp`]) when the session ends and the agent left it empty.

use legate_core::{Error, ErrorCode, Result};
use std::ffi::OsString;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

/// The directory, inside the workspace root, that holds Codex's private `TMPDIR`s: one
/// directory per session beneath it (`SessionTmp`).
pub const CODEX_TMP: &str = ".legate-tmp";

/// Variables set for Claude Code: no telemetry, no update checks, no nonessential traffic.
const CLAUDE_SET: &[(&str, &str)] = &[
    ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
    ("DISABLE_TELEMETRY", "1"),
    ("DISABLE_AUTOUPDATER", "1"),
    ("DISABLE_ERROR_REPORTING", "1"),
];
/// Claude's credentials and endpoint, passed from Legate's environment when set.
const CLAUDE_PASS: &[&str] = &[
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "CLAUDE_CODE_OAUTH_TOKEN",
];
/// Kept from Claude: the markers of a surrounding Claude Code session, which make it refuse
/// to start or attach to the wrong IDE.
const CLAUDE_KEEP_OUT: &[&str] = &[
    "CLAUDECODE",
    "CLAUDE_CODE_ENTRYPOINT",
    "CLAUDE_CODE_SSE_PORT",
];

/// Codex's credentials and endpoint.
const CODEX_PASS: &[&str] = &["OPENAI_API_KEY", "OPENAI_BASE_URL", "CODEX_API_KEY"];
/// Kept from Codex: the markers a surrounding Codex sets for its own sandboxed children.
const CODEX_KEEP_OUT: &[&str] = &[
    "CODEX_SANDBOX",
    "CODEX_SANDBOX_NETWORK_DISABLED",
    "CODEX_HOME",
];

/// Set for Gemini: no self-relaunch (it would re-exec node with flags of its own).
const GEMINI_SET: &[(&str, &str)] = &[("GEMINI_CLI_NO_RELAUNCH", "true")];
/// Gemini's credentials and endpoint.
const GEMINI_PASS: &[&str] = &[
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "GOOGLE_GEMINI_BASE_URL",
    "GOOGLE_CLOUD_PROJECT",
    "GOOGLE_GENAI_USE_VERTEXAI",
];
/// Kept from Gemini: IDE-integration markers that make it try to reach an editor.
const GEMINI_KEEP_OUT: &[&str] = &[
    "GEMINI_CLI_IDE_SERVER_PORT",
    "GEMINI_CLI_IDE_WORKSPACE_PATH",
    "TERM_PROGRAM",
];

/// The variable that overrides a preset's model endpoint, when the preset has one: the
/// session's network policy allows that URL's host instead of the preset's default hosts.
/// Codex 0.166 (codex-acp 2.x) itself ignores `OPENAI_BASE_URL` and takes its endpoint from
/// its config file; the variable then only tells Legate which host to allow, and must name the
/// same URL (see docs/backends/acp.md, "Network, observed").
pub(crate) fn base_url_var(preset: &str) -> Option<&'static str> {
    match preset {
        "claude" => Some("ANTHROPIC_BASE_URL"),
        "codex" => Some("OPENAI_BASE_URL"),
        "gemini" => Some("GOOGLE_GEMINI_BASE_URL"),
        _ => None,
    }
}

/// The variables of a preset that hold its model credentials (a subset of its pass list):
/// with `credentials = "proxy"` each is replaced by a placeholder in the agent's environment,
/// and the egress proxy holds the value.
pub(crate) fn credential_vars(preset: &str) -> &'static [&'static str] {
    match preset {
        "claude" => &[
            "ANTHROPIC_API_KEY",
            "ANTHROPIC_AUTH_TOKEN",
            "CLAUDE_CODE_OAUTH_TOKEN",
        ],
        "codex" => &["OPENAI_API_KEY", "CODEX_API_KEY"],
        "gemini" => &["GEMINI_API_KEY", "GOOGLE_API_KEY"],
        _ => &[],
    }
}

/// One agent's launch.
#[derive(Debug)]
pub(crate) struct Launch {
    /// Set unless the spec sets the same name.
    pub(crate) set: Vec<(String, OsString)>,
    /// Passed from Legate's environment when set there and not set by the spec.
    pub(crate) pass: &'static [&'static str],
    /// Removed from the environment unless the spec sets them itself.
    pub(crate) keep_out: &'static [&'static str],
    /// The agent's private temp directory (`TMPDIR`), created.
    pub(crate) tmp_dir: Option<PathBuf>,
    /// Where the agent may write besides `/dev/null`: the root, its state and temp dirs.
    pub(crate) writable: Vec<PathBuf>,
    /// Whether the `fs` client capability is advertised.
    pub(crate) advertise_fs: bool,
    /// The temp directory this launch made inside the root (Codex's), to be kept for as long
    /// as the session lives.
    pub(crate) session_tmp: Option<SessionTmp>,
}

/// A private temp directory made for one session inside its workspace root
/// (`<root>/.legate-tmp/<session>/`). When dropped, at the end of the session, it is removed
/// if the agent left it empty, and so is `.legate-tmp` when no other session's directory is
/// left in it; a directory with something in it is left as it is, and logged. One directory
/// per session, so that sessions sharing a root never remove each other's.
#[derive(Debug)]
pub(crate) struct SessionTmp {
    dir: PathBuf,
}

impl SessionTmp {
    /// Makes a new directory beneath `<root>/.legate-tmp/` (mode 0700; never one that exists).
    ///
    /// The root is the agent's: both directories are made beneath it in the kernel
    /// ([`legate_beneath`]), so a `.legate-tmp` an earlier agent left as a symlink is refused,
    /// never followed to make a directory elsewhere.
    fn create(root: &Path) -> Result<Self> {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let parent = root.join(CODEX_TMP);
        let held = legate_beneath::Root::open(root).map_err(|e| beneath_failed(root, &e))?;
        let exists = |e: &legate_beneath::BeneathError| {
            e.io_error()
                .is_some_and(|io| io.kind() == ErrorKind::AlreadyExists)
        };
        let mut last = None;
        for _ in 0..16 {
            match held.create_dir(Path::new(CODEX_TMP), 0o700) {
                Ok(()) => {}
                Err(e) if exists(&e) => {}
                Err(e) => return Err(beneath_failed(&parent, &e)),
            }
            let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let name = format!("{}-{n}", std::process::id());
            let dir = parent.join(&name);
            match held.create_dir(&Path::new(CODEX_TMP).join(&name), 0o700) {
                Ok(()) => return Ok(Self { dir }),
                // Left by an earlier process with this pid, or the parent was removed by a
                // session ending meanwhile: another name, or the parent again.
                Err(e) if exists(&e) || e.is_not_found() => last = Some(e),
                Err(e) => return Err(beneath_failed(&dir, &e)),
            }
        }
        Err(match last {
            Some(e) => beneath_failed(&parent, &e),
            None => start_failed(&parent, &std::io::Error::from(ErrorKind::AlreadyExists)),
        })
    }

    /// The directory.
    pub(crate) fn path(&self) -> &Path {
        &self.dir
    }
}

impl Drop for SessionTmp {
    fn drop(&mut self) {
        match std::fs::remove_dir(&self.dir) {
            Ok(()) => {
                // Fails, harmlessly, while another session's directory is in it.
                if let Some(parent) = self.dir.parent() {
                    let _ = std::fs::remove_dir(parent);
                }
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => tracing::info!(
                dir = %self.dir.display(),
                error = %e,
                "the agent's temp directory in its workspace was left: the agent left files in it"
            ),
        }
    }
}

fn beneath_failed(dir: &Path, e: &legate_beneath::BeneathError) -> Error {
    match e.io_error() {
        Some(io) => start_failed(dir, io),
        None => Error::new(
            ErrorCode::AgentStartFailed,
            format!(
                "could not create the agent's directory {}: {e}",
                dir.display()
            ),
        ),
    }
}

fn start_failed(dir: &Path, e: &std::io::Error) -> Error {
    Error::new(
        ErrorCode::AgentStartFailed,
        format!(
            "could not create the agent's directory {}: {e}",
            dir.display()
        ),
    )
}

fn private_dir(dir: &Path) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| start_failed(dir, &e))
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, OsString)> {
    list.iter()
        .map(|(k, v)| (k.to_string(), OsString::from(v)))
        .collect()
}

/// The variables `preset` sets, passes and keeps out (and nothing else: no directory, no
/// temp dir, nothing writable), as in a pod, where the image has its own `/tmp`.
pub(crate) fn preset_vars(preset: &str, running_as_root: bool) -> Launch {
    let mut set = Vec::new();
    let (pass, keep_out): (&'static [&'static str], &'static [&'static str]) = match preset {
        "claude" => {
            set = pairs(CLAUDE_SET);
            if running_as_root {
                // Claude Code refuses to run as root unless told it is in a sandbox.
                set.push(("IS_SANDBOX".into(), OsString::from("1")));
            }
            (CLAUDE_PASS, CLAUDE_KEEP_OUT)
        }
        "codex" => (CODEX_PASS, CODEX_KEEP_OUT),
        "gemini" => {
            set = pairs(GEMINI_SET);
            (GEMINI_PASS, GEMINI_KEEP_OUT)
        }
        _ => (&[], &[]),
    };
    Launch {
        set,
        pass,
        keep_out,
        tmp_dir: None,
        writable: Vec::new(),
        advertise_fs: false,
        session_tmp: None,
    }
}

/// The launch of an agent following `preset` (`claude`, `codex`, `gemini`, or anything
/// else) in `root` (resolved), with its state in `state_dir`. Creates the state and temp
/// directories.
///
/// Every agent gets a private `TMPDIR`: Codex's is a directory of its own session beneath
/// [`CODEX_TMP`] inside its root (Codex keeps `$TMPDIR` writable without asking, so it must
/// be a place the boundary already covers); the others' is `tmp/` in their state directory.
///
/// `spec_home` is the `HOME` the agent's configuration sets, if any: it replaces the state
/// directory as the agent's home, so an absolute, existing one is writable too.
pub(crate) fn launch(
    preset: &str,
    root: &Path,
    state_dir: Option<&Path>,
    spec_home: Option<&Path>,
    running_as_root: bool,
) -> Result<Launch> {
    let Launch {
        mut set,
        pass,
        keep_out,
        ..
    } = preset_vars(preset, running_as_root);
    let mut writable = vec![root.to_path_buf()];
    if let Some(dir) = state_dir {
        private_dir(dir)?;
        writable.push(dir.to_path_buf());
    }
    if let Some(home) = spec_home.filter(|h| h.is_absolute() && h.is_dir())
        && !writable.iter().any(|w| home.starts_with(w))
    {
        writable.push(home.to_path_buf());
    }
    let session_tmp = match preset {
        "codex" => Some(SessionTmp::create(root)?),
        _ => None,
    };
    let tmp_dir = match (&session_tmp, state_dir) {
        (Some(tmp), _) => Some(tmp.path().to_path_buf()),
        (None, Some(dir)) => Some(dir.join("tmp")),
        (None, None) => None,
    };
    if let Some(tmp) = &tmp_dir {
        private_dir(tmp)?;
        set.push(("TMPDIR".into(), tmp.as_os_str().to_owned()));
        if preset == "claude" {
            // Claude Code ignores TMPDIR for its shell's working files (`/tmp/claude-<uid>`).
            set.push(("CLAUDE_CODE_TMPDIR".into(), tmp.as_os_str().to_owned()));
        }
        if !writable.iter().any(|w| tmp.starts_with(w)) {
            writable.push(tmp.clone());
        }
    }
    Ok(Launch {
        set,
        pass,
        keep_out,
        tmp_dir,
        writable,
        // Gemini fails to write a new file through `fs/write_text_file` (it reads first,
        // and takes the missing-file error for a failure); without `fs` it uses its own.
        advertise_fs: preset != "gemini",
        session_tmp,
    })
}

impl Launch {
    /// Applies the launch to `env` (built by [`crate::env::agent_env`]), taking the parent
    /// environment's values for [`Launch::pass`]. The spec's own `env` always wins.
    pub(crate) fn apply(
        &self,
        env: &mut Vec<(OsString, OsString)>,
        parent: &[(OsString, OsString)],
        spec_env: &std::collections::BTreeMap<String, String>,
    ) {
        let mut put = |k: &str, v: OsString| {
            if spec_env.contains_key(k) {
                return;
            }
            env.retain(|(name, _)| name != k);
            env.push((OsString::from(k), v));
        };
        for (k, v) in &self.set {
            put(k, v.clone());
        }
        for name in self.pass {
            if let Some((_, v)) = parent.iter().find(|(k, _)| k == name) {
                put(name, v.clone());
            }
        }
        env.retain(|(k, _)| {
            let k = k.to_string_lossy();
            !self.keep_out.contains(&k.as_ref()) || spec_env.contains_key(k.as_ref())
        });
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use std::collections::BTreeMap;

    fn os(list: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        list.iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect()
    }

    fn get<'a>(env: &'a [(OsString, OsString)], k: &str) -> Option<&'a str> {
        env.iter()
            .find(|(n, _)| n == k)
            .and_then(|(_, v)| v.to_str())
    }

    #[test]
    fn codex_gets_a_private_tmpdir_inside_its_root() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        let state = dir.path().join("state");
        std::fs::create_dir(&root).unwrap();
        let l = launch("codex", &root, Some(&state), None, false).unwrap();
        let tmp = l.tmp_dir.clone().unwrap();
        assert_eq!(tmp.parent(), Some(root.join(CODEX_TMP).as_path()));
        assert!(tmp.is_dir());
        assert_eq!(l.writable, [root.clone(), state.clone()]);
        let l = launch("claude", &root, Some(&state), None, false).unwrap();
        assert_eq!(l.tmp_dir, Some(state.join("tmp")));
        assert!(state.join("tmp").is_dir());
        let tmp = state.join("tmp").into_os_string();
        assert!(
            l.set
                .contains(&("CLAUDE_CODE_TMPDIR".to_string(), tmp.clone()))
        );
        assert!(l.set.contains(&("TMPDIR".to_string(), tmp)));
        assert!(l.advertise_fs);
        assert!(
            !launch("gemini", &root, None, None, false)
                .unwrap()
                .advertise_fs
        );
    }

    #[test]
    fn codex_temp_dirs_are_one_per_session_and_go_when_left_empty() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let first = launch("codex", root, None, None, false).unwrap();
        let second = launch("codex", root, None, None, false).unwrap();
        let (a, b) = (
            first.tmp_dir.clone().unwrap(),
            second.tmp_dir.clone().unwrap(),
        );
        assert_ne!(a, b);
        // The first session ends with its directory empty: it goes, `.legate-tmp` stays
        // for the second.
        drop(first);
        assert!(!a.exists());
        assert!(b.is_dir());
        // The second leaves a file behind: its directory (and `.legate-tmp`) stay.
        std::fs::write(b.join("left.txt"), "x").unwrap();
        drop(second);
        assert!(b.join("left.txt").is_file());
        std::fs::remove_file(b.join("left.txt")).unwrap();
        // A third, empty at its end, takes `.legate-tmp` with it once nothing else is there.
        std::fs::remove_dir(&b).unwrap();
        drop(launch("codex", root, None, None, false).unwrap());
        assert!(!root.join(CODEX_TMP).exists());
    }

    #[test]
    fn a_planted_legate_tmp_symlink_is_refused_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let (root, outside) = (dir.path().join("root"), dir.path().join("outside"));
        std::fs::create_dir(&root).unwrap();
        std::fs::create_dir(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, root.join(CODEX_TMP)).unwrap();
        let err = launch("codex", &root, None, None, false).unwrap_err();
        assert_eq!(err.code, ErrorCode::AgentStartFailed, "{err:?}");
        assert!(err.message.contains("symlink"), "{}", err.message);
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
    }

    #[test]
    fn a_home_set_by_the_spec_is_writable() {
        let dir = tempfile::tempdir().unwrap();
        let (root, state, home) = (
            dir.path().join("root"),
            dir.path().join("state"),
            dir.path().join("home"),
        );
        std::fs::create_dir(&root).unwrap();
        std::fs::create_dir(&home).unwrap();
        let l = launch("claude", &root, Some(&state), Some(&home), false).unwrap();
        assert_eq!(l.writable, [root.clone(), state.clone(), home.clone()]);
        // Not one that does not exist, is relative, or is already covered.
        for other in [
            dir.path().join("nowhere"),
            PathBuf::from("rel"),
            root.join("h"),
        ] {
            let l = launch("claude", &root, Some(&state), Some(&other), false).unwrap();
            assert_eq!(l.writable, [root.clone(), state.clone()], "{other:?}");
        }
    }

    #[test]
    fn presets_pass_their_own_credentials_only_and_the_spec_wins() {
        let dir = tempfile::tempdir().unwrap();
        let parent = os(&[
            ("ANTHROPIC_API_KEY", "a"),
            ("OPENAI_API_KEY", "o"),
            ("GEMINI_API_KEY", "g"),
        ]);
        let mut env = os(&[("PATH", "/bin"), ("CLAUDECODE", "1")]);
        let spec_env = BTreeMap::from([("DISABLE_TELEMETRY".to_string(), "0".to_string())]);
        let l = launch("claude", dir.path(), None, None, true).unwrap();
        l.apply(&mut env, &parent, &spec_env);
        assert_eq!(get(&env, "ANTHROPIC_API_KEY"), Some("a"));
        assert_eq!(get(&env, "OPENAI_API_KEY"), None);
        assert_eq!(get(&env, "IS_SANDBOX"), Some("1"));
        assert_eq!(get(&env, "DISABLE_TELEMETRY"), None, "the spec sets it");
        assert_eq!(get(&env, "CLAUDECODE"), None);
        assert_eq!(get(&env, "PATH"), Some("/bin"));

        let mut env = Vec::new();
        launch("gemini", dir.path(), None, None, false)
            .unwrap()
            .apply(&mut env, &parent, &BTreeMap::new());
        assert_eq!(get(&env, "GEMINI_API_KEY"), Some("g"));
        assert_eq!(get(&env, "GEMINI_CLI_NO_RELAUNCH"), Some("true"));
        assert_eq!(get(&env, "ANTHROPIC_API_KEY"), None);
    }
}
