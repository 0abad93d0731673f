//! A remote's Server-Sent Events, parsed within bounds: one event at most
//! [`crate::wire::Limits::event`] bytes, the whole stream at most
//! [`crate::wire::Limits::stream`] bytes. Past either the stream yields one
//! [`crate::wire::TOO_LARGE`] error and ends, and the connection is dropped: no byte more is
//! read or kept.
//!
//! The framing is the SDK's (events split at a blank line, `data:` lines joined, a JSON-RPC
//! envelope or a bare `StreamResponse` for HTTP+JSON). This module never blocks on anything
//! but the stream and never decides what an event means.

use crate::tap::TapRoute;
use crate::wire::{Limits, TOO_LARGE, envelope};
use a2a::{A2AError, StreamResponse};
use a2a_client::BoxStream;
use a2a_pb::protojson_conv;
use futures::{Stream, StreamExt};
use legate_core::TapDirection;

/// Where the first event in `buf` ends: (end of its text, end of its blank-line separator),
/// looking from `from` on (what was looked at before holds no separator).
fn boundary(buf: &[u8], from: usize) -> Option<(usize, usize)> {
    (from.min(buf.len())..buf.len()).find_map(|i| {
        if buf[i..].starts_with(b"\r\n\r\n") {
            Some((i, i + 4))
        } else if buf[i..].starts_with(b"\n\n") || buf[i..].starts_with(b"\r\r") {
            Some((i, i + 2))
        } else {
            None
        }
    })
}

/// One event's text as a `StreamResponse`, or `None` when it carries no data.
fn event(text: &[u8], json_rpc: bool) -> Option<Result<StreamResponse, A2AError>> {
    let text = match std::str::from_utf8(text) {
        Ok(t) => t,
        Err(e) => {
            return Some(Err(A2AError::internal(format!(
                "SSE UTF-8 decode error: {e}"
            ))));
        }
    };
    let mut data = String::new();
    for line in text.lines() {
        if let Some(d) = line.strip_prefix("data:") {
            if !data.is_empty() {
                data.push('\n');
            }
            data.push_str(d.strip_prefix(' ').unwrap_or(d));
        }
    }
    if data.is_empty() {
        return None;
    }
    if let Err(e) = crate::json_shape::check(data.as_bytes(), "the remote's event") {
        return Some(Err(e));
    }
    let parsed = if json_rpc {
        envelope(data.as_bytes()).and_then(|v| {
            protojson_conv::from_value::<StreamResponse>(v)
                .map_err(|e| A2AError::internal(format!("SSE parse error: {e}")))
        })
    } else {
        protojson_conv::from_str::<StreamResponse>(&data)
            .map_err(|e| A2AError::internal(format!("SSE parse error: {e}")))
    };
    Some(parsed)
}

/// The state of a stream being parsed.
struct Parse<S> {
    bytes: std::pin::Pin<Box<S>>,
    buf: Vec<u8>,
    /// Where the first event not yet returned starts in `buf` (what is before it is dropped
    /// once per chunk, never once per event: a chunk of empty events costs its length).
    start: usize,
    /// How much of `buf` was looked at for a separator, less the 3 bytes one may straddle.
    scanned: usize,
    read: usize,
    limits: Limits,
    json_rpc: bool,
    ended: bool,
    /// Where each event's text goes when the running turn's task is tapped.
    tap: Option<TapRoute>,
}

impl<S, B> Parse<S>
where
    S: Stream<Item = Result<B, reqwest::Error>> + Send,
    B: AsRef<[u8]>,
{
    /// The next event, or the error that ends the stream.
    async fn next(&mut self) -> Option<Result<StreamResponse, A2AError>> {
        while !self.ended {
            while let Some((end, next)) = boundary(&self.buf, self.scanned.max(self.start)) {
                let text = &self.buf[self.start..end];
                if let Some(tap) = &self.tap {
                    tap.record(TapDirection::FromAgent, &String::from_utf8_lossy(text));
                }
                let parsed = event(text, self.json_rpc);
                self.start = next;
                self.scanned = next;
                if let Some(e) = parsed {
                    return Some(e);
                }
            }
            self.buf.drain(..self.start);
            self.start = 0;
            self.scanned = self.buf.len().saturating_sub(3);
            if self.buf.len() > self.limits.event {
                return self.fail(format!(
                    "one event of the remote's stream is larger than {} bytes; the rest was not read",
                    self.limits.event
                ));
            }
            match self.bytes.next().await {
                Some(Ok(chunk)) => {
                    let chunk = chunk.as_ref();
                    self.read = self.read.saturating_add(chunk.len());
                    if self.read > self.limits.stream {
                        return self.fail(format!(
                            "the remote's stream carried more than {} bytes; the rest was not read",
                            self.limits.stream
                        ));
                    }
                    self.buf.extend_from_slice(chunk);
                }
                Some(Err(e)) => {
                    self.ended = true;
                    return Some(Err(A2AError::internal(format!("SSE stream error: {e}"))));
                }
                None => {
                    self.ended = true;
                    let tail = std::mem::take(&mut self.buf);
                    if let Some(tap) = &self.tap
                        && !tail.is_empty()
                    {
                        tap.record(TapDirection::FromAgent, &String::from_utf8_lossy(&tail));
                    }
                    return event(&tail, self.json_rpc);
                }
            }
        }
        None
    }

    fn fail(&mut self, message: String) -> Option<Result<StreamResponse, A2AError>> {
        self.ended = true;
        self.buf = Vec::new();
        Some(Err(A2AError::new(TOO_LARGE, message)))
    }
}

/// `bytes` as bounded events (see the module docs), each event's text (as read, before it is
/// parsed) recorded on `tap` when there is one.
pub fn parse<S, B>(
    bytes: S,
    limits: Limits,
    json_rpc: bool,
    tap: Option<TapRoute>,
) -> BoxStream<'static, Result<StreamResponse, A2AError>>
where
    S: Stream<Item = Result<B, reqwest::Error>> + Send + 'static,
    B: AsRef<[u8]> + Send + 'static,
{
    let state = Parse {
        bytes: Box::pin(bytes),
        buf: Vec::new(),
        start: 0,
        scanned: 0,
        read: 0,
        limits,
        json_rpc,
        ended: false,
        tap,
    };
    Box::pin(futures::stream::unfold(state, |mut s| async move {
        s.next().await.map(|item| (item, s))
    }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn chunks(parts: Vec<Vec<u8>>) -> impl Stream<Item = Result<Vec<u8>, reqwest::Error>> {
        futures::stream::iter(parts.into_iter().map(Ok))
    }

    const STATUS: &str = r#"{"statusUpdate":{"taskId":"t","contextId":"c","status":{"state":"TASK_STATE_WORKING"}}}"#;

    #[tokio::test]
    async fn events_are_split_and_bounded() {
        let one = format!("data: {STATUS}\n\n");
        let limits = Limits {
            event: 1024,
            stream: 4096,
            ..Limits::default()
        };
        // Two events, split across chunks anywhere, are two updates.
        let text = format!("{one}{one}");
        let (a, b) = text.as_bytes().split_at(7);
        let got: Vec<_> = parse(chunks(vec![a.to_vec(), b.to_vec()]), limits, false, None)
            .collect()
            .await;
        assert_eq!(got.len(), 2);
        assert!(got.iter().all(Result::is_ok), "{got:?}");
        // One event that never ends is refused once past its bound.
        let endless = std::iter::repeat_n(b"data: xxxxxxxx".to_vec(), 200).collect();
        let got: Vec<_> = parse(chunks(endless), limits, false, None).collect().await;
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].as_ref().unwrap_err().code, TOO_LARGE);
        // Many small events are refused once the stream's total is past its bound.
        let many = std::iter::repeat_n(one.into_bytes(), 100).collect();
        let got: Vec<_> = parse(chunks(many), limits, false, None).collect().await;
        assert_eq!(got.last().unwrap().as_ref().unwrap_err().code, TOO_LARGE);
        assert!(got.len() < 100);
    }

    /// A chunk of a million empty events costs its length, not its length squared: the
    /// event after them arrives (with the old per-event drain this did not end).
    #[tokio::test]
    async fn a_flood_of_empty_events_is_read_in_one_pass() {
        let mut flood = b"\n\n".repeat(1_000_000);
        flood.extend_from_slice(format!("data: {STATUS}\n\n").as_bytes());
        let limits = Limits {
            event: 1 << 20,
            stream: 8 << 20,
            ..Limits::default()
        };
        let got: Vec<_> = parse(chunks(vec![flood]), limits, false, None)
            .collect()
            .await;
        assert_eq!(got.len(), 1);
        assert!(got[0].is_ok(), "{got:?}");
    }
}
