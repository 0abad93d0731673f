//! The "Done when" suite of supervision (issue 14), with the scripted ACP agent asking for
//! real over its pipes: a policy `ask` decided by a supervising agent (the scripted agent
//! answering the schema, and revisor), one whose supervising agent answers garbage, hangs or
//! tries a tool, each then decided by a human answering through the store
//! as another process does; one nobody answers, refused at the deadline; and every decision
//! in the audit with its decider; and the supervising agent out of the caller's reach (no
//! task on it, a fresh home per question, its model the supervisor's). The suites that need the `legate` binary as a second process
//! (the CLI's approve, the supervisor endpoint's token, a restart) are in
//! `supervision_cli.rs`.
//!
//! Every wait follows the task's events (`awaiting_supervision`, the task's end); nothing
//! sleeps to synchronise.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_backend::selection::Choice;
use legate_core::{Decider, Decision, ErrorCode, Event, EventKind, TaskId, TaskState};
use legate_engine::{
    Answer, ApprovalAnswer, ApprovalFilter, ApprovalState, AuditEntry, AuditFilter, Records,
    SubmitRequest, TaskFilter,
};
use legate_testkit::harness::{EngineHarness, TestAgent};
use legate_testkit::judge::MEMORY_FILE;
use std::time::Duration;

/// The policy of every test: `touch` needs a supervisor (the issue's example rule).
const POLICY: &str = r#"
[[policy.rules]]
id = "ask-before-touch"
kind = "execute"
program = "touch"
decision = "ask"
reason = "touching files needs a supervisor"
"#;

/// The worker's prompt: one command the policy sends to a supervisor.
const PROMPT: &str = "run touch judged.txt";

/// A harness with the worker (the scripted agent), a judge answering as `judge` says
/// (`LEGATE_TESTKIT_JUDGE`; `None`: no supervising agent), the policy, and `deadline`.
fn harness(judge: Option<(&str, TestAgent)>, deadline: Duration) -> EngineHarness {
    let mut builder = EngineHarness::builder().agent(TestAgent::scripted("worker"));
    let name = judge.as_ref().map(|(name, _)| name.to_string());
    if let Some((_, agent)) = judge {
        builder = builder.agent(agent);
    }
    builder
        .default_agent("worker")
        .config(move |c| {
            let rules = legate_supervisor::policy::parse_file(POLICY).unwrap();
            c.policy = legate_supervisor::Policy::from_tables(Vec::new(), rules).unwrap();
            c.approvals.deadline = deadline;
            c.approvals.agent = name;
            c.approvals.agent_timeout = Duration::from_secs(20);
        })
        .start()
}

fn scripted_judge(answer: &str) -> (&'static str, TestAgent) {
    (
        "judge",
        TestAgent::scripted("judge").env("LEGATE_TESTKIT_JUDGE", answer),
    )
}

fn is_awaiting(e: &Event) -> bool {
    matches!(&e.kind, EventKind::Notice { detail, .. } if detail["event"] == "awaiting_supervision")
}

/// The approval id the task's `awaiting_supervision` notice names, once it comes.
async fn awaited(h: &EngineHarness, id: &TaskId) -> String {
    let events = h.until(id, is_awaiting).await;
    let Some(EventKind::Notice { detail, .. }) = events.last().map(|e| &e.kind) else {
        unreachable!()
    };
    detail["approvalId"].as_str().unwrap().to_string()
}

/// The verdicts sent to the agent about the `touch` call.
fn touch_verdicts(h: &EngineHarness, id: &TaskId) -> Vec<legate_core::Ruling> {
    h.events(id)
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::Permission { title, verdict, .. } if title.contains("touch") => {
                Some(verdict)
            }
            _ => None,
        })
        .collect()
}

fn audit(h: &EngineHarness, id: &TaskId) -> Vec<AuditEntry> {
    let mut entries = h
        .engine
        .approvals()
        .audit(&AuditFilter {
            task_id: Some(id.clone()),
            since: None,
            limit: 100,
        })
        .unwrap();
    entries.reverse(); // oldest first
    entries
}

/// Answers `approval` as another process on the same home does: through `Records`, never the
/// running engine.
fn answer_from_another_process(h: &EngineHarness, approval: &str, answer: Answer) {
    let records = Records::open(&h.engine.config().paths).unwrap();
    records
        .answer_approval(
            approval,
            ApprovalAnswer {
                answer,
                reason: Some("checked by a person".into()),
                channel: "cli".into(),
            },
        )
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_nobody_answers_is_refused_at_the_deadline() {
    let h = harness(None, Duration::from_secs(1));
    let task = h.engine.submit(SubmitRequest::new(PROMPT)).unwrap();
    let approval = awaited(&h, &task.id).await;
    let done = h.wait(&task.id).await;
    assert_eq!(done.state, TaskState::Completed);

    let verdicts = touch_verdicts(&h, &task.id);
    assert_eq!(verdicts.len(), 1, "{verdicts:?}");
    assert_eq!(verdicts[0].decision, Decision::Deny);
    assert_eq!(verdicts[0].decider, Decider::Deadline);
    assert_eq!(verdicts[0].option_id.as_deref(), Some("reject"));
    assert!(
        verdicts[0]
            .reason
            .contains("no supervisor answered within 1 s"),
        "{}",
        verdicts[0].reason
    );
    let entries = audit(&h, &task.id);
    let last = entries.last().unwrap();
    assert_eq!(last.decider, Decider::Deadline);
    assert_eq!(last.rule_id.as_deref(), Some("ask-before-touch"));
    assert_eq!(last.approval_id.as_deref(), Some(approval.as_str()));
    let closed = h
        .engine
        .approvals()
        .list(&ApprovalFilter {
            task_id: Some(task.id.clone()),
            pending_only: false,
            limit: 10,
        })
        .unwrap();
    assert_eq!(closed[0].state, ApprovalState::Expired);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_supervising_agent_answering_the_schema_decides() {
    let h = harness(Some(scripted_judge("allow")), Duration::from_secs(120));
    let done = h.run(SubmitRequest::new(PROMPT)).await;
    assert_eq!(done.state, TaskState::Completed);

    let verdicts = touch_verdicts(&h, &done.id);
    assert_eq!(verdicts.len(), 1, "{verdicts:?}");
    assert_eq!(verdicts[0].decision, Decision::Allow);
    assert_eq!(verdicts[0].decider, Decider::Agent);
    assert_eq!(
        verdicts[0].option_id.as_deref(),
        Some("allow"),
        "allowed once, never always"
    );
    // It judged in an empty directory of its own, not the worker's sandbox.
    assert!(
        verdicts[0].reason.contains("its directory holds 0 entries"),
        "{}",
        verdicts[0].reason
    );
    let entry = audit(&h, &done.id).pop().unwrap();
    assert_eq!(entry.decider, Decider::Agent);
    assert_eq!(entry.channel.as_deref(), Some("agent:judge"));
    assert_eq!(entry.rule_id.as_deref(), Some("ask-before-touch"));
    // Its throwaway sandbox is gone.
    let judges = h.home().join("judges");
    let left = std::fs::read_dir(&judges).map_or(0, |d| d.count());
    assert_eq!(left, 0, "judge sandboxes left in {}", judges.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revisor_as_the_supervising_agent_denies_a_command() {
    let h = harness(
        Some(("rev", TestAgent::scripted("rev"))),
        Duration::from_secs(120),
    );
    let done = h.run(SubmitRequest::new(PROMPT)).await;
    let verdicts = touch_verdicts(&h, &done.id);
    assert_eq!(verdicts[0].decision, Decision::Deny);
    assert_eq!(verdicts[0].decider, Decider::Agent);
    assert!(
        verdicts[0].reason.contains("revisor allows only reads"),
        "{}",
        verdicts[0].reason
    );
}

/// The judge answers badly (`judge`), does not decide, and the audit says what it answered;
/// the approval waits for a human, who decides.
async fn falls_through_to_a_human(judge: &str, answered: &str) {
    let h = harness(Some(scripted_judge(judge)), Duration::from_secs(120));
    let task = h.engine.submit(SubmitRequest::new(PROMPT)).unwrap();
    let approval = awaited(&h, &task.id).await;
    answer_from_another_process(&h, &approval, Answer::Deny);
    let done = h.wait(&task.id).await;
    assert_eq!(done.state, TaskState::Completed);

    let verdicts = touch_verdicts(&h, &done.id);
    assert_eq!(verdicts.len(), 1, "{verdicts:?}");
    assert_eq!(verdicts[0].decider, Decider::Human);
    assert_eq!(verdicts[0].decision, Decision::Deny);
    let entries = audit(&h, &done.id);
    let passed: Vec<&AuditEntry> = entries
        .iter()
        .filter(|e| e.decider == Decider::Agent)
        .collect();
    assert_eq!(passed.len(), 1, "{entries:?}");
    assert_eq!(
        passed[0].decision,
        Decision::Ask,
        "a judge that passes decides nothing"
    );
    assert_eq!(passed[0].approval_id.as_deref(), Some(approval.as_str()));
    assert!(
        passed[0].reason.contains(answered),
        "{judge}: {}",
        passed[0].reason
    );
    let human = entries.last().unwrap();
    assert_eq!(human.decider, Decider::Human);
    assert_eq!(human.channel.as_deref(), Some("cli"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_supervising_agent_answering_garbage_falls_through_to_a_human() {
    falls_through_to_a_human("garbage", "Looks fine to me, allow it!").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_supervising_agent_widening_the_schema_falls_through_to_a_human() {
    falls_through_to_a_human("extra", "unknown field").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_supervising_agent_falls_through_to_a_human() {
    let h = EngineHarness::builder()
        .agent(TestAgent::scripted("worker"))
        .agent(TestAgent::scripted("judge").env("LEGATE_TESTKIT_JUDGE", "hang"))
        .default_agent("worker")
        .config(|c| {
            let rules = legate_supervisor::policy::parse_file(POLICY).unwrap();
            c.policy = legate_supervisor::Policy::from_tables(Vec::new(), rules).unwrap();
            c.approvals.agent = Some("judge".into());
            c.approvals.agent_timeout = Duration::from_secs(1);
        })
        .start();
    let task = h.engine.submit(SubmitRequest::new(PROMPT)).unwrap();
    let approval = awaited(&h, &task.id).await;
    answer_from_another_process(&h, &approval, Answer::Allow);
    let done = h.wait(&task.id).await;
    let verdicts = touch_verdicts(&h, &done.id);
    assert_eq!(verdicts[0].decider, Decider::Human);
    assert_eq!(verdicts[0].decision, Decision::Allow);
    let entries = audit(&h, &done.id);
    assert!(
        entries
            .iter()
            .any(|e| e.decider == Decider::Agent && e.reason.contains("did not answer within 1 s")),
        "{entries:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_supervising_agent_never_runs_a_callers_task() {
    // Issue 29, finding 1. Before: the judge was an ordinary agent, so a caller ran a task on
    // it (here: the worker, configured as the judge, is the default agent), and what that
    // task wrote into its home every later judge session read. Now no caller task reaches it:
    // refused before anything is stored, on every path that names an agent.
    let h = EngineHarness::builder()
        .agent(TestAgent::scripted("worker").env("LEGATE_TESTKIT_JUDGE", "allow"))
        .agent(TestAgent::scripted("other"))
        .config(|c| {
            let rules = legate_supervisor::policy::parse_file(POLICY).unwrap();
            c.policy = legate_supervisor::Policy::from_tables(Vec::new(), rules).unwrap();
            c.approvals.agent = Some("worker".into());
        })
        .start();
    let e = h.engine.submit(SubmitRequest::new(PROMPT)).unwrap_err();
    assert_eq!(e.code, ErrorCode::AgentReserved, "{e}");
    let mut named = SubmitRequest::new("write $HOME/note.txt");
    named.agent = Some("worker".into());
    let e = h.engine.submit_or_ask(named).unwrap_err();
    assert_eq!(e.code, ErrorCode::AgentReserved, "{e}");
    assert!(e.message.contains("supervising agent"), "{e}");
    let e = h
        .engine
        .agents()
        .set_model_preference("worker", Some(&Choice::Model("revisor-thorough".into())))
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::AgentReserved, "{e}");
    let listed = h.engine.tasks(&TaskFilter::default()).unwrap();
    assert!(listed.is_empty(), "nothing stored: {listed:?}");
    assert!(!h.home().join("judges").exists(), "no judge was started");
    assert!(
        !h.home().join("models").join("worker.json").exists(),
        "no preference saved"
    );
    // Listed to callers as what it is.
    let limits = h.engine.agents().limitations("worker").unwrap();
    assert!(
        limits.iter().any(|l| l.name == "supervisingAgent"),
        "{limits:?}"
    );
    assert!(h.engine.agents().reserved("worker"));
    assert!(!h.engine.agents().reserved("other"));
    // Another agent still runs.
    let mut other = SubmitRequest::new("say hi");
    other.agent = Some("other".into());
    assert_eq!(h.run(other).await.state, TaskState::Completed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_supervising_agent_remembers_nothing_between_questions() {
    // Issue 29, finding 1. Before: every question ran with the agent's one state directory
    // as its HOME, so what one judge session wrote there (or a caller's task on the agent)
    // the next one read: this judge denied the second request after allowing the first.
    let h = harness(Some(scripted_judge("remember")), Duration::from_secs(120));
    for _ in 0..2 {
        let done = h.run(SubmitRequest::new(PROMPT)).await;
        let verdicts = touch_verdicts(&h, &done.id);
        assert_eq!(verdicts[0].decider, Decider::Agent, "{verdicts:?}");
        assert!(
            verdicts[0].reason.contains("nothing remembered"),
            "{}",
            verdicts[0].reason
        );
        assert_eq!(verdicts[0].decision, Decision::Allow);
    }
    assert!(
        !h.home()
            .join("agents")
            .join("judge")
            .join(MEMORY_FILE)
            .exists(),
        "the agent's shared state directory is not its home"
    );
    let left = std::fs::read_dir(h.home().join("judges")).map_or(0, |d| d.count());
    assert_eq!(left, 0, "every question's directories are removed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_supervising_agent_answers_with_the_supervisors_model_only() {
    // Issue 29, finding 1. Before: the judge ran with the saved preference a caller set
    // (`set_model`), over its configured model. Now a preference, even one saved before this
    // release (planted here), is never read: `[supervision] model`, else the agent's `model`.
    let (name, judge) = scripted_judge("allow");
    let h = harness(
        Some((name, judge.model("revisor-thorough"))),
        Duration::from_secs(120),
    );
    let e = h
        .engine
        .agents()
        .set_model_preference("judge", Some(&Choice::Model("revisor-standard".into())))
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::AgentReserved, "{e}");
    legate_backend::selection::save_preference(
        &h.home(),
        "judge",
        Some(&Choice::Model("revisor-standard".into())),
    )
    .unwrap();
    let done = h.run(SubmitRequest::new(PROMPT)).await;
    let verdicts = touch_verdicts(&h, &done.id);
    assert_eq!(verdicts[0].decider, Decider::Agent, "{verdicts:?}");
    assert!(
        verdicts[0].reason.contains("model revisor-thorough"),
        "{}",
        verdicts[0].reason
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn supervision_model_is_the_judges_model() {
    let h = EngineHarness::builder()
        .agent(TestAgent::scripted("worker"))
        .agent(TestAgent::scripted("judge").env("LEGATE_TESTKIT_JUDGE", "allow"))
        .default_agent("worker")
        .config(|c| {
            let rules = legate_supervisor::policy::parse_file(POLICY).unwrap();
            c.policy = legate_supervisor::Policy::from_tables(Vec::new(), rules).unwrap();
            c.approvals.agent = Some("judge".into());
            c.approvals.agent_timeout = Duration::from_secs(20);
            c.approvals.model = Some("revisor-thorough".into());
        })
        .start();
    let done = h.run(SubmitRequest::new(PROMPT)).await;
    let verdicts = touch_verdicts(&h, &done.id);
    assert!(
        verdicts[0].reason.contains("model revisor-thorough"),
        "{}",
        verdicts[0].reason
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_supervising_agent_has_no_tools() {
    // The judge asks to edit a file first and allows only if that was refused.
    let h = harness(Some(scripted_judge("tool")), Duration::from_secs(120));
    let done = h.run(SubmitRequest::new(PROMPT)).await;
    let verdicts = touch_verdicts(&h, &done.id);
    assert_eq!(verdicts[0].decider, Decider::Agent);
    assert!(
        verdicts[0].reason.contains("my edit was refused"),
        "{}",
        verdicts[0].reason
    );
    assert_eq!(verdicts[0].decision, Decision::Allow);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleanup_removes_the_questions_of_stopped_legates_only() {
    // Issue 29, finding 8: `legate cleanup` now sweeps `judges/` too (the `kill -9` itself is
    // in crates/legate/tests/approvals.rs).
    let h = harness(None, Duration::from_secs(120));
    let judges = h.home().join("judges");
    let dead = judges.join("dead00000000-0123");
    let own = judges.join(format!("{}-0123", h.engine.runner_id()));
    std::fs::create_dir_all(&own).unwrap();
    // The engine's own retention sweep also runs once at its start (then once a minute) and
    // may take the first directory before this call does; a second round cannot be raced.
    let mut reports = Vec::new();
    for _ in 0..2 {
        std::fs::create_dir_all(dead.join("home")).unwrap();
        let report = h.engine.reviews().cleanup().await.unwrap();
        assert!(!dead.exists(), "a stopped runner's question is removed");
        assert!(own.exists(), "this engine's own question is kept");
        let swept = report.judge_dirs_removed;
        reports.push(report);
        if swept == 1 {
            return;
        }
    }
    panic!("cleanup never reported the stopped runner's question: {reports:?}");
}
