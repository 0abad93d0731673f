//! Running one shell command for the `run` instruction: bounded output, a deadline, and
//! cancellation. It owns the child process and its pipes; it never decides whether a command
//! may run (the turn asked the client first) and never runs one through anything but `sh -c`
//! in the session's directory.

use std::path::Path;
use std::process::Stdio;

use tokio::io::AsyncReadExt;
use tokio_util::sync::CancellationToken;

use crate::turn::{OUTPUT_LIMIT, RUN_TIMEOUT};

/// How a command ended.
pub(crate) enum Ran {
    Exited { code: Option<i32>, output: String },
    TimedOut { output: String },
    Cancelled,
    CouldNotStart(String),
}

/// Reads a pipe to its end, keeping at most `limit` bytes.
async fn read_bounded(reader: Option<impl tokio::io::AsyncRead + Unpin>, limit: usize) -> Vec<u8> {
    let Some(mut reader) = reader else {
        return Vec::new();
    };
    let mut kept = Vec::new();
    let mut buf = vec![0_u8; 4096];
    loop {
        match reader.read(&mut buf).await {
            Ok(0) | Err(_) => return kept,
            Ok(n) => {
                let room = limit.saturating_sub(kept.len());
                kept.extend_from_slice(buf.get(..n.min(room)).unwrap_or_default());
            }
        }
    }
}

fn bounded_output(stdout: &[u8], stderr: &[u8]) -> String {
    let mut bytes = stdout.to_vec();
    if !stderr.is_empty() {
        if !bytes.is_empty() && !bytes.ends_with(b"\n") {
            bytes.push(b'\n');
        }
        bytes.extend_from_slice(stderr);
    }
    let truncated = bytes.len() > OUTPUT_LIMIT;
    bytes.truncate(OUTPUT_LIMIT);
    let mut text = String::from_utf8_lossy(&bytes).into_owned();
    if truncated {
        text.push_str("\n[output truncated]");
    }
    text
}

/// Runs `sh -c command` in `cwd` for at most [`RUN_TIMEOUT`].
///
/// The command stays in revisor's own process group on purpose: the client that started
/// revisor (Legate) stops an agent by killing its whole group, and a command in a group of its
/// own would outlive that.
pub(crate) async fn run_shell(command: &str, cwd: &Path, token: &CancellationToken) -> Ran {
    let mut child = match tokio::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
    {
        Ok(child) => child,
        Err(error) => return Ran::CouldNotStart(error.to_string()),
    };
    let stdout = read_bounded(child.stdout.take(), OUTPUT_LIMIT + 1);
    let stderr = read_bounded(child.stderr.take(), OUTPUT_LIMIT + 1);
    let work = async {
        let (status, out, err) = tokio::join!(child.wait(), stdout, stderr);
        (status, out, err)
    };
    let result = tokio::select! {
        result = tokio::time::timeout(RUN_TIMEOUT, work) => Some(result),
        () = token.cancelled() => None,
    };
    let ran = match result {
        Some(Ok((status, out, err))) => Ran::Exited {
            code: status.ok().and_then(|s| s.code()),
            output: bounded_output(&out, &err),
        },
        Some(Err(_elapsed)) => Ran::TimedOut {
            output: String::new(),
        },
        None => Ran::Cancelled,
    };
    if !matches!(ran, Ran::Exited { .. }) {
        // `work` borrowed the child; it is done now. Kill and reap it.
        let _ = child.start_kill();
        let _ = child.wait().await;
    }
    ran
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_is_bounded() {
        let big = vec![b'x'; OUTPUT_LIMIT * 2];
        let text = bounded_output(&big, b"err");
        assert!(text.ends_with("[output truncated]"));
        assert_eq!(bounded_output(b"out", b"err"), "out\nerr");
    }

    #[tokio::test]
    async fn shell_runs_and_reports_exit_codes() {
        let dir = tempfile::tempdir().unwrap();
        let token = CancellationToken::new();
        match run_shell("echo hi; exit 3", dir.path(), &token).await {
            Ran::Exited { code, output } => {
                assert_eq!(code, Some(3));
                assert_eq!(output, "hi\n");
            }
            _ => panic!("expected an exit"),
        }
    }
}
