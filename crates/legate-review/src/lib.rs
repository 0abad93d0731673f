//! Legate's review of a copy: what the agent changed, read safely, and checked against the
//! task's criteria.
//!
//! This crate owns two steps of the copy pipeline, one concept per module: `preview` (the
//! copy's patch against its private baseline: files as A/M/D with their counts, the full
//! binary-safe patch and its sha256, reading it by path or in chunks bound to that sha256,
//! and the read-only check) and `verify` (acceptance criteria, the caller's reviews, running
//! the checks on the copy's real files and confirming every quoted citation, with the files
//! the verdict rests on so that a later change makes it stale).
//!
//! It stands on `legate-workspace` (the copy, its baseline and the change model the preview
//! is made of, re-exported here) and never writes to the copy, the baseline's own index or
//! the project: integrating a reviewed patch is `legate-integration`'s. It keeps no records
//! (the engine persists reviews and evidence).
//!
//! ```
//! use legate_review::{chunk, DEFAULT_CHUNK};
//!
//! let patch = "diff --git a/f b/f\n+héllo\n".as_bytes();
//! let first = chunk(patch, 0, Some(20), "sha").unwrap();
//! assert!(first.has_more);
//! let rest = chunk(patch, first.next_offset, Some(DEFAULT_CHUNK), "sha").unwrap();
//! assert_eq!(format!("{}{}", first.text, rest.text).as_bytes(), patch);
//! ```

mod preview;
mod verify;

pub use legate_workspace::{ChangeStatus, FileChange, PatchSummary, Preview};
pub use preview::{
    DEFAULT_CHUNK, MAX_CHUNK, PatchChunk, chunk, full_patch, preview, read_only_changes,
};
pub use verify::{
    Check, CheckKind, Criterion, CriterionResult, MAX_CRITERIA, Review, Verdict, Verification,
    quote_at, staleness, validate_criteria, verify,
};
