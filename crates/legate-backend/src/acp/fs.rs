//! Serving `fs/read_text_file` and `fs/write_text_file`, only inside the workspace root.
//!
//! Paths are resolved with [`legate_supervisor::containment::resolve_within`] (symlinks
//! followed as far as the path exists, both the lexical and the physical reading inside the
//! root). Writes are refused in read-only mode and create missing parent directories inside
//! the root. A refusal is a JSON-RPC `invalid_params` error whose message is one sentence.

use agent_client_protocol::v1::schema as acp;
use legate_core::TaskMode;
use legate_supervisor::containment;
use std::path::{Path, PathBuf};

/// Files larger than this are not read through the client.
pub(crate) const MAX_READ_BYTES: u64 = 64 * 1024 * 1024;

/// Why an access was refused or failed: the JSON-RPC error for the agent and the sentence
/// for the event.
#[derive(Debug)]
pub(crate) struct Refused {
    pub(crate) error: Box<agent_client_protocol::Error>,
    pub(crate) reason: String,
}

fn invalid(reason: String) -> Refused {
    Refused {
        error: Box::new(agent_client_protocol::Error::new(
            agent_client_protocol::ErrorCode::INVALID_PARAMS,
            reason.clone(),
        )),
        reason,
    }
}

fn io_failure(what: &str, path: &Path, e: &std::io::Error) -> Refused {
    let reason = format!("could not {what} {}: {e}", path.display());
    let error = if e.kind() == std::io::ErrorKind::NotFound {
        let mut err: agent_client_protocol::Error =
            acp::Error::resource_not_found(Some(path.display().to_string())).into();
        err.message = reason.clone();
        err
    } else {
        agent_client_protocol::Error::new(
            agent_client_protocol::ErrorCode::INTERNAL_ERROR,
            reason.clone(),
        )
    };
    Refused {
        error: Box::new(error),
        reason,
    }
}

fn resolve(root: &Path, path: &Path) -> Result<PathBuf, Refused> {
    containment::resolve_within(root, path)
        .map_err(|outside| invalid(format!("{outside}; Legate serves files only inside it")))
}

/// Lines `line..line+limit` (1-based) of `content`, line endings kept.
pub(crate) fn slice_lines(content: &str, line: Option<u32>, limit: Option<u32>) -> String {
    if line.is_none() && limit.is_none() {
        return content.to_string();
    }
    let skip = line.map_or(0, |l| l.saturating_sub(1) as usize);
    let take = limit.map_or(usize::MAX, |l| l as usize);
    content
        .split_inclusive('\n')
        .skip(skip)
        .take(take)
        .collect()
}

/// Serves a read.
pub(crate) async fn read(
    root: &Path,
    req: &acp::ReadTextFileRequest,
) -> Result<acp::ReadTextFileResponse, Refused> {
    let path = resolve(root, &req.path)?;
    let meta = tokio::fs::metadata(&path)
        .await
        .map_err(|e| io_failure("read", &req.path, &e))?;
    if !meta.is_file() {
        return Err(invalid(format!(
            "{} is not a regular file",
            req.path.display()
        )));
    }
    if meta.len() > MAX_READ_BYTES {
        return Err(invalid(format!(
            "{} is larger than {} MiB and is not served through the client",
            req.path.display(),
            MAX_READ_BYTES / (1024 * 1024)
        )));
    }
    let bytes = tokio::fs::read(&path)
        .await
        .map_err(|e| io_failure("read", &req.path, &e))?;
    let text = String::from_utf8(bytes)
        .map_err(|_| invalid(format!("{} is not UTF-8 text", req.path.display())))?;
    Ok(acp::ReadTextFileResponse::new(slice_lines(
        &text, req.line, req.limit,
    )))
}

/// Serves a write.
pub(crate) async fn write(
    root: &Path,
    mode: TaskMode,
    req: &acp::WriteTextFileRequest,
) -> Result<acp::WriteTextFileResponse, Refused> {
    if mode == TaskMode::ReadOnly {
        return Err(invalid(format!(
            "this task is read-only, so {} may not be written",
            req.path.display()
        )));
    }
    let path = resolve(root, &req.path)?;
    if let Some(parent) = path.parent() {
        tokio::fs::create_dir_all(parent)
            .await
            .map_err(|e| io_failure("create the directory for", &req.path, &e))?;
    }
    // The directories just made may not change the answer, but check again now they exist.
    let path = resolve(root, &req.path)?;
    if tokio::fs::metadata(&path).await.is_ok_and(|m| m.is_dir()) {
        return Err(invalid(format!("{} is a directory", req.path.display())));
    }
    tokio::fs::write(&path, req.content.as_bytes())
        .await
        .map_err(|e| io_failure("write", &req.path, &e))?;
    Ok(acp::WriteTextFileResponse::new())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn root() -> (tempfile::TempDir, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap().join("root");
        std::fs::create_dir(&root).unwrap();
        (tmp, root)
    }

    #[test]
    fn slicing_lines() {
        let text = "a\nb\nc\nd";
        assert_eq!(slice_lines(text, None, None), text);
        assert_eq!(slice_lines(text, Some(2), None), "b\nc\nd");
        assert_eq!(slice_lines(text, Some(2), Some(2)), "b\nc\n");
        assert_eq!(slice_lines(text, None, Some(1)), "a\n");
        assert_eq!(slice_lines(text, Some(0), Some(1)), "a\n");
        assert_eq!(slice_lines(text, Some(9), None), "");
    }

    #[tokio::test]
    async fn reads_and_writes_inside_the_root() {
        let (_tmp, root) = root();
        let w = acp::WriteTextFileRequest::new("s", root.join("new/dir/a.txt"), "one\ntwo\n");
        write(&root, TaskMode::Write, &w).await.unwrap();
        assert_eq!(
            std::fs::read_to_string(root.join("new/dir/a.txt")).unwrap(),
            "one\ntwo\n"
        );
        let r = acp::ReadTextFileRequest::new("s", root.join("new/dir/a.txt")).line(2u32);
        assert_eq!(read(&root, &r).await.unwrap().content, "two\n");
    }

    #[tokio::test]
    async fn refuses_outside_the_root_and_in_read_only_mode() {
        let (tmp, root) = root();
        let outside = std::fs::canonicalize(tmp.path()).unwrap().join("secret");
        std::fs::write(&outside, "s").unwrap();
        std::os::unix::fs::symlink(tmp.path(), root.join("up")).unwrap();

        let r = acp::ReadTextFileRequest::new("s", outside.clone());
        let err = read(&root, &r).await.unwrap_err();
        assert_eq!(
            err.error.code,
            agent_client_protocol::ErrorCode::INVALID_PARAMS
        );
        assert!(err.reason.contains("outside the root"), "{}", err.reason);

        let w = acp::WriteTextFileRequest::new("s", root.join("up/evil"), "x");
        assert!(write(&root, TaskMode::Write, &w).await.is_err());
        assert!(!tmp.path().join("evil").exists());

        let w = acp::WriteTextFileRequest::new("s", root.join("ok.txt"), "x");
        let err = write(&root, TaskMode::ReadOnly, &w).await.unwrap_err();
        assert!(err.reason.contains("read-only"), "{}", err.reason);
        assert!(!root.join("ok.txt").exists());
    }

    #[tokio::test]
    async fn a_missing_file_is_resource_not_found() {
        let (_tmp, root) = root();
        let r = acp::ReadTextFileRequest::new("s", root.join("nope.txt"));
        let err = read(&root, &r).await.unwrap_err();
        assert_eq!(
            err.error.code,
            agent_client_protocol::ErrorCode::RESOURCE_NOT_FOUND
        );
    }
}
