//! The MCP server's side of tasks: how a call becomes a task (the engine records it, or runs
//! it as an op, before the caller is told), and what a `tasks/*` request may reach: exactly
//! what the matching tools (`status`, `result`, `cancel`, `send_message`, `group_status`,
//! `comparison`, …) reach under this server's profile, never more. An id the caller cannot
//! reach reads as unknown.
//!
//! This module decides nothing about the work (see [`crate::task_calls`]); it logs tool
//! names, ids and codes, never arguments.

use super::{LegateMcp, error_result, not_available};
use crate::codec::{self, parse};
use crate::review;
use crate::task_calls::{self, OP_TOOLS};
use legate_core::{Error, ErrorCode, Timestamp};
use legate_engine::CallTask;
use rmcp::model::{CallToolResponse, CreateTaskResult};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::Value;

/// What a `tasks/*` request does with a call.
#[derive(Debug, Clone, Copy)]
pub(super) enum Reach {
    /// `tasks/get`.
    Read,
    /// `tasks/cancel`.
    Cancel,
    /// `tasks/update`.
    Answer,
}

/// The protocol error of a `tasks/*` request, its stable code in the data: invalid params
/// for the caller's mistakes, an internal error for the store's.
pub(super) fn task_error(e: &Error) -> ErrorData {
    match e.code {
        ErrorCode::Internal | ErrorCode::StoreError => ErrorData::internal_error(
            e.detail(),
            Some(serde_json::json!({ "code": e.code.as_str() })),
        ),
        _ => codec::not_offered(e),
    }
}

impl LegateMcp {
    /// Answers `name` as a task: an op for `test` and `integrate`, else the tool's direct
    /// answer recorded under the id the caller follows. Arguments that do not fit, and a call
    /// that fails at once, get today's tool error instead of a task.
    pub(super) async fn call_as_task(
        &self,
        name: &str,
        args: Value,
        context: &RequestContext<RoleServer>,
    ) -> std::result::Result<CallToolResponse, ErrorData> {
        let started = if OP_TOOLS.contains(&name) {
            self.start_op(name, args)
        } else {
            match self.dispatch(name, args, context).await {
                Ok(answer) => self.record(name, &answer),
                Err(e) => Err(e),
            }
        };
        match started {
            Ok(id) => {
                tracing::info!(tool = %name, task = %id, "tool call answered as a task");
                Ok(CreateTaskResult::new(task_calls::handle(&id, Timestamp::now())).into())
            }
            Err(e) => {
                tracing::info!(tool = %name, code = %e.code, "tool call failed");
                Ok(error_result(&e).into())
            }
        }
    }

    fn record(&self, name: &str, answer: &Value) -> legate_core::Result<String> {
        let id = task_calls::followed_id(name, answer).ok_or_else(|| {
            Error::new(
                ErrorCode::Internal,
                format!("{name}'s answer names no id to follow"),
            )
        })?;
        self.engine.call_tasks().record(&id, name, answer)?;
        Ok(id)
    }

    fn start_op(&self, name: &str, args: Value) -> legate_core::Result<String> {
        let engine = self.engine.clone();
        let done = |out: legate_core::Result<Value>| match out {
            Ok(v) => (v, false),
            Err(e) => (task_calls::error_answer(&e), true),
        };
        match name {
            "test" => {
                let a = parse(args)?;
                self.engine.call_tasks().start(name, move |_| async move {
                    done(review::test(&engine, a).await.and_then(codec::to_value))
                })
            }
            "integrate" => {
                let a = parse(args)?;
                self.engine
                    .call_tasks()
                    .start(name, move |confirmer| async move {
                        let out = review::integrate(&engine, a, &confirmer).await;
                        if let Ok(o) = &out {
                            tracing::info!(task = %o.task_id, "mcp integrate as a task");
                        }
                        done(out.and_then(codec::to_value))
                    })
            }
            other => Err(not_available(other, self.options.profile)),
        }
    }

    /// The call `id` when this server's profile offers both the tool that made it and the
    /// tool that does `reach` to its work; `TASK_NOT_FOUND` (an invalid-params error)
    /// otherwise, as for an id nobody made.
    pub(super) fn reachable(
        &self,
        id: &str,
        reach: Reach,
    ) -> std::result::Result<CallTask, ErrorData> {
        let call = self
            .engine
            .call_tasks()
            .get(id)
            .map_err(|e| task_error(&e))?;
        let tool = call.record.tool.as_str();
        let through = match (tool, reach) {
            ("test" | "integrate", _) => tool,
            ("group_start", Reach::Read) => "group_status",
            ("group_start", Reach::Cancel) => "group_cancel",
            ("compare", Reach::Read) => "comparison",
            ("compare", Reach::Cancel) => "cancel",
            (_, Reach::Read) => "result",
            (_, Reach::Cancel) => "cancel",
            (_, Reach::Answer) => "send_message",
        };
        if self.get_tool(tool).is_none() || self.get_tool(through).is_none() {
            let e = Error::new(
                ErrorCode::TaskNotFound,
                format!("no call answered as a task has the id {id:?}"),
            );
            tracing::info!(task = %id, tool, "a task request out of this profile's reach");
            return Err(task_error(&e));
        }
        Ok(call)
    }
}
