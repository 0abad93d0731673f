//! Real callers of `legate mcp`, offline. Opt-in: `--features real-callers`.
//!
//! (Temporary harness of the `codex` branch: the shared one comes with Claude Code's suite.)

#![cfg(feature = "real-callers")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod codex;
