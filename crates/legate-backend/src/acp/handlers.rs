//! The client side of ACP: what Legate does when the agent notifies or asks.
//!
//! These run inside the SDK's dispatch loop, so none of them waits for the agent: session
//! updates become events synchronously (which is what puts every event of a turn on the sink
//! before the prompt's response is routed), permission requests are decided by the
//! (synchronous) supervisor, and `fs/*` touch only the local disk.

use super::fs;
use super::state::Shared;
use super::translate;
use agent_client_protocol::v1::schema as acp;
use legate_core::{Decision, EventKind, Verdict};
use tracing::{debug, error, info};

/// A `session/update`: one event, sent now.
pub(crate) fn session_update(shared: &Shared, notification: &acp::SessionNotification) {
    if shared.is_replaying() {
        debug!(session_id = %notification.session_id, "history replayed by session/load skipped");
        return;
    }
    let update = &notification.update;
    let tool_id = match update {
        acp::SessionUpdate::ToolCall(c) => Some(c.tool_call_id.0.to_string()),
        acp::SessionUpdate::ToolCallUpdate(u) => Some(u.tool_call_id.0.to_string()),
        _ => None,
    };
    if let Some(id) = tool_id {
        shared.remember_tool(&id, |known| translate::learn_tool(known, update));
    }
    match translate::update_event(update) {
        Some(event) => {
            shared.emit(event);
        }
        None => debug!(session_id = %notification.session_id, "session update not recorded"),
    }
}

/// A `session/request_permission`: the supervisor decides; the answer is an offered option
/// id or `cancelled`, never anything else.
pub(crate) fn permission(
    shared: &Shared,
    req: &acp::RequestPermissionRequest,
) -> acp::RequestPermissionResponse {
    let request =
        translate::permission_request(req, shared.known_tool(&req.tool_call.tool_call_id.0));
    let supervision = shared.supervision();
    let mut verdict = shared.supervisor().decide(&supervision, &request);
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
            verdict = Verdict {
                decision: Decision::Deny,
                option_id: None,
                reason: format!(
                    "refused: the supervisor chose an option that was not offered ({})",
                    verdict.reason
                ),
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
        option_id = ?verdict.option_id,
        reason = %verdict.reason,
        "permission decided"
    );
    let outcome = match &verdict.option_id {
        Some(id) => {
            acp::RequestPermissionOutcome::Selected(acp::SelectedPermissionOutcome::new(id.clone()))
        }
        None => acp::RequestPermissionOutcome::Cancelled,
    };
    shared.emit(EventKind::Permission {
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
    shared: &Shared,
    req: &acp::ReadTextFileRequest,
) -> Result<acp::ReadTextFileResponse, agent_client_protocol::Error> {
    let result = fs::read(shared.root(), req).await;
    report_fs(shared, "read", &req.path, result.as_ref().err());
    result.map_err(|r| *r.error)
}

/// An `fs/write_text_file`.
pub(crate) async fn write_text_file(
    shared: &Shared,
    req: &acp::WriteTextFileRequest,
) -> Result<acp::WriteTextFileResponse, agent_client_protocol::Error> {
    let mode = shared.supervision().mode;
    let result = fs::write(shared.root(), mode, req).await;
    report_fs(shared, "write", &req.path, result.as_ref().err());
    result.map_err(|r| *r.error)
}

fn report_fs(shared: &Shared, op: &str, path: &std::path::Path, refused: Option<&fs::Refused>) {
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
