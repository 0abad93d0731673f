//! Comparisons over a real engine, real copies, real pipes and the scripted agent: three
//! targets (revisor's own review, and two scripted ACP agents told what to answer with
//! `!as TAG !say …`) review one version, each in a copy made before any started, and their
//! findings are grouped literally into all three agreement kinds. Then the attacks: a finding
//! citing a path outside the copy, the same target twice, 1 or 5 targets, a stale context
//! sha, a full queue, a source or a review's copy changed after the comparison, and a review
//! canceled or discarded on its own.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_core::{ErrorCode, Task, TaskState};
use legate_engine::{Agreement, CompareRequest, CompareTarget, Comparison, ContinueRequest};
use legate_testkit::directives::TAG_ENV;
use legate_testkit::{EngineHarness, TestAgent};
use std::path::PathBuf;

const LIB: &str = "pub fn f(x: Option<u8>) -> u8 {\n    x.unwrap()\n}\n// TODO: tests\n";

fn builder() -> legate_testkit::harness::HarnessBuilder {
    EngineHarness::builder()
        .agent(TestAgent::scripted("agent").model("revisor-standard"))
        .agent(TestAgent::scripted("beta").env(TAG_ENV, "beta"))
        .agent(TestAgent::scripted("gamma").env(TAG_ENV, "gamma"))
}

fn harness_with(tune: impl FnOnce(&mut legate_engine::EngineConfig) + 'static) -> EngineHarness {
    builder()
        .project(&[("src/lib.rs", LIB), ("README.md", "# Demo\n")])
        .config(tune)
        .start()
}

fn harness() -> EngineHarness {
    harness_with(|_| {})
}

/// A finished copy task that added notes.md to its copy.
async fn source(h: &EngineHarness) -> Task {
    let t = h.run(h.on_copy("write notes.md: notes\\n")).await;
    assert_eq!(t.state, TaskState::Completed, "{:?}", t.error);
    t
}

/// Revisor's own finding for a marked line, as it words it.
fn revisor_finding(line: u32, quote: &str, severity: &str, message: &str) -> serde_json::Value {
    serde_json::json!({"severity": severity, "path": "src/lib.rs", "line": line, "quote": quote,
        "message": message, "impact": "whoever runs or maintains this code",
        "suggestion": "look at the line and resolve it"})
}

fn unwrap_finding() -> serde_json::Value {
    revisor_finding(
        2,
        "x.unwrap()",
        "P2",
        "unwrap() panics on an error or a None",
    )
}

fn todo_finding() -> serde_json::Value {
    revisor_finding(4, "// TODO: tests", "P3", "a TODO is left in the code")
}

fn report(findings: &[serde_json::Value]) -> serde_json::Value {
    serde_json::json!({"summary": "tagged review", "reviewedFiles": ["src/lib.rs"],
        "unverified": [], "findings": findings})
}

/// The lines by which the agent tagged `tag` answers exactly `report`.
fn says(tag: &str, report: &serde_json::Value) -> String {
    format!("!as {tag} !say {report}\n!as {tag} !stop end_turn\n")
}

fn targets(list: &[(&str, Option<&str>)]) -> Vec<CompareTarget> {
    list.iter()
        .map(|(a, m)| CompareTarget {
            agent: (*a).into(),
            model: m.map(Into::into),
        })
        .collect()
}

fn request(source: &Task, sha: &str, prompt: &str, t: Vec<CompareTarget>) -> CompareRequest {
    CompareRequest {
        source_task_id: source.id.to_string(),
        expected_context_sha256: sha.into(),
        prompt: prompt.into(),
        targets: t,
    }
}

fn three() -> Vec<CompareTarget> {
    targets(&[
        ("agent", None),
        ("beta", Some("revisor-thorough")),
        ("gamma", None),
    ])
}

fn copies(h: &EngineHarness) -> Vec<PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(h.home().join("copies"))
        .map(|d| d.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

async fn settled(h: &EngineHarness, id: &str) -> Comparison {
    h.engine.comparisons().comparison(id).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_targets_review_one_version_and_their_findings_group_literally() {
    // One running place: the targets run one after another, yet every copy exists before
    // the first starts.
    let h = harness_with(|c| c.max_running = 1);
    let src = source(&h).await;
    let ctx = h.engine.handoffs().context(src.id.as_str()).await.unwrap();
    let beta = report(&[
        unwrap_finding(),
        revisor_finding(4, "// TODO: tests", "P1", "the tests are missing"),
        revisor_finding(1, "pub fn f", "P2", "a public function without docs"),
    ]);
    let gamma = report(&[unwrap_finding(), todo_finding()]);
    let prompt = format!(
        "review the crate\n!as beta !usage 100 20\n{}{}",
        says("beta", &beta),
        says("gamma", &gamma)
    );
    let before = copies(&h).len();
    let out = h
        .engine
        .comparisons()
        .compare(request(&src, &ctx.context_sha256, &prompt, three()))
        .await
        .unwrap();
    assert_eq!(out.task_ids.len(), 3);
    assert!(out.start_errors.is_empty());
    // Every copy is there at once, each with the source copy's current files.
    assert_eq!(copies(&h).len(), before + 3);
    for id in &out.task_ids {
        let dir = h.home().join("copies").join(id.as_str());
        assert_eq!(
            std::fs::read_to_string(dir.join("notes.md")).unwrap(),
            "notes\n"
        );
    }
    let mut tasks = Vec::new();
    for id in &out.task_ids {
        let t = h.wait(id).await;
        assert_eq!(t.state, TaskState::Completed, "{:?}", t.error);
        assert_eq!(
            t.controls.comparison_id.as_deref(),
            Some(out.comparison_id.as_str())
        );
        assert_eq!(t.mode, legate_core::TaskMode::ReadOnly);
        assert_eq!(t.role.as_ref().unwrap().name, "reviewer");
        tasks.push(t);
    }
    assert_eq!(tasks[1].model.as_deref(), Some("revisor-thorough"));
    let c = settled(&h, &out.comparison_id).await;
    assert!(c.complete, "{c:?}");
    assert!(!c.context_stale && c.source_matches);
    assert_eq!(c.reviews_grouped, 3);
    assert!(
        c.reviews
            .iter()
            .all(|r| r.context_matches && r.citations_checked)
    );
    assert_eq!(c.reviews[1].usage.as_ref().unwrap().input_tokens, Some(100));
    assert_eq!(c.reviews[1].summary.as_deref(), Some("tagged review"));
    let at = |line: u32| {
        c.findings
            .iter()
            .find(|f| f.path == "src/lib.rs" && f.line == line)
            .unwrap_or_else(|| panic!("no group at line {line}: {:?}", c.findings))
    };
    assert_eq!(at(2).agreement, Agreement::Identical);
    assert_eq!(at(2).reported_by.len(), 3);
    assert_eq!(at(2).quote.as_deref(), Some("x.unwrap()"));
    assert_eq!(at(4).agreement, Agreement::Different);
    assert_eq!(at(4).variants.len(), 2);
    assert_eq!(at(1).agreement, Agreement::NotReportedByAll);
    assert_eq!(at(1).reported_by, vec![out.task_ids[1].clone()]);
    // Each review's copy was made before it started, and says from where.
    let events = h.events(&out.task_ids[2]);
    assert!(events.iter().any(|e| matches!(&e.kind,
        legate_core::EventKind::Notice { detail, .. }
            if detail["event"] == "copy.ready" && detail["handedOffFrom"] == src.id.as_str())));
    // Nothing in it moves by itself: read again, it groups the same.
    assert_eq!(settled(&h, &out.comparison_id).await.findings, c.findings);
    // Durable: another engine on the same home (a restart) reads the same comparison.
    h.engine.shutdown().await;
    let next = builder().engine_in(h.base());
    let again = next
        .comparisons()
        .comparison(&out.comparison_id)
        .await
        .unwrap();
    assert!(again.complete, "{again:?}");
    assert_eq!(again.findings, c.findings);
    next.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_review_citing_a_path_outside_its_copy_fails_and_is_never_grouped() {
    let h = harness();
    let src = source(&h).await;
    let ctx = h.engine.handoffs().context(src.id.as_str()).await.unwrap();
    let escape = report(&[
        unwrap_finding(),
        serde_json::json!({"severity": "P0", "path": "../../../../etc/passwd", "line": 1,
            "quote": "root", "message": "m", "impact": "i", "suggestion": "s"}),
    ]);
    let absolute = report(
        &[serde_json::json!({"severity": "P0", "path": "/etc/passwd",
        "line": 1, "quote": "root", "message": "m", "impact": "i", "suggestion": "s"})],
    );
    let prompt = format!(
        "review\n{}{}",
        says("beta", &escape),
        says("gamma", &absolute)
    );
    let out = h
        .engine
        .comparisons()
        .compare(request(&src, &ctx.context_sha256, &prompt, three()))
        .await
        .unwrap();
    for id in &out.task_ids {
        h.wait(id).await;
    }
    let c = settled(&h, &out.comparison_id).await;
    assert!(!c.complete);
    assert_eq!(c.reviews_grouped, 1, "{c:?}");
    for r in &c.reviews[1..] {
        assert_eq!(r.state, Some(TaskState::Failed));
        assert_eq!(r.error.as_ref().unwrap().code, ErrorCode::ReportInvalid);
        assert!(!r.citations_checked);
    }
    assert!(
        c.findings
            .iter()
            .all(|f| !f.path.contains("..") && !f.path.starts_with('/'))
    );
    // Only revisor's own findings are grouped, trivially all "identical" among one review.
    assert!(
        c.findings
            .iter()
            .all(|f| f.reported_by == vec![out.task_ids[0].clone()])
    );
    h.engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_target_lists_and_stale_context_start_nothing() {
    let h = harness_with(|c| {
        c.max_running = 1;
        c.max_queued = 1;
    });
    let src = source(&h).await;
    let ctx = h.engine.handoffs().context(src.id.as_str()).await.unwrap();
    let tasks_before = h.engine.tasks(&Default::default()).unwrap().len();
    let copies_before = copies(&h);
    let refused = |e: legate_core::Error, code: ErrorCode| {
        assert_eq!(e.code, code, "{}", e.message);
    };
    for list in [
        targets(&[("agent", None)]),
        targets(&[
            ("agent", None),
            ("beta", None),
            ("gamma", None),
            ("beta", Some("revisor-thorough")),
            ("gamma", Some("revisor-thorough")),
        ]),
        // Twice as written, and twice once the agent's configured model is filled in.
        targets(&[("beta", None), ("beta", None)]),
        targets(&[("agent", None), ("agent", Some("revisor-standard"))]),
    ] {
        let e = h
            .engine
            .comparisons()
            .compare(request(&src, &ctx.context_sha256, "review", list))
            .await
            .unwrap_err();
        refused(e, ErrorCode::InvalidInput);
    }
    let e = h
        .engine
        .comparisons()
        .compare(request(&src, &"0".repeat(64), "review", three()))
        .await
        .unwrap_err();
    refused(e, ErrorCode::ContextChanged);
    // One running and one queued place for three targets: none starts.
    let e = h
        .engine
        .comparisons()
        .compare(request(&src, &ctx.context_sha256, "review", three()))
        .await
        .unwrap_err();
    refused(e, ErrorCode::QueueFull);
    let e = h
        .engine
        .comparisons()
        .comparison("no-such-comparison")
        .await
        .unwrap_err();
    refused(e, ErrorCode::ComparisonNotFound);
    assert_eq!(
        h.engine.tasks(&Default::default()).unwrap().len(),
        tasks_before
    );
    assert_eq!(copies(&h), copies_before, "no copy was made");
    h.engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_source_or_review_copy_makes_the_comparison_stale() {
    let h = harness();
    let src = source(&h).await;
    let ctx = h.engine.handoffs().context(src.id.as_str()).await.unwrap();
    let out = h
        .engine
        .comparisons()
        .compare(request(
            &src,
            &ctx.context_sha256,
            "review",
            targets(&[("agent", None), ("beta", None)]),
        ))
        .await
        .unwrap();
    for id in &out.task_ids {
        h.wait(id).await;
    }
    assert!(settled(&h, &out.comparison_id).await.complete);
    // The source copy moves on (a next turn in its context): the comparison is of another
    // version now, though each review's copy still holds what was compared.
    let next = h
        .engine
        .resume(ContinueRequest {
            context_id: src.context_id.clone(),
            prompt: "write later.txt: later\\n".into(),
            mode: None,
            timeout: None,
        })
        .unwrap();
    assert_eq!(h.wait(&next.id).await.state, TaskState::Completed);
    let c = settled(&h, &out.comparison_id).await;
    assert!(!c.complete && c.context_stale && !c.source_matches, "{c:?}");
    assert!(c.reviews.iter().all(|r| r.context_matches));
    // A review's copy changed behind Legate's back: that review no longer matches.
    let copy = h.home().join("copies").join(out.task_ids[1].as_str());
    std::fs::write(copy.join("src/lib.rs"), "changed\n").unwrap();
    let c = settled(&h, &out.comparison_id).await;
    assert!(c.reviews[0].context_matches);
    assert!(!c.reviews[1].context_matches);
    h.engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_review_is_canceled_or_discarded_on_its_own() {
    let h = harness();
    let src = source(&h).await;
    let ctx = h.engine.handoffs().context(src.id.as_str()).await.unwrap();
    let prompt = "review\n!as gamma !hang\n";
    let out = h
        .engine
        .comparisons()
        .compare(request(&src, &ctx.context_sha256, prompt, three()))
        .await
        .unwrap();
    let (a, b) = (
        h.wait(&out.task_ids[0]).await,
        h.wait(&out.task_ids[1]).await,
    );
    assert_eq!(
        (a.state, b.state),
        (TaskState::Completed, TaskState::Completed)
    );
    h.wait_state(&out.task_ids[2], TaskState::Working).await;
    h.engine.cancel(out.task_ids[2].as_str()).unwrap();
    assert_eq!(h.wait(&out.task_ids[2]).await.state, TaskState::Canceled);
    h.engine
        .reviews()
        .discard(out.task_ids[0].as_str())
        .await
        .unwrap();
    let c = settled(&h, &out.comparison_id).await;
    assert!(!c.complete);
    assert_eq!(c.reviews[2].state, Some(TaskState::Canceled));
    assert!(
        !c.reviews[0].context_matches,
        "a discarded copy matches nothing"
    );
    assert!(c.reviews[1].context_matches, "the others are untouched");
    assert_eq!(c.reviews_grouped, 2);
    // A review's copy keeps the original baseline, like a handoff's: its patch is the
    // source's change alone, nothing of the read-only reviewer's.
    let p = h
        .engine
        .reviews()
        .preview(out.task_ids[1].as_str())
        .await
        .unwrap();
    let files: Vec<_> = p.patch.files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(files, vec!["notes.md"]);
    h.engine.shutdown().await;
}
