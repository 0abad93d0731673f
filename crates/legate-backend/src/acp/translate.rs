//! ACP shapes into Legate's event model, and back for permission answers.
//!
//! Pure functions: one `session/update` becomes at most one [`EventKind`]; a
//! `session/request_permission` becomes a [`PermissionRequest`] for the supervisor.

use crate::StopReason;
use agent_client_protocol::v1::schema as acp;
use legate_core::{
    Attachment, EventKind, OptionKind, PermissionOption, PermissionRequest, PlanEntry,
    ToolCallEvent, ToolCallUpdateEvent, ToolKind, ToolStatus, Usage,
};
use std::path::PathBuf;

/// Text carried by a tool call update is bounded to this many bytes.
pub(crate) const MAX_TOOL_CONTENT: usize = 8 * 1024;
/// Embedded content (text or base64) of an attachment is kept up to this many bytes; larger
/// content is dropped and the attachment keeps only its name, type and URI.
pub(crate) const MAX_ATTACHMENT_CONTENT: usize = 1 << 20;

/// What earlier `tool_call` / `tool_call_update`s said about a tool call.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct KnownTool {
    pub(crate) title: Option<String>,
    pub(crate) kind: Option<ToolKind>,
    pub(crate) locations: Option<Vec<PathBuf>>,
    pub(crate) raw_input: Option<serde_json::Value>,
    /// A permission request named this tool call.
    pub(crate) asked: bool,
    /// Its `ranWithoutAsking` notice was sent (or left out over the turn's limit).
    pub(crate) unasked_noted: bool,
}

/// Cuts `s` to at most `max` bytes on a character boundary, marking the cut with `…`.
pub(crate) fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max.saturating_sub('…'.len_utf8());
    while end > 0 && !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// ACP's tool kind.
pub(crate) fn tool_kind(kind: acp::ToolKind) -> ToolKind {
    match kind {
        acp::ToolKind::Read => ToolKind::Read,
        acp::ToolKind::Edit => ToolKind::Edit,
        acp::ToolKind::Delete => ToolKind::Delete,
        acp::ToolKind::Move => ToolKind::Move,
        acp::ToolKind::Search => ToolKind::Search,
        acp::ToolKind::Execute => ToolKind::Execute,
        acp::ToolKind::Think => ToolKind::Think,
        acp::ToolKind::Fetch => ToolKind::Fetch,
        acp::ToolKind::SwitchMode => ToolKind::SwitchMode,
        _ => ToolKind::Other,
    }
}

/// ACP's tool call status.
pub(crate) fn tool_status(status: acp::ToolCallStatus) -> ToolStatus {
    match status {
        acp::ToolCallStatus::InProgress => ToolStatus::InProgress,
        acp::ToolCallStatus::Completed => ToolStatus::Completed,
        acp::ToolCallStatus::Failed => ToolStatus::Failed,
        _ => ToolStatus::Pending,
    }
}

fn option_kind(kind: acp::PermissionOptionKind) -> Option<OptionKind> {
    match kind {
        acp::PermissionOptionKind::AllowOnce => Some(OptionKind::AllowOnce),
        acp::PermissionOptionKind::AllowAlways => Some(OptionKind::AllowAlways),
        acp::PermissionOptionKind::RejectOnce => Some(OptionKind::RejectOnce),
        acp::PermissionOptionKind::RejectAlways => Some(OptionKind::RejectAlways),
        _ => None,
    }
}

/// The snake-case wire form of a serde enum (`end_turn`, `high`, …).
fn wire_name<T: serde::Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => "unknown".to_string(),
    }
}

/// A plan entry's priority as its ACP wire name (`high`, `medium`, `low`).
pub(crate) fn plan_priority(p: &acp::PlanEntryPriority) -> String {
    match p {
        acp::PlanEntryPriority::High => "high".to_owned(),
        acp::PlanEntryPriority::Medium => "medium".to_owned(),
        acp::PlanEntryPriority::Low => "low".to_owned(),
        other => wire_name(other),
    }
}

/// A plan entry's status as its ACP wire name (`pending`, `in_progress`, `completed`).
pub(crate) fn plan_status(s: &acp::PlanEntryStatus) -> String {
    match s {
        acp::PlanEntryStatus::Pending => "pending".to_owned(),
        acp::PlanEntryStatus::InProgress => "in_progress".to_owned(),
        acp::PlanEntryStatus::Completed => "completed".to_owned(),
        other => wire_name(other),
    }
}

/// ACP's stop reason as Legate's. `input_required` says whether the agent asked for more
/// input (`_meta.legate.inputRequired` on an `end_turn`, see [`super::ext`]), `direct`
/// whether it said its answer is a direct message (`_meta.legate.directMessage`); asking
/// wins.
pub(crate) fn stop_reason(
    reason: acp::StopReason,
    input_required: bool,
    direct: bool,
) -> StopReason {
    match reason {
        acp::StopReason::EndTurn if input_required => StopReason::InputRequired,
        acp::StopReason::EndTurn if direct => StopReason::DirectMessage,
        acp::StopReason::EndTurn => StopReason::EndTurn,
        acp::StopReason::MaxTokens => StopReason::MaxTokens,
        acp::StopReason::MaxTurnRequests => StopReason::MaxTurnRequests,
        acp::StopReason::Refusal => StopReason::Refusal,
        acp::StopReason::Cancelled => StopReason::Cancelled,
        other => StopReason::Other(wire_name(&other)),
    }
}

/// The turn's usage from a prompt response.
pub(crate) fn prompt_usage(usage: &acp::Usage) -> Usage {
    Usage {
        input_tokens: Some(usage.input_tokens),
        output_tokens: Some(usage.output_tokens),
        thinking_tokens: usage.thought_tokens,
        cache_read_tokens: usage.cached_read_tokens,
        total_tokens: Some(usage.total_tokens),
        context_used: None,
        context_size: None,
        model: None,
        source: Some(legate_core::UsageSource::Turn),
        observed_cumulative: None,
    }
}

fn block_text(block: &acp::ContentBlock) -> Option<String> {
    match block {
        acp::ContentBlock::Text(t) => Some(t.text.clone()),
        acp::ContentBlock::ResourceLink(link) => Some(format!("[{}]({})", link.name, link.uri)),
        acp::ContentBlock::Resource(res) => match &res.resource {
            acp::EmbeddedResourceResource::TextResourceContents(t) => Some(t.text.clone()),
            _ => None,
        },
        _ => None,
    }
}

/// The last segment of a URI's path, as a file name (`None` when there is none).
fn file_name(uri: &str) -> Option<String> {
    let path = uri.split(['?', '#']).next().unwrap_or(uri);
    let name = path.rsplit('/').next().unwrap_or(path);
    (!name.is_empty() && !name.contains(':')).then(|| name.to_string())
}

/// Keeps embedded content within [`MAX_ATTACHMENT_CONTENT`].
fn bounded(content: &str) -> Option<String> {
    (content.len() <= MAX_ATTACHMENT_CONTENT).then(|| content.to_string())
}

/// A block of an agent message that is not text (a resource, a link, an image, audio) as an
/// attachment; `None` for text.
fn block_attachment(block: &acp::ContentBlock) -> Option<Attachment> {
    match block {
        acp::ContentBlock::ResourceLink(link) => Some(Attachment {
            name: Some(link.name.clone()),
            media_type: link.mime_type.clone(),
            uri: Some(link.uri.clone()),
            ..Attachment::default()
        }),
        acp::ContentBlock::Resource(res) => Some(match &res.resource {
            acp::EmbeddedResourceResource::TextResourceContents(t) => Attachment {
                name: file_name(&t.uri),
                media_type: t.mime_type.clone(),
                uri: Some(t.uri.clone()),
                text: bounded(&t.text),
                base64: None,
            },
            acp::EmbeddedResourceResource::BlobResourceContents(b) => Attachment {
                name: file_name(&b.uri),
                media_type: b.mime_type.clone(),
                uri: Some(b.uri.clone()),
                text: None,
                base64: bounded(&b.blob),
            },
            _ => return None,
        }),
        acp::ContentBlock::Image(i) => Some(Attachment {
            name: i.uri.as_deref().and_then(file_name),
            media_type: Some(i.mime_type.clone()),
            uri: i.uri.clone(),
            text: None,
            base64: bounded(&i.data),
        }),
        acp::ContentBlock::Audio(a) => Some(Attachment {
            media_type: Some(a.mime_type.clone()),
            base64: bounded(&a.data),
            ..Attachment::default()
        }),
        _ => None,
    }
}

fn locations(locs: &[acp::ToolCallLocation]) -> Vec<PathBuf> {
    locs.iter().map(|l| l.path.clone()).collect()
}

/// The text a tool call's content carries (output, a diff summary), bounded to
/// [`MAX_TOOL_CONTENT`]; `None` when there is none.
pub(crate) fn tool_content_text(content: &[acp::ToolCallContent]) -> Option<String> {
    let parts: Vec<String> = content
        .iter()
        .filter_map(|c| match c {
            acp::ToolCallContent::Content(c) => block_text(&c.content),
            acp::ToolCallContent::Diff(d) => Some(format!(
                "{} {} (+{} lines)",
                if d.old_text.is_none() {
                    "create"
                } else {
                    "edit"
                },
                d.path.display(),
                d.new_text.lines().count()
            )),
            acp::ToolCallContent::Terminal(t) => Some(format!("terminal {}", t.terminal_id)),
            _ => None,
        })
        .collect();
    if parts.is_empty() {
        None
    } else {
        Some(truncate(&parts.join("\n"), MAX_TOOL_CONTENT))
    }
}

/// One `session/update` as an event; `None` for updates Legate does not record.
pub(crate) fn update_event(update: &acp::SessionUpdate) -> Option<EventKind> {
    match update {
        acp::SessionUpdate::AgentMessageChunk(chunk) => match &chunk.content {
            acp::ContentBlock::Text(t) => Some(EventKind::Message {
                text: t.text.clone(),
            }),
            other => block_attachment(other).map(EventKind::Attachment),
        },
        acp::SessionUpdate::AgentThoughtChunk(chunk) => {
            block_text(&chunk.content).map(|text| EventKind::Thought { text })
        }
        acp::SessionUpdate::ToolCall(call) => Some(EventKind::ToolCall(ToolCallEvent {
            id: call.tool_call_id.0.to_string(),
            title: call.title.clone(),
            tool_kind: tool_kind(call.kind),
            status: tool_status(call.status),
            locations: locations(&call.locations),
            raw_input: call.raw_input.clone(),
        })),
        acp::SessionUpdate::ToolCallUpdate(update) => {
            let f = &update.fields;
            Some(EventKind::ToolCallUpdate(ToolCallUpdateEvent {
                id: update.tool_call_id.0.to_string(),
                title: f.title.clone(),
                tool_kind: f.kind.map(tool_kind),
                status: f.status.map(tool_status),
                locations: f.locations.as_deref().map(locations),
                content: f.content.as_deref().and_then(tool_content_text),
            }))
        }
        acp::SessionUpdate::Plan(plan) => Some(EventKind::Plan {
            entries: plan
                .entries
                .iter()
                .map(|e| PlanEntry {
                    content: e.content.clone(),
                    priority: plan_priority(&e.priority),
                    status: plan_status(&e.status),
                })
                .collect(),
        }),
        acp::SessionUpdate::CurrentModeUpdate(m) => Some(EventKind::Mode {
            mode_id: m.current_mode_id.0.to_string(),
        }),
        acp::SessionUpdate::UsageUpdate(u) => Some(EventKind::Usage {
            usage: Usage {
                context_used: Some(u.used),
                context_size: Some(u.size),
                ..Usage::default()
            },
        }),
        _ => None,
    }
}

/// Folds what a tool call update says into what is known about the call.
pub(crate) fn learn_tool(known: &mut KnownTool, update: &acp::SessionUpdate) {
    match update {
        acp::SessionUpdate::ToolCall(call) => {
            known.title = Some(call.title.clone());
            known.kind = Some(tool_kind(call.kind));
            known.locations = Some(locations(&call.locations));
            known.raw_input = call.raw_input.clone();
        }
        acp::SessionUpdate::ToolCallUpdate(update) => learn_fields(known, &update.fields),
        _ => {}
    }
}

fn learn_fields(known: &mut KnownTool, f: &acp::ToolCallUpdateFields) {
    if let Some(t) = &f.title {
        known.title = Some(t.clone());
    }
    if let Some(k) = f.kind {
        known.kind = Some(tool_kind(k));
    }
    if let Some(l) = &f.locations {
        known.locations = Some(locations(l));
    }
    if let Some(r) = &f.raw_input {
        known.raw_input = Some(r.clone());
    }
}

/// The supervisor's view of a permission request. Fields the request leaves out are taken
/// from what earlier updates said about the same tool call. Options of a kind Legate does
/// not know are left out, so they can never be chosen.
pub(crate) fn permission_request(
    req: &acp::RequestPermissionRequest,
    earlier: Option<KnownTool>,
) -> PermissionRequest {
    let mut known = earlier.unwrap_or_default();
    learn_fields(&mut known, &req.tool_call.fields);
    let id = req.tool_call.tool_call_id.0.to_string();
    // `raw_input.network` is where Legate's own egress proxy names a connection it puts to a
    // supervisor (`crate::egress`): an agent's request may not carry one, or it could pass
    // for a connection Legate asked about (and be shown, and scoped, as one).
    let mut raw_input = known.raw_input;
    if let Some(serde_json::Value::Object(map)) = raw_input.as_mut()
        && map.remove("network").is_some()
    {
        tracing::warn!(tool_call_id = %id, "an agent's permission request named `network` in its raw input; dropped");
    }
    PermissionRequest {
        title: known.title.unwrap_or_else(|| id.clone()),
        tool_call_id: id,
        tool_kind: known.kind.unwrap_or(ToolKind::Other),
        locations: known.locations.unwrap_or_default(),
        raw_input,
        options: req
            .options
            .iter()
            .filter_map(|o| {
                option_kind(o.kind).map(|kind| PermissionOption {
                    id: o.option_id.0.to_string(),
                    name: o.name.clone(),
                    kind,
                })
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use serde_json::json;

    fn update(v: serde_json::Value) -> acp::SessionUpdate {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn message_and_thought_chunks() {
        let e = update_event(&update(json!({
            "sessionUpdate": "agent_message_chunk",
            "content": {"type": "text", "text": "hello"}
        })));
        assert_eq!(
            e,
            Some(EventKind::Message {
                text: "hello".into()
            })
        );
        let e = update_event(&update(json!({
            "sessionUpdate": "agent_thought_chunk",
            "content": {"type": "text", "text": "hmm"}
        })));
        assert_eq!(e, Some(EventKind::Thought { text: "hmm".into() }));
        let e = update_event(&update(json!({
            "sessionUpdate": "agent_thought_chunk",
            "content": {"type": "image", "data": "AA==", "mimeType": "image/png"}
        })));
        assert_eq!(e, None);
    }

    #[test]
    fn resources_links_and_images_in_messages_are_attachments() {
        let attachment = |content: serde_json::Value| match update_event(&update(json!({
            "sessionUpdate": "agent_message_chunk", "content": content
        }))) {
            Some(EventKind::Attachment(a)) => a,
            other => panic!("not an attachment: {other:?}"),
        };
        let a = attachment(json!({"type": "resource_link", "name": "output.txt",
            "uri": "https://example.com/output.txt", "mimeType": "text/plain"}));
        assert_eq!(a.name.as_deref(), Some("output.txt"));
        assert_eq!(a.uri.as_deref(), Some("https://example.com/output.txt"));
        assert_eq!(a.media_type.as_deref(), Some("text/plain"));
        assert!(a.is_link());
        let a = attachment(json!({"type": "resource", "resource":
            {"uri": "file:///w/out/output.txt", "blob": "dGNr", "mimeType": "text/plain"}}));
        assert_eq!(a.name.as_deref(), Some("output.txt"));
        assert_eq!(a.base64.as_deref(), Some("dGNr"));
        assert!(!a.is_link());
        let a = attachment(json!({"type": "resource", "resource":
            {"uri": "data.json", "text": "{\"k\": 1}", "mimeType": "application/json"}}));
        assert_eq!(a.name.as_deref(), Some("data.json"));
        assert_eq!(a.text.as_deref(), Some("{\"k\": 1}"));
        let a = attachment(json!({"type": "image", "data": "AA==", "mimeType": "image/png"}));
        assert_eq!(a.media_type.as_deref(), Some("image/png"));
        assert_eq!(a.base64.as_deref(), Some("AA=="));
        assert_eq!(a.name, None);
        // Too large to keep: the attachment stays, without its content.
        let big = "x".repeat(MAX_ATTACHMENT_CONTENT + 1);
        let a =
            attachment(json!({"type": "resource", "resource": {"uri": "big.txt", "text": big}}));
        assert_eq!(a.name.as_deref(), Some("big.txt"));
        assert_eq!(a.text, None);
        assert_eq!(file_name("https://example.com/"), None);
        assert_eq!(file_name("urn:x"), None);
        assert_eq!(file_name("a/b.txt?x=1"), Some("b.txt".into()));
    }

    #[test]
    fn tool_call_carries_kind_status_locations_and_raw_input() {
        let e = update_event(&update(json!({
            "sessionUpdate": "tool_call",
            "toolCallId": "t1",
            "title": "Write a.txt",
            "kind": "edit",
            "status": "pending",
            "locations": [{"path": "/w/a.txt"}],
            "rawInput": {"path": "/w/a.txt", "content": "x"}
        })));
        assert_eq!(
            e,
            Some(EventKind::ToolCall(ToolCallEvent {
                id: "t1".into(),
                title: "Write a.txt".into(),
                tool_kind: ToolKind::Edit,
                status: ToolStatus::Pending,
                locations: vec![PathBuf::from("/w/a.txt")],
                raw_input: Some(json!({"path": "/w/a.txt", "content": "x"})),
            }))
        );
        // No kind: other.
        let Some(EventKind::ToolCall(t)) = update_event(&update(json!({
            "sessionUpdate": "tool_call", "toolCallId": "t2", "title": "?"
        }))) else {
            panic!("not a tool call")
        };
        assert_eq!(t.tool_kind, ToolKind::Other);
        assert_eq!(t.status, ToolStatus::Pending);
    }

    #[test]
    fn tool_call_update_content_is_bounded_text() {
        let big = "x".repeat(20_000);
        let e = update_event(&update(json!({
            "sessionUpdate": "tool_call_update",
            "toolCallId": "t1",
            "status": "completed",
            "content": [
                {"type": "content", "content": {"type": "text", "text": big}},
            ]
        })));
        let Some(EventKind::ToolCallUpdate(u)) = e else {
            panic!("not an update")
        };
        assert_eq!(u.status, Some(ToolStatus::Completed));
        assert_eq!(u.title, None);
        assert_eq!(u.tool_kind, None);
        let content = u.content.unwrap();
        assert!(content.len() <= MAX_TOOL_CONTENT);
        assert!(content.ends_with('…'));

        let Some(EventKind::ToolCallUpdate(u)) = update_event(&update(json!({
            "sessionUpdate": "tool_call_update",
            "toolCallId": "t1",
            "content": [{"type": "diff", "path": "/w/a.txt", "oldText": null, "newText": "a\nb\n"}]
        }))) else {
            panic!("not an update")
        };
        assert_eq!(u.content.as_deref(), Some("create /w/a.txt (+2 lines)"));
        assert_eq!(u.status, None);
    }

    #[test]
    fn plan_mode_and_usage() {
        let e = update_event(&update(json!({
            "sessionUpdate": "plan",
            "entries": [{"content": "step", "priority": "high", "status": "in_progress"}]
        })));
        assert_eq!(
            e,
            Some(EventKind::Plan {
                entries: vec![PlanEntry {
                    content: "step".into(),
                    priority: "high".into(),
                    status: "in_progress".into()
                }]
            })
        );
        let e = update_event(&update(
            json!({"sessionUpdate": "current_mode_update", "currentModeId": "plan"}),
        ));
        assert_eq!(
            e,
            Some(EventKind::Mode {
                mode_id: "plan".into()
            })
        );
        let e = update_event(&update(
            json!({"sessionUpdate": "usage_update", "used": 10, "size": 100}),
        ));
        assert_eq!(
            e,
            Some(EventKind::Usage {
                usage: Usage {
                    context_used: Some(10),
                    context_size: Some(100),
                    ..Usage::default()
                }
            })
        );
    }

    #[test]
    fn other_updates_are_ignored() {
        let e = update_event(&update(json!({
            "sessionUpdate": "user_message_chunk",
            "content": {"type": "text", "text": "me"}
        })));
        assert_eq!(e, None);
        let e = update_event(&update(json!({
            "sessionUpdate": "available_commands_update",
            "availableCommands": []
        })));
        assert_eq!(e, None);
    }

    #[test]
    fn stop_reasons_map_to_legates_with_their_acp_wire_strings() {
        for (acp_reason, ours) in [
            (acp::StopReason::EndTurn, StopReason::EndTurn),
            (acp::StopReason::MaxTokens, StopReason::MaxTokens),
            (
                acp::StopReason::MaxTurnRequests,
                StopReason::MaxTurnRequests,
            ),
            (acp::StopReason::Refusal, StopReason::Refusal),
            (acp::StopReason::Cancelled, StopReason::Cancelled),
        ] {
            assert_eq!(stop_reason(acp_reason, false, false), ours);
            assert_eq!(wire_name(&acp_reason), ours.as_str());
        }
        assert_eq!(
            stop_reason(acp::StopReason::EndTurn, true, false),
            StopReason::InputRequired
        );
        assert_eq!(
            stop_reason(acp::StopReason::EndTurn, false, true),
            StopReason::DirectMessage
        );
        assert_eq!(
            stop_reason(acp::StopReason::EndTurn, true, true),
            StopReason::InputRequired
        );
        assert_eq!(
            stop_reason(acp::StopReason::Refusal, false, true),
            StopReason::Refusal
        );
        // Only an ended turn can ask for input: a refusal stays a refusal.
        assert_eq!(
            stop_reason(acp::StopReason::Refusal, true, false),
            StopReason::Refusal
        );
    }

    #[test]
    fn permission_request_fills_missing_fields_from_earlier_updates() {
        let req: acp::RequestPermissionRequest = serde_json::from_value(json!({
            "sessionId": "s",
            "toolCall": {"toolCallId": "t9"},
            "options": [
                {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
                {"optionId": "reject", "name": "Reject", "kind": "reject_once"}
            ]
        }))
        .unwrap();
        let bare = permission_request(&req, None);
        assert_eq!(bare.title, "t9");
        assert_eq!(bare.tool_kind, ToolKind::Other);
        assert_eq!(
            bare.options
                .iter()
                .map(|o| (o.id.as_str(), o.kind))
                .collect::<Vec<_>>(),
            [
                ("allow", OptionKind::AllowOnce),
                ("reject", OptionKind::RejectOnce)
            ]
        );

        let mut known = KnownTool::default();
        learn_tool(
            &mut known,
            &update(json!({
                "sessionUpdate": "tool_call", "toolCallId": "t9", "title": "rm -rf x",
                "kind": "execute", "rawInput": {"command": "rm -rf x"}
            })),
        );
        let full = permission_request(&req, Some(known));
        assert_eq!(full.title, "rm -rf x");
        assert_eq!(full.tool_kind, ToolKind::Execute);
        assert_eq!(full.raw_input, Some(json!({"command": "rm -rf x"})));
    }

    #[test]
    fn truncate_respects_char_boundaries() {
        assert_eq!(truncate("abc", 3), "abc");
        let t = truncate("ééééé", 6);
        assert!(t.len() <= 6, "{t}");
        assert!(t.ends_with('…'));
    }

    #[test]
    fn an_agents_request_cannot_pass_for_a_connection_legate_asked_about() {
        let req: acp::RequestPermissionRequest = serde_json::from_value(json!({
            "sessionId": "s",
            "toolCall": {
                "toolCallId": "t1",
                "title": "read docs",
                "kind": "fetch",
                "rawInput": {"network": {"destination": "evil.example:443"}, "url": "x"}
            },
            "options": [{"optionId": "a", "name": "Allow", "kind": "allow_once"}]
        }))
        .unwrap();
        let request = permission_request(&req, None);
        assert_eq!(request.raw_input, Some(json!({"url": "x"})));
    }
}
