//! Private memory per project and specialist (issue 17): what a caller keeps for a specialist
//! of a project, in Legate's own store, and reads back or hands to a task as data.
//!
//! This module owns the four operations fronts call ([`Memory::list`],
//! [`Memory::read`], [`Memory::write`], [`Memory::remove`]), their limits
//! ([`MemoryLimits`], `[memory]` in the configuration, within the seed's bounds), the key of
//! an entry (the project's canonical git root and a specialist id checked like a role name),
//! and the checks on its text: UTF-8 size, no high-confidence credential
//! (`INPUT_SECRET_DETECTED`), a sha256 that matches what is stored. `selection` takes the
//! snapshots a task is given; `block` frames them for the agent.
//!
//! It never reads or imports anything from the project (the path only names the key), never
//! returns a text from `memory_list`, never puts a text (or part of one) into an error or a
//! log, and never lets a text grant anything: a task's memory is data its agent reads.

pub(crate) mod block;
mod read;
pub(crate) mod selection;

pub use read::MemoryPiece;

pub use crate::config::{
    MEMORY_MAX_BYTES_CEILING, MEMORY_MAX_ENTRIES_CEILING, MEMORY_MAX_ENTRY_BYTES_CEILING,
    MemoryLimits,
};
use crate::core::Core;
use legate_core::{Error, ErrorCode, Result};
use legate_store::{MemoryBounds, MemoryMeta, MemoryWrite};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// One entry, without its text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct MemoryEntryInfo {
    /// The specialist id.
    pub specialist: String,
    /// The sha256 (lowercase hex) of its text: what `memory_read`, `memory_write`,
    /// `memory_remove` and a task's `memory` selection name.
    pub sha256: String,
    /// Its size in UTF-8 bytes.
    pub bytes: u64,
    /// When it was first written (Unix milliseconds).
    pub created_at: i64,
    /// When its text last changed (Unix milliseconds).
    pub updated_at: i64,
}

/// What `memory_list` answers: metadata and limits, never text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct MemoryList {
    /// The canonical git root the entries belong to.
    pub project: String,
    /// The entries, by specialist.
    pub entries: Vec<MemoryEntryInfo>,
    /// Entries stored over every project.
    pub total_entries: u64,
    /// UTF-8 bytes stored over every project.
    pub total_bytes: u64,
    /// The configured limits.
    pub limits: MemoryLimits,
}

/// What `memory_write` answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct MemoryWritten {
    /// The specialist.
    pub specialist: String,
    /// The sha256 of the text now stored.
    pub sha256: String,
    /// Its UTF-8 size.
    pub bytes: u64,
    /// Whether it replaced an earlier version (`false`: created).
    pub replaced: bool,
}

/// What `memory_remove` answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct MemoryRemoved {
    /// The specialist.
    pub specialist: String,
    /// The sha256 of the version removed.
    pub sha256: String,
}

/// A specialist id is a role name's shape: 1 to 32 lowercase ASCII letters, digits and
/// hyphens. `INVALID_INPUT` otherwise, without echoing it.
pub(crate) fn check_specialist(specialist: &str) -> Result<()> {
    if crate::roles::valid_role_name(specialist) {
        return Ok(());
    }
    Err(Error::invalid_input(
        "a specialist id must be 1 to 32 lowercase letters, digits or '-' (like a role name)",
    ))
}

/// `INVALID_INPUT` unless `sha` is 64 lowercase hex digits.
pub(crate) fn check_sha(field: &str, sha: &str) -> Result<()> {
    let ok = sha.len() == 64
        && sha
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if ok {
        return Ok(());
    }
    Err(Error::invalid_input(format!(
        "{field} must be a sha256: 64 lowercase hex digits"
    )))
}

pub(crate) fn changed(specialist: &str, current: Option<&str>) -> Error {
    let now = match current {
        Some(sha) => format!("is now {sha}"),
        None => "does not exist".to_string(),
    };
    Error::new(
        ErrorCode::MemoryChanged,
        format!(
            "the memory of specialist {specialist} {now}; read memory_list again and retry with its current sha256"
        ),
    )
}

pub(crate) fn not_found(specialist: &str, sha: &str) -> Error {
    Error::new(
        ErrorCode::MemoryNotFound,
        format!(
            "specialist {specialist} has no memory at sha256 {sha} in this project; read memory_list for the current version"
        ),
    )
}

fn info(m: MemoryMeta) -> MemoryEntryInfo {
    MemoryEntryInfo {
        specialist: m.specialist,
        sha256: m.sha256,
        bytes: m.bytes,
        created_at: m.created_at.0,
        updated_at: m.updated_at.0,
    }
}

/// The project memory: read, list, write and remove its entries.
/// Handed out by [`Engine::memory`](crate::Engine::memory).
#[derive(Debug, Clone)]
pub struct Memory {
    pub(crate) core: Core,
}

impl Core {
    /// The configured memory limits.
    fn memory_limits(&self) -> MemoryLimits {
        self.config().memory
    }

    /// The key of `project`: its canonical git root (`INVALID_WORKSPACE` for a path that is
    /// not the top of a git work tree; `FORBIDDEN_DIRECTORY` for a configured forbidden
    /// directory). Nothing in the project is read beyond what finding its root needs.
    pub(crate) fn memory_project(&self, project: &Path) -> Result<PathBuf> {
        let root = legate_workspace::project_root(project)?;
        self.check_not_forbidden("the project", &root)?;
        Ok(root)
    }

    /// The entries of `project` (of one `specialist`, when given): metadata, hashes, sizes
    /// and limits, never text.
    pub(crate) fn memory_list(
        &self,
        project: &Path,
        specialist: Option<&str>,
    ) -> Result<MemoryList> {
        if let Some(s) = specialist {
            check_specialist(s)?;
        }
        let root = self.memory_project(project)?;
        let key = root.to_string_lossy();
        let entries = self.store().memory_list(&key, specialist)?;
        let totals = self.store().memory_totals()?;
        Ok(MemoryList {
            project: key.into_owned(),
            entries: entries.into_iter().map(info).collect(),
            total_entries: totals.entries,
            total_bytes: totals.bytes,
            limits: self.memory_limits(),
        })
    }

    /// Removes `specialist`'s memory of `project` if it is at `expected`
    /// (`MEMORY_NOT_FOUND` when there is none, `MEMORY_CHANGED` for another version). Tasks
    /// that received it keep their snapshots.
    pub(crate) fn memory_remove(
        &self,
        project: &Path,
        specialist: &str,
        expected: &str,
    ) -> Result<MemoryRemoved> {
        check_specialist(specialist)?;
        check_sha("expectedSha256", expected)?;
        let root = self.memory_project(project)?;
        let key = root.to_string_lossy();
        match self.store().memory_remove(&key, specialist, expected)? {
            MemoryWrite::Written => {
                tracing::info!(project = %key, specialist, sha256 = expected, "memory removed");
                Ok(MemoryRemoved {
                    specialist: specialist.to_string(),
                    sha256: expected.to_string(),
                })
            }
            MemoryWrite::Changed { current: None } => Err(not_found(specialist, expected)),
            MemoryWrite::Changed { current } => Err(changed(specialist, current.as_deref())),
            other => Err(Error::internal(format!(
                "the store answered a removal with {other:?}"
            ))),
        }
    }
}

impl Memory {
    /// The entries of `project` (of one `specialist`, when given): metadata, hashes, sizes
    /// and limits, never text.
    pub fn list(&self, project: &Path, specialist: Option<&str>) -> Result<MemoryList> {
        self.core.memory_list(project, specialist)
    }

    /// Writes `text` as `specialist`'s memory of `project`, compare-and-swap: `expected`
    /// `None` creates (`MEMORY_CHANGED` if an entry exists), the current sha256 replaces it
    /// (`MEMORY_CHANGED` for any other). `MEMORY_LIMIT_EXCEEDED` past a limit,
    /// `INPUT_SECRET_DETECTED` for a text holding a credential. Safe across processes: the
    /// check and the write are one store transaction.
    pub fn write(
        &self,
        project: &Path,
        specialist: &str,
        text: &str,
        expected: Option<&str>,
    ) -> Result<MemoryWritten> {
        let core = &self.core;
        check_specialist(specialist)?;
        if let Some(e) = expected {
            check_sha("expectedSha256", e)?;
        }
        let limits = core.memory_limits();
        let bytes = text.len() as u64;
        if bytes > limits.max_entry_bytes {
            return Err(Error::new(
                ErrorCode::MemoryLimitExceeded,
                format!(
                    "the text is {bytes} bytes; one memory entry holds at most {} (memory.max_entry_bytes)",
                    limits.max_entry_bytes
                ),
            ));
        }
        if text.trim().is_empty() {
            return Err(Error::invalid_input(
                "a memory text must not be empty; remove the entry instead",
            ));
        }
        legate_credentials::refuse_credential("the memory text", text)?;
        let root = core.memory_project(project)?;
        let key = root.to_string_lossy();
        let sha = legate_workspace::sha256_hex(text.as_bytes());
        let bounds = MemoryBounds {
            max_entries: limits.max_entries,
            max_bytes: limits.max_bytes,
        };
        match core
            .store()
            .memory_write(&key, specialist, text, &sha, expected, bounds)?
        {
            MemoryWrite::Written => {
                tracing::info!(project = %key, specialist, sha256 = %sha, bytes, "memory written");
                Ok(MemoryWritten {
                    specialist: specialist.to_string(),
                    sha256: sha,
                    bytes,
                    replaced: expected.is_some(),
                })
            }
            MemoryWrite::Changed { current } => Err(changed(specialist, current.as_deref())),
            MemoryWrite::TooManyEntries { entries } => Err(Error::new(
                ErrorCode::MemoryLimitExceeded,
                format!(
                    "the store holds {entries} memory entries, the limit (memory.max_entries); remove one first"
                ),
            )),
            MemoryWrite::TooManyBytes { total } => Err(Error::new(
                ErrorCode::MemoryLimitExceeded,
                format!(
                    "the store's memory would hold {total} bytes; the limit is {} (memory.max_bytes)",
                    limits.max_bytes
                ),
            )),
        }
    }

    /// Removes `specialist`'s memory of `project` if it is at `expected`
    /// (`MEMORY_NOT_FOUND` when there is none, `MEMORY_CHANGED` for another version). Tasks
    /// that received it keep their snapshots.
    pub fn remove(
        &self,
        project: &Path,
        specialist: &str,
        expected: &str,
    ) -> Result<MemoryRemoved> {
        self.core.memory_remove(project, specialist, expected)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_default_limits_are_the_seeds_and_the_bounds_hold() {
        let d = MemoryLimits::default();
        assert_eq!(
            (d.max_entries, d.max_bytes, d.max_entry_bytes),
            (100, 1 << 20, 64 << 10)
        );
        assert!(d.validate().is_ok());
        let top = MemoryLimits {
            max_entries: 10_000,
            max_bytes: 64 << 20,
            max_entry_bytes: 1 << 20,
        };
        assert!(top.validate().is_ok());
        for bad in [
            MemoryLimits {
                max_entries: 10_001,
                ..top
            },
            MemoryLimits {
                max_entries: 0,
                ..top
            },
            MemoryLimits {
                max_bytes: (64 << 20) + 1,
                ..top
            },
            MemoryLimits {
                max_entry_bytes: (1 << 20) + 1,
                ..top
            },
            MemoryLimits {
                max_bytes: 1000,
                max_entry_bytes: 1001,
                ..top
            },
        ] {
            assert_eq!(
                bad.validate().unwrap_err().code,
                ErrorCode::ConfigInvalid,
                "{bad:?}"
            );
        }
    }

    proptest! {
        #[test]
        fn a_specialist_id_is_a_role_name_and_never_echoed(s in "\\PC{0,40}|[a-z0-9-]{0,40}|\\.\\./[a-z]{1,4}|[a-z]{1,3}/[a-z]{1,3}") {
            let ok = !s.is_empty() && s.len() <= 32 && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
            match check_specialist(&s) {
                Ok(()) => prop_assert!(ok),
                Err(e) => {
                    prop_assert!(!ok);
                    prop_assert_eq!(e.code, ErrorCode::InvalidInput);
                    // One fixed sentence: nothing of the caller's id is echoed.
                    prop_assert_eq!(e.message, check_specialist("").unwrap_err().message);
                }
            }
        }

        #[test]
        fn a_sha_is_exactly_64_lowercase_hex(s in "[0-9a-fA-F]{60,68}|\\PC{0,70}") {
            let ok = s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
            prop_assert_eq!(check_sha("x", &s).is_ok(), ok);
        }
    }
}
