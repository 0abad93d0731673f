//! The stdout pump: copies the agent's protocol bytes to the real stdout, and injects raw
//! lines (or an exit) between whole lines.
//!
//! This module owns the scripted agent's stdout. Revisor writes into an in-process pipe; the
//! pump copies whatever has accumulated there in large writes (so a burst of small messages
//! costs few syscalls) and, only at a line boundary, writes injected lines that the SDK would
//! never produce (garbage, hand-made notifications). It must never split a protocol line and
//! never reorder bytes revisor wrote.

use std::collections::VecDeque;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

/// Something to put on stdout out of band.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Injection {
    /// Write this line (a newline is added) at the next line boundary.
    Line(String),
    /// Flush what came before, then stop the process with this exit code.
    Exit(i32),
}

/// How the pump ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PumpEnd {
    /// The agent closed its side of the pipe; everything was copied.
    Drained,
    /// An [`Injection::Exit`] asked for this exit code; stdout is flushed.
    Exit(i32),
}

/// Copies `from` to `out` until `from` ends or an exit is injected.
///
/// # Errors
/// When reading the pipe or writing `out` fails.
pub async fn pump(
    mut from: impl AsyncRead + Unpin,
    mut injections: mpsc::UnboundedReceiver<Injection>,
    mut out: impl AsyncWrite + Unpin,
) -> std::io::Result<PumpEnd> {
    let mut buf = vec![0_u8; 64 * 1024];
    let mut at_boundary = true;
    let mut waiting: VecDeque<Injection> = VecDeque::new();
    let mut injections_open = true;
    loop {
        if at_boundary {
            while let Some(injection) = waiting.pop_front() {
                match injection {
                    Injection::Line(line) => {
                        out.write_all(line.as_bytes()).await?;
                        out.write_all(b"\n").await?;
                        out.flush().await?;
                    }
                    Injection::Exit(code) => {
                        out.flush().await?;
                        return Ok(PumpEnd::Exit(code));
                    }
                }
            }
        }
        tokio::select! {
            injection = injections.recv(), if injections_open => match injection {
                Some(injection) => waiting.push_back(injection),
                None => injections_open = false,
            },
            read = from.read(&mut buf) => {
                let n = read?;
                let Some(bytes) = buf.get(..n).filter(|bytes| !bytes.is_empty()) else {
                    out.flush().await?;
                    return Ok(PumpEnd::Drained);
                };
                out.write_all(bytes).await?;
                out.flush().await?;
                at_boundary = bytes.last() == Some(&b'\n');
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn injects_only_between_lines_and_exits_after_flushing() {
        let (mut agent, from) = tokio::io::duplex(1024);
        let (tx, rx) = mpsc::unbounded_channel();
        let mut out = Vec::new();
        agent.write_all(b"{\"a\":1}\n{\"b\":").await.unwrap();
        tx.send(Injection::Line("garbage".into())).unwrap();
        let pumping = tokio::spawn(async move {
            let end = pump(from, rx, &mut out).await.unwrap();
            (end, out)
        });
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        agent.write_all(b"2}\n").await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        tx.send(Injection::Exit(7)).unwrap();
        let (end, out) = pumping.await.unwrap();
        assert_eq!(end, PumpEnd::Exit(7));
        let text = String::from_utf8(out).unwrap();
        assert!(
            text == "{\"a\":1}\n{\"b\":2}\ngarbage\n" || text == "garbage\n{\"a\":1}\n{\"b\":2}\n",
            "{text:?}"
        );
    }
}
