//! The private-memory tools: `memory_list`, `memory_read`, `memory_write`, `memory_remove`,
//! over the engine's memory operations.
//!
//! This module owns their argument shapes (the spellings: `projectPath`,
//! `specialist`, `text`, `expectedSha256`, `offset`, `limit`) and their translation to
//! [`Engine`] calls. Every rule (keys, limits, compare-and-swap, credentials) is the
//! engine's. It never logs a text, and `memory_list` never returns one. `memory_list` and
//! `memory_read` are query tools (every profile that serves callers lists them);
//! `memory_write` and `memory_remove` are implementation tools (`full` and `implementation`).

use crate::tools::absolute;
use legate_core::Result;
use legate_engine::{Engine, MemoryList, MemoryPiece, MemoryRemoved, MemoryWritten};
use rmcp::schemars::JsonSchema;
use serde::Deserialize;

/// `memory_list`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MemoryListArgs {
    /// The absolute path of the project: the root of a git work tree.
    pub project_path: String,
    /// One specialist's entry only; omitted for every specialist of the project.
    pub specialist: Option<String>,
}

/// `memory_read`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MemoryReadArgs {
    /// The absolute path of the project: the root of a git work tree.
    pub project_path: String,
    /// The specialist id (1 to 32 lowercase letters, digits or '-').
    pub specialist: String,
    /// The sha256 memory_list gave: MEMORY_CHANGED when the entry is another version now.
    pub expected_sha256: String,
    /// Where to start, in UTF-8 bytes (default 0; pass the nextOffset returned).
    pub offset: Option<u64>,
    /// At most this many bytes (4 to 65536, default 16384).
    pub limit: Option<usize>,
}

/// `memory_write`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MemoryWriteArgs {
    /// The absolute path of the project: the root of a git work tree.
    pub project_path: String,
    /// The specialist id (1 to 32 lowercase letters, digits or '-').
    pub specialist: String,
    /// The text, reviewed by the caller (UTF-8; no credentials: INPUT_SECRET_DETECTED).
    pub text: String,
    /// null to create the entry; its current sha256 to replace it. Any other value, or null
    /// for an existing entry, is MEMORY_CHANGED and changes nothing.
    pub expected_sha256: Option<String>,
}

/// `memory_remove`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MemoryRemoveArgs {
    /// The absolute path of the project: the root of a git work tree.
    pub project_path: String,
    /// The specialist id.
    pub specialist: String,
    /// The sha256 of the version to remove: another is MEMORY_CHANGED.
    pub expected_sha256: String,
}

/// `memory_list`: metadata, hashes, sizes and limits; never text.
pub fn list(engine: &Engine, args: MemoryListArgs) -> Result<MemoryList> {
    let project = absolute("projectPath", &args.project_path)?;
    engine.memory().list(&project, args.specialist.as_deref())
}

/// `memory_read`: one piece, bound to `expectedSha256`.
pub fn read(engine: &Engine, args: MemoryReadArgs) -> Result<MemoryPiece> {
    let project = absolute("projectPath", &args.project_path)?;
    engine.memory().read(
        &project,
        &args.specialist,
        &args.expected_sha256,
        args.offset.unwrap_or(0),
        args.limit,
    )
}

/// `memory_write`: compare-and-swap; returns the new sha256.
pub fn write(engine: &Engine, args: MemoryWriteArgs) -> Result<MemoryWritten> {
    let project = absolute("projectPath", &args.project_path)?;
    let out = engine.memory().write(
        &project,
        &args.specialist,
        &args.text,
        args.expected_sha256.as_deref(),
    )?;
    tracing::info!(specialist = %out.specialist, sha256 = %out.sha256, "mcp memory_write");
    Ok(out)
}

/// `memory_remove`: only the matching version.
pub fn remove(engine: &Engine, args: MemoryRemoveArgs) -> Result<MemoryRemoved> {
    let project = absolute("projectPath", &args.project_path)?;
    engine
        .memory()
        .remove(&project, &args.specialist, &args.expected_sha256)
}
