//! The client side of ACP: what Legate does when the agent notifies or asks.
//!
//! None of them waits for the agent. Session updates run in the transport's reader, before
//! the next line is read (`transport::lines`), and become events synchronously (which is
//! what puts every event of a turn on the sink before the prompt's response is routed); the
//! rest run inside the SDK's dispatch loop: permission requests are decided by the
//! (synchronous) supervisor, after the task's tool controls (`legate_supervisor::tools`,
//! which also bound `fs/*`: no read without `read`, no write without `edit`), and `fs/*`
//! touch only the local disk. An `ask` ruling is the one
//! exception: it is handed to the supervision channel and awaited in a task of its own
//! ([`wait`]), so the loop keeps dispatching while a supervisor decides. No lock is held
//! across that wait.

use super::fs;
use super::state::HandlerState;
use super::translate;
use crate::approvals::{ApprovalChannel, Ask, Sent};
use agent_client_protocol::v1::schema as acp;
use legate_core::{Decision, EventKind, Ruling, TaskId, ToolKind};
use tracing::{debug, error, info};

/// A `session/update`: one event, sent now.
pub(crate) fn session_update(shared: &HandlerState, notification: &acp::SessionNotification) {
    if shared.is_replaying() {
        debug!(session_id = %notification.session_id, "history replayed by session/load skipped");
        return;
    }
    let update = &notification.update;
    let tool_id = match update {
        acp::SessionUpdate::ToolCall(c) => Some((c.tool_call_id.0.to_string(), true)),
        acp::SessionUpdate::ToolCallUpdate(u) => Some((
            u.tool_call_id.0.to_string(),
            u.fields.title.is_some()
                || u.fields.locations.is_some()
                || u.fields.raw_input.is_some(),
        )),
        _ => None,
    };
    // Outside a turn nothing is stored, and nothing is remembered either: an idle agent's
    // flood of tool calls must not grow Legate's memory.
    if let Some((id, heavy)) = tool_id
        && shared.routed()
    {
        shared.remember_tool(&id, heavy, |known| translate::learn_tool(known, update));
    }
    match translate::update_event(update) {
        Some(event) => {
            shared.emit(event);
        }
        None => debug!(session_id = %notification.session_id, "session update not recorded"),
    }
    let ended = match update {
        acp::SessionUpdate::ToolCall(c) => Some((c.tool_call_id.0.to_string(), c.status)),
        acp::SessionUpdate::ToolCallUpdate(u) => u
            .fields
            .status
            .map(|status| (u.tool_call_id.0.to_string(), status)),
        _ => None,
    };
    if let Some((id, status)) = ended {
        shared.note_if_unasked(&id, translate::tool_status(status));
    }
}

/// A `session/update` that is a plan, read straight into its entries: what
/// [`session_update`] does with a plan (one event; nothing about tools).
pub(crate) fn session_plan(shared: &HandlerState, entries: Vec<legate_core::PlanEntry>) {
    if shared.is_replaying() {
        debug!("history replayed by session/load skipped");
        return;
    }
    shared.emit(legate_core::EventKind::Plan { entries });
}

/// How a `session/request_permission` is answered: now, or after a supervisor's answer.
pub(crate) enum Permission {
    /// Decided at once (the table, a policy rule, or a refused `ask`).
    Now(acp::RequestPermissionResponse),
    /// Sent to the supervision channel: [`wait`] answers it, off the dispatch loop.
    Ask(Box<PendingAsk>),
}

/// An `ask` to hand to the supervision channel.
pub(crate) struct PendingAsk {
    channel: std::sync::Arc<dyn ApprovalChannel>,
    ask: Ask,
    _place: super::state::AskPlace,
}

/// A `session/request_permission`: the supervisor decides; an `ask` goes to the supervision
/// channel when the session has one (else it is refused). The answer is an offered option id
/// or `cancelled`, never anything else.
pub(crate) fn permission(shared: &HandlerState, req: &acp::RequestPermissionRequest) -> Permission {
    shared.asked_about(&req.tool_call.tool_call_id.0);
    let request =
        translate::permission_request(req, shared.known_tool(&req.tool_call.tool_call_id.0));
    let supervision = shared.supervision();
    // The task's tool controls come first: a kind or MCP tool outside them is refused before
    // any rule, policy or supervisor is asked (and never reaches the approval queue).
    let mut verdict = match supervision.tools.refusal(&request, &supervision.preset) {
        Some(refused) => refused,
        None => shared.supervisor().decide(&supervision, &request),
    };
    let turn = shared.turn();
    if verdict.decision == Decision::Ask {
        let place = shared.take_ask_place();
        if let (Some(channel), Some((task_id, sink, abort)), Some(place)) =
            (shared.channel(), turn.clone(), place)
        {
            return Permission::Ask(Box::new(PendingAsk {
                _place: place,
                channel,
                ask: Ask {
                    task_id,
                    supervision,
                    request,
                    ruling: verdict,
                    sink,
                    abort,
                },
            }));
        }
        // No supervision channel is connected to this session (or no task's turn runs, or
        // too many of its requests wait already): an `ask` is refused, never allowed by default.
        let why = if shared.channel().is_some() && turn.is_some() {
            "too many of this agent's requests already wait for one"
        } else {
            "no supervision channel is connected"
        };
        verdict = refused_ask(&request, &supervision, verdict, why);
    }
    let sent = Sent {
        task_id: &TaskId(String::new()),
        supervision: &supervision,
        request: &request,
        ruling: &verdict,
        approval_id: None,
        channel: None,
    };
    let task = turn.map(|(task_id, _, _)| task_id);
    let channel = shared.channel();
    Permission::Now(finish(
        sent,
        task.as_ref().zip(channel.as_deref()),
        |event| {
            shared.emit(event);
        },
    ))
}

/// Waits for the supervision channel's answer to `pending`, then answers as [`permission`]
/// does (the events go to the sink of the turn that asked).
pub(crate) async fn wait(
    _shared: &HandlerState,
    pending: PendingAsk,
) -> acp::RequestPermissionResponse {
    // The place stays taken until the answer is sent.
    let PendingAsk {
        channel,
        ask,
        _place,
    } = pending;
    let task_id = ask.task_id.clone();
    let supervision = ask.supervision.clone();
    let request = ask.request.clone();
    let sink = ask.sink.clone();
    let answered = channel.ask(ask).await;
    let mut verdict = answered.ruling;
    if verdict.decision == Decision::Ask {
        verdict = refused_ask(
            &request,
            &supervision,
            verdict,
            "the supervision channel gave no answer",
        );
    }
    let sent = Sent {
        task_id: &task_id,
        supervision: &supervision,
        request: &request,
        ruling: &verdict,
        approval_id: answered.approval_id.as_deref(),
        channel: answered.channel.as_deref(),
    };
    finish(sent, Some((&task_id, channel.as_ref())), |event| {
        sink.send(event)
    })
}

/// An `ask` nobody can answer, as a refusal with the seed's refusal preference.
fn refused_ask(
    request: &legate_core::PermissionRequest,
    supervision: &legate_supervisor::Supervision,
    verdict: Ruling,
    why: &str,
) -> Ruling {
    Ruling {
        decision: Decision::Deny,
        option_id: legate_supervisor::pick_reject(&request.options, &supervision.preset)
            .map(|o| o.id.clone()),
        reason: format!(
            "refused: a supervisor must decide ({}), and {why}",
            verdict.reason
        ),
        ..verdict
    }
}

/// Keeps `sent.ruling` honest (an offered option or `cancelled`; a refusal never an allowing
/// option), records it through the channel when a task is known, emits the permission event
/// and builds the reply.
fn finish(
    sent: Sent<'_>,
    audit: Option<(&TaskId, &dyn ApprovalChannel)>,
    emit: impl FnOnce(EventKind),
) -> acp::RequestPermissionResponse {
    let request = sent.request;
    let mut verdict = sent.ruling.clone();
    let chosen = verdict
        .option_id
        .as_deref()
        .map(|id| request.options.iter().find(|o| o.id == id));
    match chosen {
        Some(None) => {
            error!(
                tool_call_id = %request.tool_call_id,
                option_id = ?verdict.option_id,
                "the supervisor chose an option the agent did not offer; answering cancelled"
            );
            verdict = Ruling {
                decision: Decision::Deny,
                option_id: None,
                reason: format!(
                    "refused: the supervisor chose an option that was not offered ({})",
                    verdict.reason
                ),
                ..verdict
            };
        }
        Some(Some(option)) if verdict.decision == Decision::Deny && option.kind.is_allow() => {
            error!(
                tool_call_id = %request.tool_call_id,
                option_id = %option.id,
                "the supervisor denied with an allowing option; answering cancelled"
            );
            verdict.option_id = None;
        }
        _ => {}
    }
    info!(
        tool_call_id = %request.tool_call_id,
        tool_kind = request.tool_kind.as_str(),
        decision = ?verdict.decision,
        decider = verdict.decider.as_str(),
        rule_id = ?verdict.rule_id,
        option_id = ?verdict.option_id,
        reason = %verdict.reason,
        "permission decided"
    );
    if let Some((task_id, channel)) = audit {
        // Durable before the agent is told.
        channel.record(Sent {
            task_id,
            ruling: &verdict,
            ..sent
        });
    }
    let outcome = match &verdict.option_id {
        Some(id) => {
            acp::RequestPermissionOutcome::Selected(acp::SelectedPermissionOutcome::new(id.clone()))
        }
        None => acp::RequestPermissionOutcome::Cancelled,
    };
    emit(EventKind::Permission {
        tool_call_id: request.tool_call_id.clone(),
        title: request.title.clone(),
        tool_kind: request.tool_kind,
        offered: request.options.iter().map(|o| o.id.clone()).collect(),
        verdict,
    });
    acp::RequestPermissionResponse::new(outcome)
}

/// An `fs/read_text_file`.
pub(crate) async fn read_text_file(
    shared: &HandlerState,
    req: &acp::ReadTextFileRequest,
) -> Result<acp::ReadTextFileResponse, agent_client_protocol::Error> {
    let result = match shared.beneath() {
        _ if !shared.serves_files() => Err(fs::no_file_service(&req.path)),
        _ if !shared.supervision().tools.allows_kind(ToolKind::Read) => {
            Err(fs::not_allowed("read", &req.path, ToolKind::Read))
        }
        Ok(root) => {
            // Room for the answer first: an agent that never reads its stdin waits here.
            let room = shared.unwritten().reserve().await;
            let read = fs::read(root, &shared.covered(), req).await;
            if let Ok(answer) = &read {
                room.keep(super::unwritten::escaped_len(&answer.content));
            }
            read
        }
        Err(e) => Err(fs::unusable_root(&req.path, &e)),
    };
    report_fs(shared, "read", &req.path, result.as_ref().err());
    result.map_err(|r| *r.error)
}

/// An `fs/write_text_file`.
pub(crate) async fn write_text_file(
    shared: &HandlerState,
    req: &acp::WriteTextFileRequest,
) -> Result<acp::WriteTextFileResponse, agent_client_protocol::Error> {
    let supervision = shared.supervision();
    let mode = supervision.mode;
    let result = match shared.beneath() {
        _ if !shared.serves_files() => Err(fs::no_file_service(&req.path)),
        // An agent that skips the permission request and writes through the client is held
        // to the same allowed kinds.
        _ if !supervision.tools.allows_kind(ToolKind::Edit) => {
            Err(fs::not_allowed("write", &req.path, ToolKind::Edit))
        }
        Ok(root) => {
            fs::write(root, &shared.covered(), mode, req, &|job| {
                shared.spawn_in_turn(job)
            })
            .await
        }
        Err(e) => Err(fs::unusable_root(&req.path, &e)),
    };
    report_fs(shared, "write", &req.path, result.as_ref().err());
    result.map_err(|r| *r.error)
}

fn report_fs(
    shared: &HandlerState,
    op: &str,
    path: &std::path::Path,
    refused: Option<&fs::Refused>,
) {
    match refused {
        None => debug!(op, path = %path.display(), "fs access served"),
        Some(r) => info!(op, path = %path.display(), reason = %r.reason, "fs access refused"),
    }
    shared.emit(EventKind::FsAccess {
        op: op.to_string(),
        path: path.to_path_buf(),
        allowed: refused.is_none(),
        reason: refused.map(|r| r.reason.clone()),
    });
}

#[cfg(test)]
#[path = "handlers_tests.rs"]
mod tests;
