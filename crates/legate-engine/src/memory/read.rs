//! Reading a memory entry in pieces, each bound to the sha256 the caller names: a piece is
//! cut from that version only, never split inside a UTF-8 character, and followed by
//! `nextOffset` until `hasMore` is false.
//!
//! It never answers a text whose stored hash does not match its bytes (`STORE_ERROR`), and
//! never answers the text of an entry that holds a credential (one written before a rule
//! existed): that entry reads redacted and cannot be selected.

use super::Memory;
use super::{changed, check_sha, check_specialist, not_found};
use legate_core::{Error, ErrorCode, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The default piece, in bytes.
pub const DEFAULT_MEMORY_PIECE: usize = 16 << 10;
/// The largest piece, in bytes.
pub const MAX_MEMORY_PIECE: usize = 64 << 10;

/// One piece of an entry's text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct MemoryPiece {
    /// The specialist.
    pub specialist: String,
    /// The version read (the `expectedSha256` given).
    pub sha256: String,
    /// The text from `offset` to `nextOffset` (empty when `redacted`).
    pub text: String,
    /// Where this piece starts, in UTF-8 bytes.
    pub offset: u64,
    /// Where the next piece starts.
    pub next_offset: u64,
    /// Whether text follows this piece.
    pub has_more: bool,
    /// The text's whole size in UTF-8 bytes.
    pub total_bytes: u64,
    /// The entry holds what now looks like a credential: its text is withheld (and the entry
    /// cannot be selected for a task); `redactedKind` names the kind.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub redacted: bool,
    /// The kind of credential, when `redacted`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redacted_kind: Option<String>,
}

/// Cuts `text` at `offset` into at most `limit` bytes (1 to [`MAX_MEMORY_PIECE`]), on a
/// character boundary: `(start, end)`.
pub(crate) fn window(text: &str, offset: u64, limit: Option<usize>) -> Result<(usize, usize)> {
    let limit = limit.unwrap_or(DEFAULT_MEMORY_PIECE);
    if !(4..=MAX_MEMORY_PIECE).contains(&limit) {
        return Err(Error::invalid_input(format!(
            "limit must be between 4 and {MAX_MEMORY_PIECE} bytes"
        )));
    }
    let total = text.len();
    let start = usize::try_from(offset).unwrap_or(usize::MAX);
    if start > total || !text.is_char_boundary(start) {
        return Err(Error::invalid_input(format!(
            "offset {offset} is not a character boundary inside the {total}-byte text; use the nextOffset returned"
        )));
    }
    let mut end = start.saturating_add(limit).min(total);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Ok((start, end))
}

impl Memory {
    /// A piece of `specialist`'s memory of `project` at version `expected`
    /// (`MEMORY_CHANGED` when the entry is another version now, `MEMORY_NOT_FOUND` when
    /// there is none).
    pub fn read(
        &self,
        project: &Path,
        specialist: &str,
        expected: &str,
        offset: u64,
        limit: Option<usize>,
    ) -> Result<MemoryPiece> {
        check_specialist(specialist)?;
        check_sha("expectedSha256", expected)?;
        let root = self.core.memory_project(project)?;
        let key = root.to_string_lossy();
        let Some(entry) = self.core.store().memory_entry(&key, specialist)? else {
            return Err(not_found(specialist, expected));
        };
        if entry.meta.sha256 != expected {
            return Err(changed(specialist, Some(&entry.meta.sha256)));
        }
        if legate_workspace::sha256_hex(entry.text.as_bytes()) != entry.meta.sha256 {
            return Err(Error::new(
                ErrorCode::StoreError,
                format!(
                    "the memory of specialist {specialist} does not match its stored sha256; remove it and write it again"
                ),
            ));
        }
        let total = entry.text.len() as u64;
        if let Some(kind) = legate_credentials::credential_in(&entry.text) {
            tracing::warn!(
                specialist,
                kind,
                "a stored memory entry holds a credential; read redacted"
            );
            return Ok(MemoryPiece {
                specialist: specialist.to_string(),
                sha256: entry.meta.sha256,
                text: String::new(),
                offset: 0,
                next_offset: 0,
                has_more: false,
                total_bytes: total,
                redacted: true,
                redacted_kind: Some(kind.to_string()),
            });
        }
        let (start, end) = window(&entry.text, offset, limit)?;
        Ok(MemoryPiece {
            specialist: specialist.to_string(),
            text: entry.text[start..end].to_string(),
            sha256: entry.meta.sha256,
            offset: start as u64,
            next_offset: end as u64,
            has_more: (end as u64) < total,
            total_bytes: total,
            redacted: false,
            redacted_kind: None,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Following nextOffset from 0 reads the whole text back, piece by piece, whatever
        /// its characters and the limit.
        #[test]
        fn pieces_join_to_the_text(text in "\\PC{0,300}", limit in 4usize..40) {
            let mut out = String::new();
            let mut at = 0u64;
            loop {
                let (s, e) = window(&text, at, Some(limit)).unwrap();
                prop_assert!(e > s || e == text.len());
                out.push_str(&text[s..e]);
                at = e as u64;
                if e == text.len() { break; }
            }
            prop_assert_eq!(out, text);
        }

        #[test]
        fn an_offset_inside_a_character_or_past_the_end_is_refused(extra in 1u64..10) {
            let text = "é";
            prop_assert!(window(text, 1, None).is_err());
            prop_assert!(window(text, 2 + extra, None).is_err());
        }
    }
}
