//! The `supervisor` profile: an MCP server with exactly three tools, `approvals` (what waits,
//! newest first, with deadlines), `decide` (answer one) and `audit` (every decision taken),
//! over the durable approval queue.
//!
//! It is a handler of its own, not a filter over [`crate::LegateMcp`]'s catalog: it holds no
//! `Engine` method that starts, continues or cancels a task, so no token that reaches it can
//! delegate anything. It is served at `/supervisor/mcp` behind the supervisor token
//! ([`crate::http`]), or on stdio once the binary checked that token. It never decides: an
//! answer is the engine's to turn into an option id, and the engine's to record.

use crate::codec::{self, parse, to_value};
use crate::schema::{self, ErrorBody};
use legate_core::{Error, ErrorCode, Result, TaskId, Timestamp};
use legate_engine::{
    Answer, Approval, ApprovalAnswer, ApprovalDesk, ApprovalFilter, AuditEntry, AuditFilter,
    parse_since, seconds_left,
};
use rmcp::model::{CallToolRequestParams, CallToolResponse, CallToolResult, Tool, ToolAnnotations};
use rmcp::schemars::JsonSchema;
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::sync::Arc;

/// The shortest approval id prefix accepted for an approval id.
pub use legate_engine::MIN_APPROVAL_PREFIX as MIN_PREFIX;
/// The most entries one listing returns.
pub const MAX_LIST: usize = 500;
/// The default listing length.
pub const LIST_DEFAULT: usize = 50;
/// The channel name an MCP answer is recorded with.
pub const CHANNEL: &str = "mcp";

const INSTRUCTIONS: &str = "Legate's supervisor endpoint: agents delegated by Legate wait here for a permission decision. \
List what waits with `approvals` (newest first, each with its deadline and secondsLeft), answer one with `decide` \
(answer allow, allow-for-task or deny, with a reason), and read every decision taken, by whom, with `audit`. \
An approval not answered by its deadline is refused. This endpoint cannot delegate tasks.";

/// `approvals`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApprovalsArgs {
    /// Only approvals of this task.
    pub task_id: Option<String>,
    /// Also those already decided or expired (default false: pending only).
    pub all: Option<bool>,
    /// At most this many, 1 to 500 (default 50).
    pub limit: Option<usize>,
}

/// One approval as listed: the approval and the seconds left before its deadline.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct ListedApproval {
    /// The approval.
    #[serde(flatten)]
    pub approval: Approval,
    /// Whole seconds before the deadline refuses it; absent once it is decided.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seconds_left: Option<u64>,
}

/// `approvals`' answer.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct ApprovalsOut {
    /// Newest first.
    pub approvals: Vec<ListedApproval>,
}

/// `decide`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DecideArgs {
    /// The approval id (or an unambiguous prefix of at least 8 characters).
    pub id: String,
    /// `allow`, `allow-for-task` (this and later requests of the same scope in this task) or
    /// `deny`.
    pub answer: Answer,
    /// Why; recorded in the audit and, for a denial, sent back with the refusal.
    pub reason: Option<String>,
}

/// `decide`'s answer.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct DecideOut {
    /// The approval as it stands after the answer.
    pub approval: Approval,
}

/// `audit`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AuditArgs {
    /// Only decisions of this task.
    pub task_id: Option<String>,
    /// Only decisions since then: a duration back from now (`90s`, `2h`, `1day`) or an RFC
    /// 3339 time.
    pub since: Option<String>,
    /// At most this many, 1 to 500 (default 50).
    pub limit: Option<usize>,
}

/// `audit`'s answer.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct AuditOut {
    /// Newest first; `decider` is table, policy, human, agent or deadline.
    pub entries: Vec<AuditEntry>,
}

fn limit(given: Option<usize>) -> Result<usize> {
    crate::tools::in_range("limit", given.unwrap_or(LIST_DEFAULT), 1, MAX_LIST)
}

/// `approvals` over `queue`.
pub fn approvals(queue: &ApprovalDesk, args: ApprovalsArgs) -> Result<ApprovalsOut> {
    // Taken apart whole and the filter built whole, so a field added to either does not
    // compile until it is mapped here.
    let ApprovalsArgs {
        task_id,
        all,
        limit: count,
    } = args;
    let filter = ApprovalFilter {
        task_id: task_id.map(TaskId),
        pending_only: !all.unwrap_or(false),
        limit: limit(count)?,
    };
    let now = Timestamp::now();
    let approvals = queue
        .approvals(&filter)?
        .into_iter()
        .map(|approval| ListedApproval {
            seconds_left: seconds_left(&approval, now),
            approval,
        })
        .collect();
    Ok(ApprovalsOut { approvals })
}

/// `decide` over `queue`, recorded as answered through `channel`.
pub fn decide(queue: &ApprovalDesk, args: DecideArgs, channel: &str) -> Result<DecideOut> {
    let reason = args
        .reason
        .map(|r| r.trim().to_string())
        .filter(|r| !r.is_empty());
    if reason.as_ref().is_some_and(|r| r.chars().count() > 2000) {
        return Err(Error::invalid_input("a reason is at most 2000 characters"));
    }
    let approval = queue.answer(
        &args.id,
        ApprovalAnswer {
            answer: args.answer,
            reason,
            channel: channel.to_string(),
        },
    )?;
    Ok(DecideOut { approval })
}

/// `audit` over `queue`.
pub fn audit(queue: &ApprovalDesk, args: AuditArgs) -> Result<AuditOut> {
    // Taken apart whole and the filter built whole, so a field added to either does not
    // compile until it is mapped here.
    let AuditArgs {
        task_id,
        since,
        limit: count,
    } = args;
    let since = since
        .as_deref()
        .map(|s| parse_since(s, Timestamp::now()))
        .transpose()?;
    let entries = queue.audit(&AuditFilter {
        task_id: task_id.map(TaskId),
        since,
        limit: limit(count)?,
    })?;
    Ok(AuditOut { entries })
}

fn tool<A: JsonSchema + 'static, O: JsonSchema + 'static>(
    name: &'static str,
    title: &str,
    description: &'static str,
    read_only: bool,
) -> Tool {
    let annotations = ToolAnnotations::with_title(title)
        .read_only(read_only)
        .destructive(false)
        .open_world(false);
    Tool::new(name, description, schema::input_schema::<A>())
        .with_title(title)
        .with_raw_output_schema(schema::output_schema::<O>())
        .with_annotations(annotations)
}

/// The supervisor profile's tools, in the order they are listed.
pub fn catalog() -> Vec<Tool> {
    vec![
        tool::<ApprovalsArgs, ApprovalsOut>(
            "approvals",
            "Pending approvals",
            "Permission requests delegated agents are waiting on, newest first: the task, agent, role, tool call (kind, title, paths, command words), the options offered, the policy rule and reason, the deadline and secondsLeft. all: true lists decided and expired ones too.",
            true,
        ),
        tool::<DecideArgs, DecideOut>(
            "decide",
            "Answer an approval",
            "Answers one pending approval: allow, allow-for-task (this request and later ones of the same scope in the task) or deny, with a reason. The agent's waiting request is answered with an option it offered. An approval already decided or expired is APPROVAL_CLOSED; an unknown id APPROVAL_NOT_FOUND.",
            false,
        ),
        tool::<AuditArgs, AuditOut>(
            "audit",
            "Decisions taken",
            "Every permission decision, newest first: the request, who decided (decider table, policy with its rule id, human with the channel, agent, or deadline), the option id sent and when. Filter by taskId and since.",
            true,
        ),
    ]
}

/// The `supervisor` profile's MCP server. Cheap to clone.
#[derive(Debug, Clone)]
pub struct ApprovalsMcp {
    queue: ApprovalDesk,
    tools: Arc<Vec<Tool>>,
}

impl ApprovalsMcp {
    /// A server over `queue`.
    pub fn new(queue: ApprovalDesk) -> Self {
        Self {
            queue,
            tools: Arc::new(catalog()),
        }
    }

    /// The tools it lists.
    pub fn tools(&self) -> Vec<Tool> {
        self.tools.as_ref().clone()
    }

    fn dispatch(&self, name: &str, args: Value) -> Result<Value> {
        match name {
            "approvals" => to_value(approvals(&self.queue, parse(args)?)?),
            "decide" => {
                let out = decide(&self.queue, parse(args)?, CHANNEL)?;
                tracing::info!(approval_id = %out.approval.id, state = out.approval.state.as_str(), "mcp decide");
                to_value(out)
            }
            "audit" => to_value(audit(&self.queue, parse(args)?)?),
            other => Err(not_available(other)),
        }
    }
}

fn not_available(name: &str) -> Error {
    Error::new(
        ErrorCode::ToolNotAvailable,
        format!("no tool named {name:?} in Legate's supervisor profile"),
    )
}

impl ServerHandler for ApprovalsMcp {
    codec::introduced_as!("legate-supervisor", "Legate supervisor", INSTRUCTIONS);

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tools.iter().find(|t| t.name == name).cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> std::result::Result<CallToolResponse, ErrorData> {
        let name = request.name.to_string();
        if self.get_tool(&name).is_none() {
            let e = not_available(&name);
            tracing::info!(tool = %name, code = %e.code, "call to a tool not offered");
            return Err(codec::not_offered(&e));
        }
        let args = Value::Object(request.arguments.unwrap_or_default());
        Ok(match self.dispatch(&name, args) {
            Ok(value) => CallToolResult::structured(value).into(),
            Err(e) => {
                tracing::info!(tool = %name, code = %e.code, "tool call failed");
                CallToolResult::structured_error(json!({ "error": ErrorBody::from(&e) })).into()
            }
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn the_profile_has_three_tools_and_none_delegates() {
        let names: Vec<String> = catalog().iter().map(|t| t.name.to_string()).collect();
        assert_eq!(names, ["approvals", "decide", "audit"]);
        for t in catalog() {
            assert_eq!(t.input_schema["type"], "object", "{}", t.name);
            let out = t.output_schema.as_ref().unwrap();
            assert_eq!(
                out["properties"]["error"]["required"],
                json!(["code", "message"])
            );
            for f in schema::formats(&Value::Object(out.as_ref().clone())) {
                assert!(
                    schema::STANDARD_FORMATS.contains(&f.as_str()),
                    "{} {f}",
                    t.name
                );
            }
        }
        let decide = catalog().into_iter().find(|t| t.name == "decide").unwrap();
        let answer = decide.input_schema["properties"]["answer"].to_string();
        for word in ["allow", "allow-for-task", "deny"] {
            assert!(
                answer.contains(&format!("\"{word}\""))
                    || decide
                        .input_schema
                        .get("$defs")
                        .is_some_and(|d| d.to_string().contains(&format!("\"{word}\""))),
                "{answer}"
            );
        }
    }
}
