//! The agy driver: runs the Antigravity CLI (`agy`) headless, one process per turn.
//!
//! `agy` does not stay up between turns and does not ask for permission in-band (its headless
//! protocol refuses `control_request`): each turn is one `agy --sandbox --input-format
//! stream-json --output-format stream-json …` process in the workspace root, in its own
//! process group, with a filtered environment. The prompt is one NDJSON line on stdin, then
//! stdin closes; stdout is NDJSON events; the conversation continues with `--conversation`.
//! What limits it is `agy`'s own `--sandbox`, the workspace root, and (on Linux) the same
//! Landlock confinement as ACP agents (`confine`), not Legate's supervisor, which this
//! protocol gives nothing to decide.
//!
//! The pieces, one concept per module:
//!
//! * `discovery`: finding the executable, `--version` and `--help` with timeouts, capabilities;
//! * `models`: `agy models` and its parsing, login phrases;
//! * `crate::selection` (shared with the ACP driver): which model a turn uses (task, saved
//!   preference, configured default, Auto);
//! * `args`: the argument vector of a run;
//! * `ndjson`: stdout bytes into lines (split UTF-8, CRLF, very long lines);
//! * `translate`: stream-json events into Legate's event model;
//! * `usage`: per-turn tokens from the CLI's session-cumulative counters;
//! * `confine`: what an `agy` process may write (root, its profile, a private temp dir);
//! * `crate::cleanup` (shared with the ACP driver): workspaces blocked after a run whose
//!   process group could not be shown gone;
//! * `run`: one process: spawn, stdin, stdout/stderr, stop (SIGINT, SIGKILL after 3 s), verify;
//! * `staging`: a task's tool controls staged in its copy (the policy outside it,
//!   `.agents/hooks.json` and `.agents/mcp_config.json`), checked unchanged after the turn;
//!   `hook`: what `legate agy-hook`, the staged PreToolUse hook, decides for one tool call;
//! * `backend`: [`AgyBackend`] and [`AgySession`]; `turn_steps`: what a turn does before and
//!   after its process (supervision check, model, schema argument, usage, failure);
//!
//! This driver never touches the store, never passes a prompt or a secret as an argument,
//! and never passes `--dangerously-skip-permissions`.

mod args;
mod backend;
mod confine;
mod discovery;
pub mod hook;
mod models;
mod ndjson;
mod run;
pub mod staging;
mod translate;
mod turn_steps;
mod turns;
pub(crate) mod usage;

pub use crate::cleanup;
pub use crate::selection;
pub use args::RunOptions;
pub use backend::{AgyBackend, AgySession};
pub use discovery::{Capabilities, Discovery, discover, resolve_executable};
pub use models::{Model, is_login_phrase, list_models, parse_models};
pub use ndjson::{Line, LineSplitter};
pub use translate::STRUCTURED_OUTPUT;
pub use usage::{Counters, turn_usage};
