//! stream-json events into Legate's event model.
//!
//! | agy event | becomes |
//! |---|---|
//! | `init` | a [`EventKind::Session`] with its `conversation_id`; its model is remembered |
//! | `step_update`, `step_type:"agent_response"` | [`EventKind::Message`] with `text_delta` |
//! | `step_update`, `step_type:"thinking"`/`"thought"` | [`EventKind::Thought`] |
//! | `step_update`, `step_type:"tool"`, state not `DONE` | a new [`EventKind::ToolCall`] |
//! | `step_update`, `step_type:"tool"`, state `DONE` | [`EventKind::ToolCallUpdate`], completed |
//! | `result` | remembered for the end of the turn; its `response` becomes the answer when no text streamed; its `structured_output` an [`EventKind::Attachment`] (`structured_output.json`, `application/json`) |
//! | another object | [`EventKind::Raw`] (bounded) |
//! | not a JSON object | [`EventKind::Unparsed`] (bounded), counted as a parse error |
//!
//! Usage is not turned into events here: it is cumulative, see `usage`.

use super::ndjson::Line;
use legate_core::{EventKind, ToolCallEvent, ToolCallUpdateEvent, ToolKind, ToolStatus};
use serde_json::Value;

/// The name of the attachment that carries a run's `structured_output`.
pub const STRUCTURED_OUTPUT: &str = legate_core::STRUCTURED_OUTPUT_ATTACHMENT;
/// Text kept of an unparsed line.
const MAX_UNPARSED: usize = 4 * 1024;
/// Text kept of a tool's output.
const MAX_TOOL_OUTPUT: usize = 8 * 1024;
/// Serialized bytes kept of a raw event's payload.
const MAX_RAW: usize = 16 * 1024;

/// `s` cut to at most `max` bytes on a character boundary, with `…` when cut (the ACP
/// driver's cut).
pub(crate) use crate::acp::truncate;

/// The `result` event of a run.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct RunResult {
    pub(crate) status: String,
    pub(crate) response: Option<String>,
    pub(crate) error: Option<String>,
    pub(crate) usage: Option<Value>,
    pub(crate) conversation_id: Option<String>,
}

/// Translation state for one run.
#[derive(Debug, Default)]
pub(crate) struct Translator {
    next_tool: u32,
    open_tools: Vec<(String, String)>,
    resumed: bool,
    announced: Option<String>,
    streamed_text: bool,
    /// The conversation id, from `init` or `result`.
    pub(crate) conversation_id: Option<String>,
    /// The model `init` named.
    pub(crate) init_model: Option<String>,
    /// The last cumulative usage a `step_update` carried.
    pub(crate) step_usage: Option<Value>,
    /// The `result`, once it came.
    pub(crate) result: Option<RunResult>,
    /// Lines that were not JSON objects.
    pub(crate) parse_errors: u32,
}

fn text(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_owned)
}

fn tool_kind(name: &str) -> ToolKind {
    let n = name.to_ascii_lowercase();
    let any = |words: &[&str]| words.iter().any(|w| n.contains(w));
    if any(&["delete", "remove"]) {
        ToolKind::Delete
    } else if any(&["write", "edit", "replace", "create", "patch"]) {
        ToolKind::Edit
    } else if any(&["read", "view", "list", "cat"]) {
        ToolKind::Read
    } else if any(&["grep", "search", "find", "glob"]) {
        ToolKind::Search
    } else if any(&["shell", "command", "bash", "exec", "run"]) {
        ToolKind::Execute
    } else if any(&["fetch", "web", "http", "url"]) {
        ToolKind::Fetch
    } else {
        ToolKind::Other
    }
}

impl Translator {
    /// A translator for a run that resumes a conversation (`resumed`) or starts one.
    pub(crate) fn new(resumed: bool) -> Self {
        Self {
            resumed,
            ..Self::default()
        }
    }

    /// The events one stdout line becomes.
    pub(crate) fn line(&mut self, line: &Line) -> Vec<EventKind> {
        if line.bytes.iter().all(u8::is_ascii_whitespace) && !line.truncated {
            return Vec::new();
        }
        let parsed = if line.truncated {
            None
        } else {
            serde_json::from_slice::<Value>(&line.bytes)
                .ok()
                .filter(Value::is_object)
        };
        let Some(v) = parsed else {
            self.parse_errors += 1;
            let shown = String::from_utf8_lossy(&line.bytes);
            let mut shown = truncate(shown.trim_end(), MAX_UNPARSED);
            if line.truncated && !shown.ends_with('…') {
                shown.push('…');
            }
            return vec![EventKind::Unparsed { line: shown }];
        };
        match v.get("event").and_then(Value::as_str).unwrap_or("") {
            "init" => self.init(&v),
            "step_update" => self.step(v.get("step_update").unwrap_or(&Value::Null)),
            "result" => self.result(v.get("result").unwrap_or(&Value::Null)),
            other => vec![raw(other, v.clone())],
        }
    }

    fn announce(&mut self, id: Option<String>) -> Vec<EventKind> {
        let Some(id) = id.filter(|i| !i.is_empty()) else {
            return Vec::new();
        };
        self.conversation_id = Some(id.clone());
        if self.announced.as_deref() == Some(id.as_str()) {
            return Vec::new();
        }
        self.announced = Some(id.clone());
        vec![EventKind::Session {
            session_id: id,
            resumed: self.resumed,
        }]
    }

    fn init(&mut self, v: &Value) -> Vec<EventKind> {
        let init = v.get("init").unwrap_or(&Value::Null);
        self.init_model = text(init, "model").filter(|m| !m.is_empty());
        let id = text(v, "conversation_id").or_else(|| text(init, "conversation_id"));
        self.announce(id)
    }

    fn step(&mut self, s: &Value) -> Vec<EventKind> {
        if let Some(u) = s.get("usage").filter(|u| !u.is_null()) {
            self.step_usage = Some(u.clone());
        }
        let state = text(s, "state").unwrap_or_default();
        match text(s, "step_type").as_deref() {
            Some("agent_response") => match text(s, "text_delta").filter(|t| !t.is_empty()) {
                Some(t) => {
                    self.streamed_text = true;
                    vec![EventKind::Message { text: t }]
                }
                None => Vec::new(),
            },
            Some("thinking" | "thought") => text(s, "text_delta")
                .filter(|t| !t.is_empty())
                .map(|t| vec![EventKind::Thought { text: t }])
                .unwrap_or_default(),
            Some("tool") => self.tool(s, &state),
            _ => vec![raw("step_update", s.clone())],
        }
    }

    fn tool(&mut self, s: &Value, state: &str) -> Vec<EventKind> {
        let info = s.get("tool_info").unwrap_or(&Value::Null);
        let name = text(s, "tool_name")
            .or_else(|| text(info, "name"))
            .unwrap_or_else(|| "tool".into());
        let done = state.eq_ignore_ascii_case("DONE");
        let open = self.open_tools.iter().position(|(n, _)| *n == name);
        let mut events = Vec::new();
        let id = match (done, open) {
            (true, Some(i)) => self.open_tools.remove(i).1,
            (false, Some(i)) => return self.tool_progress(&self.open_tools[i].1.clone(), state),
            (_, None) => {
                self.next_tool += 1;
                let id = format!("agy-tool-{}", self.next_tool);
                events.push(EventKind::ToolCall(ToolCallEvent {
                    id: id.clone(),
                    title: name.clone(),
                    tool_kind: tool_kind(&name),
                    status: ToolStatus::InProgress,
                    locations: Vec::new(),
                    raw_input: info.get("parameters").filter(|p| !p.is_null()).cloned(),
                }));
                if !done {
                    self.open_tools.push((name, id));
                    return events;
                }
                id
            }
        };
        let failed = ["ERROR", "FAILED", "CANCELED", "CANCELLED"]
            .iter()
            .any(|f| state.eq_ignore_ascii_case(f))
            || info.get("error").is_some_and(|e| !e.is_null());
        let output = match info.get("output") {
            Some(Value::String(s)) => Some(truncate(s, MAX_TOOL_OUTPUT)),
            Some(Value::Null) | None => None,
            Some(other) => Some(truncate(&other.to_string(), MAX_TOOL_OUTPUT)),
        };
        events.push(EventKind::ToolCallUpdate(ToolCallUpdateEvent {
            id,
            title: None,
            tool_kind: None,
            status: Some(if failed {
                ToolStatus::Failed
            } else {
                ToolStatus::Completed
            }),
            locations: None,
            content: output,
        }));
        events
    }

    fn tool_progress(&self, id: &str, state: &str) -> Vec<EventKind> {
        let failed = ["ERROR", "FAILED"]
            .iter()
            .any(|f| state.eq_ignore_ascii_case(f));
        if !failed {
            return Vec::new();
        }
        vec![EventKind::ToolCallUpdate(ToolCallUpdateEvent {
            id: id.to_string(),
            title: None,
            tool_kind: None,
            status: Some(ToolStatus::Failed),
            locations: None,
            content: None,
        })]
    }

    fn result(&mut self, r: &Value) -> Vec<EventKind> {
        let result = RunResult {
            status: text(r, "status").unwrap_or_default(),
            response: text(r, "response"),
            error: match r.get("error") {
                Some(Value::String(s)) => Some(s.clone()),
                Some(Value::Object(o)) => o
                    .get("message")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .or_else(|| Some(Value::Object(o.clone()).to_string())),
                _ => None,
            },
            usage: r.get("usage").filter(|u| !u.is_null()).cloned(),
            conversation_id: text(r, "conversation_id"),
        };
        let mut events = self.announce(result.conversation_id.clone());
        if !self.streamed_text
            && let Some(resp) = result.response.as_ref().filter(|r| !r.is_empty())
        {
            events.push(EventKind::Message { text: resp.clone() });
        }
        if let Some(structured) = r.get("structured_output").filter(|v| !v.is_null()) {
            events.push(EventKind::Attachment(legate_core::Attachment {
                name: Some(STRUCTURED_OUTPUT.into()),
                media_type: Some("application/json".into()),
                text: Some(structured.to_string()),
                ..legate_core::Attachment::default()
            }));
        }
        self.result = Some(result);
        events
    }
}

fn raw(event: &str, payload: Value) -> EventKind {
    let size = payload.to_string().len();
    let payload = if size > MAX_RAW {
        Value::String(truncate(&payload.to_string(), MAX_RAW))
    } else {
        payload
    };
    EventKind::Raw {
        event: truncate(event, 64),
        payload,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;

    fn line(v: &str) -> Line {
        Line {
            bytes: v.as_bytes().to_vec(),
            truncated: false,
        }
    }

    #[test]
    fn a_whole_run_translates() {
        let mut t = Translator::new(false);
        let mut ev = Vec::new();
        for l in [
            json!({"event":"init","conversation_id":"c-1","init":{"cwd":"/w","model":"mock-pro","args":[]}}),
            json!({"event":"step_update","step_update":{"step_type":"tool","state":"RUNNING","tool_name":"write_file","tool_info":{"name":"write_file","parameters":{"path":"a.txt"}}}}),
            json!({"event":"step_update","step_update":{"step_type":"tool","state":"DONE","tool_name":"write_file","tool_info":{"name":"write_file","output":"ok"}}}),
            json!({"event":"step_update","step_update":{"step_type":"agent_response","text_delta":"Hel"}}),
            json!({"event":"step_update","step_update":{"step_type":"agent_response","text_delta":"lo"}}),
            json!({"event":"telemetry","x":1}),
            json!({"event":"result","result":{"conversation_id":"c-1","status":"SUCCESS","response":"Hello","usage":{"total_tokens":120}}}),
        ] {
            ev.extend(t.line(&line(&l.to_string())));
        }
        let types: Vec<&str> = ev.iter().map(EventKind::type_name).collect();
        assert_eq!(
            types,
            [
                "session",
                "tool_call",
                "tool_call_update",
                "message",
                "message",
                "raw"
            ]
        );
        assert_eq!(t.conversation_id.as_deref(), Some("c-1"));
        assert_eq!(t.init_model.as_deref(), Some("mock-pro"));
        let r = t.result.unwrap();
        assert_eq!(r.status, "SUCCESS");
        assert_eq!(r.usage.unwrap()["total_tokens"], 120);
        assert_eq!(t.parse_errors, 0);
        match &ev[1] {
            EventKind::ToolCall(c) => assert_eq!(c.tool_kind, ToolKind::Edit),
            e => panic!("{e:?}"),
        }
    }

    #[test]
    fn invalid_lines_are_unparsed_events_and_the_response_fills_in_for_no_stream() {
        let mut t = Translator::new(true);
        let ev = t.line(&line("this is not json {"));
        assert_eq!(
            ev,
            [EventKind::Unparsed {
                line: "this is not json {".into()
            }]
        );
        assert_eq!(t.line(&line("[1,2]")).len(), 1);
        assert!(t.line(&line("   ")).is_empty());
        let cut = Line {
            bytes: b"{\"event\":\"init\"".to_vec(),
            truncated: true,
        };
        assert_eq!(t.line(&cut)[0].type_name(), "unparsed");
        assert_eq!(t.parse_errors, 3);
        let ev = t.line(&line(
            &json!({"event":"result","result":{"conversation_id":"c-9","status":"ERROR","response":"partial","error":{"message":"boom"}}}).to_string(),
        ));
        assert_eq!(
            ev,
            [
                EventKind::Session {
                    session_id: "c-9".into(),
                    resumed: true
                },
                EventKind::Message {
                    text: "partial".into()
                }
            ]
        );
        assert_eq!(t.result.unwrap().error.as_deref(), Some("boom"));
    }
}
