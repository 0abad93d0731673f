//! Serving `fs/read_text_file` and `fs/write_text_file`, only beneath the workspace root.
//!
//! The agent is hostile and shares the root with Legate, so a path checked first and opened
//! by name later can be redirected by a symlink swapped in between (issue 11, finding 1).
//! Every access therefore goes through [`legate_beneath::Root`]: the root is opened once and
//! held, the agent's absolute path is stripped of the root prefix by text, and the kernel
//! resolves the rest beneath the held directory in the same call that opens the file
//! (`openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`, or a per-component `O_NOFOLLOW`
//! walk). **Any symlink on the path is refused, even one that points inside the root.** A
//! write replaces the file through a temporary file renamed into place, never through the
//! existing name, and makes missing parent directories beneath the root. Writes are refused
//! in read-only mode. A refusal is a JSON-RPC `invalid_params` error whose message is one
//! sentence; a missing file is `resource_not_found`.
//!
//! This module must never open an agent-named path by its full name.

use agent_client_protocol::v1::schema as acp;
use legate_beneath::{BeneathError, Root};
use legate_confine::Covered;
use legate_core::TaskMode;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::task::JoinHandle;

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

/// The refusal of an `fs/*` call whose tool kind the task's controls leave out
/// (`TOOL_NOT_ALLOWED` in the sentence and the event).
pub(crate) fn not_allowed(op: &str, path: &Path, kind: legate_core::ToolKind) -> Refused {
    invalid(format!(
        "{}: {op} of {} refused: {} is not among the tool kinds this task may use",
        legate_core::ErrorCode::ToolNotAllowed.as_str(),
        path.display(),
        kind.as_str()
    ))
}

/// The refusal or failure for `error`, worded with the path the agent sent.
fn refused(what: &str, root: &Root, path: &Path, error: &BeneathError) -> Refused {
    let shown = path.display();
    match error {
        BeneathError::Absolute { .. }
        | BeneathError::Escapes { .. }
        | BeneathError::NotUnderRoot { .. } => invalid(format!(
            "{shown} is outside the root {}; Legate serves files only inside it",
            root.path().display()
        )),
        BeneathError::Symlink { .. } => invalid(format!(
            "{shown} goes through a symlink, and Legate never follows symlinks when it serves files"
        )),
        BeneathError::IsDirectory { .. } if what == "write" => {
            invalid(format!("{shown} is a directory"))
        }
        BeneathError::IsDirectory { .. } | BeneathError::NotRegular { .. } => {
            invalid(format!("{shown} is not a regular file"))
        }
        BeneathError::TooLarge { max, .. } => invalid(format!(
            "{shown} is larger than {} MiB and is not served through the client",
            max / (1024 * 1024)
        )),
        BeneathError::Root { source, .. } => io_failure("open the root for", path, source),
        BeneathError::Io { op, source, .. } => {
            let what = if *op == "create the directory" {
                "create the directory for"
            } else {
                what
            };
            io_failure(what, path, source)
        }
    }
}

/// `path` relative to the root, refused outside it and where the agent's namespace covers it
/// (Legate's home inside a shared workspace: its tokens, database and configuration).
fn beneath(what: &str, root: &Root, covered: &Covered, path: &Path) -> Result<PathBuf, Refused> {
    let rel = root
        .relative(path)
        .map_err(|e| refused(what, root, path, &e))?;
    if covered.covers(&rel) {
        return Err(invalid(format!(
            "{} is in Legate's home or a file hidden from agents; Legate never serves it",
            path.display()
        )));
    }
    Ok(rel)
}

/// The refusal for a root that could not be opened.
/// A file request in a session whose files are not on this machine (an agent in a pod).
pub(crate) fn no_file_service(path: &Path) -> Refused {
    invalid(format!(
        "{}: this session has no client file service; the agent runs in a pod and uses its own files",
        path.display()
    ))
}

pub(crate) fn unusable_root(path: &Path, error: &BeneathError) -> Refused {
    match error.io_error() {
        Some(source) => io_failure("open the root for", path, source),
        None => invalid(format!("{} cannot be served: {error}", path.display())),
    }
}

/// Runs a blocking access to the held root on the blocking pool.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, Refused> + Send + 'static,
) -> Result<T, Refused> {
    joined(tokio::task::spawn_blocking(f).await)
}

/// What a blocking access answered; a refusal when its thread panicked.
fn joined<T>(answered: Result<Result<T, Refused>, tokio::task::JoinError>) -> Result<T, Refused> {
    answered.unwrap_or_else(|e| {
        Err(io_failure(
            "serve",
            Path::new("the request"),
            &std::io::Error::other(e.to_string()),
        ))
    })
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
    root: Arc<Root>,
    covered: &Arc<Covered>,
    req: &acp::ReadTextFileRequest,
) -> Result<acp::ReadTextFileResponse, Refused> {
    let path = req.path.clone();
    let covered = Arc::clone(covered);
    let bytes = blocking(move || {
        let rel = beneath("read", &root, &covered, &path)?;
        root.read(&rel, MAX_READ_BYTES)
            .map_err(|e| refused("read", &root, &path, &e))
    })
    .await?;
    let text = String::from_utf8(bytes)
        .map_err(|_| invalid(format!("{} is not UTF-8 text", req.path.display())))?;
    Ok(acp::ReadTextFileResponse::new(slice_lines(
        &text, req.line, req.limit,
    )))
}

/// A write's blocking part, to be started as the turn's work.
pub(crate) type WriteJob = Box<dyn FnOnce() -> Result<(), Refused> + Send>;

/// Starts a [`WriteJob`] as the current turn's work in its workspace (`WorkspaceWork`); `None`
/// when no turn runs.
pub(crate) type StartWrite<'a> =
    &'a (dyn Fn(WriteJob) -> Option<JoinHandle<Result<(), Refused>>> + Sync);

/// Serves a write, as the current turn's work (`start`): a write the turn's end did not wait
/// for could land in a copy whose patch is being read. Refused when no turn runs (while the
/// session opens, between turns).
pub(crate) async fn write(
    root: Arc<Root>,
    covered: &Arc<Covered>,
    mode: TaskMode,
    req: &acp::WriteTextFileRequest,
    start: StartWrite<'_>,
) -> Result<acp::WriteTextFileResponse, Refused> {
    if mode == TaskMode::ReadOnly {
        return Err(invalid(format!(
            "this task is read-only, so {} may not be written",
            req.path.display()
        )));
    }
    let path = req.path.clone();
    let content = req.content.clone();
    let covered = Arc::clone(covered);
    let job: WriteJob = Box::new(move || {
        let rel = beneath("write", &root, &covered, &path)?;
        root.write(&rel, content.as_bytes(), true)
            .map_err(|e| refused("write", &root, &path, &e))
    });
    let Some(started) = start(job) else {
        return Err(invalid(format!(
            "{} was not written: no turn is running, and Legate writes files for an agent only during a turn",
            req.path.display()
        )));
    };
    joined(started.await)?;
    Ok(acp::WriteTextFileResponse::new())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn held(root: &Path) -> Arc<Root> {
        Arc::new(Root::open(root).unwrap())
    }

    fn none() -> Arc<Covered> {
        Arc::default()
    }

    /// Writes started as a turn's work.
    const IN_TURN: StartWrite<'static> = &|job| Some(tokio::task::spawn_blocking(job));

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
        write(held(&root), &none(), TaskMode::Write, &w, IN_TURN)
            .await
            .unwrap();
        assert_eq!(
            std::fs::read_to_string(root.join("new/dir/a.txt")).unwrap(),
            "one\ntwo\n"
        );
        let r = acp::ReadTextFileRequest::new("s", root.join("new/dir/a.txt")).line(2u32);
        assert_eq!(
            read(held(&root), &none(), &r).await.unwrap().content,
            "two\n"
        );
    }

    #[tokio::test]
    async fn refuses_outside_the_root_and_in_read_only_mode() {
        let (tmp, root) = root();
        let outside = std::fs::canonicalize(tmp.path()).unwrap().join("secret");
        std::fs::write(&outside, "s").unwrap();
        std::os::unix::fs::symlink(tmp.path(), root.join("up")).unwrap();

        let r = acp::ReadTextFileRequest::new("s", outside.clone());
        let err = read(held(&root), &none(), &r).await.unwrap_err();
        assert_eq!(
            err.error.code,
            agent_client_protocol::ErrorCode::INVALID_PARAMS
        );
        assert!(err.reason.contains("outside the root"), "{}", err.reason);

        let w = acp::WriteTextFileRequest::new("s", root.join("up/evil"), "x");
        assert!(
            write(held(&root), &none(), TaskMode::Write, &w, IN_TURN)
                .await
                .is_err()
        );
        assert!(!tmp.path().join("evil").exists());

        let w = acp::WriteTextFileRequest::new("s", root.join("ok.txt"), "x");
        let err = write(held(&root), &none(), TaskMode::ReadOnly, &w, IN_TURN)
            .await
            .unwrap_err();
        assert!(err.reason.contains("read-only"), "{}", err.reason);
        assert!(!root.join("ok.txt").exists());
    }

    /// A home inside a shared workspace: what the agent's namespace covers is never served,
    /// by any spelling of its path; its own state directory there is.
    #[tokio::test]
    async fn what_the_namespace_covers_is_never_served() {
        let (_tmp, root) = root();
        let home = root.join("home");
        std::fs::create_dir_all(home.join("agents/revisor")).unwrap();
        std::fs::write(home.join("mcp-token"), "TOKEN").unwrap();
        let covered = Arc::new(Covered::new(
            &root,
            std::slice::from_ref(&home),
            &[root.clone(), home.join("agents/revisor")],
        ));
        for asked in [
            home.join("mcp-token"),
            root.join("src/../home/mcp-token"),
            PathBuf::from("home/mcp-token"),
            PathBuf::from("./home/./mcp-token"),
        ] {
            let r = acp::ReadTextFileRequest::new("s", asked.clone());
            let err = read(held(&root), &covered, &r).await.unwrap_err();
            assert!(
                err.reason.contains("Legate's home"),
                "{asked:?}: {}",
                err.reason
            );
        }
        let w = acp::WriteTextFileRequest::new("s", home.join("legate.toml"), "[network]");
        let err = write(held(&root), &covered, TaskMode::Write, &w, IN_TURN)
            .await
            .unwrap_err();
        assert!(err.reason.contains("never serves"), "{}", err.reason);
        assert!(!home.join("legate.toml").exists());
        let w = acp::WriteTextFileRequest::new("s", home.join("agents/revisor/n.txt"), "n");
        write(held(&root), &covered, TaskMode::Write, &w, IN_TURN)
            .await
            .unwrap();
        let w = acp::WriteTextFileRequest::new("s", root.join("homework.txt"), "h");
        write(held(&root), &covered, TaskMode::Write, &w, IN_TURN)
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn a_missing_file_is_resource_not_found() {
        let (_tmp, root) = root();
        let r = acp::ReadTextFileRequest::new("s", root.join("nope.txt"));
        let err = read(held(&root), &none(), &r).await.unwrap_err();
        assert_eq!(
            err.error.code,
            agent_client_protocol::ErrorCode::RESOURCE_NOT_FOUND
        );
    }

    #[tokio::test]
    async fn a_symlink_is_refused_even_when_it_points_inside() {
        let (_tmp, root) = root();
        std::fs::write(root.join("real.txt"), "real\n").unwrap();
        std::fs::create_dir(root.join("sub")).unwrap();
        std::os::unix::fs::symlink(root.join("real.txt"), root.join("alias.txt")).unwrap();
        std::os::unix::fs::symlink("sub", root.join("subalias")).unwrap();
        let r = acp::ReadTextFileRequest::new("s", root.join("alias.txt"));
        let err = read(held(&root), &none(), &r).await.unwrap_err();
        assert_eq!(
            err.error.code,
            agent_client_protocol::ErrorCode::INVALID_PARAMS
        );
        assert!(err.reason.contains("symlink"), "{}", err.reason);
        let w = acp::WriteTextFileRequest::new("s", root.join("alias.txt"), "x");
        assert!(
            write(held(&root), &none(), TaskMode::Write, &w, IN_TURN)
                .await
                .is_err()
        );
        let w = acp::WriteTextFileRequest::new("s", root.join("subalias/new.txt"), "x");
        let err = write(held(&root), &none(), TaskMode::Write, &w, IN_TURN)
            .await
            .unwrap_err();
        assert!(err.reason.contains("symlink"), "{}", err.reason);
        assert!(!root.join("sub/new.txt").exists());
        assert_eq!(
            std::fs::read_to_string(root.join("real.txt")).unwrap(),
            "real\n"
        );
    }

    #[tokio::test]
    async fn relative_and_dotted_paths_stay_beneath() {
        let (tmp, root) = root();
        let w = acp::WriteTextFileRequest::new("s", "rel/a.txt", "a");
        write(held(&root), &none(), TaskMode::Write, &w, IN_TURN)
            .await
            .unwrap();
        assert!(root.join("rel/a.txt").is_file());
        let w = acp::WriteTextFileRequest::new("s", root.join("rel/../../escaped"), "x");
        let err = write(held(&root), &none(), TaskMode::Write, &w, IN_TURN)
            .await
            .unwrap_err();
        assert!(err.reason.contains("outside the root"), "{}", err.reason);
        assert!(!tmp.path().join("escaped").exists());
        let w = acp::WriteTextFileRequest::new("s", root.join("rel"), "x");
        let err = write(held(&root), &none(), TaskMode::Write, &w, IN_TURN)
            .await
            .unwrap_err();
        assert!(err.reason.contains("is a directory"), "{}", err.reason);
    }
}
