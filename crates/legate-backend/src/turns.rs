//! One turn at a time, and none once the session is shut down: the gate kept by the
//! sessions whose turns are not tied to one live process (agy's process per turn, a remote
//! agent).
//!
//! This module only orders turns; it never runs one, stops a process or cancels a turn.

use legate_core::{Error, ErrorCode, Result};
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::{Mutex, MutexGuard};

/// The place of the running turn, and whether the session was shut down.
#[derive(Debug, Default)]
pub struct TurnGate {
    turn: Mutex<()>,
    closed: AtomicBool,
}

impl TurnGate {
    /// Waits until no other turn of the session runs and holds its place until the guard is
    /// dropped; `AGENT_EXITED` (`{session} was shut down`) once the gate is closed.
    pub async fn enter(&self, session: &str) -> Result<MutexGuard<'_, ()>> {
        let place = self.turn.lock().await;
        if self.is_closed() {
            return Err(Error::new(
                ErrorCode::AgentExited,
                format!("{session} was shut down"),
            ));
        }
        Ok(place)
    }

    /// Closes the gate: no turn starts after this.
    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
    }

    /// Whether the gate was closed.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }
}
