//! The workspace an A2A message may ask for in `metadata.workspace`: the context's sandbox
//! (the default) or a copy of a git project on the server, which comes back as a `patch`
//! artifact (see `patch`).
//!
//! A copy reads a directory of the machine Legate runs on, so a remote caller may name only
//! projects under the roots the operator listed (`a2a.copy_roots`); with none listed, copies
//! are refused. A shared directory (the agent writing straight into a server directory) is
//! never offered over A2A: changes reach the original only through a reviewed integration,
//! from the CLI or MCP on that machine. This module parses and checks; it never touches a path
//! beyond resolving it.

use a2a::{A2AError, Message};
use legate_engine::WorkspaceRequest;
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// The metadata key.
pub const KEY: &str = "workspace";

/// The metadata key of the role a message asks for (a role name, as `legate roles` lists).
pub const ROLE_KEY: &str = "role";

/// The role `message` asks for in `metadata.role`, `None` when it names none; a value that
/// is not a string is `INVALID_INPUT`. Whether the role exists, and whether this message may
/// choose it, is the engine's rule.
pub fn role(message: &Message) -> Result<Option<String>, A2AError> {
    match message.metadata.as_ref().and_then(|m| m.get(ROLE_KEY)) {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(A2AError::invalid_params(
            "INVALID_INPUT: metadata.role must be a role name (a string)",
        )),
    }
}

/// `metadata.workspace` as sent.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Requested {
    kind: String,
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    include_paths: Vec<String>,
    #[serde(default)]
    criteria: Vec<legate_engine::Criterion>,
}

fn invalid(message: String) -> A2AError {
    A2AError::invalid_params(format!("INVALID_WORKSPACE: {message}"))
}

/// [`invalid`], quoting its cause (the A2A error carries text alone, so the cause ends here).
fn invalid_by(sentence: String, e: impl std::error::Error + Send + Sync + 'static) -> A2AError {
    let e = legate_core::Error::quoting(legate_core::ErrorCode::InvalidWorkspace, sentence, e);
    invalid(e.message)
}

/// The workspace `message` asks for, `None` when it names none. `copy_roots` are the
/// directories under which a copy's project may lie (already canonical).
pub fn requested(
    message: &Message,
    copy_roots: &[PathBuf],
) -> Result<Option<WorkspaceRequest>, A2AError> {
    let Some(value) = message.metadata.as_ref().and_then(|m| m.get(KEY)) else {
        return Ok(None);
    };
    let r: Requested = serde_json::from_value(value.clone()).map_err(|e| {
        let sentence = "metadata.workspace must be {kind, path, includePaths, criteria}";
        invalid_by(sentence.to_string(), e)
    })?;
    match r.kind.as_str() {
        "sandbox" => {
            if r.path.is_some() || !r.include_paths.is_empty() || !r.criteria.is_empty() {
                return Err(invalid("a sandbox takes no path, includePaths or criteria".into()));
            }
            Ok(Some(WorkspaceRequest::Sandbox))
        }
        "copy" => {
            let path = r
                .path
                .ok_or_else(|| invalid("a copy needs `path`, the project's root".into()))?;
            let source = contained(Path::new(&path), copy_roots)?;
            Ok(Some(WorkspaceRequest::Copy {
                source,
                include_paths: r.include_paths,
                criteria: r.criteria,
            }))
        }
        "shared" => Err(invalid(
            "shared directories are not offered over A2A; ask for a copy, whose patch comes back as an artifact".into(),
        )),
        other => Err(invalid(format!(
            "unknown workspace kind {other:?}; use \"sandbox\" or \"copy\""
        ))),
    }
}

/// `path` resolved (symlinks and all), when it lies under one of `roots`.
fn contained(path: &Path, roots: &[PathBuf]) -> Result<PathBuf, A2AError> {
    if roots.is_empty() {
        return Err(invalid(
            "copy workspaces are off over A2A; the operator lists allowed project roots in a2a.copy_roots".into(),
        ));
    }
    if !path.is_absolute() {
        return Err(invalid(format!(
            "path must be absolute (got {})",
            path.display()
        )));
    }
    let resolved = path
        .canonicalize()
        .map_err(|e| invalid_by(format!("{} cannot be opened", path.display()), e))?;
    if roots.iter().any(|root| resolved.starts_with(root)) {
        Ok(resolved)
    } else {
        Err(invalid(format!(
            "{} is not under a2a.copy_roots",
            path.display()
        )))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use a2a::{Part, Role};
    use serde_json::json;
    use std::collections::HashMap;

    fn message(workspace: Option<serde_json::Value>) -> Message {
        let mut m = Message::new(Role::User, vec![Part::text("hi")]);
        m.metadata = workspace.map(|w| HashMap::from([(KEY.to_string(), w)]));
        m
    }

    fn code(e: &A2AError) -> String {
        format!("{e:?}")
    }

    #[test]
    fn no_metadata_is_no_request_and_sandbox_is_accepted() {
        assert!(requested(&message(None), &[]).unwrap().is_none());
        let w = requested(&message(Some(json!({"kind": "sandbox"}))), &[]).unwrap();
        assert!(matches!(w, Some(WorkspaceRequest::Sandbox)));
    }

    #[test]
    fn a_copy_must_lie_under_a_configured_root() {
        let root = tempfile::tempdir().unwrap();
        let root = root.path().canonicalize().unwrap();
        let project = root.join("p");
        std::fs::create_dir(&project).unwrap();
        let outside = tempfile::tempdir().unwrap();
        let link = root.join("escape");
        std::os::unix::fs::symlink(outside.path(), &link).unwrap();
        let roots = vec![root.clone()];
        let ask = |path: &Path| {
            requested(
                &message(Some(
                    json!({"kind": "copy", "path": path, "includePaths": ["src"]}),
                )),
                &roots,
            )
        };
        match ask(&project).unwrap() {
            Some(WorkspaceRequest::Copy {
                source,
                include_paths,
                ..
            }) => {
                assert_eq!(source, project);
                assert_eq!(include_paths, ["src"]);
            }
            other => panic!("{other:?}"),
        }
        for bad in [outside.path(), link.as_path(), Path::new("relative/p")] {
            let e = ask(bad).unwrap_err();
            assert!(code(&e).contains("INVALID_WORKSPACE"), "{bad:?}: {e:?}");
        }
        let e = requested(
            &message(Some(json!({"kind": "copy", "path": project}))),
            &[],
        )
        .unwrap_err();
        assert!(code(&e).contains("a2a.copy_roots"), "{e:?}");
    }

    #[test]
    fn other_kinds_and_shapes_are_refused() {
        for bad in [
            json!({"kind": "shared", "path": "/tmp"}),
            json!({"kind": "volume"}),
            json!({"kind": "copy"}),
            json!({"kind": "sandbox", "path": "/tmp"}),
            json!({"kind": "copy", "path": "/tmp", "extra": 1}),
            json!("copy"),
        ] {
            let e = requested(&message(Some(bad.clone())), &[PathBuf::from("/")]).unwrap_err();
            assert!(code(&e).contains("INVALID_WORKSPACE"), "{bad}: {e:?}");
        }
    }

    #[test]
    fn a_role_is_a_string_in_metadata_role_or_absent() {
        let with = |v: serde_json::Value| {
            let mut m = Message::new(Role::User, vec![Part::text("hi")]);
            m.metadata = Some(HashMap::from([(ROLE_KEY.to_string(), v)]));
            m
        };
        assert_eq!(role(&message(None)).unwrap(), None);
        assert_eq!(role(&with(json!(null))).unwrap(), None);
        assert_eq!(
            role(&with(json!("planner"))).unwrap().as_deref(),
            Some("planner")
        );
        for bad in [json!(1), json!(["planner"]), json!({"name": "planner"})] {
            assert!(code(&role(&with(bad)).unwrap_err()).contains("INVALID_INPUT"));
        }
    }
}
