//! An agent's environment: an allowlist of Legate's own variables, plus what its spec adds.
//!
//! Every driver starts its agent from an empty environment. The agent inherits only the
//! seed's `cliEnvironment` groups ([`INHERITED_EXACT`], the same for every agent, plus
//! [`GOOGLE_AUTH`] for `agy`), then the names its
//! [`AgentSpec`] opts in by exact name (`inherit_env`), then the variables its spec sets
//! (`env`). Variables that change how a runtime loads code (`NODE_OPTIONS`, `NODE_PATH`,
//! `LD_*`, `DYLD_*`) are never passed on: a spec that names one, in any case or spacing, is
//! refused, and the error names the variable, never its value.
//!
//! This module never logs a value and never reads anything but the parent environment it is
//! handed.

use legate_core::{AgentSpec, Error, ErrorCode, Result};
use std::ffi::{OsStr, OsString};
use std::path::Path;

/// Variables every agent inherits from Legate's environment by exact name: the seed's
/// `cliEnvironment` groups without a vendor's credentials (system and executables; user and
/// profile directories; temp; locale; XDG and the native keyring; SSH session context without
/// credentials; proxies; certificates; Windows context). Drivers and presets then add what
/// their agent needs: `agy` [`GOOGLE_AUTH`], ACP presets their own credentials, and every ACP
/// agent its private `HOME` and temp directory.
pub const INHERITED_EXACT: &[&str] = &[
    // System and executable resolution.
    "PATH",
    "PATHEXT",
    "SystemRoot",
    "SystemDrive",
    "ComSpec",
    "WINDIR",
    "SHELL",
    "TERM",
    "COLORTERM",
    // User and profile directories.
    "HOME",
    "USERPROFILE",
    "APPDATA",
    "LOCALAPPDATA",
    "HOMEDRIVE",
    "HOMEPATH",
    "USER",
    "LOGNAME",
    "USERNAME",
    // Temporary directories.
    "TEMP",
    "TMP",
    "TMPDIR",
    // Locale and time zone.
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "LC_MESSAGES",
    "TZ",
    // XDG base directories, session bus and native keyring.
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "XDG_CACHE_HOME",
    "XDG_RUNTIME_DIR",
    "XDG_DATA_DIRS",
    "XDG_CONFIG_DIRS",
    "DBUS_SESSION_BUS_ADDRESS",
    "GNOME_KEYRING_CONTROL",
    "GNOME_KEYRING_PID",
    "SECURITYSESSIONID",
    // Remote SSH session context (no credentials).
    "SSH_CONNECTION",
    "SSH_CLIENT",
    "SSH_TTY",
    // Network and proxies.
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
    // TLS certificates.
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    // Windows, architecture and domain context.
    "OS",
    "PROCESSOR_ARCHITECTURE",
    "PROCESSOR_ARCHITEW6432",
    "NUMBER_OF_PROCESSORS",
    "ProgramData",
    "ProgramFiles",
    "ProgramFiles(x86)",
    "CommonProgramFiles",
    "CommonProgramFiles(x86)",
    "USERDOMAIN",
    "USERDNSDOMAIN",
    "COMPUTERNAME",
];

/// Variables inherited by prefix: none. (ACP agents once inherited `LC_*` and `XDG_*`; they
/// now get the seed's exact locale and XDG names, like `agy`.)
pub const INHERITED_PREFIXES: &[&str] = &[];

/// What `agy` inherits on top of [`INHERITED_EXACT`]: the seed's Google/Gemini
/// authentication and endpoint group.
pub const GOOGLE_AUTH: &[&str] = &[
    "GEMINI_API_KEY",
    "GOOGLE_GEMINI_BASE_URL",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "GOOGLE_CLOUD_PROJECT",
    "GCLOUD_PROJECT",
    "GOOGLE_CLOUD_UNIVERSE_DOMAIN",
];

/// Variables never passed to an agent, by exact name (compared upper-cased, blanks removed).
pub const FORBIDDEN_EXACT: &[&str] = &["NODE_OPTIONS", "NODE_PATH"];

/// Variables never passed to an agent, by prefix (compared upper-cased, blanks removed).
pub const FORBIDDEN_PREFIXES: &[&str] = &["LD_", "DYLD_"];

/// Which allowlist a driver starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Allowlist {
    /// ACP agents: [`INHERITED_EXACT`]; their presets add their own credentials.
    Acp,
    /// `agy`: [`INHERITED_EXACT`] and [`GOOGLE_AUTH`].
    Agy,
}

impl Allowlist {
    fn admits(self, name: &str) -> bool {
        INHERITED_EXACT.contains(&name)
            || INHERITED_PREFIXES.iter().any(|p| name.starts_with(p))
            || (self == Self::Agy && GOOGLE_AUTH.contains(&name))
    }
}

/// Whether `name` is a loader variable, in any case and with any blanks in it.
pub fn is_forbidden(name: &str) -> bool {
    let norm: String = name
        .chars()
        .filter(|c| !c.is_whitespace())
        .flat_map(char::to_uppercase)
        .collect();
    FORBIDDEN_EXACT.contains(&norm.as_str())
        || FORBIDDEN_PREFIXES.iter().any(|p| norm.starts_with(p))
}

/// The name as it may appear in an error: trimmed, escaped, and cut short.
fn shown(name: &str) -> String {
    let t = name.trim();
    let cut: String = t.chars().take(64).collect();
    cut.escape_debug().to_string()
}

fn valid_name(name: &str) -> bool {
    !name.is_empty() && !name.contains('=') && !name.contains('\0')
}

/// Checks exact names opted in for inheritance (`inherit_env`): each must be a valid name
/// and none a loader variable. `CONFIG_INVALID` naming the first bad one, never a value.
pub fn check_opt_ins(names: &[String]) -> Result<()> {
    for name in names {
        if is_forbidden(name) {
            return Err(Error::new(
                ErrorCode::ConfigInvalid,
                format!(
                    "{} may not be inherited: Legate never passes NODE_OPTIONS, NODE_PATH, LD_* or DYLD_* to an agent",
                    shown(name)
                ),
            ));
        }
        if !valid_name(name) || name.trim() != name {
            return Err(Error::new(
                ErrorCode::ConfigInvalid,
                format!("`{}` is not a valid environment variable name", shown(name)),
            ));
        }
    }
    Ok(())
}

fn is_inherited(name: &OsStr, allow: Allowlist, opt_ins: &[String]) -> bool {
    let Some(name) = name.to_str() else {
        return false;
    };
    !is_forbidden(name) && (allow.admits(name) || opt_ins.iter().any(|o| o == name))
}

/// The complete environment for `spec`'s process, built from `parent` (Legate's own
/// environment): `allow`'s variables, the spec's `inherit_env` names, then the spec's `env`.
/// `state_dir`, when given, becomes `HOME` unless the spec sets `HOME` itself.
///
/// `AGENT_START_FAILED` naming the variable (never its value) when the spec names a loader
/// variable or an invalid name.
pub fn agent_env(
    parent: impl IntoIterator<Item = (OsString, OsString)>,
    spec: &AgentSpec,
    state_dir: Option<&Path>,
    allow: Allowlist,
) -> Result<Vec<(OsString, OsString)>> {
    let refuse = |name: &str, why: &str| {
        Error::new(
            ErrorCode::AgentStartFailed,
            format!("agent `{}` {why} {}", spec.name, shown(name)),
        )
    };
    let local = spec.local()?;
    for name in local.env.keys() {
        if is_forbidden(name) {
            return Err(Error::new(
                ErrorCode::AgentStartFailed,
                format!(
                    "agent `{}` sets {} in its environment, which Legate never passes to an agent",
                    spec.name,
                    shown(name)
                ),
            ));
        }
        if !valid_name(name) {
            return Err(refuse(name, "names an invalid environment variable"));
        }
    }
    for name in &local.inherit_env {
        if is_forbidden(name) {
            return Err(refuse(
                name,
                "opts in a variable Legate never passes to an agent:",
            ));
        }
        if !valid_name(name) {
            return Err(refuse(name, "opts in an invalid environment variable"));
        }
    }
    let mut env: Vec<(OsString, OsString)> = parent
        .into_iter()
        .filter(|(k, _)| is_inherited(k, allow, &local.inherit_env))
        .collect();
    let mut set = |k: &str, v: OsString| {
        env.retain(|(name, _)| name != k);
        env.push((OsString::from(k), v));
    };
    if let Some(dir) = state_dir {
        set("HOME", dir.as_os_str().to_owned());
    }
    for (k, v) in &local.env {
        set(k, OsString::from(v));
    }
    Ok(env)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use legate_core::AgentKind;
    use std::collections::BTreeMap;

    fn spec(env: &[(&str, &str)]) -> AgentSpec {
        AgentSpec::command("a", AgentKind::ACP, "x").envs(
            env.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
        )
    }

    fn parent() -> Vec<(OsString, OsString)> {
        [
            ("PATH", "/bin"),
            ("HOME", "/home/me"),
            ("LC_ALL", "C"),
            ("LC_NUMERIC", "C"),
            ("XDG_CONFIG_HOME", "/c"),
            ("XDG_SESSION_ID", "7"),
            ("AWS_SECRET_ACCESS_KEY", "s3cr3t"),
            ("NODE_OPTIONS", "--require evil"),
            ("LD_PRELOAD", "/evil.so"),
            ("ANTHROPIC_API_KEY", "k"),
            ("GEMINI_API_KEY", "g"),
            ("HTTPS_PROXY", "http://proxy"),
            ("SSH_AUTH_SOCK", "/agent"),
            ("MY_TOOL_SETTING", "on"),
        ]
        .iter()
        .map(|(k, v)| (OsString::from(k), OsString::from(v)))
        .collect()
    }

    fn get<'a>(env: &'a [(OsString, OsString)], k: &str) -> Option<&'a OsStr> {
        env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_os_str())
    }

    fn names(env: &[(OsString, OsString)]) -> Vec<&str> {
        let mut names: Vec<_> = env.iter().map(|(k, _)| k.to_str().unwrap()).collect();
        names.sort_unstable();
        names
    }

    #[test]
    fn acp_agents_inherit_the_seed_groups_without_google_credentials() {
        let env = agent_env(parent(), &spec(&[]), None, Allowlist::Acp).unwrap();
        assert_eq!(
            names(&env),
            ["HOME", "HTTPS_PROXY", "LC_ALL", "PATH", "XDG_CONFIG_HOME"]
        );
    }

    #[test]
    fn agy_inherits_the_seed_groups_by_exact_name_only() {
        let env = agent_env(parent(), &spec(&[]), None, Allowlist::Agy).unwrap();
        assert_eq!(
            names(&env),
            [
                "GEMINI_API_KEY",
                "HOME",
                "HTTPS_PROXY",
                "LC_ALL",
                "PATH",
                "XDG_CONFIG_HOME"
            ]
        );
        let s = spec(&[]).inherit_env(["MY_TOOL_SETTING"]);
        let env = agent_env(parent(), &s, None, Allowlist::Agy).unwrap();
        assert_eq!(get(&env, "MY_TOOL_SETTING"), Some(OsStr::new("on")));
        assert_eq!(get(&env, "SSH_AUTH_SOCK"), None);
    }

    #[test]
    fn spec_env_and_state_dir_are_added() {
        let env = agent_env(
            parent(),
            &spec(&[("ANTHROPIC_API_KEY", "mine"), ("PATH", "/opt/bin")]),
            Some(Path::new("/state")),
            Allowlist::Acp,
        )
        .unwrap();
        assert_eq!(get(&env, "ANTHROPIC_API_KEY"), Some(OsStr::new("mine")));
        assert_eq!(get(&env, "PATH"), Some(OsStr::new("/opt/bin")));
        assert_eq!(get(&env, "HOME"), Some(OsStr::new("/state")));
        let env = agent_env(
            parent(),
            &spec(&[("HOME", "/h")]),
            Some(Path::new("/state")),
            Allowlist::Acp,
        )
        .unwrap();
        assert_eq!(get(&env, "HOME"), Some(OsStr::new("/h")));
    }

    #[test]
    fn loader_variables_are_refused_by_name_without_their_value() {
        for (k, v) in [
            ("NODE_OPTIONS", "--inspect"),
            ("NODE_PATH", "/x"),
            ("LD_PRELOAD", "/evil.so"),
            ("LD_LIBRARY_PATH", "/l"),
            ("DYLD_INSERT_LIBRARIES", "/d"),
            ("node_options", "--inspect"),
            ("Ld_Preload", "/evil.so"),
        ] {
            let err = agent_env(parent(), &spec(&[(k, v)]), None, Allowlist::Acp).unwrap_err();
            assert_eq!(err.code, ErrorCode::AgentStartFailed);
            assert!(err.message.contains(k), "{}", err.message);
            assert!(!err.message.contains(v), "{}", err.message);
        }
    }

    #[test]
    fn loader_opt_ins_are_refused_in_any_case_or_spacing() {
        for name in [
            "NODE_OPTIONS",
            "node_options",
            " NODE_OPTIONS ",
            "NODE_ OPTIONS",
            "Node_Path",
            "ld_preload",
            "\tLD_AUDIT",
            "DYLD_INSERT_LIBRARIES",
            "dyld_library_path",
        ] {
            let err = check_opt_ins(&[name.to_string()]).unwrap_err();
            assert_eq!(err.code, ErrorCode::ConfigInvalid);
            assert!(err.message.contains(name.trim()), "{}", err.message);
            let s = spec(&[]).inherit_env([name]);
            for allow in [Allowlist::Acp, Allowlist::Agy] {
                let err = agent_env(parent(), &s, None, allow).unwrap_err();
                assert_eq!(err.code, ErrorCode::AgentStartFailed);
                assert!(err.message.contains(name.trim()), "{}", err.message);
                assert!(!err.message.contains("evil"), "{}", err.message);
            }
        }
        check_opt_ins(&["MY_TOOL_SETTING".into(), "NODE_EXTRA_CA_CERTS".into()]).unwrap();
    }
}
