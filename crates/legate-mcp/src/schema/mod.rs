//! The shapes of every tool's arguments and answers, and the one place their input and
//! output JSON Schemas are generated.
//!
//! The shapes are the engine's own types wherever the wire carries them as they are
//! (`JsonSchema` derived behind their crates' `schema` feature); the structs here are only
//! MCP envelopes and subsets that contain or point at those types, never copies of their
//! fields. Field names are camelCase on the wire. Arguments reject unknown fields. Every
//! output schema also admits the error shape `{error: {code, message}}` (see
//! [`with_error`]), so a client that validates structured content accepts both answers of
//! one tool. Generated schemas are JSON Schema 2020-12 and carry only its own `format`
//! values ([`STANDARD_FORMATS`]): schemars' `uint64`, `int32`, `double`, … are removed here.
//!
//! This module decides nothing about a task; it must never hold a rule, only shapes.

pub mod answers;
pub mod args;

pub use answers::*;
pub use args::*;

use rmcp::model::JsonObject;
use rmcp::schemars::generate::SchemaSettings;
use rmcp::schemars::transform::RecursiveTransform;
use rmcp::schemars::{JsonSchema, Schema};
use serde::Serialize;
use serde_json::{Map, Value, json};
use std::sync::Arc;

/// The `format` values of the JSON Schema 2020-12 format vocabulary (and its `uuid`,
/// `duration`). Any other `format` is stripped from generated schemas.
pub const STANDARD_FORMATS: &[&str] = &[
    "date-time",
    "date",
    "time",
    "duration",
    "email",
    "idn-email",
    "hostname",
    "idn-hostname",
    "ipv4",
    "ipv6",
    "uri",
    "uri-reference",
    "iri",
    "iri-reference",
    "uuid",
    "uri-template",
    "json-pointer",
    "relative-json-pointer",
    "regex",
];

/// Removes a nonstandard `format` (schemars writes `uint64`, `uint`, `int64`, `double`, …
/// for numbers; validators warn on them). The range keywords schemars adds next to them
/// (`minimum: 0`) are standard and stay.
fn strip_nonstandard_format(schema: &mut Schema) {
    let nonstandard = schema
        .get("format")
        .and_then(Value::as_str)
        .is_some_and(|f| !STANDARD_FORMATS.contains(&f));
    if nonstandard {
        schema.remove("format");
    }
}

/// The schema of `T` as a JSON object: draft 2020-12, the serialize contract for an answer
/// (what `Serialize` writes) or the deserialize contract for arguments, with nonstandard
/// formats removed and the root's `title` and `description` (the Rust type's) dropped.
fn generate<T: JsonSchema>(answer: bool) -> JsonObject {
    let mut settings = SchemaSettings::draft2020_12();
    if answer {
        settings = settings.for_serialize();
    }
    let settings = settings.with_transform(RecursiveTransform(strip_nonstandard_format));
    let schema = settings.into_generator().into_root_schema_for::<T>();
    let mut object = match schema.to_value() {
        Value::Object(o) => o,
        // A schema is an object or a boolean; every shape here is a struct, so this is a
        // bug the catalog test catches.
        other => {
            tracing::error!(schema = %other, "a tool schema is not an object");
            JsonObject::new()
        }
    };
    object.remove("title");
    object.remove("description");
    object
}

/// The input schema of an argument struct.
pub fn input_schema<T: JsonSchema>() -> Arc<JsonObject> {
    Arc::new(generate::<T>(false))
}

/// The output schema of an answer, with the error shape admitted (see [`with_error`]).
pub fn output_schema<T: JsonSchema>() -> Arc<JsonObject> {
    with_error(&Arc::new(generate::<T>(true)))
}

/// The error half of every answer: MCP's failure envelope over [`legate_core::Error`] (its
/// code's wire string and its sentence; the cause never travels).
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct ErrorBody {
    /// A stable code, e.g. `TASK_NOT_FOUND`.
    pub code: String,
    /// One sentence for a person.
    pub message: String,
}

impl From<&legate_core::Error> for ErrorBody {
    fn from(e: &legate_core::Error) -> Self {
        Self {
            code: e.code.as_str().to_string(),
            message: e.detail(),
        }
    }
}

/// `output` with an `error` property added and its required fields made an alternative to
/// `error`: `anyOf: [{required: [...]}, {required: ["error"]}]`.
pub fn with_error(output: &Arc<JsonObject>) -> Arc<JsonObject> {
    let mut schema = output.as_ref().clone();
    let required = schema.remove("required");
    let properties = schema
        .entry("properties")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(p) = properties {
        debug_assert!(
            !p.contains_key("error"),
            "an answer has a top-level `error` field"
        );
        p.insert(
            "error".into(),
            json!({
                "type": "object",
                "description": "Present instead of the other fields when the call failed.",
                "properties": {
                    "code": {"type": "string", "description": "A stable code, e.g. TASK_NOT_FOUND."},
                    "message": {"type": "string", "description": "One sentence for a person."}
                },
                "required": ["code", "message"]
            }),
        );
    }
    if let Some(required) = required {
        schema.insert(
            "anyOf".into(),
            json!([{ "required": required }, { "required": ["error"] }]),
        );
    }
    Arc::new(schema)
}

/// Every `format` value in `schema`, wherever it stands (properties, `$defs`, items, …).
pub fn formats(schema: &Value) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![schema];
    while let Some(v) = stack.pop() {
        match v {
            Value::Object(m) => {
                if let Some(Value::String(f)) = m.get("format") {
                    found.push(f.clone());
                }
                stack.extend(m.values());
            }
            Value::Array(a) => stack.extend(a),
            _ => {}
        }
    }
    found
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn output_schemas_admit_the_error_shape() {
        let schema = output_schema::<CancelOut>();
        assert_eq!(schema["type"], "object");
        assert_eq!(
            schema["properties"]["error"]["required"],
            json!(["code", "message"])
        );
        let any_of = schema["anyOf"].as_array().unwrap();
        assert_eq!(any_of[1], json!({"required": ["error"]}));
        let required = any_of[0]["required"].as_array().unwrap();
        assert!(required.contains(&json!("taskId")));
        assert!(schema.get("required").is_none());
    }

    #[test]
    fn integer_formats_are_stripped_and_ranges_kept() {
        let schema = Value::Object(generate::<ReadResultOut>(true));
        assert_eq!(formats(&schema), Vec::<String>::new(), "{schema:#}");
        assert_eq!(schema["properties"]["offset"]["type"], "integer");
        assert_eq!(schema["properties"]["offset"]["minimum"], 0);
    }
}
