//! The agent's stderr, line by line, into the current turn's events.
//!
//! Each line is cut to [`MAX_LINE`] bytes (the rest of an over-long line is read and
//! discarded, never buffered), less the word the cut fell in (it may be the start of a
//! credential the engine's redaction could no longer recognise); invalid UTF-8 is replaced. Counting per turn and routing are
//! [`HandlerState::stderr_line`]'s job.

use super::state::HandlerState;
use super::translate::truncate;
use std::sync::Arc;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tracing::debug;

/// A stderr line is cut to this many bytes.
pub(crate) const MAX_LINE: usize = 2 * 1024;

/// Reads `stderr` until EOF in a background task.
pub(crate) fn spawn(stderr: impl AsyncRead + Unpin + Send + 'static, shared: Arc<HandlerState>) {
    tokio::spawn(async move {
        let mut reader = BufReader::new(stderr);
        let mut line: Vec<u8> = Vec::new();
        let mut overflow = false;
        loop {
            let buf = match reader.fill_buf().await {
                Ok(buf) => buf,
                Err(e) => {
                    debug!(error = %e, "agent stderr read failed");
                    break;
                }
            };
            if buf.is_empty() {
                if !line.is_empty() {
                    emit(&shared, &line, overflow);
                }
                break;
            }
            let (chunk, newline) = match buf.iter().position(|b| *b == b'\n') {
                Some(i) => (&buf[..i], Some(i)),
                None => (buf, None),
            };
            let room = (MAX_LINE + 4).saturating_sub(line.len());
            if chunk.len() > room {
                overflow = true;
            }
            line.extend_from_slice(&chunk[..chunk.len().min(room)]);
            let used = newline.map_or(buf.len(), |i| i + 1);
            reader.consume(used);
            if newline.is_some() {
                emit(&shared, &line, overflow);
                line.clear();
                overflow = false;
            }
        }
        shared.stderr_closed();
    });
}

fn emit(shared: &HandlerState, raw: &[u8], overflow: bool) {
    let text = String::from_utf8_lossy(raw);
    let text = text.trim_end_matches('\r');
    let mut line = truncate(text, MAX_LINE);
    if overflow || line.len() < text.len() {
        // The word the cut falls in may be the start of a credential, which the redaction
        // downstream can no longer recognise: it goes.
        let word = line
            .trim_end_matches('…')
            .trim_end_matches(|c: char| !c.is_whitespace());
        line = word.to_string();
    }
    if overflow && !line.ends_with('…') {
        line = truncate(&format!("{line}…"), MAX_LINE);
    }
    shared.stderr_line(line);
}
