//! The remote's wire tap: the A2A requests Legate sends a remote agent and the answers (each
//! body, each Server-Sent Event) it reads, handed to the running turn's tap.
//!
//! A [`TapRoute`] belongs to one connection ([`crate::connect::Remote`]); its transports
//! ([`crate::wire`], [`crate::events`]) and the connection's card fetch and token check
//! ([`crate::card`]) record on it, and the task opening the connection, then each turn,
//! routes it to its sink for as long as it connects or runs ([`TapRoute::route`]). Outside
//! those, or for a task that is not tapped, nothing is recorded. This module never redacts, bounds or stores a frame (the
//! engine's recorder does) and keeps no sink past the turn that gave it.

use legate_backend::EventSink;
use legate_core::{TapDirection, TapProtocol};
use std::sync::{Arc, Mutex, MutexGuard};

/// Where one connection's frames go: the running turn's sink, when its task is tapped.
#[derive(Debug, Clone, Default)]
pub struct TapRoute(Arc<Mutex<Option<EventSink>>>);

impl TapRoute {
    fn lock(&self) -> MutexGuard<'_, Option<EventSink>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Routes the connection's frames to `sink` until the guard drops (nothing for a sink
    /// that does not tap).
    pub fn route(&self, sink: &EventSink) -> TapGuard {
        if sink.taps() {
            *self.lock() = Some(sink.clone());
        }
        TapGuard(self.clone())
    }

    /// Records one frame on the routed turn's tap, if there is one.
    pub fn record(&self, direction: TapDirection, frame: &str) {
        let sink = self.lock().clone();
        if let Some(sink) = sink {
            sink.tap(direction, TapProtocol::A2a, frame);
        }
    }
}

/// Stops a turn's routing when dropped: the connection keeps no clone of the turn's sink.
#[derive(Debug)]
pub struct TapGuard(TapRoute);

impl Drop for TapGuard {
    fn drop(&mut self) {
        *self.0.lock() = None;
    }
}
