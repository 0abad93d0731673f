//! The dashboard in a real browser: headless Chromium over WebDriver (chromedriver) against
//! the real router and HTTP server over a real engine, the scripted revisor agent on real
//! pipes, a real git copy and a real store.
//!
//! One walk-through, in order: sign in with a one-time URL; a hostile page on another
//! loopback port (same site: the cookie goes along) and one on a foreign origin each try to
//! answer a pending approval with a cross-site form, and are refused (403) while the
//! approval stays pending; the copy task's page is open while, from a second window, the
//! supervisor approves its command, and its events arrive on the open page without a reload;
//! the agent's answer holding `<script>` and an `onerror` image shows as text; the diff
//! shows the files with A/M/D and numbered lines; Integrate changes the original; the usage
//! and tasks pages render; a caller's session sees the queue but gets no answer buttons.
//! The screenshots it takes are the ones in `docs/images/` (`LEGATE_UPDATE_SCREENSHOTS=1`
//! writes them there).

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/browser.rs"]
mod browser;
mod common;
#[path = "support/hostile.rs"]
mod hostile;

use browser::Browser;
use common::UiServer;
use fantoccini::Locator;
use legate_core::{Event, EventKind, TaskId, TaskState};
use legate_engine::{
    ApprovalFilter, ApprovalState, Check, CheckKind, Criterion, Review, SubmitRequest, Verdict,
    WorkspaceRequest,
};
use legate_frontkit::AskCommands;
use legate_testkit::{EngineHarness, TestAgent};
use legate_ui::Audience;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

/// What the agent writes and then quotes in its answer: markup that would run if the page
/// placed it unescaped.
const EVIL: &str = "<script>window.__pwned=1</script><img src=x onerror=window.__pwned=2>";

/// How long the browser may take for one step (a bound on a wait for an event, not a pace).
const STEP: Duration = Duration::from_secs(60);

fn awaiting(e: &Event) -> Option<String> {
    match &e.kind {
        EventKind::Notice { detail, .. } if detail["event"] == "awaiting_supervision" => {
            Some(detail["approvalId"].as_str()?.to_string())
        }
        _ => None,
    }
}

async fn approval_of(h: &EngineHarness, task: &TaskId) -> String {
    let events = h.until(task, |e| awaiting(e).is_some()).await;
    events.iter().find_map(awaiting).unwrap()
}

fn pending(h: &EngineHarness, id: &str) -> bool {
    h.engine
        .approvals()
        .list(&ApprovalFilter::default())
        .unwrap()
        .iter()
        .any(|a| a.id == id && a.state == ApprovalState::Pending)
}

async fn js(b: &Browser, script: &str) -> Value {
    b.client.execute(script, vec![]).await.unwrap()
}

async fn body_text(b: &Browser) -> String {
    b.client
        .find(Locator::Css("body"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// Waits until `cond` (a JavaScript expression) is true on the page: the check runs in the
/// page on every DOM change (a `MutationObserver`), so the wait ends on the change itself. A
/// navigation ends the script with an error; it is then set up again on the new document.
async fn wait_js(b: &Browser, cond: &str, what: &str) {
    let script = format!(
        r#"const done = arguments[arguments.length - 1];
const check = () => {{ try {{ return !!({cond}); }} catch (e) {{ return false; }} }};
if (check()) {{ done(true); }} else {{
  const obs = new MutationObserver(() => {{ if (check()) {{ obs.disconnect(); done(true); }} }});
  obs.observe(document, {{ subtree: true, childList: true, characterData: true, attributes: true }});
}}"#
    );
    let until = async {
        loop {
            if let Ok(Value::Bool(true)) = b.client.execute_async(&script, vec![]).await {
                return;
            }
        }
    };
    if tokio::time::timeout(STEP, until).await.is_err() {
        let url = b.client.current_url().await.map(|u| u.to_string());
        let text = body_text(b).await;
        panic!("the page never showed {what}; at {url:?} it shows:\n{text}");
    }
}

/// Waits until the page's text holds `needle`.
async fn wait_text(b: &Browser, needle: &str) {
    let quoted = serde_json::to_string(needle).unwrap();
    wait_js(
        b,
        &format!("document.body.innerText.includes({quoted})"),
        needle,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_dashboard_end_to_end_in_chromium() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let s = UiServer::with(
        EngineHarness::builder()
            .agent(TestAgent::scripted("agent"))
            .supervisor(Arc::new(AskCommands))
            .project(&[("a.txt", "alpha\n"), ("notes.md", "one\r\ntwo\r\n")]),
    )
    .await;
    let h = &s.h;

    // A copy task that writes markup, edits a file, then runs a command (asks), then quotes
    // the markup in its answer.
    let mut req = SubmitRequest::new(format!(
        "write evil.html: {EVIL}\nreplace a.txt: alpha => beta\nrun echo ran from the dashboard\nread evil.html"
    ));
    req.workspace = WorkspaceRequest::Copy {
        source: h.project(),
        include_paths: vec![],
        criteria: vec![Criterion {
            id: "beta".into(),
            description: "a.txt says beta".into(),
            check: Some(Check {
                kind: CheckKind::FileContains,
                path: "a.txt".into(),
                text: Some("beta".into()),
            }),
        }],
    };
    let copy = h.engine.submit(req).unwrap();
    let approval = approval_of(h, &copy.id).await;

    // 1. Sign in with a one-time URL (the supervisor's: it may answer approvals).
    b.client
        .goto(&s.one_time_url(Audience::Supervisor))
        .await
        .unwrap();
    wait_text(&b, "Tasks").await;
    assert!(
        b.client
            .current_url()
            .await
            .unwrap()
            .path()
            .starts_with("/tasks")
    );
    let cookies = b.client.get_all_cookies().await.unwrap();
    let session = cookies
        .iter()
        .find(|c| c.name() == "legate_session")
        .unwrap();
    assert_eq!(session.http_only(), Some(true));
    assert_eq!(format!("{:?}", session.same_site()), "Some(Strict)");

    // 2. Cross-site forms try to approve the pending request.
    let action = s.url(&format!("/approvals/{approval}/answer"));
    let same_site = hostile::serve(hostile::auto_post(&action, &[("answer", "allow")])).await;
    b.client
        .goto(&format!("http://127.0.0.1:{same_site}/"))
        .await
        .unwrap();
    // Another local port is another origin (issue 29, finding 8): refused before the
    // session is read (it got as far as the CSRF check before).
    wait_text(&b, "ORIGIN_NOT_ALLOWED").await;
    assert!(
        pending(h, &approval),
        "a cross-port form without the CSRF token answered"
    );
    let forged = hostile::auto_post(&action, &[("answer", "allow"), ("csrf", "forged")]);
    let foreign = hostile::serve(forged).await;
    b.client
        .goto(&format!("http://evil.example:{foreign}/"))
        .await
        .unwrap();
    wait_js(
        &b,
        "location.pathname.endsWith('/answer')",
        "the forged answer's response",
    )
    .await;
    let text = body_text(&b).await;
    assert!(text.contains("ORIGIN_NOT_ALLOWED"), "{text}");
    assert!(pending(h, &approval), "a foreign origin's form answered");

    // 3. The task page is open while the approval is answered from another window.
    let task_url = s.url(&format!("/tasks/{}", copy.id));
    b.client.goto(&task_url).await.unwrap();
    wait_text(&b, "Events").await;
    js(&b, "window.__stayed = 'yes'; return null;").await;
    let task_window = b.client.window().await.unwrap();
    let second = b.client.new_window(true).await.unwrap();
    b.client.switch_to_window(second.handle).await.unwrap();
    b.client.goto(&s.url("/approvals")).await.unwrap();
    wait_text(&b, "commands need a supervisor").await;
    b.screenshot("approvals").await;
    b.client
        .find(Locator::Css(&format!("#a-{approval} button[value=allow]")))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    // The answered request leaves the page's pending list (the heading "Audit trail" is on
    // the page before the click too, so it cannot tell that the answer has landed).
    wait_js(
        &b,
        &format!("document.querySelector('#a-{approval}') === null"),
        "the approval leaving the pending list",
    )
    .await;
    assert!(!pending(h, &approval), "the page's Approve did not answer");
    b.client.close_window().await.unwrap();
    b.client.switch_to_window(task_window).await.unwrap();

    // 4. The agent continues; its events arrive on the open page, which never reloaded.
    wait_text(&b, "ran from the dashboard").await;
    wait_text(&b, "window.__pwned=1").await;
    assert_eq!(
        js(&b, "return window.__stayed;").await,
        "yes",
        "the page reloaded"
    );
    // The answer's markup is text: no element was made from it, nothing ran.
    let made = js(
        &b,
        "return document.querySelectorAll('#events script, #events img, .answer script, .answer img').length;",
    )
    .await;
    assert_eq!(made, 0);
    assert_eq!(js(&b, "return typeof window.__pwned;").await, "undefined");
    let events_text = b
        .client
        .find(Locator::Id("events"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        events_text.contains(EVIL),
        "the answer is not shown as text: {events_text}"
    );
    js(
        &b,
        "document.getElementById('events-h').scrollIntoView(); return null;",
    )
    .await;
    b.screenshot("task-live").await;

    // 5. The copy's diff.
    let done = h.wait_state(&copy.id, TaskState::Completed).await;
    let sha = h
        .engine
        .reviews()
        .preview(copy.id.as_str())
        .await
        .unwrap()
        .patch
        .sha256;
    let verified = h
        .engine
        .reviews()
        .verify(
            copy.id.as_str(),
            &sha,
            vec![Review {
                criterion_id: "beta".into(),
                verdict: Verdict::Passed,
                path: "a.txt".into(),
                line: 1,
                quote: "beta".into(),
                explanation: "replaced".into(),
            }],
        )
        .await
        .unwrap();
    assert!(verified.passed, "{done:?} {verified:?}");
    b.client.goto(&task_url).await.unwrap();
    wait_text(&b, "Changed files").await;
    let rows = js(
        &b,
        "return [...document.querySelectorAll('table.diff-files tbody tr')].map(r => r.innerText.replace(/\\s+/g,' ').trim());",
    )
    .await;
    let rows: Vec<String> = serde_json::from_value(rows).unwrap();
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert!(rows[0].starts_with("M a.txt +1 −1"), "{rows:?}");
    assert!(rows[1].starts_with("A evil.html +1"), "{rows:?}");
    b.client
        .find(Locator::Css("table.diff-files a[href='#file-0']"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let numbered = js(
        &b,
        "return [...document.querySelectorAll('#file-0 tr.add, #file-0 tr.rem')].map(r => [...r.cells].map(c => c.innerText.replace(/\\s+/g, ' ').trim()));",
    )
    .await;
    assert_eq!(
        numbered,
        serde_json::json!([["1", "", "removed: -alpha"], ["", "1", "added: +beta"]]),
        "the unified diff's line numbers"
    );
    let added = js(
        &b,
        "return document.querySelector('#file-1 tr.add code').innerText;",
    )
    .await;
    assert_eq!(added, format!("+{EVIL}"));
    b.screenshot("diff").await;

    // 6. Integrate from the page: the original changes.
    let original = h.project().join("a.txt");
    assert_eq!(std::fs::read_to_string(&original).unwrap(), "alpha\n");
    b.client
        .find(Locator::Css("form[action$='/integrate'] button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(&b, "Integrated at").await;
    assert_eq!(std::fs::read_to_string(&original).unwrap(), "beta\n");
    assert_eq!(
        std::fs::read_to_string(h.project().join("evil.html")).unwrap(),
        EVIL
    );

    // 7. Usage and tasks pages.
    b.client.goto(&s.url("/usage")).await.unwrap();
    wait_text(&b, "Tokens by agent").await;
    assert_eq!(
        js(
            &b,
            "return document.querySelectorAll('svg title').length > 0;"
        )
        .await,
        true
    );
    b.screenshot("usage").await;
    b.client.goto(&s.url("/tasks")).await.unwrap();
    wait_text(&b, copy.id.as_str().get(..8).unwrap()).await;
    b.screenshot("tasks").await;

    // 8. A caller's session sees a waiting approval but has no buttons to answer it.
    let other = h
        .engine
        .submit(SubmitRequest::new("run echo second"))
        .unwrap();
    let second_approval = approval_of(h, &other.id).await;
    b.client
        .goto(&s.one_time_url(Audience::Caller))
        .await
        .unwrap();
    wait_text(&b, "Tasks").await;
    b.client.goto(&s.url("/approvals")).await.unwrap();
    wait_text(&b, "cannot answer").await;
    let buttons = js(
        &b,
        &format!("return document.querySelectorAll('#a-{second_approval} button').length;"),
    )
    .await;
    assert_eq!(buttons, 0);
    assert!(pending(h, &second_approval));
    h.engine.cancel(other.id.as_str()).unwrap();

    b.close().await;
    s.stop().await;
}

/// The browser itself works here: markup renders as markup and a screenshot is a PNG.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_browser_starts_and_renders() {
    let Some(b) = Browser::start().await else {
        return;
    };
    b.client
        .goto("data:text/html,<title>t</title><p id=p>hi</p>")
        .await
        .unwrap();
    let p = b.client.find(Locator::Id("p")).await.unwrap();
    assert_eq!(p.text().await.unwrap(), "hi");
    assert!(b.client.screenshot().await.unwrap().starts_with(b"\x89PNG"));
    b.close().await;
}
