//! The dashboard's doors, over real HTTP against a real server and engine: no session is
//! 401; a one-time code works once; the cookie's flags; a bearer token reads but never
//! writes; a caller's code relabelled as a supervisor's is refused.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::UiServer;
use legate_ui::Audience;
use reqwest::header;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_cookie_and_no_token_is_401() {
    let s = UiServer::start().await;
    for path in [
        "/tasks",
        "/approvals",
        "/tasks/x/events",
        "/approvals/live",
        "/",
    ] {
        let r = s.client.get(s.url(path)).send().await.unwrap();
        assert_eq!(r.status(), 401, "{path}");
    }
    let r = s.post_form(None, "/tasks/x/cancel", &[("csrf", "x")]).await;
    assert_eq!(r.status(), 401);
    // A forged cookie is no session either.
    let r = s
        .get_with(
            "legate_session=c.00000000000000000000000000000000.ffffffffff.00",
            "/tasks",
        )
        .await;
    assert_eq!(r.status(), 401);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_time_code_works_once_and_sets_a_strict_http_only_cookie() {
    let s = UiServer::start().await;
    let url = s.one_time_url(Audience::Caller);
    let r = s.client.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 303);
    assert_eq!(r.headers()[header::LOCATION], "/tasks");
    assert_eq!(r.headers()[header::REFERRER_POLICY], "no-referrer");
    let set = r.headers()[header::SET_COOKIE]
        .to_str()
        .unwrap()
        .to_string();
    assert!(set.starts_with("legate_session="), "{set}");
    for flag in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(
            set.split("; ").any(|p| p == flag),
            "{flag} missing in {set}"
        );
    }
    let cookie = set.split(';').next().unwrap();
    let page = s.get_with(cookie, "/tasks").await;
    assert_eq!(page.status(), 200);
    // Pages say same-origin (no-referrer would make browsers send `Origin: null` on the
    // dashboard's own POSTs), and `Origin: null` is refused.
    assert_eq!(page.headers()[header::REFERRER_POLICY], "same-origin");
    let null = s
        .client
        .post(s.url("/logout"))
        .header(header::COOKIE, cookie)
        .header(header::ORIGIN, "null")
        .send()
        .await
        .unwrap();
    assert_eq!(null.status(), 403);
    assert!(page.text().await.unwrap().contains("<h1>Tasks</h1>"));
    // Again: refused.
    let again = s.client.get(&url).send().await.unwrap();
    assert_eq!(again.status(), 401);
    assert!(again.text().await.unwrap().contains("already used"));
    // A caller's code relabelled as a supervisor's is forged.
    let url = s.one_time_url(Audience::Caller);
    let forged = url.replace("code=c.", "code=s.");
    let r = s.client.get(&forged).send().await.unwrap();
    assert_eq!(r.status(), 401);
    s.stop().await;
}

/// Signing out ends the session on the server: its cookie, copied before (another tab, a
/// stolen copy), is refused afterwards, not only forgotten by this browser (issue 29,
/// finding 8). Another session is untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signing_out_revokes_the_cookie_everywhere() {
    let s = UiServer::start().await;
    let one = s.login(Audience::Caller).await;
    let two = s.login(Audience::Caller).await;
    assert_eq!(s.get_with(&one.cookie, "/tasks").await.status(), 200);
    let out = s
        .post_form(Some(&one.cookie), "/logout", &[("csrf", &one.csrf)])
        .await;
    assert_eq!(out.status(), 200);
    let copied = s.get_with(&one.cookie, "/tasks").await;
    assert_eq!(copied.status(), 401, "a signed-out cookie still works");
    assert_eq!(s.get_with(&two.cookie, "/tasks").await.status(), 200);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bearer_token_reads_but_never_writes() {
    let s = UiServer::start().await;
    let r = s
        .client
        .get(s.url("/tasks"))
        .bearer_auth(s.caller.expose())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = s
        .client
        .post(s.url("/tasks/x/cancel"))
        .bearer_auth(s.supervisor.expose())
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body("csrf=x")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    s.stop().await;
}
