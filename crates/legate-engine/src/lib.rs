//! Legate's engine: the one API every front calls.
//!
//! It owns a task's life: validation at submit, admission (bounded running and queued),
//! workspace preparation, opening or continuing the context's agent session, the turn itself
//! with its timeout and cancel, storing every event before fanning it out, and recovery of
//! tasks whose process died. Fronts (CLI, MCP, A2A) translate; they never decide.
//!
//! The engine never speaks a protocol itself: backends do, through `legate-backend`.

mod accumulator;
mod config;
mod engine;
mod fanout;
mod pool;
pub mod runner;

pub use config::{EngineConfig, Paths};
pub use engine::{Engine, SubmitRequest, WorkspaceRequest, preset_for};
pub use fanout::Subscription;

/// Follows a task's events from the store alone, polling; for tasks run by another process.
pub fn follow(
    store: legate_store::Store,
    task_id: legate_core::TaskId,
    after: u64,
) -> Subscription {
    fanout::Fanout::new(1).subscribe(store, task_id, after)
}
