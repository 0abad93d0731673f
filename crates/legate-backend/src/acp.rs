//! The ACP driver: runs an agent that speaks the Agent Client Protocol on stdio.
//!
//! `AcpBackend::open` spawns the agent itself (not through the SDK's spawner, which sets
//! neither `cwd` nor a pre-exec hook): in the workspace root, in its own process group, with a
//! filtered environment, dying with Legate, and confined by Landlock (`legate-confine`) so that
//! it can write only in its root, its state directory and its private temp directory. It then performs the handshake (`initialize`,
//! `session/resume`, `session/load` or `session/new`, `session/set_mode`) and hands back an [`AcpSession`].
//!
//! The pieces, one concept per module:
//!
//! * `crate::env` (shared with the agy driver): which variables of Legate's environment the
//!   agent inherits;
//! * `launch`: what each preset needs at launch (environment, private `TMPDIR`, writable
//!   state directories, whether `fs` is advertised);
//! * `sys`: the only `unsafe` code (the pre-exec hooks, including Landlock confinement, and
//!   `killpg`);
//! * `process`: spawning and stopping the process group;
//! * `stderr`: the agent's stderr, line by line, into [`EventKind::Stderr`] events;
//! * `transport`: stdout/stdin as JSON-RPC lines, with non-JSON lines reported and skipped;
//! * `translate`: ACP shapes into Legate's event model;
//! * `state`: where the current turn's events go;
//! * `handlers`: the client side of ACP (permission requests, `fs/*`, session updates);
//! * `fs`: serving `fs/read_text_file` and `fs/write_text_file` inside the root;
//! * `models`: model selection through a config option of category `model`;
//! * `failure`: a failed request or an exit as Legate's error;
//! * `session`: the connection actor, prompts, model selection, cancel and shutdown (with
//!   the cleanup check shared with agy, `crate::cleanup`);
//! * `backend`: spawning the agent and opening its session; `handshake`: the handshake;
//! * `lifecycle`: what the agent announced of ACP's session lifecycle, `session/resume`
//!   preferred to `session/load` when continuing, and `session/close` when a session ends;
//! * [`ext`]: Legate's extension of ACP in `_meta` (the caller's message id on a prompt, an
//!   agent's request for input on its answer).
//!
//! [`EventKind::Stderr`]: legate_core::EventKind::Stderr

mod asked;
mod backend;
pub mod ext;
mod failure;
mod fs;
mod handlers;
mod handshake;
mod known_tools;
pub(crate) mod launch;
pub mod lifecycle;
mod mcp;
mod models;
mod pipe;
mod plan_read;
mod pod;
mod process;
mod session;
mod state;
mod stderr;
pub(crate) mod sys;
mod translate;
mod transport;
mod unasked;
mod unwritten;

pub use crate::env::{FORBIDDEN_EXACT, FORBIDDEN_PREFIXES, INHERITED_EXACT, INHERITED_PREFIXES};
pub use backend::AcpBackend;
pub use backend::{DEFAULT_HANDSHAKE_TIMEOUT, DEFAULT_KILL_GRACE};
pub use launch::CODEX_TMP;
pub use session::{AcpCanceller, AcpSession};
pub(crate) use translate::truncate;

/// Whether the process group `pgid` still has a member that is not a zombie (for tests and
/// diagnostics; see [`crate::cleanup::group_alive`]).
pub fn process_group_alive(pgid: i32) -> bool {
    crate::cleanup::group_alive(pgid)
}
