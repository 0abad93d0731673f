//! Redaction: every credential the content rules find in a text replaced by a marker that
//! names its kind, `[REDACTED:<rule id>]`, in a whole text ([`redact`]) or in a text that
//! arrives in pieces ([`StreamRedactor`]).
//!
//! This module owns the marker's form and how a stream is cut so that no credential is split
//! between what was relayed and what was held. It must never log, return or keep past its
//! owner's life any part of a credential, and never hide less than the rules find: a text the
//! rule table cannot judge (`scanner-unavailable`) is replaced whole.
//!
//! A stream is relayed a chunk at a time, but a chunk that ends with a character a credential
//! may be made of (letters, digits, `+/=_-.~:%$`) is held whole, with what follows, until a
//! chunk ends with another character (a blank, most punctuation) or the stream ends: a
//! credential of a known format is such a run (a token), or a key block of lines, so it is
//! final once another character follows it. A chunk that ends with a blank goes out whole, as
//! one event. Held text longer than [`MAX_HOLD`] is cut [`TAIL`] bytes before its end. The last
//! [`CONTEXT`] bytes already relayed are scanned again with what follows, so that a rule whose
//! keyword precedes the secret (`aws_secret_access_key = …`, a key block's header line) still
//! sees it; a key block that goes on past a cut keeps being hidden until its END line. A relay
//! costs at most `CONTEXT` bytes of scanning beyond the bytes it relays (text held because a
//! credential runs over the cut is tried again only once it has doubled): the work stays
//! linear in the stream.

use crate::SCANNER_UNAVAILABLE;
use crate::rules::ruleset;
use crate::scan::{BlockLine, Found, block_end, block_line};
use std::borrow::Cow;

/// The marker that replaces a credential of kind `rule` (a rule id, or `scanner-unavailable`
/// for a text that could not be judged).
pub fn marker(rule: &str) -> String {
    format!("[REDACTED:{rule}]")
}

/// The most bytes of one line a stream holds before it cuts inside the line.
pub const MAX_HOLD: usize = 64 * 1024;
/// How much of a line too long to hold stays held when it is cut: more than any token the
/// rules know (a secret is judged on its first 4096 bytes).
pub const TAIL: usize = 4096;
/// How many bytes already relayed are scanned again with the next ones, for a rule's keyword
/// or a key block's header line.
pub const CONTEXT: usize = 1024;

/// The credentials in `text`, as character-aligned spans with their kind, sorted and apart.
/// `None` when the rule table could not be built.
fn spans(text: &str) -> Option<Vec<Found<'static>>> {
    let set = ruleset().ok()?;
    let mut found = set.find(text.as_bytes());
    for f in &mut found {
        while !text.is_char_boundary(f.span.start) {
            f.span.start -= 1;
        }
        while !text.is_char_boundary(f.span.end) {
            f.span.end += 1;
        }
    }
    Some(found)
}

/// `text` with every credential the content rules find replaced by its [`marker`]; borrowed
/// when there is none. A private key block is hidden from its first body line to its END
/// line. Fails closed: when the rules cannot run, the whole text is one marker.
pub fn redact(text: &str) -> Cow<'_, str> {
    if text.is_empty() {
        return Cow::Borrowed(text);
    }
    let Some(found) = spans(text) else {
        return Cow::Owned(marker(SCANNER_UNAVAILABLE));
    };
    if found.is_empty() {
        return Cow::Borrowed(text);
    }
    Cow::Owned(replaced(text, found))
}

/// `text` with each span of `found` (sorted) replaced by its marker.
fn replaced(text: &str, found: Vec<Found<'static>>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for f in found {
        if f.span.start < at {
            continue;
        }
        out.push_str(&text[at..f.span.start]);
        out.push_str(&marker(f.rule));
        at = f.span.end;
    }
    out.push_str(&text[at..]);
    out
}

/// [`redact`] for text that holds escaped strings, once or more (a JSON log line quoting an
/// ACP frame): a credential after an escape (`\\nghp_…`, `\\\\nghp_…`) is found as if the
/// escape were the character it stands for, and a key block whose lines are joined by
/// escaped newlines is still one block. The text itself is kept as it is, except the
/// credentials.
pub fn redact_escaped(text: &str) -> Cow<'_, str> {
    if !text.contains('\\') {
        return redact(text);
    }
    let view = unescaped_view(text);
    let Some(found) = spans(&view) else {
        return Cow::Owned(marker(SCANNER_UNAVAILABLE));
    };
    if found.is_empty() {
        return Cow::Borrowed(text);
    }
    Cow::Owned(replaced(text, found))
}

/// `text` with every escape (a run of backslashes and the character after it, `\\uXXXX` with
/// its digits) replaced by as many bytes of blank, ending in a newline for `n` and `r`: the
/// same length, the same character boundaries, only ASCII changed.
fn unescaped_view(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut view = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'\\' {
            view.push(bytes[i]);
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && bytes[i] == b'\\' {
            i += 1;
        }
        let mut end = i;
        let mut last = b' ';
        match bytes.get(i) {
            Some(b'n' | b'r') => {
                end += 1;
                last = b'\n';
            }
            Some(b'u')
                if bytes.len() >= i + 5
                    && bytes[i + 1..i + 5].iter().all(u8::is_ascii_hexdigit) =>
            {
                end += 5;
            }
            Some(c) if c.is_ascii() => end += 1,
            _ => {}
        }
        view.extend(std::iter::repeat_n(b' ', end - start - 1));
        view.push(last);
        i = end;
    }
    // Only ASCII bytes were replaced, by ASCII: still UTF-8.
    String::from_utf8(view).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// One stream of text (an agent's answer or its reasoning) redacted as it arrives: what
/// [`push`](Self::push) returns is safe to store and relay, and no credential of a known
/// format is split between it and what is held; [`finish`](Self::finish) returns the rest.
#[derive(Debug, Default)]
pub struct StreamRedactor {
    /// The last bytes already relayed, as the agent wrote them (scanned again, never relayed
    /// again).
    context: String,
    /// What arrived and was not relayed yet.
    pending: String,
    /// Where each piece in `pending` ends: what is relayed keeps the pieces apart where no
    /// credential joins them.
    bounds: Vec<usize>,
    /// The length `pending` must reach before the next try (so that text held because a
    /// credential runs over the cut is not scanned again for every small piece).
    next_try: usize,
    /// The kind of a key block that was being hidden when the last piece was relayed.
    open_block: Option<&'static str>,
    /// How many bytes were scanned in all (the work, which tests bound).
    scanned: usize,
}

impl StreamRedactor {
    /// A stream with nothing seen yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes the next piece; returns the text that may be relayed now, if any: everything held,
    /// unless the piece ends with a character a credential may be made of (it may go on).
    pub fn push(&mut self, piece: &str) -> Vec<String> {
        self.pending.push_str(piece);
        self.bounds.push(self.pending.len());
        if self.pending.len() >= MAX_HOLD {
            let mut cut = self.pending.len() - TAIL;
            while !self.pending.is_char_boundary(cut) {
                cut -= 1;
            }
            return self.relay(cut, Cut::Forced);
        }
        let open = self.pending.chars().next_back().is_some_and(in_token);
        if open || self.pending.len() < self.next_try {
            return Vec::new();
        }
        self.relay(self.pending.len(), Cut::Chunk)
    }

    /// Everything held, redacted, for a stream that went quiet with a run unfinished (its
    /// owner's choice of when: what comes next is still judged with this as context, but a
    /// credential cut here shows the part relayed now).
    pub fn release(&mut self) -> Vec<String> {
        self.relay(self.pending.len(), Cut::Forced)
    }

    /// Whether anything is held.
    pub fn holds(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Everything still held, redacted; the stream starts afresh.
    pub fn finish(&mut self) -> Vec<String> {
        let out = self.relay(self.pending.len(), Cut::End);
        *self = Self {
            scanned: self.scanned,
            ..Self::new()
        };
        out
    }

    /// Relays `pending[..cut]` (less, when a credential crosses a line cut), redacted.
    fn relay(&mut self, cut: usize, how: Cut) -> Vec<String> {
        if cut == 0 {
            return Vec::new();
        }
        let base = self.context.len();
        let hay = format!("{}{}", self.context, self.pending);
        self.scanned += hay.len();
        let Some(mut found) = spans(&hay) else {
            // Fail closed: nothing of what was held is relayed.
            self.context.clear();
            self.pending.drain(..cut);
            self.bounds.retain(|b| *b > cut);
            self.bounds.iter_mut().for_each(|b| *b -= cut);
            return vec![marker(SCANNER_UNAVAILABLE)];
        };
        if let Some(rule) = self.open_block {
            // A key block relayed in part goes on while its lines do.
            // `base` starts a line of it (or is inside one, after a forced cut).
            let end = match block_line(hay.as_bytes(), base) {
                BlockLine::Body(after) => block_end(hay.as_bytes(), after),
                BlockLine::Last(after) => after,
                BlockLine::Not => base,
            };
            if end > base {
                found.insert(
                    0,
                    Found {
                        // Begun before `base`: hidden without a second marker.
                        span: base.saturating_sub(1)..end,
                        rule,
                        block: true,
                    },
                );
            }
        }
        let mut cut = base + cut;
        let end = hay.len();
        if how == Cut::Chunk
            && let Some(f) = found.iter().find(|f| {
                !f.block
                    && f.span.start >= base
                    && f.span.start < cut
                    && (f.span.end > cut || f.span.end == end)
            })
        {
            // A secret that runs over the cut, or up to the end of what came (it may go on),
            // waits whole (a key block goes on hidden instead).
            cut = f.span.start;
        }
        let marks = self
            .bounds
            .iter()
            .map(|b| base + b)
            .filter(|m| *m < cut)
            .collect();
        let mut out = Pieces {
            hay: &hay,
            marks,
            next: 0,
            pieces: vec![String::new()],
        };
        let mut at = base;
        let mut open = None;
        for f in found
            .iter()
            .filter(|f| f.span.end > base && f.span.start < cut)
        {
            let (start, end) = (f.span.start.max(at), f.span.end.min(cut));
            out.copy(at, start);
            if f.span.start >= base {
                out.add(&marker(f.rule));
            }
            out.skip(end);
            at = end.max(at);
            if f.block && how != Cut::End && (f.span.end > cut || f.span.end == hay.len()) {
                open = Some(f.rule);
            }
        }
        out.copy(at.min(cut), cut);
        let pieces: Vec<String> = out.pieces.into_iter().filter(|p| !p.is_empty()).collect();
        self.open_block = open;
        let relayed = cut - base;
        self.remember(relayed);
        self.next_try = if relayed == 0 {
            2 * self.pending.len()
        } else {
            0
        };
        pieces
    }

    /// Moves the first `n` bytes of `pending` to the context.
    fn remember(&mut self, n: usize) {
        self.context.push_str(&self.pending[..n]);
        self.pending.drain(..n);
        self.bounds.retain(|b| *b > n);
        self.bounds.iter_mut().for_each(|b| *b -= n);
        if self.context.len() > CONTEXT {
            let mut from = self.context.len() - CONTEXT;
            while !self.context.is_char_boundary(from) {
                from += 1;
            }
            self.context.drain(..from);
        }
    }
}

/// What a relay hands out: the text in the pieces it came in, split where a piece ended unless
/// a hidden credential spans the split (the pieces inside it join the marker's).
struct Pieces<'h> {
    hay: &'h str,
    /// Where a piece ended, in `hay`, in order.
    marks: Vec<usize>,
    next: usize,
    pieces: Vec<String>,
}

impl Pieces<'_> {
    fn last(&mut self) -> &mut String {
        if self.pieces.is_empty() {
            self.pieces.push(String::new());
        }
        let n = self.pieces.len() - 1;
        &mut self.pieces[n]
    }

    /// Copies `hay[from..to]`, starting a new piece at each mark on the way.
    fn copy(&mut self, from: usize, to: usize) {
        let mut x = from;
        while let Some(&m) = self.marks.get(self.next) {
            if m >= to {
                break;
            }
            if m > x {
                let text = &self.hay[x..m];
                self.last().push_str(text);
                x = m;
            }
            if !self.last().is_empty() {
                self.pieces.push(String::new());
            }
            self.next += 1;
        }
        if to > x {
            let text = &self.hay[x..to];
            self.last().push_str(text);
        }
    }

    fn add(&mut self, text: &str) {
        self.last().push_str(text);
    }

    /// Passes over hidden text up to `to`: the marks inside it start no piece.
    fn skip(&mut self, to: usize) {
        while self.marks.get(self.next).is_some_and(|m| *m < to) {
            self.next += 1;
        }
    }
}

/// Whether `c` may be part of a credential the rules know (all but two, whose values may hold
/// any character: a `.netrc` password and a WordPress `define`).
fn in_token(c: char) -> bool {
    c.is_ascii_alphanumeric() || "+/=_-.~:%$".contains(c)
}

/// Why a stream relays now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cut {
    /// A piece ended outside a credential's characters.
    Chunk,
    /// A line too long to hold.
    Forced,
    /// The stream ended.
    End,
}

#[cfg(test)]
#[path = "redact_tests.rs"]
mod tests;
