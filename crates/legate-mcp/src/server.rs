//! The MCP server handler: the tool catalog (filtered by profile), and `tools/call` dispatch
//! with every failure turned into `isError` with `{error: {code, message}}`.
//!
//! Transports live elsewhere (`stdio`, `http`); this module never touches a socket or a pipe,
//! and it logs tool names, task ids and error codes, never arguments.

use crate::catalog::{ToolDef, catalog, with_role_names};
use crate::codec::{self, parse, to_value};
use crate::confirmation::ElicitationConfirmer;
use crate::groups;
use crate::profile::Profile;
use crate::review;
use crate::schema::*;
use crate::task_calls;
use crate::tools;
use crate::wait::{self, Progress};
use legate_core::{Error, ErrorCode, Result, TaskId};
use legate_engine::Engine;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, GetTaskParams,
    GetTaskResult, Tool, UpdateTaskParams,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tasks::{Reach, task_error};
use tracing::Instrument;

mod tasks;

/// The longest silence between two progress notifications of one `wait`: the issue asks for
/// at least every 15 s; 10 s leaves room for a slow link.
pub const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(10);

const INSTRUCTIONS: &str = "Legate delegates coding tasks to other agents inside limits neither side can widen. \
Start work with `run` (it returns a taskId at once), follow it with `wait` (up to 60 s per call; \
pass the returned nextCursor as `after` and call again until ready is true), then collect it with \
`result` (includeResult: false for a small answer) and `read_result` for the answer in pieces. \
Waiting or disconnecting never cancels a task; only `cancel` does. Continue a conversation with \
`resume` or `send_message`, using the contextId that `run` returned. To change a git project only \
after review, `run` with workspace {kind: \"copy\", path, criteria}, then `preview` (its sha256 binds \
every later step), `read_patch`, `verify`, `test`, and `integrate`, as the profile offers them.";

/// How the server behaves.
#[derive(Debug, Clone)]
pub struct McpOptions {
    /// Which tools exist, and whether tasks may write.
    pub profile: Profile,
    /// The longest silence between two progress notifications of one `wait`.
    pub heartbeat: Duration,
    /// Whether the server declares the MCP Tasks extension and answers a long call as a
    /// task to a client that declared it too (`--no-tasks` turns it off).
    pub tasks: bool,
}

impl Default for McpOptions {
    fn default() -> Self {
        Self {
            profile: Profile::Full,
            heartbeat: DEFAULT_HEARTBEAT,
            tasks: true,
        }
    }
}

/// Legate's MCP server. Cheap to clone; clones share the engine and the list of tasks they
/// started.
#[derive(Debug, Clone)]
pub struct LegateMcp {
    engine: Engine,
    options: Arc<McpOptions>,
    tools: Arc<Vec<ToolDef>>,
    started: Arc<Mutex<HashSet<TaskId>>>,
}

impl LegateMcp {
    /// A server over `engine`.
    pub fn new(engine: Engine, options: McpOptions) -> Self {
        let profile = options.profile;
        let names = engine.roles().names();
        let tools = catalog()
            .into_iter()
            .filter(|t| profile.offers(t.group))
            .map(|t| with_role_names(t, &names))
            .collect();
        Self {
            engine,
            options: Arc::new(options),
            tools: Arc::new(tools),
            started: Arc::default(),
        }
    }

    /// The tools this server lists and answers.
    pub fn tools(&self) -> Vec<Tool> {
        self.tools.iter().map(|t| t.tool.clone()).collect()
    }

    /// The tasks this server started that have not ended yet.
    pub fn unfinished(&self) -> Vec<TaskId> {
        let ids: Vec<TaskId> = lock(&self.started).iter().cloned().collect();
        ids.into_iter()
            .filter(|id| {
                self.engine
                    .task(id.as_str())
                    .map(|t| !t.is_terminal())
                    .unwrap_or(false)
            })
            .collect()
    }

    /// The engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    fn remember(&self, task_id: &str) {
        lock(&self.started).insert(TaskId(task_id.to_string()));
    }

    /// Runs one tool. Arguments that do not fit the tool's schema are `INVALID_INPUT`.
    async fn dispatch(
        &self,
        name: &str,
        args: Value,
        context: &RequestContext<RoleServer>,
    ) -> Result<Value> {
        let engine = &self.engine;
        let profile = self.options.profile;
        match name {
            "health" => to_value(tools::health(engine, profile, parse(args)?).await?),
            "agents" => to_value(tools::agents(engine, parse(args)?).await),
            "roles" => {
                let _: NoArgs = parse(args)?;
                to_value(tools::roles(engine))
            }
            "run" => {
                let out = tools::run(engine, profile, parse(args)?)?;
                self.remember(&out.task_id);
                tracing::info!(task = %out.task_id, agent = %out.agent, mode = %out.mode, "mcp run");
                to_value(out)
            }
            "wait" => {
                let progress = context.meta.get_progress_token().map(|token| Progress {
                    peer: context.peer.clone(),
                    token,
                    heartbeat: self.options.heartbeat,
                });
                to_value(wait::wait(engine, parse(args)?, progress, context.ct.clone()).await?)
            }
            "wait_many" => to_value(wait::wait_many(engine, parse(args)?).await?),
            "events" => to_value(tools::events(engine, parse(args)?)?),
            "status" => to_value(tools::status(engine, parse(args)?)?),
            "result" => to_value(tools::result(engine, parse(args)?)?),
            "read_result" => to_value(tools::read_result(engine, parse(args)?)?),
            "cancel" => to_value(tools::cancel(engine, parse(args)?)?),
            "tasks" => to_value(tools::tasks(engine, parse(args)?)?),
            "sessions" => to_value(tools::sessions(engine, parse(args)?)?),
            "resume" => {
                let out = tools::resume(engine, profile, parse(args)?)?;
                self.remember(&out.task_id);
                to_value(out)
            }
            "continue" => {
                let out = tools::continue_task(engine, profile, parse(args)?)?;
                self.remember(&out.started.task_id);
                tracing::info!(task = %out.started.task_id, cut = %out.continued_from, "mcp continue");
                to_value(out)
            }
            "send_message" => {
                let out = tools::send_message(engine, profile, parse(args)?)?;
                if !out.duplicate {
                    self.remember(&out.continuation_task_id);
                }
                to_value(out)
            }
            "usage" => to_value(review::usage(engine, parse(args)?)?),
            "list_project_files" => {
                to_value(review::list_project_files(engine, parse(args)?).await?)
            }
            "context" => {
                let a: TaskArgs = parse(args)?;
                to_value(engine.handoffs().context(&a.task_id).await?)
            }
            "handoff" => {
                let out = tools::handoff(engine, profile, parse(args)?).await?;
                self.remember(&out.task_id);
                tracing::info!(task = %out.task_id, agent = %out.agent, mode = %out.mode, "mcp handoff");
                to_value(out)
            }
            "compare" => {
                let out = crate::compare::compare(engine, parse(args)?).await?;
                for id in &out.task_ids {
                    self.remember(id.as_str());
                }
                tracing::info!(comparison = %out.comparison_id, started = out.task_ids.len(), failed = out.start_errors.len(), "mcp compare");
                to_value(out)
            }
            "comparison" => to_value(crate::compare::comparison(engine, parse(args)?).await?),
            "preview" => to_value(review::preview(engine, parse(args)?).await?),
            "read_patch" => to_value(review::read_patch(engine, parse(args)?).await?),
            "verify" => to_value(review::verify(engine, parse(args)?).await?),
            "test" => to_value(review::test(engine, parse(args)?).await?),
            "record_test" => to_value(review::record_test(engine, parse(args)?).await?),
            "integrate" => {
                let confirmer = ElicitationConfirmer::new(
                    context.peer.clone(),
                    engine.config().fronts.approval_timeout,
                );
                let out = review::integrate(engine, parse(args)?, &confirmer).await?;
                tracing::info!(task = %out.task_id, files = out.integration.result.files.len(), "mcp integrate");
                to_value(out)
            }
            "discard" => {
                let a: TaskArgs = parse(args)?;
                to_value(review::discard(engine, &a.task_id).await?)
            }
            "cleanup" => {
                let _: NoArgs = parse(args)?;
                to_value(review::cleanup(engine).await?)
            }
            "get_sandbox_policy" => {
                let _: NoArgs = parse(args)?;
                to_value(crate::sandbox::get_sandbox_policy(engine)?)
            }
            "set_sandbox_policy" => {
                let confirmer = crate::sandbox::CeilingElicitor::new(
                    context.peer.clone(),
                    engine.config().fronts.approval_timeout,
                );
                to_value(
                    crate::sandbox::set_sandbox_policy(engine, parse(args)?, &confirmer).await?,
                )
            }
            "memory_list" => to_value(crate::memory::list(engine, parse(args)?)?),
            "memory_read" => to_value(crate::memory::read(engine, parse(args)?)?),
            "memory_write" => to_value(crate::memory::write(engine, parse(args)?)?),
            "memory_remove" => to_value(crate::memory::remove(engine, parse(args)?)?),
            "group_create" => to_value(groups::create(engine, parse(args)?)?),
            "group_start" => to_value(groups::start(engine, parse(args)?).await?),
            "group_status" => to_value(groups::status(engine, parse(args)?)?),
            "group_wait" => {
                let progress = context.meta.get_progress_token().map(|token| Progress {
                    peer: context.peer.clone(),
                    token,
                    heartbeat: self.options.heartbeat,
                });
                to_value(groups::wait(engine, parse(args)?, progress, context.ct.clone()).await?)
            }
            "group_cancel" => to_value(groups::cancel(engine, parse(args)?)?),
            "groups" => to_value(groups::list(engine, parse(args)?)?),
            "workflow_result" => to_value(groups::workflow_result(engine, parse(args)?).await?),
            "peer_receipts" => to_value(groups::peer_receipts(engine, parse(args)?)?),
            "set_delivery_mode" => {
                let out = crate::delivery::set_delivery_mode(engine, parse(args)?)?;
                tracing::info!(task = %out.task_id, mode = out.delivery_mode.as_str(), "mcp set_delivery_mode");
                to_value(out)
            }
            "read_artifact" => {
                to_value(crate::delivery::read_artifact(engine, parse(args)?).await?)
            }
            // ctrl (issue 17, parts 4 and 6).
            "get_agent_policy" => to_value(crate::controls::controls_overview(engine)),
            "list_models" => to_value(crate::controls::list_models(engine, parse(args)?).await?),
            "get_model" => to_value(crate::controls::get_model(engine, parse(args)?)?),
            "set_model" => to_value(crate::controls::set_model(engine, parse(args)?)?),
            other => Err(not_available(other, profile)),
        }
    }

    /// A tool call, in its span (`call_tool`).
    async fn call_tool_traced(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> std::result::Result<CallToolResponse, ErrorData> {
        let name = request.name.to_string();
        let args = Value::Object(request.arguments.unwrap_or_default());
        let started = std::time::Instant::now();
        if self.get_tool(&name).is_none() {
            // A tool the client was never offered is a protocol error (MCP: `-32602`), not a
            // tool result; the stable code travels in the error's data.
            let e = not_available(&name, self.options.profile);
            tracing::info!(tool = %name, code = %e.code, "call to a tool not offered");
            return Err(codec::not_offered(&e));
        }
        let as_task = self.options.tasks
            && task_calls::TASK_TOOLS.contains(&name.as_str())
            && context
                .client_capabilities()
                .is_some_and(|c| c.supports_tasks());
        if as_task {
            return self.call_as_task(&name, args, &context).await;
        }
        let outcome = self.dispatch(&name, args, &context).await;
        let elapsed_ms = started.elapsed().as_millis() as u64;
        Ok(match outcome {
            Ok(value) => {
                tracing::debug!(tool = %name, elapsed_ms, "tool call answered");
                CallToolResult::structured(value).into()
            }
            Err(e) => {
                tracing::info!(tool = %name, code = %e.code, elapsed_ms, "tool call failed");
                error_result(&e).into()
            }
        })
    }
}

fn not_available(name: &str, profile: Profile) -> Error {
    Error::new(
        ErrorCode::ToolNotAvailable,
        format!(
            "no tool named {name:?} in Legate's {} profile",
            profile.as_str()
        ),
    )
}

/// The tool result for a failure: `isError` with `{error: {code, message}}`.
pub fn error_result(e: &Error) -> CallToolResult {
    CallToolResult::structured_error(json!({ "error": ErrorBody::from(e) }))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl ServerHandler for LegateMcp {
    codec::introduced_as!("legate", "Legate", INSTRUCTIONS, tasks: |s: &Self| s
        .options
        .tasks);

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tools
            .iter()
            .find(|t| t.tool.name == name)
            .map(|t| t.tool.clone())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> std::result::Result<CallToolResponse, ErrorData> {
        // The caller's W3C trace context (`_meta.traceparent`, MCP SEP-414): the call's span
        // continues the caller's trace, and so does a task it submits.
        let span = tracing::info_span!(
            "legate.mcp.tool_call",
            legate.mcp.tool = tracing::field::Empty,
            legate.caller.traced = tracing::field::Empty,
        );
        if let Some(caller) = context
            .meta
            .get_traceparent()
            .and_then(|p| legate_trace::TraceContext::new(p, context.meta.get_tracestate()))
        {
            caller.adopt(&span);
            span.record("legate.caller.traced", true);
        }
        if self.get_tool(&request.name).is_some() {
            span.record("legate.mcp.tool", request.name.as_ref());
        }
        self.call_tool_traced(request, context)
            .instrument(span)
            .await
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> std::result::Result<GetTaskResult, ErrorData> {
        let call = self.reachable(&request.task_id, Reach::Read)?;
        task_calls::detailed(&self.engine, &call)
            .await
            .map(GetTaskResult::new)
            .map_err(|e| task_error(&e))
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> std::result::Result<(), ErrorData> {
        let call = self.reachable(&request.task_id, Reach::Cancel)?;
        task_calls::cancel(&self.engine, &call)
            .await
            .map_err(|e| task_error(&e))?;
        tracing::info!(task = %request.task_id, "tasks/cancel");
        Ok(())
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> std::result::Result<(), ErrorData> {
        let call = self.reachable(&request.task_id, Reach::Answer)?;
        let read_only = self.options.profile.read_only();
        task_calls::update(&self.engine, &call, &request.input_responses, read_only)
            .await
            .map_err(|e| task_error(&e))?;
        tracing::info!(task = %request.task_id, "tasks/update");
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::profile::ToolGroup;
    use crate::schema;

    /// How many tools the catalog has, and how many the read-only profiles offer.
    const ALL_TOOLS: usize = 50;
    const QUERY_TOOLS: usize = 31;
    const REVIEW_TOOLS: usize = 36;

    #[test]
    fn every_tool_has_object_schemas_and_a_unique_name() {
        let tools = catalog();
        let names: HashSet<_> = tools.iter().map(|t| t.tool.name.to_string()).collect();
        assert_eq!(names.len(), tools.len());
        assert_eq!(tools.len(), ALL_TOOLS);
        for t in &tools {
            assert_eq!(t.tool.input_schema["type"], "object", "{}", t.tool.name);
            let out = t.tool.output_schema.as_ref().unwrap();
            assert_eq!(out["type"], "object", "{}", t.tool.name);
            // `error` at the top level is the failure envelope; no answer may use the name.
            assert_eq!(
                out["properties"]["error"]["required"],
                json!(["code", "message"]),
                "{}",
                t.tool.name
            );
            assert!(
                out["properties"]["error"]["description"]
                    .as_str()
                    .unwrap()
                    .starts_with("Present instead"),
                "{} has its own top-level `error` field",
                t.tool.name
            );
        }
    }

    /// JSON Schema 2020-12's format vocabulary only: schemars writes `uint64`, `int32`,
    /// `double`, … for numbers, and validators warn on (or reject) them.
    #[test]
    fn every_schema_uses_only_standard_formats() {
        let tools = catalog();
        let mut checked = 0;
        for t in &tools {
            let input = Value::Object(t.tool.input_schema.as_ref().clone());
            let output = Value::Object(t.tool.output_schema.as_ref().unwrap().as_ref().clone());
            for (which, schema) in [("input", &input), ("output", &output)] {
                for f in schema::formats(schema) {
                    assert!(
                        schema::STANDARD_FORMATS.contains(&f.as_str()),
                        "{} {which} schema has format {f:?}",
                        t.tool.name
                    );
                    checked += 1;
                }
            }
        }
        // The walk reaches nested definitions: read_patch's `offset` is an unsigned integer
        // whose `uint64` format must have been seen and removed, not missed.
        let read_patch = tools.iter().find(|t| t.tool.name == "read_patch").unwrap();
        let offset = &read_patch.tool.input_schema["properties"]["offset"];
        assert!(offset.get("format").is_none(), "{offset}");
        assert_eq!(checked, 0);
    }

    #[test]
    fn a_profile_lists_only_the_groups_it_offers() {
        let mut tools = catalog();
        tools[0].group = ToolGroup::Implementation;
        let visible = |p: Profile| {
            tools
                .iter()
                .filter(|t| p.offers(t.group))
                .map(|t| t.tool.name.to_string())
                .collect::<Vec<_>>()
        };
        assert!(visible(Profile::Full).contains(&"health".to_string()));
        assert!(!visible(Profile::Query).contains(&"health".to_string()));
        assert!(!visible(Profile::Review).contains(&"health".to_string()));
        assert_eq!(visible(Profile::Query).len(), QUERY_TOOLS);
        assert_eq!(visible(Profile::Review).len(), REVIEW_TOOLS);
        assert_eq!(visible(Profile::Implementation).len(), tools.len());
        // The supervisor's server is another handler: no caller tool, `run` least of all.
        assert!(visible(Profile::Supervisor).is_empty());
        for name in ["preview", "read_patch", "verify", "context", "handoff"] {
            assert!(visible(Profile::Review).contains(&name.to_string()));
            assert!(!visible(Profile::Query).contains(&name.to_string()));
        }
        for name in ["memory_list", "memory_read"] {
            assert!(visible(Profile::Query).contains(&name.to_string()));
            assert!(visible(Profile::Review).contains(&name.to_string()));
        }
        for name in ["memory_write", "memory_remove"] {
            assert!(!visible(Profile::Query).contains(&name.to_string()));
            assert!(!visible(Profile::Review).contains(&name.to_string()));
            assert!(visible(Profile::Full).contains(&name.to_string()));
        }
        for name in ["compare", "comparison"] {
            assert!(visible(Profile::Query).contains(&name.to_string()));
        }
        for name in ["test", "record_test", "integrate", "discard", "cleanup"] {
            assert!(!visible(Profile::Review).contains(&name.to_string()));
            assert!(visible(Profile::Implementation).contains(&name.to_string()));
        }
    }

    #[test]
    fn descriptions_do_not_deny_the_confinement_tests_have() {
        let tools = catalog();
        let test = tools.iter().find(|t| t.tool.name == "test").unwrap();
        let text = test.tool.description.as_deref().unwrap_or_default();
        assert!(text.contains("kernel-confined like an agent"), "{text}");
        for t in &tools {
            let text = t.tool.description.as_deref().unwrap_or_default();
            assert!(
                !text.contains("Not kernel-confined"),
                "{}: {text}",
                t.tool.name
            );
        }
    }

    #[test]
    fn errors_are_structured() {
        let r = error_result(&Error::new(
            ErrorCode::TaskNotFound,
            "no task has the id x.",
        ));
        assert_eq!(r.is_error, Some(true));
        assert_eq!(
            r.structured_content.unwrap(),
            json!({"error": {"code": "TASK_NOT_FOUND", "message": "no task has the id x."}})
        );
    }
}
