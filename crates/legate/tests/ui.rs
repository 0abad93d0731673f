//! `legate serve --ui` beside `--mcp` from one process, and `legate ui --print-url`: the
//! `dashboard: <url>` line, a one-time URL that works once, a fresh one minted by another
//! process (the CLI) that the server accepts, the supervisor's only for a holder of the
//! supervisor token, and the run file gone once the server stops; the dashboard admits its own
//! origin only, not a page on another local port; a caller holding the connection cap with
//! event streams leaves room for the supervisor; a used one-time code and a signed-out session
//! stay refused after a restart (issue 29, finding 8).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_frontkit::cli::CliHome;
use legate_frontkit::served::{addr_of, path_of, raw};

const LEGATE: &str = env!("CARGO_BIN_EXE_legate");

#[test]
fn serve_ui_prints_a_one_time_url_and_legate_ui_mints_fresh_ones() {
    // No supervisor token in the environment: `legate ui --print-url` mints the caller's.
    let home = CliHome::new(LEGATE)
        .env("LEGATE_LOG", "warn")
        .env_remove("LEGATE_SUPERVISOR_TOKEN");
    let print_url = ["ui", "--print-url"];
    let mut served = home.serve(&["--ui", "--mcp", "--port", "0", "--ui-port", "0"]);
    let line = served
        .printed
        .iter()
        .find(|l| l.starts_with("dashboard: "))
        .unwrap_or_else(|| panic!("{:?}", served.printed))
        .clone();
    let url = line.trim_start_matches("dashboard: ").to_string();
    assert!(!url.contains(' '), "the URL is alone on its line: {line}");
    let ui = addr_of(&url);
    let mcp = addr_of(&served.url("Legate MCP server"));
    assert_ne!(ui, mcp);
    // Not at a terminal, no supervisor token: the caller's session.
    assert!(url.contains("code=c."), "{url}");

    let first = raw(&ui, "GET", &path_of(&url), &ui, &[], "");
    assert_eq!(first.status, 303, "{first:?}");
    assert!(
        first.head.contains("set-cookie: legate_session="),
        "{first:?}"
    );
    let cookie = first.cookie().unwrap();
    let page = raw(&ui, "GET", "/tasks", &ui, &[("Cookie", &cookie)], "");
    assert_eq!(page.status, 200, "{page:?}");
    let again = raw(&ui, "GET", &path_of(&url), &ui, &[], "");
    assert_eq!(again.status, 401, "{again:?}");
    // The MCP front of the same process still answers (401 without its token).
    let m = raw(&mcp, "GET", "/mcp", &mcp, &[], "");
    assert_eq!(m.status, 401, "{m:?}");

    // Another process mints a code the server accepts.
    let out = home.run(&print_url);
    assert!(out.status.success(), "{out:?}");
    let fresh = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert!(fresh.contains("code=c."), "{fresh}");
    let r = raw(&ui, "GET", &path_of(&fresh), &ui, &[], "");
    assert_eq!(r.status, 303, "{r:?}");
    // With the supervisor token, the supervisor's; a wrong one is refused.
    let token = std::fs::read_to_string(home.home().join("supervisor-token")).unwrap();
    let out = home.run_with(&print_url, &[("LEGATE_SUPERVISOR_TOKEN", token.trim())]);
    let sup = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert!(sup.contains("code=s."), "{sup}");
    assert_eq!(raw(&ui, "GET", &path_of(&sup), &ui, &[], "").status, 303);
    let out = home.run_with(&print_url, &[("LEGATE_SUPERVISOR_TOKEN", &"x".repeat(40))]);
    let not = String::from_utf8(out.stdout).unwrap();
    assert!(!not.contains("code=s."), "{not}");

    served.stop().unwrap();
    assert!(!home.home().join("run").join("ui.json").exists());
    let out = home.run(&print_url);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no dashboard is running"),
        "{out:?}"
    );

    // A restarted server on the same home accepts the session a browser kept: a page that
    // reconnects after a restart carries on.
    let served = home.serve(&["--ui", "--port", "0"]);
    let url = served.url("dashboard: ");
    let ui = addr_of(&url);
    let page = raw(&ui, "GET", "/tasks", &ui, &[("Cookie", &cookie)], "");
    assert_eq!(page.status, 200, "{page:?}");
    assert!(home.home().join("run").join("ui.json").exists());
}

/// `legate serve --ui` admits its own origin only (scheme, host and the port it serves on): a
/// page on another 127.0.0.1 port is another site, refused before the session is even read
/// (issue 29, finding 8: any local port passed).
#[test]
fn the_dashboard_admits_its_own_origin_only() {
    let home = CliHome::new(LEGATE).env("LEGATE_LOG", "warn");
    let served = home.serve(&["--ui", "--port", "0"]);
    let url = served.url("dashboard: ");
    let ui = addr_of(&url);
    let login = raw(&ui, "GET", &path_of(&url), &ui, &[], "");
    let cookie = login.cookie().unwrap();
    let port: u16 = ui.rsplit(':').next().unwrap().parse().unwrap();
    let own = format!("http://{ui}");
    let form = [
        ("Cookie", cookie.as_str()),
        ("Content-Type", "application/x-www-form-urlencoded"),
    ];
    // Its own origin passes the allowlist (and then needs its CSRF token).
    let r = raw(
        &ui,
        "POST",
        "/logout",
        &ui,
        &[form[0], form[1], ("Origin", &own)],
        "csrf=x",
    );
    assert_eq!(r.status, 403, "{r:?}");
    assert!(r.body.contains("CSRF_REJECTED"), "{r:?}");
    for other in [
        format!("http://127.0.0.1:{}", port.wrapping_add(1).max(1)),
        format!("http://localhost:{}", port.wrapping_sub(1).max(1)),
        "http://127.0.0.1".to_string(),
    ] {
        for (method, path) in [("POST", "/logout"), ("GET", "/tasks")] {
            let r = raw(
                &ui,
                method,
                path,
                &ui,
                &[form[0], form[1], ("Origin", &other)],
                "csrf=x",
            );
            assert_eq!(r.status, 403, "{other} {method} {path}: {r:?}");
            assert!(r.body.contains("ORIGIN_NOT_ALLOWED"), "{other}: {r:?}");
        }
    }
    let page = raw(
        &ui,
        "GET",
        "/tasks",
        &ui,
        &[("Cookie", &cookie), ("Origin", &own)],
        "",
    );
    assert_eq!(page.status, 200, "{page:?}");
}

/// Opens `path` with `token` as a bearer and keeps the connection: an event stream, once its
/// head (status 200) has arrived.
fn stream(addr: &str, path: &str, token: &str) -> std::net::TcpStream {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    let auth = format!("Bearer {token}");
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: {auth}\r\nAccept: text/event-stream\r\n\r\n"
    );
    s.write_all(request.as_bytes()).unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut byte).unwrap(), 1, "closed: {head:?}");
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).to_string();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    s
}

/// A caller who holds the dashboard's whole connection cap with event streams leaves the
/// supervisor room to answer: another caller request is 503, the supervisor's is served
/// (issue 29, finding 8: a caller's 128 event streams got the supervisor 503).
#[test]
fn a_caller_at_the_connection_cap_leaves_room_for_the_supervisor() {
    let home =
        CliHome::with_config(LEGATE, "[ui]\nmax_connections = 8\n").env("LEGATE_LOG", "warn");
    let served = home.serve(&["--ui", "--port", "0"]);
    let ui = addr_of(&served.url("dashboard: "));
    let read = |name: &str| {
        std::fs::read_to_string(home.home().join(name))
            .unwrap()
            .trim()
            .to_string()
    };
    let (caller, supervisor) = (read("mcp-token"), read("supervisor-token"));
    let streams: Vec<_> = (0..8)
        .map(|_| stream(&ui, "/tasks/live", &caller))
        .collect();
    let auth = |t: &str| format!("Bearer {t}");
    for _ in 0..3 {
        let r = raw(
            &ui,
            "GET",
            "/tasks",
            &ui,
            &[("Authorization", &auth(&caller))],
            "",
        );
        assert_eq!(r.status, 503, "{r:?}");
        assert!(r.body.contains("UNAVAILABLE"), "{r:?}");
    }
    let r = raw(
        &ui,
        "GET",
        "/approvals",
        &ui,
        &[("Authorization", &auth(&supervisor))],
        "",
    );
    assert_eq!(r.status, 200, "the supervisor was refused: {r:?}");
    // And the supervisor's own event stream, beside the caller's.
    let _live = stream(&ui, "/approvals/live", &supervisor);
    drop(streams);
}

/// The CSRF token in a page's forms.
fn csrf_of(page: &str) -> String {
    let at = page.find("name=\"csrf\" value=\"").unwrap() + "name=\"csrf\" value=\"".len();
    page[at..at + page[at..].find('"').unwrap()].to_string()
}

/// What sign-in remembers survives a restart of `legate serve --ui` on the same home: a used
/// one-time code stays used, a signed-out session stays signed out, and a session that was not
/// signed out carries on (issue 29, finding 8: both came back after a restart).
#[test]
fn a_used_code_and_a_signed_out_session_stay_refused_after_a_restart() {
    let home = CliHome::new(LEGATE).env("LEGATE_LOG", "warn");
    let mut served = home.serve(&["--ui", "--port", "0"]);
    let url = served.url("dashboard: ");
    let ui = addr_of(&url);
    let code = path_of(&url);
    let first = raw(&ui, "GET", &code, &ui, &[], "");
    assert_eq!(first.status, 303, "{first:?}");
    let ended = first.cookie().unwrap();
    let out = home.run(&["ui", "--print-url"]);
    let kept = raw(
        &ui,
        "GET",
        &path_of(String::from_utf8(out.stdout).unwrap().trim()),
        &ui,
        &[],
        "",
    );
    assert_eq!(kept.status, 303, "{kept:?}");
    let kept = kept.cookie().unwrap();
    // Sign out the first session, from its own page's form.
    let page = raw(&ui, "GET", "/tasks", &ui, &[("Cookie", &ended)], "");
    let own = format!("http://{ui}");
    let form = format!("csrf={}", csrf_of(&page.body));
    let headers = [
        ("Cookie", ended.as_str()),
        ("Origin", own.as_str()),
        ("Content-Type", "application/x-www-form-urlencoded"),
    ];
    let out = raw(&ui, "POST", "/logout", &ui, &headers, &form);
    assert_eq!(out.status, 200, "{out:?}");
    assert_eq!(
        raw(&ui, "GET", "/tasks", &ui, &[("Cookie", &ended)], "").status,
        401
    );
    served.stop().unwrap();

    let served = home.serve(&["--ui", "--port", "0"]);
    let ui = addr_of(&served.url("dashboard: "));
    let again = raw(&ui, "GET", &code, &ui, &[], "");
    assert_eq!(
        again.status, 401,
        "a used one-time code worked after a restart: {again:?}"
    );
    assert!(again.body.contains("already used"), "{again:?}");
    let r = raw(&ui, "GET", "/tasks", &ui, &[("Cookie", &ended)], "");
    assert_eq!(
        r.status, 401,
        "a signed-out session came back after a restart: {r:?}"
    );
    let r = raw(&ui, "GET", "/tasks", &ui, &[("Cookie", &kept)], "");
    assert_eq!(r.status, 200, "{r:?}");
}
