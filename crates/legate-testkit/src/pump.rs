//! The stdout pump: copies the agent's protocol bytes to the real stdout, and injects raw
//! lines (or an exit) between whole lines.
//!
//! This module owns the scripted agent's stdout. Revisor writes into an in-process pipe; the
//! pump copies whatever has accumulated there in large writes (so a burst of small messages
//! costs few syscalls) and, only at a line boundary, writes injected lines that the SDK would
//! never produce (garbage, hand-made notifications). It must never split a protocol line and
//! never reorder bytes revisor wrote. The one change it makes to revisor's own lines is asked
//! for by [`Injection::ResponseUsage`]: a `usage` put in the answer of a prompt in place of
//! revisor's own (zero tokens), or taken out of it.

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
    /// Put this `usage` object in the `result` of the next JSON-RPC response that carries a
    /// `stopReason` (the answer to `session/prompt`); `null` takes the `usage` out.
    ResponseUsage(serde_json::Value),
    /// Write one `agent_message_chunk` of session `session` whose text is `bytes` letters, as
    /// one line written a piece at a time (never held whole), at the next line boundary.
    LongChunk {
        /// The session the chunk is for.
        session: String,
        /// The text's length.
        bytes: u64,
    },
}

/// Writes [`Injection::LongChunk`]'s line to `out`.
async fn long_chunk(
    out: &mut (impl AsyncWrite + Unpin),
    session: &str,
    bytes: u64,
) -> std::io::Result<()> {
    let head = serde_json::json!({
        "jsonrpc": "2.0",
        "method": "session/update",
        "params": {"sessionId": session, "update": {"sessionUpdate": "agent_message_chunk",
            "content": {"type": "text", "text": ""}}},
    })
    .to_string();
    // Everything up to the text's closing quote, the letters, then the rest.
    let (before, after) = head.split_at(head.find(r#""text":""#).map_or(0, |i| i + 8));
    out.write_all(before.as_bytes()).await?;
    let piece = vec![b'a'; 64 * 1024];
    let mut left = bytes;
    while left > 0 {
        let n = left.min(piece.len() as u64);
        out.write_all(&piece[..n as usize]).await?;
        left -= n;
    }
    out.write_all(after.as_bytes()).await?;
    out.write_all(b"\n").await?;
    out.flush().await
}

/// `line` with `usage` added to its `result` when it is a prompt's answer (a JSON-RPC
/// response whose result has a `stopReason`); `None` otherwise.
fn with_usage(line: &[u8], usage: &serde_json::Value) -> Option<Vec<u8>> {
    let mut v: serde_json::Value = serde_json::from_slice(line).ok()?;
    let result = v.get_mut("result")?.as_object_mut()?;
    if !result.contains_key("stopReason") {
        return None;
    }
    if usage.is_null() {
        result.remove("usage");
    } else {
        result.insert("usage".into(), usage.clone());
    }
    let mut out = serde_json::to_vec(&v).ok()?;
    out.push(b'\n');
    Some(out)
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
    // While a usage waits for the prompt's answer, bytes are copied line by line.
    let mut usage: Option<serde_json::Value> = None;
    let mut partial: Vec<u8> = Vec::new();
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
                    Injection::ResponseUsage(u) => usage = Some(u),
                    Injection::LongChunk { session, bytes } => {
                        long_chunk(&mut out, &session, bytes).await?;
                    }
                }
            }
        }
        tokio::select! {
            // Injections first: a directive injects before revisor writes what follows it.
            biased;
            injection = injections.recv(), if injections_open => match injection {
                Some(injection) => waiting.push_back(injection),
                None => injections_open = false,
            },
            read = from.read(&mut buf) => {
                let n = read?;
                let Some(bytes) = buf.get(..n).filter(|bytes| !bytes.is_empty()) else {
                    out.write_all(&partial).await?;
                    out.flush().await?;
                    return Ok(PumpEnd::Drained);
                };
                match &usage {
                    None => {
                        out.write_all(bytes).await?;
                        at_boundary = bytes.last() == Some(&b'\n');
                    }
                    Some(u) => {
                        partial.extend_from_slice(bytes);
                        let mut rest = partial.as_slice();
                        let mut answered = false;
                        while let Some(end) = rest.iter().position(|b| *b == b'\n') {
                            let (line, tail) = rest.split_at(end + 1);
                            match (answered, with_usage(line, u)) {
                                (false, Some(changed)) => {
                                    out.write_all(&changed).await?;
                                    answered = true;
                                }
                                _ => out.write_all(line).await?,
                            }
                            rest = tail;
                        }
                        partial = rest.to_vec();
                        if answered {
                            usage = None;
                            out.write_all(&partial).await?;
                            at_boundary = partial.is_empty();
                            partial.clear();
                        } else {
                            at_boundary = true;
                        }
                    }
                }
                out.flush().await?;
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
        // The pauses are the subject, not a synchronisation: they let the pump read the split
        // line in two pieces, the case under test. The assertion holds whatever it reads.
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

    #[tokio::test]
    async fn a_usage_is_added_to_the_next_prompt_answer_only() {
        let (mut agent, from) = tokio::io::duplex(1024);
        let (tx, rx) = mpsc::unbounded_channel();
        let mut out = Vec::new();
        tx.send(Injection::ResponseUsage(
            serde_json::json!({"totalTokens": 3}),
        ))
        .unwrap();
        let pumping = tokio::spawn(async move {
            let end = pump(from, rx, &mut out).await.unwrap();
            (end, out)
        });
        // The pauses let the pump read the answer split in two (the case under test); they
        // order nothing the assertions depend on.
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        agent
            .write_all(b"{\"method\":\"x\"}\n{\"id\":1,\"result\":{\"stopRe")
            .await
            .unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        agent
            .write_all(
                b"ason\":\"end_turn\"}}\n{\"id\":2,\"result\":{\"stopReason\":\"end_turn\"}}\n",
            )
            .await
            .unwrap();
        drop(agent);
        let (end, out) = pumping.await.unwrap();
        assert_eq!(end, PumpEnd::Drained);
        let lines: Vec<serde_json::Value> = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0]["method"], "x");
        assert_eq!(lines[1]["result"]["usage"]["totalTokens"], 3);
        assert!(lines[2]["result"].get("usage").is_none());
    }
}
