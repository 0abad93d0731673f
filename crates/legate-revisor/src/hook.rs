//! The extension seams: prompt lines revisor itself does not understand, and the session
//! lifecycle revisor itself does not keep.
//!
//! This module owns the [`DirectiveHook`] trait and the [`DirectiveContext`] handed to it,
//! and the [`SessionHook`] trait. Revisor ships no directives and keeps no sessions beyond
//! its process: an embedder (Legate's test kit, for one) installs hooks through
//! [`crate::RevisorOptions`] to give some lines a meaning of its own, or to keep sessions
//! (ACP's `session/resume`, `session/close`, `session/list`). This module must never grow
//! behaviour of its own: it only describes the seams.

use std::fmt;
use std::path::{Path, PathBuf};

use agent_client_protocol::Client;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    CloseSessionRequest, ContentBlock, ContentChunk, ListSessionsRequest, ListSessionsResponse,
    ResumeSessionRequest, SessionCapabilities, SessionId, SessionNotification, SessionUpdate,
    StopReason, TextContent,
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

/// Keeps sessions for revisor, which has no memory of its own: what makes `session/resume`,
/// `session/close` and `session/list` mean something. Without one, revisor announces none
/// of them and answers them "method not found".
///
/// Every method runs inside the connection's dispatch loop: it must be quick and never
/// await the client.
pub trait SessionHook: Send + Sync + fmt::Debug + 'static {
    /// The lifecycle methods to announce in `initialize` (`sessionCapabilities`).
    fn capabilities(&self) -> SessionCapabilities;

    /// Whether to announce `session/load` (`agentCapabilities.loadSession`), which revisor
    /// does unless its hook says otherwise (an agent that can continue no session).
    fn load_session(&self) -> bool {
        true
    }

    /// `session/new` opened session `id` in `cwd`.
    fn created(&self, id: &SessionId, cwd: &Path);

    /// `session/resume`: `Ok` when the session is known (revisor then serves it in the
    /// request's `cwd`), else the error to answer with.
    ///
    /// # Errors
    /// An unknown or malformed session.
    fn resume(&self, request: &ResumeSessionRequest) -> Result<(), agent_client_protocol::Error>;

    /// `session/close` (revisor has already forgotten the session and canceled its turn).
    ///
    /// # Errors
    /// An unknown session.
    fn close(&self, request: &CloseSessionRequest) -> Result<(), agent_client_protocol::Error>;

    /// `session/list`.
    ///
    /// # Errors
    /// When the sessions cannot be read.
    fn list(
        &self,
        request: &ListSessionsRequest,
    ) -> Result<ListSessionsResponse, agent_client_protocol::Error>;

    /// Session `id` is about to run a prompt whose text is `prompt`.
    fn prompted(&self, id: &SessionId, prompt: &str);
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
    pub(crate) mcp_servers: Vec<agent_client_protocol::v1::schema::McpServer>,
    pub(crate) model: String,
}

impl DirectiveContext {
    /// The model the session runs with (picked through its `model` config option; the
    /// first of [`crate::MODELS`] until then).
    #[must_use]
    pub fn model(&self) -> &str {
        &self.model
    }

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

    /// The MCP servers the client handed this session (`session/new`, `session/load`).
    #[must_use]
    pub fn mcp_servers(&self) -> &[agent_client_protocol::v1::schema::McpServer] {
        &self.mcp_servers
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
