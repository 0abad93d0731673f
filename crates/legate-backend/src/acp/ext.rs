//! Legate's extension of ACP, carried in `_meta` (ACP's extensibility field), under one key,
//! [`NAMESPACE`]. Agents that do not know it ignore it, as ACP requires.
//!
//! - `session/prompt` request: `_meta.legate.messageId`, the caller's id for the message the
//!   turn answers (an A2A `messageId`), when the front that submitted the task had one.
//! - `session/prompt` response: `_meta.legate.inputRequired: true` with stop reason `end_turn`
//!   says the agent ended its turn to ask the caller for more input; the driver reports it as
//!   [`crate::StopReason::InputRequired`].
//! - `session/prompt` response: `_meta.legate.directMessage: true` with stop reason
//!   `end_turn` says the answer is a direct message that needs no task tracking (A2A §3.1.1:
//!   "a direct Message response for simple interactions"); the driver reports it as
//!   [`crate::StopReason::DirectMessage`]. Asking for input wins over it.
//!
//! - `session/prompt` request: `_meta.traceparent` and `_meta.tracestate`, the W3C trace
//!   context of the turn's span, when traces are on (top level, not under `legate`: the
//!   names the W3C and OpenTelemetry give them, for any agent that traces).
//!
//! This module owns those names and their parsing; it never decides what a stop means (the
//! engine does).

use serde_json::{Map, Value};

/// The key of Legate's object in `_meta`.
pub const NAMESPACE: &str = "legate";
/// The caller's message id, in a prompt request's `_meta.legate`.
pub const MESSAGE_ID: &str = "messageId";
/// `true` in a prompt response's `_meta.legate` when the agent asks for input.
pub const INPUT_REQUIRED: &str = "inputRequired";

/// `true` in a prompt response's `_meta.legate` when the answer is a direct message.
pub const DIRECT_MESSAGE: &str = "directMessage";

/// The `_meta` of a prompt request for a turn that answers message `message_id`.
pub fn prompt_meta(message_id: Option<&str>) -> Option<Map<String, Value>> {
    let id = message_id?;
    let mut legate = Map::new();
    legate.insert(MESSAGE_ID.into(), Value::String(id.to_string()));
    let mut meta = Map::new();
    meta.insert(NAMESPACE.into(), Value::Object(legate));
    Some(meta)
}

/// `meta` with the W3C trace context `trace` added (`_meta.traceparent`, `_meta.tracestate`);
/// `meta` as it was when there is none.
pub fn with_trace(
    meta: Option<Map<String, Value>>,
    trace: Option<&legate_trace::TraceContext>,
) -> Option<Map<String, Value>> {
    let Some(trace) = trace else {
        return meta;
    };
    let mut meta = meta.unwrap_or_default();
    trace.to_meta(&mut meta);
    Some(meta)
}

/// The message id a prompt request's `_meta` carries (what an agent reads).
pub fn message_id(meta: Option<&Map<String, Value>>) -> Option<&str> {
    meta?.get(NAMESPACE)?.get(MESSAGE_ID)?.as_str()
}

/// Whether a prompt response's `_meta` says the agent asks for input.
pub fn input_required(meta: Option<&Map<String, Value>>) -> bool {
    flag(meta, INPUT_REQUIRED)
}

/// Whether a prompt response's `_meta` says the answer is a direct message.
pub fn direct_message(meta: Option<&Map<String, Value>>) -> bool {
    flag(meta, DIRECT_MESSAGE)
}

/// `_meta.legate.<name>` is `true` (anything else, or nothing, is `false`).
fn flag(meta: Option<&Map<String, Value>>, name: &str) -> bool {
    meta.and_then(|m| m.get(NAMESPACE))
        .and_then(|l| l.get(name))
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

/// The `_meta` of a prompt response that asks for input (what an agent sends).
pub fn input_required_meta() -> Map<String, Value> {
    let mut legate = Map::new();
    legate.insert(INPUT_REQUIRED.into(), Value::Bool(true));
    let mut meta = Map::new();
    meta.insert(NAMESPACE.into(), Value::Object(legate));
    meta
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn the_trace_context_sits_beside_legates_keys_and_only_when_given() {
        let trace = legate_trace::TraceContext::new(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            None,
        )
        .unwrap();
        assert_eq!(with_trace(None, None), None);
        assert_eq!(
            with_trace(prompt_meta(Some("m-1")), None),
            prompt_meta(Some("m-1"))
        );
        let meta = with_trace(prompt_meta(Some("m-1")), Some(&trace)).unwrap();
        assert_eq!(
            Value::Object(meta.clone()),
            json!({"legate": {"messageId": "m-1"}, "traceparent": trace.traceparent()})
        );
        assert_eq!(
            legate_trace::TraceContext::from_meta(Some(&meta)),
            Some(trace)
        );
    }

    #[test]
    fn the_message_id_and_the_input_flag_round_trip() {
        assert_eq!(prompt_meta(None), None);
        let meta = prompt_meta(Some("m-1")).unwrap();
        assert_eq!(
            Value::Object(meta.clone()),
            json!({"legate": {"messageId": "m-1"}})
        );
        assert_eq!(message_id(Some(&meta)), Some("m-1"));
        assert_eq!(message_id(None), None);
        assert!(input_required(Some(&input_required_meta())));
        assert!(!input_required(Some(&meta)));
        assert!(!input_required(None));
        let direct: Map<String, Value> =
            serde_json::from_value(json!({"legate": {"directMessage": true}})).unwrap();
        assert!(direct_message(Some(&direct)));
        assert!(!input_required(Some(&direct)));
        assert!(!direct_message(Some(&input_required_meta())));
        let odd: Map<String, Value> =
            serde_json::from_value(json!({"legate": {"directMessage": 1}})).unwrap();
        assert!(!direct_message(Some(&odd)));
        let odd: Map<String, Value> =
            serde_json::from_value(json!({"legate": {"inputRequired": "yes"}})).unwrap();
        assert!(!input_required(Some(&odd)));
    }
}
