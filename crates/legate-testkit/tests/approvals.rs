//! The durable approval queue against the scripted agent on real pipes and a real store: an
//! `ask` ruling waits for an answer from this process or another store handle, is refused at
//! the deadline, is decided once when answers race, expires on cancel and on a restart after
//! its process was killed, and every decision is audited.
//!
//! Until the policy lands, `Ask` comes from a test supervisor that asks about every command
//! (and leaves everything else to the built-in table).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_core::{
    Decider, Decision, ErrorCode, Event, EventKind, Ruling, TaskId, TaskState, ToolKind,
};
use legate_engine::{
    Answer, ApprovalAnswer, ApprovalFilter, ApprovalState, AuditEntry, AuditFilter, Paths, Records,
    SubmitRequest,
};
use legate_testkit::supervisors::AskCommands;
use legate_testkit::{EngineHarness, TestAgent};
use std::io::BufRead;
use std::sync::Arc;
use std::time::Duration;

fn harness(deadline: Duration) -> EngineHarness {
    EngineHarness::builder()
        .agent(TestAgent::scripted("agent"))
        .supervisor(Arc::new(AskCommands))
        .config(move |c| c.approvals.deadline = deadline)
        .start()
}

/// The approval id of the `n`th `awaiting supervision` notice (from 1), once it is stored.
async fn nth_awaiting(h: &EngineHarness, task: &TaskId, n: usize) -> String {
    let events = h
        .until(task, |e| {
            awaiting(e).is_some() && count(&h.events(task)) >= n
        })
        .await;
    events.iter().filter_map(awaiting).nth(n - 1).unwrap()
}

fn awaiting(e: &Event) -> Option<String> {
    match &e.kind {
        EventKind::Notice { detail, .. } if detail["event"] == "awaiting_supervision" => {
            Some(detail["approvalId"].as_str().unwrap().to_string())
        }
        _ => None,
    }
}

fn count(events: &[Event]) -> usize {
    events.iter().filter(|e| awaiting(e).is_some()).count()
}

fn verdicts(h: &EngineHarness, task: &TaskId) -> Vec<Ruling> {
    h.events(task)
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::Permission { verdict, .. } => Some(verdict),
            _ => None,
        })
        .collect()
}

fn audit_of(entries: Vec<AuditEntry>, task: &TaskId) -> Vec<AuditEntry> {
    let mut mine: Vec<_> = entries.into_iter().filter(|e| &e.task_id == task).collect();
    mine.reverse();
    mine
}

fn answer(answer: Answer, channel: &str, reason: Option<&str>) -> ApprovalAnswer {
    ApprovalAnswer {
        answer,
        reason: reason.map(str::to_owned),
        channel: channel.into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_waits_durably_and_an_in_process_answer_lets_the_command_run() {
    let h = harness(Duration::from_secs(60));
    let task = h
        .engine
        .submit(SubmitRequest::new("run touch allowed.txt"))
        .unwrap();
    let id = nth_awaiting(&h, &task.id, 1).await;
    // Stored before it was told, with what the agent asked.
    let pending = h
        .engine
        .approvals()
        .list(&ApprovalFilter::default())
        .unwrap();
    assert_eq!(pending.len(), 1, "{pending:?}");
    let approval = &pending[0];
    assert_eq!(approval.id, id);
    assert_eq!(approval.state, ApprovalState::Pending);
    assert_eq!(approval.task_id, task.id);
    assert_eq!(approval.agent, "agent");
    assert_eq!(approval.rule_id.as_deref(), Some("ask-commands"));
    assert_eq!(approval.tool.kind, ToolKind::Execute);
    assert_eq!(
        approval.tool.command.as_deref(),
        Some(&["touch".to_string(), "allowed.txt".to_string()][..])
    );
    assert!(!approval.options.is_empty());
    assert!(approval.deadline.0 > approval.created_at.0);
    assert_eq!(h.engine.approvals().pending(&task.id).unwrap().len(), 1);

    let answered = h
        .engine
        .approvals()
        .answer(&id, answer(Answer::Allow, "cli", None))
        .unwrap();
    assert_eq!(answered.state, ApprovalState::Allowed);
    let done = h.wait(&task.id).await;
    assert_eq!(done.state, TaskState::Completed, "{done:?}");
    assert!(done.root.unwrap().join("allowed.txt").exists());

    let sent = verdicts(&h, &task.id);
    let v = sent.last().unwrap();
    assert_eq!((v.decision, v.decider), (Decision::Allow, Decider::Human));
    let audit = audit_of(
        h.engine.approvals().audit(&AuditFilter::default()).unwrap(),
        &task.id,
    );
    let last = audit.last().unwrap();
    assert_eq!(last.decider, Decider::Human);
    assert_eq!(last.channel.as_deref(), Some("cli"));
    assert_eq!(last.approval_id.as_deref(), Some(id.as_str()));
    assert_eq!(last.rule_id.as_deref(), Some("ask-commands"));
    assert_eq!(last.option_id, v.option_id);
    let closed = h
        .engine
        .approvals()
        .list(&ApprovalFilter {
            pending_only: false,
            ..Default::default()
        })
        .unwrap();
    assert_eq!(closed[0].decided.as_ref().map(|d| d.id), Some(last.id));
    assert!(h.engine.approvals().pending(&task.id).unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_written_through_another_store_handle_reaches_the_waiting_agent() {
    let h = harness(Duration::from_secs(60));
    let task = h
        .engine
        .submit(SubmitRequest::new("run touch denied.txt"))
        .unwrap();
    let id = nth_awaiting(&h, &task.id, 1).await;
    // As `legate deny` in another process: its own store handle, no engine.
    let records = Records::open(&Paths::new(h.home())).unwrap();
    assert_eq!(
        records.approvals(&ApprovalFilter::default()).unwrap()[0].id,
        id
    );
    records
        .answer_approval(&id, answer(Answer::Deny, "cli", Some("not in this repo")))
        .unwrap();
    let done = h.wait(&task.id).await;
    assert!(!done.root.unwrap().join("denied.txt").exists());
    let v = verdicts(&h, &task.id).pop().unwrap();
    assert_eq!((v.decision, v.decider), (Decision::Deny, Decider::Human));
    assert!(v.reason.contains("not in this repo"), "{v:?}");
    assert!(
        v.option_id.as_deref().is_some_and(|o| o.contains("reject")),
        "{v:?}"
    );
    let audit = audit_of(records.audit(&AuditFilter::default()).unwrap(), &task.id);
    assert_eq!(audit.last().unwrap().decider, Decider::Human);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nobody_answers_and_the_deadline_refuses_with_the_refusal_preference() {
    let h = harness(Duration::from_secs(1));
    let task = h
        .engine
        .submit(SubmitRequest::new("run touch late.txt"))
        .unwrap();
    let id = nth_awaiting(&h, &task.id, 1).await;
    let done = h.wait(&task.id).await;
    assert!(!done.root.unwrap().join("late.txt").exists());
    let v = verdicts(&h, &task.id).pop().unwrap();
    assert_eq!((v.decision, v.decider), (Decision::Deny, Decider::Deadline));
    assert!(
        v.reason.contains("no supervisor answered within 1 s"),
        "{v:?}"
    );
    assert!(
        v.option_id.as_deref().is_some_and(|o| o.contains("reject")),
        "{v:?}"
    );
    let all = ApprovalFilter {
        pending_only: false,
        ..Default::default()
    };
    let approval = h.engine.approvals().list(&all).unwrap().remove(0);
    assert_eq!(approval.state, ApprovalState::Expired);
    // Too late now: the first close stands.
    let late = h
        .engine
        .approvals()
        .answer(&id, answer(Answer::Allow, "cli", None))
        .unwrap_err();
    assert_eq!(late.code, ErrorCode::ApprovalClosed);
    let audit = audit_of(
        h.engine.approvals().audit(&AuditFilter::default()).unwrap(),
        &task.id,
    );
    assert_eq!(audit.last().unwrap().decider, Decider::Deadline);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_answers_race_and_exactly_one_wins() {
    let h = harness(Duration::from_secs(60));
    let task = h
        .engine
        .submit(SubmitRequest::new("run touch raced.txt"))
        .unwrap();
    let id = nth_awaiting(&h, &task.id, 1).await;
    let unknown = h
        .engine
        .approvals()
        .answer("no-such-id", answer(Answer::Allow, "cli", None))
        .unwrap_err();
    assert_eq!(unknown.code, ErrorCode::ApprovalNotFound);
    let records = Records::open(&Paths::new(h.home())).unwrap();
    let barrier = Arc::new(std::sync::Barrier::new(2));
    let (b1, b2, id1, id2, engine) = (
        barrier.clone(),
        barrier,
        id.clone(),
        id.clone(),
        h.engine.clone(),
    );
    let allow = std::thread::spawn(move || {
        b1.wait();
        engine
            .approvals()
            .answer(&id1, answer(Answer::Allow, "mcp", None))
    });
    let deny = std::thread::spawn(move || {
        b2.wait();
        records.answer_approval(&id2, answer(Answer::Deny, "cli", None))
    });
    let results = [allow.join().unwrap(), deny.join().unwrap()];
    let won: Vec<_> = results.iter().filter(|r| r.is_ok()).collect();
    assert_eq!(won.len(), 1, "{results:?}");
    let lost = results.iter().find_map(|r| r.as_ref().err()).unwrap();
    assert_eq!(lost.code, ErrorCode::ApprovalClosed);
    let winner = won[0].as_ref().unwrap().answer.clone().unwrap();
    let done = h.wait(&task.id).await;
    let exists = done.root.unwrap().join("raced.txt").exists();
    assert_eq!(exists, winner.answer == Answer::Allow, "{winner:?}");
    let audit = audit_of(
        h.engine.approvals().audit(&AuditFilter::default()).unwrap(),
        &task.id,
    );
    let queued: Vec<_> = audit.iter().filter(|e| e.approval_id.is_some()).collect();
    assert_eq!(queued.len(), 1, "one decision sent: {audit:?}");
    assert_eq!(queued[0].channel.as_deref(), Some(winner.channel.as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_while_waiting_expires_the_approval_and_answers_cancelled() {
    let h = harness(Duration::from_secs(60));
    let task = h
        .engine
        .submit(SubmitRequest::new("run touch never.txt"))
        .unwrap();
    let id = nth_awaiting(&h, &task.id, 1).await;
    h.engine.cancel(task.id.as_str()).unwrap();
    let done = h.wait_state(&task.id, TaskState::Canceled).await;
    assert_eq!(done.state, TaskState::Canceled);
    let all = ApprovalFilter {
        pending_only: false,
        ..Default::default()
    };
    let approval = h
        .engine
        .approvals()
        .list(&all)
        .unwrap()
        .into_iter()
        .find(|a| a.id == id)
        .unwrap();
    assert_eq!(approval.state, ApprovalState::Expired, "{approval:?}");
    assert!(
        approval
            .closed_reason
            .as_deref()
            .unwrap_or("")
            .contains("canceled"),
        "{approval:?}"
    );
    let audit = audit_of(
        h.engine.approvals().audit(&AuditFilter::default()).unwrap(),
        &task.id,
    );
    let last = audit.last().unwrap();
    assert_eq!(last.approval_id.as_deref(), Some(id.as_str()));
    assert_eq!(
        last.option_id, None,
        "a canceled turn's request is answered cancelled"
    );
    assert!(!done.root.unwrap().join("never.txt").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_for_task_covers_the_same_program_and_nothing_else() {
    let h = harness(Duration::from_secs(60));
    let task = h
        .engine
        .submit(SubmitRequest::new(
            "run touch a.txt\nrun touch b.txt\nrun rm a.txt",
        ))
        .unwrap();
    let first = nth_awaiting(&h, &task.id, 1).await;
    h.engine
        .approvals()
        .answer(&first, answer(Answer::AllowForTask, "cli", None))
        .unwrap();
    // `touch b.txt` is covered; `rm` is another program and asks again.
    let second = nth_awaiting(&h, &task.id, 2).await;
    assert_ne!(first, second);
    let asked = h.engine.approvals().pending(&task.id).unwrap();
    assert_eq!(asked[0].tool.command.as_ref().unwrap()[0], "rm");
    h.engine
        .approvals()
        .answer(&second, answer(Answer::Deny, "cli", None))
        .unwrap();
    let done = h.wait(&task.id).await;
    let root = done.root.unwrap();
    assert!(root.join("a.txt").exists() && root.join("b.txt").exists());
    let audit = audit_of(
        h.engine.approvals().audit(&AuditFilter::default()).unwrap(),
        &task.id,
    );
    let scoped = audit
        .iter()
        .find(|e| e.channel.as_deref() == Some(&format!("allow-for-task:{first}")))
        .unwrap_or_else(|| panic!("no scoped allow in {audit:?}"));
    assert_eq!(scoped.decision, Decision::Allow);
    assert_eq!(scoped.tool.command.as_ref().unwrap()[1], "b.txt");
    assert_eq!(count(&h.events(&task.id)), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tables_own_decisions_are_audited_too() {
    let h = harness(Duration::from_secs(60));
    let task = h.run(SubmitRequest::new("write a.txt: hi")).await;
    assert_eq!(task.state, TaskState::Completed, "{task:?}");
    let audit = audit_of(
        h.engine.approvals().audit(&AuditFilter::default()).unwrap(),
        &task.id,
    );
    assert_eq!(audit.len(), 1, "{audit:?}");
    assert_eq!(
        (audit[0].decider, audit[0].decision),
        (Decider::Table, Decision::Allow)
    );
    assert_eq!(audit[0].tool.kind, ToolKind::Edit);
    assert_eq!(audit[0].approval_id, None);
}

/// The environment variable that makes [`child_engine_waiting_for_an_approval`] run: the
/// base directory of the home to use.
const CHILD_BASE: &str = "LEGATE_TEST_APPROVAL_CHILD";

/// Not a test on its own: run by [`a_restart_expires_the_approvals_of_a_killed_process`] as a
/// child process. Starts an engine, gets an approval pending, says so on stdout, and waits
/// to be killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_engine_waiting_for_an_approval() {
    let Some(base) = std::env::var_os(CHILD_BASE) else {
        return;
    };
    let base = std::path::PathBuf::from(base);
    let engine = EngineHarness::builder()
        .agent(TestAgent::scripted("agent"))
        .supervisor(Arc::new(AskCommands))
        .engine_in(&base);
    let task = engine
        .submit(SubmitRequest::new("run touch orphan.txt"))
        .unwrap();
    let events = legate_testkit::harness::until(&engine, &task.id, |e| awaiting(e).is_some()).await;
    let id = events.iter().find_map(awaiting).unwrap();
    println!("WAITING {} {id}", task.id);
    std::future::pending::<()>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_expires_the_approvals_of_a_killed_process() {
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(dir.path()).unwrap();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_engine_waiting_for_an_approval",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_BASE, &base)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let line = tokio::task::spawn_blocking(move || {
        std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            // libtest prints the test's name on the same line first.
            .find_map(|l| l.find("WAITING ").map(|at| l[at..].to_string()))
    })
    .await
    .unwrap()
    .expect("the child engine never had an approval pending");
    let mut words = line.split_whitespace().skip(1);
    let (task_id, approval_id) = (
        TaskId(words.next().unwrap().into()),
        words.next().unwrap().to_string(),
    );
    // `Child::kill` is SIGKILL (kill -9): nothing of the child's runs its cleanup.
    child.kill().unwrap();
    child.wait().unwrap();

    // The next process on this home recovers: the task is interrupted, the approval expired.
    let records = Records::open(&Paths::new(base.join("home"))).unwrap();
    let task = records.find_task(task_id.as_str()).unwrap();
    assert_eq!(task.state, TaskState::Failed, "{task:?}");
    assert_eq!(task.error_code(), Some(ErrorCode::ServerRestarted));
    let all = ApprovalFilter {
        pending_only: false,
        ..Default::default()
    };
    let approval = records
        .approvals(&all)
        .unwrap()
        .into_iter()
        .find(|a| a.id == approval_id)
        .unwrap();
    assert_eq!(approval.state, ApprovalState::Expired, "{approval:?}");
    assert!(
        approval
            .closed_reason
            .as_deref()
            .unwrap()
            .contains("stopped"),
        "{approval:?}"
    );
    assert!(
        records
            .approvals(&ApprovalFilter::default())
            .unwrap()
            .is_empty()
    );
    let late = records
        .answer_approval(&approval_id, answer(Answer::Allow, "cli", None))
        .unwrap_err();
    assert_eq!(late.code, ErrorCode::ApprovalClosed);
    let audit = audit_of(records.audit(&AuditFilter::default()).unwrap(), &task_id);
    let last = audit.last().unwrap();
    assert_eq!(
        (last.decider, last.decision),
        (Decider::Deadline, Decision::Deny)
    );
    assert_eq!(last.approval_id.as_deref(), Some(approval_id.as_str()));
}
