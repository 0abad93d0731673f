//! The reports of the read-only roles, end to end on real pipes, a real copy and a real
//! store: revisor answers a planner's and a reviewer's contract with reports Legate accepts;
//! a hostile ACP agent (the scripted agent told what to answer with `!say`, ending its turn
//! with `!stop` before revisor's own answer) gets every invented citation, malformed report
//! and write to its copy refused with the stable code; agy's structured output is read and
//! validated the same way.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_backend::agy::AgyBackend;
use legate_core::{AgentKind, ErrorCode, ReportBody, ReportOrigin, Task, TaskState};
use legate_engine::SubmitRequest;
use legate_testkit::{EngineHarness, TestAgent};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

const LIB: &str = "pub fn f(x: Option<u8>) -> u8 {\n    x.unwrap()\n}\n";

fn harness() -> EngineHarness {
    EngineHarness::builder()
        .project(&[
            ("src/lib.rs", LIB),
            ("README.md", "# Demo\n"),
            (".gitignore", "*.log\n"),
        ])
        .start()
}

fn on_copy(h: &EngineHarness, role: &str, prompt: &str) -> SubmitRequest {
    let mut req = h.on_copy(prompt);
    req.role = Some(role.into());
    req
}

/// A reviewer whose answer is exactly `report` (one line of JSON).
fn hostile_review(h: &EngineHarness, report: &serde_json::Value) -> SubmitRequest {
    on_copy(
        h,
        "reviewer",
        &format!("review the crate\n!say {report}\n!stop end_turn"),
    )
}

fn review(findings: serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "summary": "one finding", "reviewedFiles": ["src/lib.rs"], "unverified": [],
        "findings": findings,
    })
}

fn finding(path: &str, line: u32, quote: &str) -> serde_json::Value {
    serde_json::json!({"severity": "P1", "path": path, "line": line, "quote": quote,
        "message": "panics on None", "impact": "callers", "suggestion": "return a Result"})
}

/// Runs `req`, and checks that the task failed with `code`, kept no report, and that the
/// stored task (what every front reads) says the same.
async fn fails(h: &EngineHarness, req: SubmitRequest, code: ErrorCode) -> Task {
    let t = h.run(req).await;
    assert_eq!(t.state, TaskState::Failed, "{t:?}");
    let e = t.error.clone().unwrap();
    assert_eq!(e.code, code, "{}", e.message);
    assert!(t.result.as_ref().unwrap().report.is_none());
    let stored = h.engine.task(&t.id.to_string()).unwrap();
    assert_eq!(stored.error.unwrap().code, code);
    t
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revisor_plans_and_reviews_with_reports_legate_accepts() {
    let h = harness();
    let t = h.run(on_copy(&h, "planner", "plan a change to lib")).await;
    assert_eq!(t.state, TaskState::Completed, "{:?}", t.error);
    let report = t.result.unwrap().report.expect("a plan");
    assert_eq!(report.origin, ReportOrigin::AgentReported);
    assert!(!report.citations_checked);
    let ReportBody::Plan(plan) = report.body else {
        panic!("not a plan: {report:?}")
    };
    assert_eq!(plan.steps[0].files, vec!["src/lib.rs"]);

    let t = h.run(on_copy(&h, "reviewer", "review the crate")).await;
    assert_eq!(t.state, TaskState::Completed, "{:?}", t.error);
    let report = t.result.unwrap().report.expect("a review");
    assert!(report.citations_checked);
    let ReportBody::Review(review) = report.body else {
        panic!("not a review: {report:?}")
    };
    assert_eq!(
        (review.findings[0].path.as_str(), review.findings[0].line),
        ("src/lib.rs", 2)
    );
    assert_eq!(review.findings[0].quote, "x.unwrap()");
    h.engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acp_review_that_cites_a_missing_line_fails_citation_not_found() {
    let h = harness();
    // The same review citing a real line is accepted: only the line makes the difference.
    let ok = h
        .run(hostile_review(
            &h,
            &review(serde_json::json!([finding("src/lib.rs", 2, "unwrap()")])),
        ))
        .await;
    assert_eq!(ok.state, TaskState::Completed, "{:?}", ok.error);
    assert!(ok.result.unwrap().report.unwrap().citations_checked);

    let findings = serde_json::json!([
        finding("src/lib.rs", 2, "unwrap()"),
        finding("src/lib.rs", 40, "unwrap()")
    ]);
    let t = fails(
        &h,
        hostile_review(&h, &review(findings)),
        ErrorCode::CitationNotFound,
    )
    .await;
    let m = t.error.unwrap().message;
    assert!(
        m.contains("finding 2 (findings[1]): line 40 of src/lib.rs does not exist"),
        "{m}"
    );
    h.engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invented_files_and_misplaced_quotes_are_refused() {
    let h = harness();
    let t = fails(
        &h,
        hostile_review(
            &h,
            &review(serde_json::json!([finding("src/main.rs", 1, "fn")])),
        ),
        ErrorCode::CitationNotFound,
    )
    .await;
    assert!(
        t.error
            .unwrap()
            .message
            .contains("src/main.rs does not exist")
    );
    let t = fails(
        &h,
        hostile_review(
            &h,
            &review(serde_json::json!([finding("src/lib.rs", 1, "unwrap()")])),
        ),
        ErrorCode::CitationNotFound,
    )
    .await;
    assert!(
        t.error
            .unwrap()
            .message
            .contains("does not stand at src/lib.rs:1")
    );
    // A path that leaves the copy is not even looked up.
    let t = fails(
        &h,
        hostile_review(
            &h,
            &review(serde_json::json!([finding("../../etc/passwd", 1, "root")])),
        ),
        ErrorCode::ReportInvalid,
    )
    .await;
    assert!(t.error.unwrap().message.contains("`..`"));
    let mut listed = review(serde_json::json!([]));
    listed["reviewedFiles"] = serde_json::json!(["src/gone.rs"]);
    fails(&h, hostile_review(&h, &listed), ErrorCode::CitationNotFound).await;
    h.engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_reports_and_unknown_fields_are_report_invalid() {
    let h = harness();
    let broken = on_copy(
        &h,
        "reviewer",
        "review\n!say {\"summary\": \"x\",}\n!stop end_turn",
    );
    fails(&h, broken, ErrorCode::ReportInvalid).await;
    let silent = on_copy(
        &h,
        "planner",
        "plan\n!say nothing to report\n!stop end_turn",
    );
    fails(&h, silent, ErrorCode::ReportInvalid).await;
    let mut approved = review(serde_json::json!([finding("src/lib.rs", 2, "unwrap()")]));
    approved["findings"][0]["approved"] = serde_json::json!(true);
    let t = fails(&h, hostile_review(&h, &approved), ErrorCode::ReportInvalid).await;
    let m = t.error.unwrap().message;
    assert!(m.contains("findings[0]") && m.contains("approved"), "{m}");
    let zero = review(serde_json::json!([finding("src/lib.rs", 0, "unwrap()")]));
    let t = fails(&h, hostile_review(&h, &zero), ErrorCode::ReportInvalid).await;
    assert!(
        t.error
            .unwrap()
            .message
            .contains("finding 1 (findings[0]): `line` must be ≥ 1")
    );
    h.engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reviewer_that_writes_to_its_copy_is_refused_even_an_ignored_file() {
    let h = harness();
    let good = review(serde_json::json!([finding("src/lib.rs", 2, "unwrap()")]));
    for path in ["notes.txt", "build.log"] {
        let req = on_copy(
            &h,
            "reviewer",
            &format!("review\n!write-inside {path}\n!say {good}\n!stop end_turn"),
        );
        let t = fails(&h, req, ErrorCode::ReadOnlyViolation).await;
        assert!(
            t.error
                .unwrap()
                .message
                .contains("the reviewer changed its workspace"),
            "{path}"
        );
    }
    h.engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agy_gets_the_schema_and_its_structured_output_is_validated() {
    let dir = tempfile::tempdir().unwrap();
    let agy_home = dir.path().join("agy-home");
    let state = agy_home.join(".gemini/antigravity-cli/fake-state");
    let agy = TestAgent::command(
        "agy",
        AgentKind::AGY,
        Path::new(env!("CARGO_BIN_EXE_fake-agy")),
    )
    .env("HOME", agy_home.to_str().unwrap())
    .env("FAKE_AGY_STATE_DIR", state.to_str().unwrap());
    let backend = AgyBackend {
        probe_timeout: Duration::from_secs(3),
        kill_grace: Duration::from_secs(3),
        ..AgyBackend::default()
    };
    let h = EngineHarness::builder()
        .in_dir(dir)
        .backend(AgentKind::AGY, Arc::new(backend))
        .agent(agy)
        .start();
    let mut req = SubmitRequest::new("plan the work");
    req.agent = Some("agy".into());
    req.role = Some("planner".into());
    // fake-agy fills the schema by type (a plan with no steps, its summary the answer); its
    // text answer holds no JSON, so a report shows the structured output was read.
    let t = h.run(req).await;
    assert_eq!(t.state, TaskState::Completed, "{:?}", t.error);
    let report = t
        .result
        .unwrap()
        .report
        .expect("agy's structured output as a plan");
    assert_eq!(report.origin, ReportOrigin::AgentReported);
    assert!(!report.citations_checked);
    match report.body {
        ReportBody::Plan(plan) => {
            assert!(plan.steps.is_empty());
            assert!(plan.summary.starts_with("fake agy:"), "{}", plan.summary);
        }
        other => panic!("not a plan: {other:?}"),
    }
    h.engine.shutdown().await;
}

#[test]
fn revisor_keys_on_the_contract_head_the_engine_writes() {
    assert_eq!(
        legate_engine::CONTRACT_HEAD,
        legate_revisor::report::CONTRACT_HEAD
    );
}
