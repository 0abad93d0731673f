//! The extension seam for prompt lines revisor itself does not understand.
//!
//! This module owns the [`DirectiveHook`] trait and the [`DirectiveContext`] handed to it.
//! Revisor ships no directives of its own: an embedder (Legate's test kit, for one) installs
//! a hook through [`crate::RevisorOptions`] to give some lines a meaning of its own. This
//! module must never grow behaviour of its own: it only describes the seam.

use std::fmt;
use std::path::{Path, PathBuf};

use agent_client_protocol::Client;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    ContentBlock, ContentChunk, SessionId, SessionNotification, SessionUpdate, StopReason,
    TextContent,
};
use futures::future::BoxFuture;

/// Gives some prompt lines a meaning revisor does not know about.
///
/// While planning a turn, revisor asks [`claims`](Self::claims) about every non-blank line
/// before trying its own instruction language; a claimed line becomes a step of its own
/// (a plan entry titled with the line) and, when its turn comes, is
/// [`perform`](Self::perform)ed outside the connection's dispatch loop.
pub trait DirectiveHook: Send + Sync + fmt::Debug + 'static {
    /// Whether this hook handles `line` (already trimmed). Must be cheap and pure.
    fn claims(&self, line: &str) -> bool;

    /// Performs a claimed line. The future may send session updates through `context`; it
    /// decides whether the turn goes on. A future that never completes leaves the prompt
    /// unanswered.
    fn perform(&self, line: String, context: DirectiveContext) -> BoxFuture<'static, Directed>;
}

/// What a performed directive wants the turn to do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Directed {
    /// Go on with the next step.
    Continue,
    /// End the turn now with this stop reason, skipping the remaining steps and the answer.
    EndTurn(StopReason),
}

/// What a [`DirectiveHook`] may use while performing a line.
#[derive(Debug, Clone)]
pub struct DirectiveContext {
    pub(crate) connection: ConnectionTo<Client>,
    pub(crate) session_id: SessionId,
    pub(crate) cwd: PathBuf,
}

impl DirectiveContext {
    /// The session the turn belongs to.
    #[must_use]
    pub fn session_id(&self) -> &SessionId {
        &self.session_id
    }

    /// The session's working directory (absolute).
    #[must_use]
    pub fn cwd(&self) -> &Path {
        &self.cwd
    }

    /// The connection to the client, for anything beyond session updates.
    #[must_use]
    pub fn connection(&self) -> &ConnectionTo<Client> {
        &self.connection
    }

    /// Sends one `session/update` for this session.
    ///
    /// # Errors
    /// When the connection is closed.
    pub fn send_update(&self, update: SessionUpdate) -> Result<(), agent_client_protocol::Error> {
        self.connection
            .send_notification(SessionNotification::new(self.session_id.clone(), update))
    }

    /// Sends one `agent_message_chunk` with `text`.
    ///
    /// # Errors
    /// When the connection is closed.
    pub fn send_message_chunk(&self, text: &str) -> Result<(), agent_client_protocol::Error> {
        self.send_update(SessionUpdate::AgentMessageChunk(ContentChunk::new(
            ContentBlock::Text(TextContent::new(text)),
        )))
    }
}
