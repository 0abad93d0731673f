//! `run`: its arguments taken apart whole and turned into one `SubmitRequest`.
//!
//! The tool's syntax has several ways to say where the agent works (`workingDirectory`,
//! `workspace`, and the seed's top-level `includePaths`, `acceptanceCriteria` and
//! `isolateWorktree`); this module reads them into one `WorkspaceRequest` and refuses the
//! combinations that say two things at once (`INVALID_INPUT`), before anything is submitted.
//! What a directory named without a kind becomes (a git root is a copy) is the engine's rule
//! (`WorkspaceRequest::Directory`), never decided here.

use super::{absolute, started, timeout_arg};
use crate::profile::Profile;
use crate::schema::{RunArgs, StartedOut, WorkspaceArg, WorkspaceKindArg};
use legate_core::{Error, Result};
use legate_engine::{Criterion, Engine, SubmitRequest, WorkspaceRequest};

/// `run`. The arguments are taken apart whole and the request is built whole, so a field
/// added to either does not compile until it is mapped here.
pub fn run(engine: &Engine, profile: Profile, args: RunArgs) -> Result<StartedOut> {
    let RunArgs {
        prompt,
        agent,
        working_directory,
        context_id,
        model,
        timeout_seconds,
        mode,
        workspace,
        json_schema,
        role,
        memory,
        delivery_mode,
        artifact_paths,
        skills,
        allowed_tools,
        mcp_servers,
        include_paths,
        acceptance_criteria,
        output_schema,
        effort,
        tap,
        isolate_worktree,
    } = args;
    // An omitted mode is the role's default (write for an implementer) unless the profile
    // is read-only.
    let mode = profile.task_mode(mode)?;
    let workspace = workspace_of(Placement {
        working_directory,
        workspace,
        include_paths,
        acceptance_criteria,
        isolate_worktree,
    })?;
    let json_schema = match (json_schema, output_schema) {
        (Some(_), Some(_)) => {
            return Err(Error::invalid_input(
                "give jsonSchema or outputSchema (they are the same), not both",
            ));
        }
        (schema, other) => schema.or(other),
    };
    let request = SubmitRequest {
        agent,
        prompt,
        workspace,
        context_id,
        mode,
        timeout: timeout_arg(timeout_seconds)?,
        model,
        message_id: None,
        json_schema,
        role,
        memory,
        skills,
        delivery_mode,
        allowed_tools,
        mcp_servers,
        artifact_paths: artifact_paths.unwrap_or_default(),
        effort,
        tap: tap.unwrap_or(false),
        inbound: false,
    };
    let task = engine.submit(request)?;
    Ok(started(&task))
}

/// The arguments of `run` that say where the agent works.
struct Placement {
    working_directory: Option<String>,
    workspace: Option<WorkspaceArg>,
    include_paths: Option<Vec<String>>,
    acceptance_criteria: Option<Vec<Criterion>>,
    isolate_worktree: Option<bool>,
}

/// The workspace `placement` asks for; `INVALID_INPUT` when it says two things at once.
fn workspace_of(placement: Placement) -> Result<WorkspaceRequest> {
    let Placement {
        working_directory,
        workspace,
        include_paths,
        acceptance_criteria,
        isolate_worktree,
    } = placement;
    let top_level = include_paths.is_some() || acceptance_criteria.is_some();
    let Some(WorkspaceArg {
        kind,
        path,
        include_paths: inner_include,
        criteria: inner_criteria,
    }) = workspace
    else {
        let Some(dir) = working_directory else {
            if top_level || isolate_worktree.is_some() {
                return Err(Error::invalid_input(
                    "includePaths, acceptanceCriteria and isolateWorktree are about workingDirectory's copy; name workingDirectory",
                ));
            }
            return Ok(WorkspaceRequest::Context);
        };
        let path = absolute("workingDirectory", &dir)?;
        let (include_paths, criteria) = (
            include_paths.unwrap_or_default(),
            acceptance_criteria.unwrap_or_default(),
        );
        return match isolate_worktree {
            None => Ok(WorkspaceRequest::Directory {
                path,
                include_paths,
                criteria,
            }),
            Some(true) => Ok(WorkspaceRequest::Copy {
                source: path,
                include_paths,
                criteria,
            }),
            Some(false) if top_level => Err(Error::invalid_input(
                "includePaths and acceptanceCriteria narrow and check a copy; isolateWorktree: false works in place",
            )),
            Some(false) => Ok(WorkspaceRequest::Shared(path)),
        };
    };
    if top_level {
        return Err(Error::invalid_input(
            "give includePaths and acceptanceCriteria at the top level with workingDirectory, or inside workspace, not both",
        ));
    }
    let path = match (working_directory, path) {
        (Some(_), Some(_)) => Err(Error::invalid_input(
            "name the directory once: workingDirectory or workspace.path, not both",
        )),
        (Some(dir), None) => absolute("workingDirectory", &dir),
        (None, Some(dir)) => absolute("workspace.path", &dir),
        (None, None) => Err(Error::invalid_input(
            "workspace needs its path, or workingDirectory beside it",
        )),
    }?;
    match (kind, isolate_worktree) {
        (WorkspaceKindArg::Copy, None | Some(true)) => Ok(WorkspaceRequest::Copy {
            source: path,
            include_paths: inner_include,
            criteria: inner_criteria,
        }),
        (WorkspaceKindArg::Shared, None | Some(false)) => {
            if !inner_include.is_empty() || !inner_criteria.is_empty() {
                return Err(Error::invalid_input(
                    "a shared workspace takes no includePaths or criteria: they narrow and check a copy",
                ));
            }
            Ok(WorkspaceRequest::Shared(path))
        }
        (WorkspaceKindArg::Copy, Some(false)) => Err(Error::invalid_input(
            "isolateWorktree: false (in place) contradicts workspace kind \"copy\"",
        )),
        (WorkspaceKindArg::Shared, Some(true)) => Err(Error::invalid_input(
            "isolateWorktree: true (a copy) contradicts workspace kind \"shared\"",
        )),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use legate_core::ErrorCode;

    fn placement(json: serde_json::Value) -> Result<WorkspaceRequest> {
        let mut args = serde_json::json!({"prompt": "p"});
        for (k, v) in json.as_object().unwrap() {
            args[k] = v.clone();
        }
        let RunArgs {
            working_directory,
            workspace,
            include_paths,
            acceptance_criteria,
            isolate_worktree,
            ..
        } = serde_json::from_value(args).unwrap();
        workspace_of(Placement {
            working_directory,
            workspace,
            include_paths,
            acceptance_criteria,
            isolate_worktree,
        })
    }

    #[test]
    fn a_directory_alone_is_left_to_the_engine_and_explicit_forms_are_kept() {
        assert!(matches!(
            placement(serde_json::json!({"workingDirectory": "/p", "includePaths": ["src"]})),
            Ok(WorkspaceRequest::Directory { include_paths, .. }) if include_paths == ["src"]
        ));
        for shared in [
            serde_json::json!({"workingDirectory": "/p", "workspace": {"kind": "shared"}}),
            serde_json::json!({"workspace": {"kind": "shared", "path": "/p"}}),
            serde_json::json!({"workingDirectory": "/p", "isolateWorktree": false}),
        ] {
            assert!(
                matches!(placement(shared.clone()), Ok(WorkspaceRequest::Shared(p)) if p.as_os_str() == "/p"),
                "{shared}"
            );
        }
        for copy in [
            serde_json::json!({"workingDirectory": "/p", "isolateWorktree": true}),
            serde_json::json!({"workingDirectory": "/p", "workspace": {"kind": "copy"}, "isolateWorktree": true}),
        ] {
            assert!(
                matches!(placement(copy.clone()), Ok(WorkspaceRequest::Copy { .. })),
                "{copy}"
            );
        }
        assert!(matches!(
            placement(serde_json::json!({})),
            Ok(WorkspaceRequest::Context)
        ));
    }

    #[test]
    fn two_answers_to_one_question_are_refused() {
        for bad in [
            serde_json::json!({"workingDirectory": "/p", "workspace": {"kind": "copy", "path": "/p"}}),
            serde_json::json!({"workingDirectory": "/p", "workspace": {"kind": "copy"}, "includePaths": ["a"]}),
            serde_json::json!({"workspace": {"kind": "copy", "path": "/p"}, "acceptanceCriteria": []}),
            serde_json::json!({"workingDirectory": "/p", "workspace": {"kind": "shared"}, "isolateWorktree": true}),
            serde_json::json!({"workingDirectory": "/p", "workspace": {"kind": "copy"}, "isolateWorktree": false}),
            serde_json::json!({"workingDirectory": "/p", "isolateWorktree": false, "includePaths": ["a"]}),
            serde_json::json!({"workspace": {"kind": "shared", "path": "/p", "includePaths": ["a"]}}),
            serde_json::json!({"workspace": {"kind": "shared"}}),
            serde_json::json!({"includePaths": ["a"]}),
            serde_json::json!({"isolateWorktree": true}),
        ] {
            let e = placement(bad.clone()).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidInput, "{bad}: {}", e.message);
        }
        let e = placement(serde_json::json!({"workingDirectory": "rel", "isolateWorktree": true}))
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidWorkspace);
    }
}
