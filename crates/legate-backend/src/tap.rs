//! The wire tap's seam: where a backend hands the raw protocol frames of a tapped task
//! (ACP JSON-RPC lines both ways, agy's stream-json lines, a remote's A2A requests and
//! responses) to whoever records them.
//!
//! The engine gives a turn's [`EventSink`](crate::EventSink) a [`TapRecorder`] when the task
//! is tapped ([`EventSink::with_tap`](crate::EventSink::with_tap)); a backend calls
//! [`EventSink::tap`](crate::EventSink::tap) with each frame as it is written or read, and
//! nothing when the sink has no recorder. A backend never redacts, bounds or stores a frame
//! here, and never touches the store: the recorder does all of that.

use legate_core::{TapDirection, TapProtocol};
use std::fmt::Debug;

/// Records a tapped task's frames. Called on the paths that read and write the agent's
/// wire, so it must not wait on I/O: it may redact and cut the frame, and hands it on.
pub trait TapRecorder: Send + Sync + Debug {
    /// One frame, as it crossed the wire (without its line ending).
    fn record(&self, direction: TapDirection, protocol: TapProtocol, frame: &str);
}
