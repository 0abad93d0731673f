//! A minimal server-sent-events reader over a real `reqwest` response: what a browser's
//! EventSource does, enough to check ids, event names and data.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use futures::StreamExt;

/// How long a test waits for an event on a stream before failing.
pub const DEADLINE: std::time::Duration = std::time::Duration::from_secs(60);

/// One SSE event.
#[derive(Debug, Clone, Default)]
pub struct SseEvent {
    pub event: String,
    pub id: Option<String>,
    pub data: String,
}

/// Reads events from a streaming response.
pub struct SseReader {
    stream: std::pin::Pin<Box<dyn futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    buf: String,
}

impl SseReader {
    pub fn new(response: reqwest::Response) -> Self {
        assert_eq!(response.status(), 200);
        let ct = response.headers()["content-type"]
            .to_str()
            .unwrap()
            .to_string();
        assert!(ct.starts_with("text/event-stream"), "{ct}");
        Self {
            stream: Box::pin(response.bytes_stream()),
            buf: String::new(),
        }
    }

    /// The next event (comments and keep-alives skipped); `None` when the stream ends.
    pub async fn next(&mut self) -> Option<SseEvent> {
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..end + 2).collect();
                let mut e = SseEvent::default();
                let mut data = Vec::new();
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("event:") {
                        e.event = v.trim_start().to_string();
                    } else if let Some(v) = line.strip_prefix("id:") {
                        e.id = Some(v.trim_start().to_string());
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push(v.strip_prefix(' ').unwrap_or(v).to_string());
                    }
                }
                if data.is_empty() && e.event.is_empty() {
                    continue;
                }
                e.data = data.join("\n");
                return Some(e);
            }
            let chunk = self.stream.next().await?.ok()?;
            self.buf.push_str(&String::from_utf8_lossy(&chunk));
        }
    }

    /// Events until one satisfies `done` (included), within a generous overall deadline (a
    /// stream that never delivers it fails the test instead of hanging it).
    pub async fn until(&mut self, done: impl Fn(&SseEvent) -> bool) -> Vec<SseEvent> {
        match tokio::time::timeout(DEADLINE, self.until_inner(done)).await {
            Ok(seen) => seen,
            Err(_) => panic!("the awaited event never came on the stream within {DEADLINE:?}"),
        }
    }

    async fn until_inner(&mut self, done: impl Fn(&SseEvent) -> bool) -> Vec<SseEvent> {
        let mut seen = Vec::new();
        while let Some(e) = self.next().await {
            let stop = done(&e);
            seen.push(e);
            if stop {
                return seen;
            }
        }
        panic!("the stream ended before the awaited event: {seen:?}");
    }
}
