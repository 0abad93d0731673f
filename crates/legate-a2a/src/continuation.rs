//! How an A2A message asks to continue a task cut by a restart of Legate: `metadata.legateContinue:
//! true` with the task in `referenceTaskIds` (A2A's field for the tasks a message refers to),
//! no `taskId` (the cut task ended, so nothing is replied into) and no text. This module
//! only reads the message's shape; whether the task may be continued is the engine's rule.

use a2a::{A2AError, Message};

/// The metadata key.
pub const KEY: &str = "legateContinue";

/// The task `message` asks to continue, `None` when it asks for no continue. A
/// `legateContinue` that is not a boolean, or `true` without exactly one `referenceTaskIds`
/// entry, is `INVALID_INPUT` (-32602).
pub fn continues(message: &Message) -> Result<Option<String>, A2AError> {
    match message.metadata.as_ref().and_then(|m| m.get(KEY)) {
        None | Some(serde_json::Value::Null | serde_json::Value::Bool(false)) => Ok(None),
        Some(serde_json::Value::Bool(true)) => match message.reference_task_ids.as_deref() {
            Some([one]) => Ok(Some(one.clone())),
            _ => Err(A2AError::invalid_params(
                "INVALID_INPUT: metadata.legateContinue needs exactly one referenceTaskIds entry: the task to continue",
            )),
        },
        Some(_) => Err(A2AError::invalid_params(
            "INVALID_INPUT: metadata.legateContinue must be true or false",
        )),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn message(metadata: serde_json::Value, refs: Option<Vec<&str>>) -> Message {
        let mut m = Message::new(a2a::Role::User, vec![]);
        m.metadata = metadata
            .as_object()
            .cloned()
            .map(|o| o.into_iter().collect());
        m.reference_task_ids = refs.map(|r| r.into_iter().map(Into::into).collect());
        m
    }

    #[test]
    fn a_continue_names_exactly_one_referenced_task() {
        assert_eq!(
            continues(&message(json!({}), Some(vec!["t"]))).unwrap(),
            None
        );
        assert_eq!(
            continues(&message(json!({KEY: false}), Some(vec!["t"]))).unwrap(),
            None
        );
        assert_eq!(
            continues(&message(json!({KEY: true}), Some(vec!["t"]))).unwrap(),
            Some("t".to_string())
        );
        for bad in [
            message(json!({KEY: true}), None),
            message(json!({KEY: true}), Some(vec![])),
            message(json!({KEY: true}), Some(vec!["a", "b"])),
            message(json!({KEY: "t"}), Some(vec!["t"])),
        ] {
            assert!(continues(&bad).is_err(), "{bad:?}");
        }
    }
}
