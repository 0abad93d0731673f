//! The dashboard against a real engine running revisor (the scripted ACP agent), over real
//! HTTP on 127.0.0.1: CSRF and Origin refusals on a POST; a caller's session cannot answer
//! an approval and a supervisor's can, after which the agent goes on; the approvals page's
//! live stream shows a request as it arrives; a task's event stream delivers events live and
//! resumes from `Last-Event-ID`; an answer holding `<script>` renders as text.
//!
//! Every wait follows events (the engine's, or the SSE stream's); nothing sleeps.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::UiServer;
use common::sse::SseReader;
use legate_core::{EventKind, TaskState};
use legate_engine::SubmitRequest;
use legate_testkit::harness::EngineHarness;
use legate_ui::Audience;
use reqwest::header;
use std::time::Duration;

/// `touch` needs a supervisor.
const POLICY: &str = r#"
[[policy.rules]]
id = "ask-before-touch"
kind = "execute"
program = "touch"
decision = "ask"
reason = "touching files needs a supervisor"
"#;

async fn supervised() -> UiServer {
    UiServer::with(EngineHarness::builder().config(|c| {
        let rules = legate_supervisor::policy::parse_file(POLICY).unwrap();
        c.policy = legate_supervisor::Policy::from_tables(Vec::new(), rules).unwrap();
        c.approvals.deadline = Duration::from_secs(120);
    }))
    .await
}

/// The approval id the task's `awaiting_supervision` notice names.
async fn awaited(s: &UiServer, id: &legate_core::TaskId) -> String {
    let events = s
        .h
        .until(id, |e| matches!(&e.kind, EventKind::Notice { detail, .. } if detail["event"] == "awaiting_supervision"))
        .await;
    let Some(EventKind::Notice { detail, .. }) = events.last().map(|e| &e.kind) else {
        unreachable!()
    };
    detail["approvalId"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_supervisor_session_with_its_csrf_token_answers_and_the_agent_goes_on() {
    let s = supervised().await;
    let supervisor = s.login(Audience::Supervisor).await;
    let caller = s.login(Audience::Caller).await;
    assert!(!supervisor.csrf.is_empty() && !caller.csrf.is_empty());
    assert_ne!(supervisor.csrf, caller.csrf);

    // The approvals page, live, before anything waits.
    let live = s
        .client
        .get(s.url("/approvals/live"))
        .header(header::COOKIE, &supervisor.cookie)
        .send()
        .await
        .unwrap();
    let mut live = SseReader::new(live);
    let first = live.next().await.unwrap();
    assert_eq!(first.event, "approvals");
    assert!(first.data.contains("Nothing is waiting"), "{first:?}");

    let task =
        s.h.engine
            .submit(SubmitRequest::new("run touch judged.txt"))
            .unwrap();
    let approval = awaited(&s, &task.id).await;
    // It arrives on the open stream, with its answer buttons for the supervisor.
    let shown = live
        .until(|e| e.data.contains(&approval))
        .await
        .pop()
        .unwrap();
    assert!(shown.data.contains("touch"), "{shown:?}");
    assert!(shown.data.contains("value=\"allow-for-task\""), "{shown:?}");
    let path = format!("/approvals/{approval}/answer");

    // The caller's session, with its own valid CSRF token: 403, and the sentence says why.
    let r = s
        .post_form(
            Some(&caller.cookie),
            &path,
            &[("csrf", &caller.csrf), ("answer", "allow")],
        )
        .await;
    assert_eq!(r.status(), 403);
    let body = r.text().await.unwrap();
    assert!(
        body.contains("SUPERVISOR_REQUIRED")
            && body.contains("Only the supervisor answers approvals"),
        "{body}"
    );
    // The caller's page shows the queue without answer buttons.
    let page = s
        .get_with(&caller.cookie, "/approvals")
        .await
        .text()
        .await
        .unwrap();
    assert!(page.contains("touch") && !page.contains("value=\"allow-for-task\""));
    // Both hints name the way to a supervisor session that exists (issue 29, finding 8:
    // they named `legate ui --supervisor`, which no CLI has).
    for text in [&body, &page] {
        assert!(!text.contains("--supervisor"), "{text}");
        assert!(
            text.contains("LEGATE_SUPERVISOR_TOKEN") && text.contains("legate ui"),
            "{text}"
        );
    }

    // The supervisor's session without a CSRF token, with another session's, with a foreign
    // Origin: 403 each.
    let r = s
        .post_form(Some(&supervisor.cookie), &path, &[("answer", "allow")])
        .await;
    assert_eq!(r.status(), 403);
    assert!(r.text().await.unwrap().contains("CSRF_REJECTED"));
    let r = s
        .post_form(
            Some(&supervisor.cookie),
            &path,
            &[("csrf", &caller.csrf), ("answer", "allow")],
        )
        .await;
    assert_eq!(r.status(), 403);
    let r = s
        .client
        .post(s.url(&path))
        .header(header::COOKIE, &supervisor.cookie)
        .header(header::ORIGIN, "http://evil.example")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(format!("csrf={}&answer=allow", supervisor.csrf))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert!(r.text().await.unwrap().contains("ORIGIN_NOT_ALLOWED"));
    // A GET never answers.
    let r = s.get_with(&supervisor.cookie, &path).await;
    assert_eq!(r.status(), 405);
    assert_eq!(
        s.h.engine.approvals().list(&Default::default()).unwrap()[0].state,
        legate_engine::ApprovalState::Pending
    );

    // Now properly: 303 back to the queue, and the agent goes on to the end.
    let r = s
        .post_form(
            Some(&supervisor.cookie),
            &path,
            &[("csrf", &supervisor.csrf), ("answer", "allow")],
        )
        .await;
    assert_eq!(r.status(), 303, "{:?}", r.text().await);
    let done = s.h.wait(&task.id).await;
    assert_eq!(done.state, TaskState::Completed, "{done:?}");
    let allowed = s.h.events(&task.id).into_iter().any(|e| {
        matches!(e.kind, EventKind::Permission { ref title, ref verdict, .. }
            if title.contains("touch") && verdict.decision == legate_core::Decision::Allow)
    });
    assert!(allowed);
    // The stream redraws: nothing waits any more. A second answer is the engine's error.
    live.until(|e| e.data.contains("Nothing is waiting")).await;
    let r = s
        .post_form(
            Some(&supervisor.cookie),
            &path,
            &[("csrf", &supervisor.csrf), ("answer", "deny")],
        )
        .await;
    assert_eq!(r.status(), 409);
    assert!(r.text().await.unwrap().contains("APPROVAL_CLOSED"));
    let audit = s
        .get_with(&supervisor.cookie, "/approvals")
        .await
        .text()
        .await
        .unwrap();
    assert!(
        audit.contains("Audit trail") && audit.contains("dashboard"),
        "{audit}"
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_streams_live_and_resumes_from_last_event_id() {
    let s = supervised().await;
    let session = s.login(Audience::Supervisor).await;
    let task =
        s.h.engine
            .submit(SubmitRequest::new("run touch judged.txt"))
            .unwrap();
    let path = format!("/tasks/{}/events?after=0", task.id.as_str());
    let stream = s.get_with(&session.cookie, &path).await;
    let mut stream = SseReader::new(stream);
    // Up to the request for supervision: the task is still working, so these came live or
    // from the store, in order, each once.
    let before = stream
        .until(|e| e.data.contains("awaiting supervision"))
        .await;
    let seqs: Vec<u64> = before
        .iter()
        .map(|e| e.id.as_ref().unwrap().parse().unwrap())
        .collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    assert!(
        before
            .iter()
            .all(|e| e.event == "event" && e.data.starts_with("<li id=\"e"))
    );
    // Answered now, the rest arrives on the same open stream, to the end.
    let approval = awaited(&s, &task.id).await;
    s.h.engine
        .approvals()
        .answer(
            &approval,
            legate_engine::ApprovalAnswer {
                answer: legate_engine::Answer::Allow,
                reason: None,
                channel: "test".into(),
            },
        )
        .unwrap();
    let after = stream.until(|e| e.event == "end").await;
    assert!(
        after.iter().any(|e| e.data.contains("permission for")),
        "{after:?}"
    );
    assert!(
        after
            .iter()
            .any(|e| e.data.contains("state <strong>completed</strong>")),
        "{after:?}"
    );
    let last: u64 = after
        .iter()
        .rev()
        .find_map(|e| e.id.as_ref())
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(last, s.h.events(&task.id).last().unwrap().seq);

    // A reconnecting browser sends Last-Event-ID (it wins over ?after=): the stream resumes
    // right after it.
    let resume_from = seqs.len() as u64;
    let again = s
        .client
        .get(s.url(&path))
        .header(header::COOKIE, &session.cookie)
        .header("Last-Event-ID", resume_from.to_string())
        .send()
        .await
        .unwrap();
    let mut again = SseReader::new(again);
    let rest = again.until(|e| e.event == "end").await;
    let ids: Vec<u64> = rest
        .iter()
        .filter_map(|e| e.id.as_ref())
        .map(|i| i.parse().unwrap())
        .collect();
    assert_eq!(ids, ((resume_from + 1)..=last).collect::<Vec<_>>());
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_holding_a_script_renders_as_text() {
    let s = UiServer::start().await;
    let session = s.login(Audience::Caller).await;
    let hostile = "<script>alert(1)</script><img src=x onerror=alert(2)>";
    let task = s.h.run(SubmitRequest::new(format!("!say {hostile}"))).await;
    assert_eq!(task.state, TaskState::Completed, "{task:?}");
    assert!(task.result.as_ref().unwrap().text.contains("<script>"));
    let page = s
        .get_with(&session.cookie, &format!("/tasks/{}", task.id.as_str()))
        .await
        .text()
        .await
        .unwrap();
    assert!(
        !page.contains("<script>alert"),
        "an agent's script reached the page"
    );
    assert!(!page.contains("<img src=x"), "{page}");
    assert!(
        page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{page}"
    );
    // The only scripts are the dashboard's own, from its own origin.
    assert_eq!(page.matches("<script").count(), 1);
    // The live stream escapes the same way.
    let r = s
        .get_with(
            &session.cookie,
            &format!("/tasks/{}/events?after=0", task.id.as_str()),
        )
        .await;
    let all = SseReader::new(r).until(|e| e.event == "end").await;
    let data: String = all.iter().map(|e| e.data.as_str()).collect();
    assert!(
        !data.contains("<script>") && data.contains("&lt;script&gt;"),
        "{data}"
    );
    // The tasks list too (the prompt is not shown there, but nothing unescaped is).
    let list = s
        .get_with(&session.cookie, "/tasks")
        .await
        .text()
        .await
        .unwrap();
    assert!(!list.contains("<script>alert"));
    s.stop().await;
}
