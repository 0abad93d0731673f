//! The front test kit: one way to serve a front over a real engine in a test.
//!
//! It owns the setup the fronts' integration tests share, built on the engine harness
//! ([`legate_testkit::EngineHarness`]): start an engine with the harness's builder, then
//!
//! - `mcp::McpFront` (feature `mcp`): `LegateMcp` served over an in-memory pipe to rmcp's
//!   own client (`mcp::McpClient`, which records progress and may answer elicitations),
//!   with the calls tests make (`call`, `call_raw`, `fail`, `refused`, `wait_done`, …); and
//!   `mcp::McpHttp`, the front's HTTP router on 127.0.0.1 for tests of raw requests;
//! - `a2a::A2aFront` (feature `a2a`): `legate_a2a::boot` served on 127.0.0.1;
//! - `ui::UiFront` (feature `ui`): the dashboard router served on 127.0.0.1 with a client
//!   that does not follow redirects;
//! - [`cli::CliHome`]: a temporary `$LEGATE_HOME` (or, with [`cli::CliHome::at`], a home
//!   another harness owns) and the `legate` binary run in it, and [`cli::KillOnDrop`] for a
//!   process that must not outlive its test;
//! - [`served::Served`]: `legate serve` on a home, its banner read and the process stopped
//!   when dropped (also under a descriptor limit, [`cli::CliHome::serve_limited`]), with
//!   [`served::raw`] requests and an HTTP [`served::origin`];
//! - [`fleet::Fleet`]: two `legate serve` nodes, a front delegating to a back over A2A, each
//!   a restartable [`fleet::Node`], and [`sse::SseStream`], an A2A stream read frame by frame;
//! - [`stdio::McpStdio`]: `legate mcp` on stdio driven with raw JSON-RPC lines;
//! - [`poll::until`] and [`poll::exit_within`]: waits on what another process changes;
//! - [`AskCommands`] (from `legate_testkit::supervisors`): the test supervisor that sends
//!   every command to the approval queue.
//!
//! It is for tests only: nothing in the product may depend on it, and a front's own unit tests
//! must not use it (they would link a second copy of the front; see `Cargo.toml`). It never
//! asserts what a test is about: its helpers check only what makes a call a call (a success is
//! not an error), and never bind anything but 127.0.0.1.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[cfg(feature = "a2a")]
pub mod a2a;
pub mod cli;
pub mod fleet;
#[cfg(feature = "mcp")]
pub mod mcp;
pub mod poll;
pub mod served;
pub mod sse;
pub mod stdio;
#[cfg(feature = "ui")]
pub mod ui;

pub use legate_testkit::supervisors::AskCommands;
pub use legate_testkit::{EngineHarness, HarnessBuilder, TestAgent};
