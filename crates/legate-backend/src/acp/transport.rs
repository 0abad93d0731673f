//! The agent's stdin and stdout as JSON-RPC lines for the SDK.
//!
//! Legate reads stdout itself (rather than through `ByteStreams`) to see each line before
//! the SDK does. What the SDK does with a line that is not JSON: it answers the agent with a
//! `-32700` parse error (`id: null`) and carries on; the connection survives. Legate instead
//! reports such a line as a [`EventKind::Workspace`] notice on the current turn and does not
//! pass it on, so the agent gets no confusing error for a stray log line. Blank lines are
//! skipped. A line longer than [`MAX_LINE`] ends the connection with an error (the agent is
//! then reported as broken, `AGENT_PROTOCOL_ERROR`); invalid UTF-8 is replaced.
//!
//! [`EventKind::Workspace`]: legate_core::EventKind::Workspace

use super::state::Shared;
use agent_client_protocol::Lines;
use futures::{Sink, Stream};
use std::io;
use std::sync::Arc;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tracing::warn;

/// One JSON-RPC line from the agent may be at most this long.
pub(crate) const MAX_LINE: u64 = 256 * 1024 * 1024;

/// The SDK transport over the agent's pipes.
pub(crate) fn lines(
    stdin: impl AsyncWrite + Unpin + Send + 'static,
    stdout: impl AsyncRead + Unpin + Send + 'static,
    shared: Arc<Shared>,
) -> Lines<
    impl Sink<String, Error = io::Error> + Send + 'static,
    impl Stream<Item = io::Result<String>> + Send + 'static,
> {
    let outgoing = futures::sink::unfold(stdin, |mut w, line: String| async move {
        w.write_all(line.as_bytes()).await?;
        w.write_all(b"\n").await?;
        w.flush().await?;
        Ok::<_, io::Error>(w)
    });
    let incoming =
        futures::stream::unfold(Some((BufReader::new(stdout), shared)), |state| async move {
            let (mut reader, shared) = state?;
            loop {
                let mut buf = Vec::new();
                let n = match (&mut reader)
                    .take(MAX_LINE + 1)
                    .read_until(b'\n', &mut buf)
                    .await
                {
                    Ok(n) => n,
                    Err(e) => return Some((Err(e), None)),
                };
                if n == 0 {
                    return None;
                }
                if buf.len() as u64 > MAX_LINE {
                    warn!(
                        limit = MAX_LINE,
                        "the agent wrote an over-long line on stdout"
                    );
                    let e = io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("the agent wrote a line longer than {MAX_LINE} bytes"),
                    );
                    return Some((Err(e), None));
                }
                let text = String::from_utf8_lossy(&buf);
                let text = text.trim_end_matches(['\n', '\r']);
                if text.trim().is_empty() {
                    continue;
                }
                if serde_json::from_str::<serde::de::IgnoredAny>(text).is_err() {
                    warn!(
                        bytes = text.len(),
                        "the agent wrote a non-JSON line on stdout; ignored"
                    );
                    shared.garbage_line(text);
                    continue;
                }
                let line = text.to_string();
                return Some((Ok(line), Some((reader, shared))));
            }
        });
    Lines::new(outgoing, incoming)
}
