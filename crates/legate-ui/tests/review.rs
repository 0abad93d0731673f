//! A copy task's review from the dashboard, against a real engine and a real git project:
//! the page shows the patch's sha and the actions; integrating a patch other than the one the
//! page showed is the engine's PATCH_CHANGED, and one without the sha256 is refused;
//! integrating the shown one changes the original;
//! verify, discard and cancel go through the engine too, and its errors are shown as they come.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{UiServer, field};
use legate_core::TaskState;
use legate_engine::SubmitRequest;
use legate_testkit::harness::EngineHarness;
use legate_ui::Audience;

async fn project() -> UiServer {
    UiServer::with(EngineHarness::builder().project(&[("a.txt", "alpha\n")])).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn integrate_from_the_page_changes_the_original_and_a_stale_sha_is_refused() {
    let s = project().await;
    let session = s.login(Audience::Caller).await;
    let task = s.h.run(s.h.on_copy("replace a.txt: alpha => beta")).await;
    assert_eq!(task.state, TaskState::Completed, "{:?}", task.error);
    let path = format!("/tasks/{}", task.id.as_str());
    let page = s
        .get_with(&session.cookie, &path)
        .await
        .text()
        .await
        .unwrap();
    assert!(
        page.contains("Review of the copy") && page.contains("open"),
        "{page}"
    );
    let sha = field(&page, "sha256").unwrap();
    assert_eq!(sha.len(), 64);
    let action = format!("{path}/integrate");

    // Without the CSRF token: 403, nothing integrated.
    let r = s
        .post_form(Some(&session.cookie), &action, &[("sha256", &sha)])
        .await;
    assert_eq!(r.status(), 403);
    assert_eq!(
        std::fs::read_to_string(s.h.project().join("a.txt")).unwrap(),
        "alpha\n"
    );
    // Another patch than the page showed: the engine refuses, and says so.
    let wrong = "0".repeat(64);
    let r = s
        .post_form(
            Some(&session.cookie),
            &action,
            &[("csrf", &session.csrf), ("sha256", &wrong)],
        )
        .await;
    assert_eq!(r.status(), 409);
    assert!(r.text().await.unwrap().contains("PATCH_CHANGED"));
    // Not verified yet: the engine's VERIFICATION_REQUIRED, shown as it comes.
    let r = s
        .post_form(
            Some(&session.cookie),
            &action,
            &[("csrf", &session.csrf), ("sha256", &sha)],
        )
        .await;
    assert_eq!(r.status(), 409);
    assert!(r.text().await.unwrap().contains("VERIFICATION_REQUIRED"));
    let r = s
        .post_form(
            Some(&session.cookie),
            &format!("{path}/verify"),
            &[("csrf", &session.csrf), ("sha256", &sha)],
        )
        .await;
    assert_eq!(r.status(), 303, "{:?}", r.text().await);
    let page = s
        .get_with(&session.cookie, &path)
        .await
        .text()
        .await
        .unwrap();
    assert!(page.contains("Passed"), "{page}");
    // Verified now, so only the binding stands between a form and the original: a form
    // without the sha256 the page showed, with an empty one, or with another patch's, is
    // refused and changes nothing (issue 29, finding 8: a form without it integrated
    // whatever the copy held).
    for fields in [
        vec![("csrf", session.csrf.as_str())],
        vec![("csrf", session.csrf.as_str()), ("sha256", "")],
        vec![("csrf", session.csrf.as_str()), ("sha256", wrong.as_str())],
    ] {
        let r = s.post_form(Some(&session.cookie), &action, &fields).await;
        let status = r.status();
        let body = r.text().await.unwrap();
        let code = if fields.len() == 1 || fields[1].1.is_empty() {
            "INVALID_INPUT"
        } else {
            "PATCH_CHANGED"
        };
        assert!(
            status.is_client_error() && body.contains(code),
            "{fields:?}: {status} {body}"
        );
        assert_eq!(
            std::fs::read_to_string(s.h.project().join("a.txt")).unwrap(),
            "alpha\n",
            "{fields:?}"
        );
    }
    // The one shown: integrated, and the original changed.
    let r = s
        .post_form(
            Some(&session.cookie),
            &action,
            &[("csrf", &session.csrf), ("sha256", &sha)],
        )
        .await;
    assert_eq!(r.status(), 303, "{:?}", r.text().await);
    assert_eq!(
        std::fs::read_to_string(s.h.project().join("a.txt")).unwrap(),
        "beta\n"
    );
    let page = s
        .get_with(&session.cookie, &path)
        .await
        .text()
        .await
        .unwrap();
    assert!(page.contains("integrated"), "{page}");
    assert!(
        !page.contains("Integrate into the project"),
        "no action on a closed copy"
    );
    // Integrating again is the engine's error, shown with its code.
    let r = s
        .post_form(
            Some(&session.cookie),
            &action,
            &[("csrf", &session.csrf), ("sha256", &sha)],
        )
        .await;
    assert!(r.status().is_client_error(), "{}", r.status());
    let body = r.text().await.unwrap();
    assert!(body.contains("role=\"alert\"><code>"), "{body}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discard_and_cancel_from_the_page() {
    let s = project().await;
    let session = s.login(Audience::Caller).await;
    let task = s.h.run(s.h.on_copy("replace a.txt: alpha => gamma")).await;
    let path = format!("/tasks/{}", task.id.as_str());
    let r = s
        .post_form(
            Some(&session.cookie),
            &format!("{path}/discard"),
            &[("csrf", &session.csrf)],
        )
        .await;
    assert_eq!(r.status(), 303, "{:?}", r.text().await);
    let page = s
        .get_with(&session.cookie, &path)
        .await
        .text()
        .await
        .unwrap();
    assert!(page.contains("discarded"), "{page}");
    assert_eq!(
        std::fs::read_to_string(s.h.project().join("a.txt")).unwrap(),
        "alpha\n"
    );

    // A task that never answers: canceled from its page.
    let hanging = s.h.engine.submit(SubmitRequest::new("!hang")).unwrap();
    s.h.wait_state(&hanging.id, TaskState::Working).await;
    let path = format!("/tasks/{}", hanging.id.as_str());
    let page = s
        .get_with(&session.cookie, &path)
        .await
        .text()
        .await
        .unwrap();
    assert!(page.contains("Cancel task"));
    let r = s
        .post_form(
            Some(&session.cookie),
            &format!("{path}/cancel"),
            &[("csrf", &session.csrf)],
        )
        .await;
    assert_eq!(r.status(), 303);
    let done = s.h.wait(&hanging.id).await;
    assert_eq!(done.state, TaskState::Canceled);
    // Canceling again is the engine's answer, not the dashboard's.
    let r = s
        .post_form(
            Some(&session.cookie),
            &format!("{path}/cancel"),
            &[("csrf", &session.csrf)],
        )
        .await;
    let status = r.status();
    let body = r.text().await.unwrap();
    assert!(status == 303 || body.contains("<code>"), "{status} {body}");
    s.stop().await;
}
