//! What an `agy` process may write, and the Landlock ruleset that holds it to that.
//!
//! Every process the agy driver spawns (`--version`, `--help`, `models`, each run) is confined
//! like an ACP agent (`legate-confine`, applied between `fork` and `exec`). Unlike an ACP
//! agent, `agy` keeps the user's `HOME` (it needs the user's profile and keyring to find its
//! login), so what it may write is decided here:
//!
//! * the workspace root;
//! * its own profile, `$HOME/.gemini/antigravity-cli` ([`PROFILE`]): settings, the settings
//!   lock, conversations, `brain/`, `history.jsonl`. It is created (mode 0700) when missing,
//!   so that a first run can write it. The rest of `$HOME` (Gemini CLI's `~/.gemini`, the
//!   Antigravity IDE's `~/.gemini/antigravity`, your dotfiles) stays read-only;
//! * a private temp directory, `<state>/tmp` (mode 0700), given as `TMPDIR`, `TMP` and
//!   `TEMP` unless the agent's `env` sets them;
//! * `/dev/null` and pseudo-terminals ([`legate_confine::WRITABLE_DEVICES`]).
//!
//! Legate's own state directory for the agent (`$LEGATE_HOME/agents/<name>/`: usage totals,
//! the saved model, blocked-workspace marks) is *not* writable: `agy` must not be able to
//! forge its usage or lift a block. Like an ACP agent's, its processes do not see Legate's
//! home or token files (the session request's `hidden` paths), only the writable
//! directories beneath them, and not Legate's processes (`legate_confine::IsolationReport`).

use legate_confine::{Confinement, Prepared, Requirement};
use legate_core::{AgentSpec, Error, ErrorCode, EventKind, Result};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// `agy`'s profile directory, relative to `HOME`.
pub(crate) const PROFILE: &str = ".gemini/antigravity-cli";

/// What an `agy` process of one session may write.
#[derive(Debug, Clone)]
pub(crate) struct Fence {
    confinement: Confinement,
    requirement: Requirement,
    /// The writable directories (devices aside), in order.
    pub(crate) writable: Vec<PathBuf>,
    /// The private temp directory, when there is a state directory to hold it.
    pub(crate) tmp_dir: Option<PathBuf>,
}

/// The path of the session bus's socket in `env`'s `DBUS_SESSION_BUS_ADDRESS`
/// (`unix:path=…`, the first address that has one; an abstract socket has no path, and is
/// out of reach in a network namespace of its own, or under Landlock's scopes, ABI 6).
fn session_bus_socket(env: &[(OsString, OsString)]) -> Option<PathBuf> {
    let (_, address) = env.iter().find(|(k, _)| k == "DBUS_SESSION_BUS_ADDRESS")?;
    let address = address.to_str()?;
    address.split(';').find_map(|one| {
        let params = one.strip_prefix("unix:")?;
        params
            .split(',')
            .find_map(|kv| kv.strip_prefix("path="))
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    })
}

fn private_dir(dir: &Path) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| {
            let sentence = format!("could not create agy's directory {}", dir.display());
            Error::quoting(ErrorCode::AgentStartFailed, sentence, e)
        })
}

impl Fence {
    /// The fence of a session in `root` (resolved), with Legate's state for the agent in
    /// `state_dir`. Creates the profile and temp directories and points `env`'s temp
    /// variables at the private one (unless `spec.env` sets them).
    pub(crate) fn new(
        spec: &AgentSpec,
        root: &Path,
        state_dir: Option<&Path>,
        env: &mut Vec<(OsString, OsString)>,
        requirement: Requirement,
        hidden: &[PathBuf],
    ) -> Result<Self> {
        let local = spec.local()?;
        let mut writable = vec![root.to_path_buf()];
        let home = env
            .iter()
            .find(|(k, _)| k == "HOME")
            .map(|(_, v)| PathBuf::from(v))
            .filter(|h| h.is_absolute());
        if let Some(home) = home {
            let profile = home.join(PROFILE);
            match private_dir(&profile) {
                Ok(()) => writable.push(profile),
                Err(e) => tracing::warn!(error = %e.message, "agy's profile is not writable"),
            }
        }
        let tmp_dir = match state_dir {
            Some(dir) => {
                let tmp = dir.join("tmp");
                private_dir(&tmp)?;
                for name in ["TMPDIR", "TMP", "TEMP"] {
                    if !local.env.contains_key(name) {
                        env.retain(|(k, _)| k != name);
                        env.push((OsString::from(name), tmp.as_os_str().to_owned()));
                    }
                }
                writable.push(tmp.clone());
                Some(tmp)
            }
            None => None,
        };
        let confinement = writable
            .iter()
            .fold(Confinement::new(), |c, dir| c.allow_write(dir));
        let mut confinement = hidden
            .iter()
            .fold(confinement, |c, p| c.hide(p))
            .limit(spec.limits);
        // agy finds a keyring login through the session bus, which the sealed namespace
        // covers (`/run/user`): its socket alone stays in sight, and only when agy has no key
        // of its own to use instead. Through that bus a process can also ask the session's
        // systemd to start a command outside any sandbox (docs/backends/agy.md).
        let has_key = env
            .iter()
            .any(|(k, _)| k == "GEMINI_API_KEY" || k == "GOOGLE_APPLICATION_CREDENTIALS");
        if let Some(bus) = session_bus_socket(env).filter(|_| !has_key) {
            confinement = confinement.keep_visible(bus);
        }
        if let Some(dir) = state_dir {
            // Long JSON Schemas are passed as files there (read-only for agy): keep it in
            // sight when the home is hidden.
            let schemas = dir.join("schemas");
            private_dir(&schemas)?;
            confinement = confinement.keep_visible(schemas);
            // So is the policy agy's tool-control hook decides from (`staging`), which it
            // must read and never write.
            let hooks = dir.join("hooks");
            private_dir(&hooks)?;
            confinement = confinement.keep_visible(hooks);
        }
        Ok(Self {
            confinement,
            requirement,
            writable,
            tmp_dir,
        })
    }

    /// A ruleset for one run (`CONFINEMENT_UNAVAILABLE` when required and impossible), whose
    /// network namespace hands back a listener for the egress proxy. Probes get none: they
    /// reach nothing.
    pub(crate) fn prepare_run(&self) -> Result<Prepared> {
        self.confinement
            .clone()
            .egress(legate_egress::PROXY_PORT)
            .prepare(self.requirement)
    }

    /// The confinement and requirement, for the probes.
    pub(crate) fn fenced(&self) -> super::discovery::Fenced<'_> {
        Some((&self.confinement, self.requirement))
    }

    /// The `notice` that reports it, sent before anything is spawned.
    pub(crate) fn event(&self) -> EventKind {
        crate::spawn::confinement_notice(
            "agy",
            &crate::spawn::Facts::probed(&self.confinement),
            &self.writable,
            self.tmp_dir.as_deref(),
        )
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use legate_core::AgentKind;

    #[test]
    fn the_session_bus_socket_is_found_in_its_address() {
        let env = |v: &str| {
            vec![(
                OsString::from("DBUS_SESSION_BUS_ADDRESS"),
                OsString::from(v),
            )]
        };
        assert_eq!(
            session_bus_socket(&env("unix:path=/run/user/1000/bus")),
            Some(PathBuf::from("/run/user/1000/bus"))
        );
        assert_eq!(
            session_bus_socket(&env("unix:abstract=/tmp/x;unix:guid=1,path=/run/b")),
            Some(PathBuf::from("/run/b"))
        );
        assert_eq!(session_bus_socket(&env("unix:abstract=/tmp/dbus-x")), None);
        assert_eq!(session_bus_socket(&env("unix:path=relative")), None);
        assert_eq!(session_bus_socket(&[]), None);
    }

    #[test]
    fn root_profile_and_private_tmp_are_writable_and_legates_state_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let (root, home, state) = (
            dir.path().join("root"),
            dir.path().join("home"),
            dir.path().join("state"),
        );
        std::fs::create_dir_all(&root).unwrap();
        let spec = AgentSpec::command("agy", AgentKind::AGY, "agy")
            .envs([("TEMP".to_string(), "/mine".to_string())].into());
        let mut env = vec![
            (OsString::from("HOME"), home.clone().into_os_string()),
            (OsString::from("TMPDIR"), OsString::from("/tmp")),
            (OsString::from("TEMP"), OsString::from("/mine")),
        ];
        let f = Fence::new(
            &spec,
            &root,
            Some(&state),
            &mut env,
            Requirement::BestEffort,
            &[],
        )
        .unwrap();
        let tmp = state.join("tmp");
        assert_eq!(f.writable, [root, home.join(PROFILE), tmp.clone()]);
        assert!(home.join(PROFILE).is_dir() && tmp.is_dir());
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        assert_eq!(get("TMPDIR"), Some(tmp.clone().into_os_string()));
        assert_eq!(get("TMP"), Some(tmp.into_os_string()));
        assert_eq!(get("TEMP"), Some(OsString::from("/mine")));
        assert!(!f.writable.contains(&state));
    }
}
