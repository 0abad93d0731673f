//! stdout bytes into NDJSON lines.
//!
//! Lines are cut on `\n` in bytes, so a UTF-8 character split across reads is joined before it
//! is decoded; a trailing `\r` is dropped (CRLF). A line may be very long: up to
//! [`MAX_LINE`] bytes are kept, the rest of it is read and discarded and the line is marked
//! truncated (it can then not be parsed, and becomes an `unparsed` event). Nothing here
//! decides what a line means.

/// The most bytes kept of one line (16 MiB).
pub const MAX_LINE: usize = 16 * 1024 * 1024;

/// One complete line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// Its bytes, without the newline (and without a `\r` before it).
    pub bytes: Vec<u8>,
    /// Whether bytes past `MAX_LINE` were dropped.
    pub truncated: bool,
}

/// Splits a byte stream into lines.
#[derive(Debug)]
pub struct LineSplitter {
    buf: Vec<u8>,
    truncated: bool,
    max: usize,
}

impl Default for LineSplitter {
    fn default() -> Self {
        Self::with_limit(MAX_LINE)
    }
}

impl LineSplitter {
    /// A splitter that keeps at most `max` bytes of a line.
    pub fn with_limit(max: usize) -> Self {
        Self {
            buf: Vec::new(),
            truncated: false,
            max,
        }
    }

    /// Takes `chunk`, and returns the lines it completed.
    pub fn push(&mut self, mut chunk: &[u8]) -> Vec<Line> {
        let mut lines = Vec::new();
        while let Some(i) = chunk.iter().position(|b| *b == b'\n') {
            self.keep(&chunk[..i]);
            lines.push(self.take());
            chunk = &chunk[i + 1..];
        }
        self.keep(chunk);
        lines
    }

    /// The last line, when the stream ended without a newline.
    pub fn finish(&mut self) -> Option<Line> {
        (!self.buf.is_empty() || self.truncated).then(|| self.take())
    }

    fn keep(&mut self, part: &[u8]) {
        let room = self.max.saturating_sub(self.buf.len());
        if part.len() > room {
            self.truncated = true;
        }
        self.buf.extend_from_slice(&part[..part.len().min(room)]);
    }

    fn take(&mut self) -> Line {
        let mut bytes = std::mem::take(&mut self.buf);
        if bytes.last() == Some(&b'\r') {
            bytes.pop();
        }
        Line {
            bytes,
            truncated: std::mem::take(&mut self.truncated),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn utf8_split_across_chunks_is_joined() {
        let text = "{\"t\":\"héllo ✓ 日本\"}\n".as_bytes();
        for cut in 0..text.len() {
            let mut s = LineSplitter::default();
            let mut lines = s.push(&text[..cut]);
            lines.extend(s.push(&text[cut..]));
            assert_eq!(lines.len(), 1, "cut at {cut}");
            assert_eq!(
                std::str::from_utf8(&lines[0].bytes).unwrap(),
                "{\"t\":\"héllo ✓ 日本\"}"
            );
        }
    }

    #[test]
    fn crlf_and_a_last_line_without_newline() {
        let mut s = LineSplitter::default();
        let lines = s.push(b"a\r\nb\n\r\nc");
        let got: Vec<&[u8]> = lines.iter().map(|l| l.bytes.as_slice()).collect();
        assert_eq!(got, [b"a".as_slice(), b"b", b""]);
        assert_eq!(s.finish().unwrap().bytes, b"c");
        assert_eq!(s.finish(), None);
    }

    #[test]
    fn very_long_lines_are_kept_up_to_the_limit() {
        let mut s = LineSplitter::with_limit(10);
        let mut lines = s.push(&[b'x'; 7]);
        lines.extend(s.push(&[b'y'; 7]));
        lines.extend(s.push(b"\nok\n"));
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].bytes.len(), 10);
        assert!(lines[0].truncated);
        assert_eq!(lines[1].bytes, b"ok");
        assert!(!lines[1].truncated);
        let big = vec![b'z'; 3 * 1024 * 1024];
        let mut s = LineSplitter::default();
        let mut lines = Vec::new();
        for part in big.chunks(8192) {
            lines.extend(s.push(part));
        }
        lines.extend(s.push(b"\n"));
        assert_eq!(lines[0].bytes.len(), big.len());
        assert!(!lines[0].truncated);
    }
}
