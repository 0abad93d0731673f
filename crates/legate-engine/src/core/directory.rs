//! A directory a caller named without saying how to work in it
//! ([`WorkspaceRequest::Directory`], MCP's `workingDirectory` alone) becomes the workspace the
//! engine chooses, before any other check sees the request: the root of a git work tree is
//! worked on in a copy (the project is never touched before `integrate`), a directory in no
//! work tree is shared as before, and a directory inside a work tree but not its root is
//! refused. A conversation already working in that directory keeps its workspace.
//!
//! This module decides that default and nothing else: it never checks the copy or the shared
//! directory themselves (`request` does), and never stores or starts anything.

use crate::core::Core;
use crate::core::request::{SubmitRequest, WorkspaceRequest};
use legate_core::{Error, ErrorCode, Result, WorkspaceKind};
use legate_workspace::GitPlace;

impl Core {
    /// Replaces a [`WorkspaceRequest::Directory`] in `request` with the workspace it means.
    /// Changes nothing else.
    pub(crate) fn resolve_directory(&self, request: &mut SubmitRequest) -> Result<()> {
        let WorkspaceRequest::Directory {
            path,
            include_paths,
            criteria,
        } = &request.workspace
        else {
            return Ok(());
        };
        let narrowed = !include_paths.is_empty() || !criteria.is_empty();
        if let Some(kept) = self.kept_shared(request.context_id.as_deref(), path)? {
            if narrowed {
                return Err(only_copies(path));
            }
            request.workspace = WorkspaceRequest::Shared(kept);
            return Ok(());
        }
        // A path that cannot be resolved is left to the shared directory's own check, which
        // names what is wrong with it.
        let place = std::fs::canonicalize(path)
            .ok()
            .filter(|p| p.is_dir())
            .map_or(GitPlace::Outside, |p| legate_workspace::git_place(&p));
        request.workspace = match place {
            GitPlace::Root => WorkspaceRequest::Copy {
                source: path.clone(),
                include_paths: include_paths.clone(),
                criteria: criteria.clone(),
            },
            GitPlace::Inside(top) => {
                return Err(Error::new(
                    ErrorCode::InvalidWorkspace,
                    format!(
                        "{} is inside the git project {} but is not its root: name the root to work on a copy of it (narrowed with include paths), or ask for a shared workspace explicitly to work in that directory in place",
                        path.display(),
                        top.display()
                    ),
                ));
            }
            GitPlace::Outside if narrowed => return Err(only_copies(path)),
            GitPlace::Outside => WorkspaceRequest::Shared(path.clone()),
        };
        Ok(())
    }

    /// The directory `path` when `context_id` names a conversation that already works in it,
    /// shared: a conversation keeps the workspace it started with.
    fn kept_shared(
        &self,
        context_id: Option<&str>,
        path: &std::path::Path,
    ) -> Result<Option<std::path::PathBuf>> {
        let Some(context_id) = context_id else {
            return Ok(None);
        };
        let last = match self.latest_task(context_id) {
            Ok(last) => last,
            Err(e) if e.code == ErrorCode::ContextNotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let same =
            |root: &std::path::Path| std::fs::canonicalize(path).is_ok_and(|named| named == root);
        Ok(match (last.workspace, last.root) {
            (WorkspaceKind::Shared, Some(root)) if same(&root) => Some(path.to_path_buf()),
            _ => None,
        })
    }
}

/// Include paths and criteria narrow and check a copy; `path` would be shared.
fn only_copies(path: &std::path::Path) -> Error {
    Error::new(
        ErrorCode::InvalidWorkspace,
        format!(
            "include paths and acceptance criteria narrow and check a copy, and {} is worked in place (it is not the root of a git project, or its conversation shares it)",
            path.display()
        ),
    )
}
