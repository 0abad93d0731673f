//! The agent's environment: an allowlist of Legate's own variables, plus the agent spec's.
//!
//! The agent starts from an empty environment. It inherits only what a program needs to run
//! (`PATH`, `HOME`, locale, terminal, temp dir, XDG directories), then gets the variables its
//! [`AgentSpec`] names. Variables that change how a runtime loads code (`NODE_OPTIONS`,
//! `NODE_PATH`, `LD_*`, `DYLD_*`) are never passed on, and a spec that names one is refused:
//! the error names the variable, never its value.

use legate_core::{AgentSpec, Error, ErrorCode, Result};
use std::ffi::{OsStr, OsString};
use std::path::Path;

/// Variables inherited from Legate's environment by exact name.
pub const INHERITED_EXACT: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TERM", "TZ", "SHELL", "TMPDIR",
];

/// Variables inherited from Legate's environment by prefix.
pub const INHERITED_PREFIXES: &[&str] = &["LC_", "XDG_"];

/// Variables never passed to an agent, by exact name.
pub const FORBIDDEN_EXACT: &[&str] = &["NODE_OPTIONS", "NODE_PATH"];

/// Variables never passed to an agent, by prefix.
pub const FORBIDDEN_PREFIXES: &[&str] = &["LD_", "DYLD_"];

fn is_forbidden(name: &str) -> bool {
    FORBIDDEN_EXACT.contains(&name) || FORBIDDEN_PREFIXES.iter().any(|p| name.starts_with(p))
}

fn is_inherited(name: &OsStr) -> bool {
    let Some(name) = name.to_str() else {
        return false;
    };
    !is_forbidden(name)
        && (INHERITED_EXACT.contains(&name)
            || INHERITED_PREFIXES.iter().any(|p| name.starts_with(p)))
}

/// The complete environment for `spec`'s process, built from `parent` (Legate's own
/// environment). `state_dir`, when given, becomes `HOME` unless the spec sets `HOME` itself.
pub(crate) fn agent_env(
    parent: impl IntoIterator<Item = (OsString, OsString)>,
    spec: &AgentSpec,
    state_dir: Option<&Path>,
) -> Result<Vec<(OsString, OsString)>> {
    for name in spec.env.keys() {
        if is_forbidden(name) {
            return Err(Error::new(
                ErrorCode::AgentStartFailed,
                format!(
                    "agent `{}` sets {name} in its environment, which Legate never passes to an agent",
                    spec.name
                ),
            ));
        }
        if name.is_empty() || name.contains('=') || name.contains('\0') {
            return Err(Error::new(
                ErrorCode::AgentStartFailed,
                format!(
                    "agent `{}` names an invalid environment variable `{}`",
                    spec.name,
                    name.escape_debug()
                ),
            ));
        }
    }
    let mut env: Vec<(OsString, OsString)> = parent
        .into_iter()
        .filter(|(k, _)| is_inherited(k))
        .collect();
    let mut set = |k: &str, v: OsString| {
        env.retain(|(name, _)| name != k);
        env.push((OsString::from(k), v));
    };
    if let Some(dir) = state_dir {
        set("HOME", dir.as_os_str().to_owned());
    }
    for (k, v) in &spec.env {
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
        AgentSpec {
            name: "a".into(),
            kind: AgentKind::Acp,
            command: "x".into(),
            args: vec![],
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
            preset: None,
            allow_execute: false,
            terminal: false,
            description: None,
        }
    }

    fn parent() -> Vec<(OsString, OsString)> {
        [
            ("PATH", "/bin"),
            ("HOME", "/home/me"),
            ("LC_ALL", "C"),
            ("XDG_CONFIG_HOME", "/c"),
            ("AWS_SECRET_ACCESS_KEY", "s3cr3t"),
            ("NODE_OPTIONS", "--require evil"),
            ("LD_PRELOAD", "/evil.so"),
            ("ANTHROPIC_API_KEY", "k"),
        ]
        .iter()
        .map(|(k, v)| (OsString::from(k), OsString::from(v)))
        .collect()
    }

    fn get<'a>(env: &'a [(OsString, OsString)], k: &str) -> Option<&'a OsStr> {
        env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_os_str())
    }

    #[test]
    fn only_the_allowlist_is_inherited() {
        let env = agent_env(parent(), &spec(&[]), None).unwrap();
        let mut names: Vec<_> = env.iter().map(|(k, _)| k.to_str().unwrap()).collect();
        names.sort_unstable();
        assert_eq!(names, ["HOME", "LC_ALL", "PATH", "XDG_CONFIG_HOME"]);
    }

    #[test]
    fn spec_env_and_state_dir_are_added() {
        let env = agent_env(
            parent(),
            &spec(&[("ANTHROPIC_API_KEY", "mine"), ("PATH", "/opt/bin")]),
            Some(Path::new("/state")),
        )
        .unwrap();
        assert_eq!(get(&env, "ANTHROPIC_API_KEY"), Some(OsStr::new("mine")));
        assert_eq!(get(&env, "PATH"), Some(OsStr::new("/opt/bin")));
        assert_eq!(get(&env, "HOME"), Some(OsStr::new("/state")));
        let env = agent_env(
            parent(),
            &spec(&[("HOME", "/h")]),
            Some(Path::new("/state")),
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
        ] {
            let err = agent_env(parent(), &spec(&[(k, v)]), None).unwrap_err();
            assert_eq!(err.code, ErrorCode::AgentStartFailed);
            assert!(err.message.contains(k), "{}", err.message);
            assert!(!err.message.contains(v), "{}", err.message);
        }
    }
}
