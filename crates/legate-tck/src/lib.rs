//! The TCK profile: a built-in, model-free ACP agent that behaves the way the official A2A
//! TCK (`a2aproject/a2a-tck`, 1.0) expects of its system under test, so the TCK can be run
//! against `legate serve`. `legate agent tck` runs it on stdio; configure it as an agent named
//! `tck` (see `docs/fronts/a2a.md`).
//!
//! The TCK selects a behaviour in band, by the prefix of each message's `messageId`. Legate
//! passes the A2A `messageId` to the agent in `session/prompt`'s `_meta.legate.messageId`
//! (see `legate_backend::acp::ext`); without one, the prompt's first word selects. Every
//! behaviour is expressed in plain ACP, so the whole pipeline (engine, store, A2A front) is
//! what the TCK exercises:
//!
//! | `messageId` prefix | the agent | the A2A task |
//! |---|---|---|
//! | `tck-complete-task` | says "Hello from TCK", `end_turn` | `completed` |
//! | `tck-artifact-text` | says "Generated text content" | `completed`, text part |
//! | `tck-artifact-file` | a blob resource `output.txt` (`text/plain`) | `completed`, file part (bytes) |
//! | `tck-artifact-file-url` | a `resource_link` to `https://example.com/output.txt` | `completed`, file part (URL) |
//! | `tck-artifact-data` | an `application/json` text resource `{"key": "value", "count": 42}` | `completed`, data part |
//! | `tck-message-response` | says "Direct message response", ending with `_meta.legate.directMessage` | `completed`; `SendMessage` answers a bare `Message` |
//! | `tck-input-required` | asks for input (`end_turn` + `_meta.legate.inputRequired`) | `input-required` |
//! | `tck-reject-task` | stop reason `refusal` | `rejected` |
//! | `tck-fail-task` | answers the prompt with an error | `failed` (`AGENT_FAILED`) |
//! | `tck-stream-001`, `-002`, `-003`, `tck-stream-ordering-001`, `tck-stream-artifact-text`, `-file`, `-chunked` | the text (or file) of the scenario, chunk by chunk | `completed` |
//! | `test-resubscribe-message-id` | works 4 s (a plan entry in progress), then "done" | `working`, then `completed` |
//! | `tck-long-running` | works 300 s | `working` until canceled |
//! | anything else | echoes the prompt | `completed` |
//!
//! `session/cancel` stops a working turn at once with stop reason `cancelled`.
//!
//! This crate owns the profile and nothing else. It never touches a file, asks no
//! permission, opens no network connection and logs only through `tracing`. It must never
//! be the default agent of a real deployment: it does no work.

mod agent;
pub mod scenario;

pub use agent::{AGENT_NAME, META_INPUT_REQUIRED, META_MESSAGE_ID, META_NAMESPACE};
pub use scenario::{Behaviour, behaviour};

use agent_client_protocol::{Agent, ConnectTo, Error, Stdio};

/// Serves the profile on stdin/stdout until the client closes stdin. Must run inside a tokio
/// runtime with time enabled.
///
/// # Errors
/// When the transport fails.
pub async fn serve_stdio() -> Result<(), Error> {
    serve_transport(Stdio::new()).await
}

/// Serves the profile on any SDK transport (for example an in-process channel) until the
/// client goes away.
///
/// # Errors
/// When the transport fails.
pub async fn serve_transport(transport: impl ConnectTo<Agent> + 'static) -> Result<(), Error> {
    agent::run(transport).await
}
