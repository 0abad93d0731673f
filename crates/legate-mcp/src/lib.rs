//! Legate's MCP front: any MCP client (Claude Code, Codex, Cursor, …) delegates work, follows
//! it and collects it, over stdio ([`serve_stdio`]) or Streamable HTTP ([`http`]).
//!
//! The front translates MCP into engine calls and back; it decides nothing about a task (rule
//! 4 of the design). Its own rules are about the protocol: which tools a [`Profile`] lists,
//! argument ranges, how a long answer is cut into pieces ([`chunk`]), how a wait reports
//! progress ([`wait`]), and who may reach the HTTP endpoint ([`http`], `token`). A client
//! that disconnects, or a wait that times out, never cancels a task.
//!
//! The supervisor's side is [`approvals`]: the `supervisor` profile's own handler (approvals,
//! decide, audit), served at [`SUPERVISOR_PATH`] behind the supervisor token.
//!
//! Layout: [`server`] (the handler and the tool catalog), `tools` (each tool over the engine),
//! [`review`] (the copy workspace's review tools and `usage`), `approval` (the elicitation
//! confirmer), [`schema`] (arguments and answers, mostly the engine's own types, and the one
//! place JSON Schemas are generated), [`wait`], [`chunk`], [`profile`], `token`, [`http`].

pub mod approvals;
mod catalog;
pub mod chunk;
mod codec;
pub mod compare;
pub mod confirmation;
pub mod controls;
pub mod delivery;
pub mod groups;
pub mod http;
pub mod memory;
pub mod profile;
pub mod review;
pub mod sandbox;
pub mod schema;
pub mod server;
mod task_calls;
mod tools;
pub mod wait;

pub use approvals::ApprovalsMcp;
pub use http::{HttpOptions, MCP_PATH, SUPERVISOR_PATH};
pub use legate_token::serve::ServeOptions;
pub use legate_token::{Token, TokenSource};
pub use profile::Profile;
pub use server::{LegateMcp, McpOptions};

use legate_core::{Error, ErrorCode, Result};
use rmcp::ServiceExt;

/// Serves MCP on this process's stdin and stdout until the client closes the connection.
/// Stdout carries only JSON-RPC; logs go wherever `tracing` sends them (stderr in the binary).
///
/// Returns when the client is gone. Tasks it started keep running: see
/// [`LegateMcp::unfinished`] and [`finish`].
pub async fn serve_stdio(server: LegateMcp) -> Result<()> {
    serve_stdio_with(server).await
}

/// [`serve_stdio`] for any handler: the supervisor profile's [`ApprovalsMcp`], say.
pub async fn serve_stdio_with<S: rmcp::ServerHandler>(server: S) -> Result<()> {
    let running = server
        .serve(rmcp::transport::io::stdio_pipes())
        .await
        .map_err(|e| Error::quoting(ErrorCode::Internal, "the MCP session did not start", e))?;
    match running.waiting().await {
        Ok(reason) => tracing::info!(reason = ?reason, "the MCP client closed the connection"),
        Err(e) => tracing::warn!(error = %e, "the MCP session ended abnormally"),
    }
    Ok(())
}

/// Waits until every task `server` started has ended. A front whose client left calls this
/// so that leaving does not cut the work short.
pub async fn finish(server: &LegateMcp) {
    // `test` and `integrate` calls answered as tasks run in the background: they end first.
    server.engine().call_tasks().settle().await;
    for id in server.unfinished() {
        if let Err(e) = server.engine().wait(&id).await {
            tracing::warn!(task = %id, error = %e, "could not follow a task to its end");
        }
    }
}
