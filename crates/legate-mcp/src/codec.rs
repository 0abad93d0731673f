//! Tool arguments in and answers out: a tool's JSON arguments read into its argument type
//! (`INVALID_INPUT` quoting the parser when they do not fit), its answer written as JSON; and
//! what both servers' handlers answer alike: who the server is, its tool list, and the error
//! for a call to a tool it does not offer.
//!
//! This module never decides what a tool does; both servers (`server`, `supervisor`) use it.

use legate_core::{Error, ErrorCode, Result};
use rmcp::ErrorData;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// `args` read as `T`; `INVALID_INPUT: invalid arguments: …` with the parser's words.
pub(crate) fn parse<T: DeserializeOwned>(args: Value) -> Result<T> {
    serde_json::from_value(args)
        .map_err(|e| Error::quoting(ErrorCode::InvalidInput, "invalid arguments", e))
}

/// `out` as JSON.
pub(crate) fn to_value<T: Serialize>(out: T) -> Result<Value> {
    serde_json::to_value(out)
        .map_err(|e| Error::quoting(ErrorCode::Internal, "could not encode an answer", e))
}

/// The protocol error for a call to a tool the client was never offered (MCP: `-32602`, not a
/// tool result), `e` saying why: its stable code travels in the error's data.
pub(crate) fn not_offered(e: &Error) -> ErrorData {
    ErrorData::invalid_params(e.detail(), Some(json!({ "code": e.code.as_str() })))
}

/// The `ServerHandler` items both servers answer alike, for a handler with a
/// `tools(&self) -> Vec<Tool>` method: `get_info` (the server's `name`, `title` and
/// `instructions`, with tools enabled, and the tasks extension when `tasks: f` says so for
/// the handler) and `list_tools` (all its tools, in one page).
macro_rules! introduced_as {
    ($name:expr, $title:expr, $instructions:expr) => {
        $crate::codec::introduced_as!($name, $title, $instructions, tasks: |_: &Self| false);
    };
    ($name:expr, $title:expr, $instructions:expr, tasks: $tasks:expr) => {
        fn get_info(&self) -> rmcp::model::ServerConfig {
            let builder = rmcp::model::ServerCapabilities::builder().enable_tools();
            let capabilities = if ($tasks)(self) {
                builder.enable_tasks().build()
            } else {
                builder.build()
            };
            rmcp::model::ServerConfig::new(capabilities)
                .with_server_info(
                    rmcp::model::Implementation::new($name, env!("CARGO_PKG_VERSION"))
                        .with_title($title),
                )
                .with_instructions($instructions)
        }

        async fn list_tools(
            &self,
            _request: Option<rmcp::model::PaginatedRequestParams>,
            _context: rmcp::service::RequestContext<rmcp::RoleServer>,
        ) -> std::result::Result<rmcp::model::ListToolsResult, rmcp::ErrorData> {
            Ok(rmcp::model::ListToolsResult::with_all_items(self.tools()))
        }
    };
}
pub(crate) use introduced_as;
