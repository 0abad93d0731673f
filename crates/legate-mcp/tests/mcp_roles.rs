//! Roles over MCP with rmcp's own client on an in-memory pipe, the engine driving the real
//! scripted agent: the `roles` tool and its schema, `run`'s `role` (its schema listing the
//! configured names), the refusals a role brings (unknown name, write on a read-only base,
//! another role on a conversation), and planner runs in the `query` profile.
//!
//! The agent binary must be built first: `cargo build -p legate-testkit --bin
//! legate-scripted-agent` (a plain `cargo test --workspace` does it).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_core::RoleBase;
use legate_engine::{EngineConfig, RoleDefaults, RoleSpec};
use legate_frontkit::mcp::{self, McpClient, McpFront};
use legate_mcp::Profile;
use legate_testkit::EngineHarness;
use serde_json::{Value, json};

async fn harness(profile: Profile) -> McpFront {
    let kit = EngineHarness::builder()
        .config(|c: &mut EngineConfig| {
            c.roles = vec![RoleSpec {
                name: "security-review".into(),
                base: RoleBase::Reviewer,
                description: Some("access control".into()),
                instructions: "Check access control.".into(),
                defaults: RoleDefaults {
                    timeout_seconds: Some(120),
                    ..RoleDefaults::default()
                },
            }]
        })
        .start();
    McpFront::serve(kit, mcp::profile(profile), McpClient::default()).await
}

/// Every property an answer carries is declared by its schema, recursively through objects
/// and arrays, and every required one is there: a structural check of `value` against the
/// output schema the tool announced (`$ref`s resolved in its `$defs`).
fn conforms(value: &Value, schema: &Value, defs: &Value, at: &str) {
    let schema = match schema.get("$ref").and_then(Value::as_str) {
        Some(r) => &defs[r.trim_start_matches("#/$defs/")],
        None => schema,
    };
    // An optional field is `anyOf: [T, null]`; the answer-or-error `anyOf` at the top only
    // lists required fields, under `properties`.
    if let Some(any) = schema
        .get("anyOf")
        .or(schema.get("oneOf"))
        .filter(|_| schema.get("properties").is_none())
    {
        if value.is_null() {
            return;
        }
        let first = any.as_array().unwrap().iter().find(|s| s["type"] != "null");
        return conforms(value, first.unwrap(), defs, at);
    }
    if let Some(options) = schema.get("enum") {
        assert!(
            options.as_array().unwrap().contains(value),
            "{at}: {value} not in {options}"
        );
    }
    match value {
        Value::Object(map) => {
            let props = &schema["properties"];
            for (k, v) in map {
                let sub = props
                    .get(k)
                    .unwrap_or_else(|| panic!("{at}.{k} is not in the schema"));
                conforms(v, sub, defs, &format!("{at}.{k}"));
            }
            for r in schema["required"].as_array().into_iter().flatten() {
                assert!(
                    map.contains_key(r.as_str().unwrap()),
                    "{at}.{r} is required"
                );
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                conforms(v, &schema["items"], defs, &format!("{at}[{i}]"));
            }
        }
        _ => {}
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roles_lists_the_builtins_and_the_configured_role_in_its_schema() {
    let h = harness(Profile::Full).await;
    let tools = h.client.list_all_tools().await.unwrap();
    let tool = |name: &str| tools.iter().find(|t| t.name == name).unwrap().clone();
    let roles = h.call("roles", json!({})).await;
    let schema = Value::Object(tool("roles").output_schema.unwrap().as_ref().clone());
    conforms(&roles, &schema, &schema["$defs"], "roles");
    let listed: Vec<&str> = roles["roles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        listed,
        ["implementer", "planner", "reviewer", "security-review"]
    );
    let custom = &roles["roles"][3];
    assert_eq!(custom["base"], "reviewer");
    assert_eq!(custom["readOnly"], true);
    assert_eq!(custom["builtin"], false);
    assert_eq!(custom["instructionsChars"], 21);
    assert_eq!(custom["defaults"]["timeoutSeconds"], 120);
    assert!(
        custom.get("instructions").is_none(),
        "only the length is listed"
    );

    let input = tool("run").input_schema;
    let role = &input["properties"]["role"];
    assert_eq!(
        role["enum"],
        json!([
            "implementer",
            "planner",
            "reviewer",
            "security-review",
            null
        ])
    );

    // An unknown role, or write on a read-only base, is refused; a reviewer omitting mode is
    // read-only and says which role it plays.
    assert_eq!(
        h.fail("run", json!({"prompt": "hi", "role": "architect"}))
            .await,
        "ROLE_NOT_FOUND"
    );
    assert_eq!(
        h.fail(
            "run",
            json!({"prompt": "hi", "role": "security-review", "mode": "write"})
        )
        .await,
        "MODE_NOT_ALLOWED"
    );
    let run = h
        .call(
            "run",
            json!({"prompt": "What is here?", "role": "security-review"}),
        )
        .await;
    conforms(
        &run,
        &Value::Object(tool("run").output_schema.unwrap().as_ref().clone()),
        &Value::Null,
        "run",
    );
    assert_eq!(
        (run["mode"].as_str(), run["role"].as_str()),
        (Some("read-only"), Some("security-review"))
    );
    assert_eq!(run["roleBase"], "reviewer");
    let status = h.ended(run["taskId"].as_str().unwrap()).await;
    assert_eq!(status["task"]["role"], "security-review");
    assert_eq!(status["task"]["timeoutSeconds"], 120);
    // The conversation keeps its role.
    assert_eq!(
        h.fail(
            "run",
            json!({"prompt": "now write", "role": "implementer", "contextId": run["contextId"]})
        )
        .await,
        "INVALID_INPUT"
    );
    let resumed = h
        .call(
            "resume",
            json!({"contextId": run["contextId"], "prompt": "And now?"}),
        )
        .await;
    assert_eq!(resumed["role"], "security-review");
    assert_eq!(resumed["mode"], "read-only");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_query_profile_lists_roles_and_runs_planners_read_only() {
    let h = harness(Profile::Query).await;
    let tools = h.client.list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "roles"));
    assert_eq!(
        h.fail(
            "run",
            json!({"prompt": "hi", "role": "planner", "mode": "write"})
        )
        .await,
        "MODE_NOT_ALLOWED"
    );
    let run = h
        .call(
            "run",
            json!({"prompt": "write a.txt: no", "role": "planner"}),
        )
        .await;
    assert_eq!(
        (run["mode"].as_str(), run["role"].as_str()),
        (Some("read-only"), Some("planner"))
    );
    let status = h.ended(run["taskId"].as_str().unwrap()).await;
    assert_eq!(status["task"]["roleBase"], "planner");
}
