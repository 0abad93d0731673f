//! Reading a large text in pieces: offsets and lengths in UTF-16 code units (what JavaScript
//! clients count), chunks that never split a surrogate pair, and a sha256 of the whole text so
//! that a reader can tell when it changed between pieces.
//!
//! This module is pure: it knows nothing of tasks or MCP.

use legate_core::{Error, ErrorCode, Result};
use sha2::{Digest, Sha256};

/// The default chunk length, in UTF-16 units.
pub const DEFAULT_LIMIT: usize = 10_000;
/// The smallest chunk length accepted: two units always hold at least one character.
pub const MIN_LIMIT: usize = 2;
/// The largest chunk length accepted.
pub const MAX_LIMIT: usize = 50_000;

/// One piece of a text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// The piece.
    pub text: String,
    /// Where it starts, in UTF-16 units.
    pub offset: usize,
    /// Where the next piece starts.
    pub next_offset: usize,
    /// Whether anything follows.
    pub has_more: bool,
    /// The whole text's length, in UTF-16 units.
    pub total_length: usize,
    /// The sha256 of the whole text's UTF-8 bytes, lowercase hex.
    pub content_sha256: String,
}

/// The lowercase hex sha256 of `text`'s UTF-8 bytes.
pub fn sha256_hex(text: &str) -> String {
    hex(&Sha256::digest(text.as_bytes()))
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    out
}

/// The text's length in UTF-16 units.
pub fn utf16_len(text: &str) -> usize {
    text.chars().map(char::len_utf16).sum()
}

/// The piece of `content` that starts at `offset` and holds at most `limit` UTF-16 units,
/// shortened by one unit when it would end inside a surrogate pair.
///
/// `expected_sha256`, when given, must be the content's current sha256
/// (`CONTENT_CHANGED` otherwise). An offset past the end, or one that falls inside a surrogate
/// pair, and a limit out of range are `INVALID_INPUT`.
pub fn read(
    content: &str,
    offset: usize,
    limit: usize,
    expected_sha256: Option<&str>,
) -> Result<Chunk> {
    if !(MIN_LIMIT..=MAX_LIMIT).contains(&limit) {
        return Err(Error::invalid_input(format!(
            "limit must be between {MIN_LIMIT} and {MAX_LIMIT} (got {limit})"
        )));
    }
    let content_sha256 = sha256_hex(content);
    if let Some(expected) = expected_sha256
        && !expected.eq_ignore_ascii_case(&content_sha256)
    {
        return Err(Error::new(
            ErrorCode::ContentChanged,
            format!(
                "the content's sha256 is now {content_sha256}, not the expected {expected}; read it again from offset 0"
            ),
        ));
    }
    let total_length = utf16_len(content);
    if offset > total_length {
        return Err(Error::invalid_input(format!(
            "offset {offset} is past the end ({total_length} UTF-16 units)"
        )));
    }
    // Walk characters once: find the byte where the piece starts and where it ends.
    let mut units = 0usize;
    let mut start_byte = None;
    let mut end_byte = content.len();
    let mut end_units = total_length;
    let want_end = offset.saturating_add(limit);
    for (byte, ch) in content.char_indices() {
        if start_byte.is_none() {
            if units == offset {
                start_byte = Some(byte);
            } else if units > offset {
                return Err(split_pair(offset));
            }
        }
        if start_byte.is_some() && units + ch.len_utf16() > want_end {
            end_byte = byte;
            end_units = units;
            break;
        }
        units += ch.len_utf16();
    }
    let start_byte = match start_byte {
        Some(b) => b,
        None if offset == total_length => content.len(),
        None => return Err(split_pair(offset)),
    };
    let text = content[start_byte..end_byte].to_string();
    Ok(Chunk {
        text,
        offset,
        next_offset: end_units,
        has_more: end_units < total_length,
        total_length,
        content_sha256,
    })
}

fn split_pair(offset: usize) -> Error {
    Error::invalid_input(format!(
        "offset {offset} falls inside a surrogate pair; use the nextOffset a previous read returned"
    ))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn read_all(content: &str, limit: usize) -> (String, usize) {
        let mut out = String::new();
        let mut offset = 0;
        let mut pieces = 0;
        loop {
            let c = read(content, offset, limit, None).unwrap();
            assert_eq!(c.offset, offset);
            assert!(utf16_len(&c.text) <= limit);
            out.push_str(&c.text);
            pieces += 1;
            if !c.has_more {
                assert_eq!(c.next_offset, c.total_length);
                break;
            }
            assert!(c.next_offset > offset, "a read must make progress");
            offset = c.next_offset;
        }
        (out, pieces)
    }

    #[test]
    fn pieces_join_to_the_whole_text_without_splitting_pairs() {
        let content = "a😀bc😀😀d€é\n".repeat(37);
        for limit in [2, 3, 4, 5, 7, 10, 64, 1000] {
            let (joined, _) = read_all(&content, limit);
            assert_eq!(joined, content, "limit {limit}");
            assert_eq!(sha256_hex(&joined), sha256_hex(&content));
        }
    }

    #[test]
    fn a_piece_that_would_end_inside_a_pair_is_one_unit_shorter() {
        let c = read("a😀b", 0, 2, None).unwrap();
        assert_eq!(c.text, "a");
        assert_eq!(c.next_offset, 1);
        let c = read("a😀b", 1, 2, None).unwrap();
        assert_eq!(c.text, "😀");
        assert_eq!(c.next_offset, 3);
        assert!(c.has_more);
        assert_eq!(c.total_length, 4);
    }

    #[test]
    fn bad_offsets_limits_and_hashes_are_refused() {
        assert_eq!(
            read("a😀b", 2, 10, None).unwrap_err().code,
            ErrorCode::InvalidInput
        );
        assert_eq!(
            read("abc", 4, 10, None).unwrap_err().code,
            ErrorCode::InvalidInput
        );
        assert_eq!(
            read("abc", 0, 1, None).unwrap_err().code,
            ErrorCode::InvalidInput
        );
        assert_eq!(
            read("abc", 0, MAX_LIMIT + 1, None).unwrap_err().code,
            ErrorCode::InvalidInput
        );
        assert_eq!(
            read("abc", 0, 10, Some(&sha256_hex("abd")))
                .unwrap_err()
                .code,
            ErrorCode::ContentChanged
        );
        let end = read("abc", 3, 10, Some(&sha256_hex("abc").to_uppercase())).unwrap();
        assert_eq!(end.text, "");
        assert!(!end.has_more);
        let empty = read("", 0, 10, None).unwrap();
        assert_eq!((empty.text.as_str(), empty.total_length), ("", 0));
    }

    #[test]
    fn sha256_is_lowercase_hex() {
        assert_eq!(
            sha256_hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
