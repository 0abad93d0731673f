//! An A2A SSE response read frame by frame: [`SseStream`] sends one streaming JSON-RPC request
//! over raw HTTP/1.1 to 127.0.0.1 and hands back each `data:` frame as it arrives, so a test
//! can act mid-task. Owns only the bytes on the wire and the frames read; it checks that the
//! stream was accepted (a 200), never what its frames say.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::Value;

use crate::served::request_text;

/// An A2A SSE response read one `data:` frame at a time.
#[derive(Debug)]
pub struct SseStream {
    reader: BufReader<TcpStream>,
    /// Every frame read so far.
    pub frames: Vec<Value>,
}

impl SseStream {
    /// POSTs `body` to `path` on `addr` (`Host` = `addr`) with `Accept: text/event-stream`
    /// and `headers`, and reads the response's head, which must be a 200.
    pub fn open(addr: &str, path: &str, headers: &[(&str, &str)], body: &str) -> SseStream {
        let mut extra = vec![("Accept", "text/event-stream")];
        extra.extend_from_slice(headers);
        let mut stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        let request = request_text("POST", path, addr, &extra, body);
        stream.write_all(request.as_bytes()).unwrap();
        let mut reader = BufReader::new(stream);
        let mut status = String::new();
        reader.read_line(&mut status).unwrap();
        assert!(status.contains(" 200 "), "stream refused: {status:?}");
        // The head, up to its blank line.
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap() == 0 || line == "\r\n" {
                break;
            }
        }
        SseStream {
            reader,
            frames: Vec::new(),
        }
    }

    /// Reads frames until one satisfies `pred`; panics when the stream ends first.
    pub fn until(&mut self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        for f in self.by_ref() {
            if pred(&f) {
                return f;
            }
        }
        panic!("the stream ended before {what}: {:?}", self.frames);
    }

    /// Reads every remaining frame.
    pub fn drain(&mut self) {
        self.by_ref().for_each(drop);
    }
}

impl Iterator for SseStream {
    type Item = Value;

    /// The next frame's JSON-RPC `result` (or the whole frame when it has none), or `None` at
    /// the end of the stream.
    fn next(&mut self) -> Option<Value> {
        let mut line = String::new();
        loop {
            line.clear();
            // Chunked transfer: size lines and blank lines are skipped; data lines are parsed.
            match self.reader.read_line(&mut line) {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
            if let Some(data) = line.trim().strip_prefix("data:") {
                let mut frame: Value = serde_json::from_str(data.trim()).unwrap();
                let result = match frame.get_mut("result") {
                    Some(result) => result.take(),
                    None => frame,
                };
                self.frames.push(result.clone());
                return Some(result);
            }
        }
    }
}

/// The `metadata.kind` of a frame's status message (`message`, `tool_call`, …), if any.
pub fn frame_kind(frame: &Value) -> Option<&str> {
    frame["statusUpdate"]["status"]["message"]["metadata"]["kind"].as_str()
}

/// The A2A state a frame carries (the task's, or a status update's).
pub fn frame_state(frame: &Value) -> Option<&str> {
    frame["statusUpdate"]["status"]["state"]
        .as_str()
        .or_else(|| frame["task"]["status"]["state"].as_str())
}
