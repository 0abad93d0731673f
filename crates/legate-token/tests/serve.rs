//! `legate_token::serve` attacked over real sockets on 127.0.0.1: slow heads, short bodies,
//! floods of idle connections, repeated `Host` headers. Each test waits for the event it
//! expects (a close, a response) within a generous bound, never for a fixed time.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{BOUND, authorized_get, call, closed_within, response, start};
use legate_token::serve::ServeOptions;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

fn options(header: Duration, body: Duration, max_connections: usize) -> ServeOptions {
    ServeOptions {
        header_timeout: header,
        body_timeout: body,
        max_connections,
        // The floods here open connections faster than any grace: these tests are about who
        // is closed, and `serve_attack.rs` about the grace a new connection gets.
        eviction_grace: Duration::ZERO,
    }
}

const LONG: Duration = Duration::from_secs(600);
const SHORT: Duration = Duration::from_millis(300);

#[tokio::test]
async fn a_head_that_never_ends_is_closed_after_the_header_timeout() {
    let (addr, stop) = start(options(SHORT, LONG, 64)).await;
    let mut slow = TcpStream::connect(addr).await.unwrap();
    slow.write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        .await
        .unwrap();
    let mut silent = TcpStream::connect(addr).await.unwrap();
    assert!(
        closed_within(&mut slow, BOUND).await,
        "a partial head stayed open"
    );
    assert!(
        closed_within(&mut silent, BOUND).await,
        "a silent connection stayed open"
    );
    // The server still answers.
    assert_eq!(call(addr, &authorized_get()).await, (200, "ok".into()));
    stop.cancel();
}

#[tokio::test]
async fn a_body_shorter_than_its_length_is_closed_after_the_body_timeout() {
    let (addr, stop) = start(options(LONG, SHORT, 64)).await;
    for authorization in [
        format!("Authorization: Bearer {}\r\n", common::TOKEN),
        String::new(),
    ] {
        let mut short = TcpStream::connect(addr).await.unwrap();
        let head = format!(
            "POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\n{authorization}Content-Type: text/plain\r\nContent-Length: 100\r\n\r\n0123456789"
        );
        short.write_all(head.as_bytes()).await.unwrap();
        assert!(
            closed_within(&mut short, BOUND).await,
            "a short body stayed open ({authorization:?})"
        );
    }
    // A whole body is read and answered, and its connection stays usable.
    let mut whole = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {}\r\nContent-Length: 5\r\n\r\nhello",
        common::TOKEN
    );
    whole.write_all(head.as_bytes()).await.unwrap();
    assert_eq!(response(&mut whole).await, (200, "5".into()));
    whole.write_all(authorized_get().as_bytes()).await.unwrap();
    assert_eq!(response(&mut whole).await, (200, "ok".into()));
    stop.cancel();
}

#[tokio::test]
async fn idle_unauthenticated_connections_at_the_cap_do_not_lock_out_a_token_holder() {
    let (addr, stop) = start(options(LONG, LONG, 16)).await;
    let mut idle = Vec::new();
    for _ in 0..40 {
        idle.push(TcpStream::connect(addr).await.unwrap());
    }
    // The token holder gets through, and stays connected.
    let mut client = TcpStream::connect(addr).await.unwrap();
    client.write_all(authorized_get().as_bytes()).await.unwrap();
    assert_eq!(response(&mut client).await, (200, "ok".into()));
    // 41 connections under a cap of 16 (and the supervisor's reserve beyond it): the oldest
    // idle ones were closed for them.
    let closed = 41 - (16 + legate_token::serve::SUPERVISOR_RESERVE);
    for (i, stream) in idle.iter_mut().take(closed).enumerate() {
        assert!(
            closed_within(stream, BOUND).await,
            "idle connection {i} stayed open"
        );
    }
    // Another flood does not close the authenticated connection either.
    let mut more = Vec::new();
    for _ in 0..40 {
        more.push(TcpStream::connect(addr).await.unwrap());
    }
    assert!(closed_within(&mut more[0], BOUND).await);
    client.write_all(authorized_get().as_bytes()).await.unwrap();
    assert_eq!(response(&mut client).await, (200, "ok".into()));
    stop.cancel();
}

/// A caller holding the cap's worth of connections (event streams, say) leaves the room kept
/// for the supervisor: another caller connection is answered 503, the supervisor's served,
/// however many the caller tries (issue 29, finding 8: the supervisor got 503).
#[tokio::test]
async fn callers_at_the_cap_leave_room_for_the_supervisor() {
    let (addr, stop) = start(options(LONG, LONG, 4)).await;
    let mut held = Vec::new();
    for _ in 0..4 {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(authorized_get().as_bytes()).await.unwrap();
        assert_eq!(response(&mut s).await.0, 200);
        held.push(s);
    }
    for _ in 0..(2 * legate_token::serve::SUPERVISOR_RESERVE) {
        let (status, body) = call(addr, &authorized_get()).await;
        assert_eq!(status, 503, "{body}");
        assert!(body.contains("UNAVAILABLE"), "{body}");
    }
    // The refused connections leave as they are answered; the supervisor gets in (a retry
    // only covers a refused one still leaving: before the fix every try was 503).
    let mut supervisor = tokio::time::timeout(BOUND, async {
        loop {
            let mut s = TcpStream::connect(addr).await.unwrap();
            s.write_all(common::supervisor_get().as_bytes())
                .await
                .unwrap();
            if response(&mut s).await == (200, "ok".into()) {
                break s;
            }
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the supervisor was refused while callers held the cap");
    // Its connection stays usable, and so do the callers'.
    supervisor
        .write_all(common::supervisor_get().as_bytes())
        .await
        .unwrap();
    assert_eq!(response(&mut supervisor).await, (200, "ok".into()));
    for s in &mut held {
        s.write_all(authorized_get().as_bytes()).await.unwrap();
        assert_eq!(response(s).await, (200, "ok".into()));
    }
    stop.cancel();
}

#[tokio::test]
async fn when_every_connection_is_authenticated_a_new_one_is_answered_503() {
    let (addr, stop) = start(options(LONG, LONG, 2)).await;
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(authorized_get().as_bytes()).await.unwrap();
        assert_eq!(response(&mut s).await.0, 200);
        held.push(s);
    }
    let (status, body) = call(addr, &authorized_get()).await;
    assert_eq!(status, 503);
    assert!(body.contains("UNAVAILABLE"), "{body}");
    for s in &mut held {
        s.write_all(authorized_get().as_bytes()).await.unwrap();
        assert_eq!(response(s).await, (200, "ok".into()));
    }
    // Once one leaves, a newcomer is admitted again.
    drop(held.pop());
    let admitted = tokio::time::timeout(BOUND, async {
        loop {
            if call(addr, &authorized_get()).await.0 == 200 {
                break;
            }
            tokio::task::yield_now().await;
        }
    })
    .await;
    assert!(admitted.is_ok(), "no room after a connection left");
    stop.cancel();
}

#[tokio::test]
async fn two_host_headers_are_400_and_two_origins_too() {
    let (addr, stop) = start(ServeOptions::default()).await;
    let (status, body) = call(
        addr,
        "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: evil.example\r\n\r\n",
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("INVALID_REQUEST"), "{body}");
    let (status, _) = call(
        addr,
        &format!(
            "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: http://127.0.0.1\r\nOrigin: http://evil.example\r\nAuthorization: Bearer {}\r\n\r\n",
            common::TOKEN
        ),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(call(addr, &authorized_get()).await.0, 200);
    stop.cancel();
}

#[tokio::test]
async fn shutdown_lets_the_server_return() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let served = tokio::spawn(legate_token::serve::serve(
        listener,
        common::router(),
        ServeOptions::default(),
        "test",
        stop.clone(),
    ));
    let mut idle = TcpStream::connect(addr).await.unwrap();
    idle.write_all(authorized_get().as_bytes()).await.unwrap();
    assert_eq!(response(&mut idle).await.0, 200);
    stop.cancel();
    tokio::time::timeout(BOUND, served)
        .await
        .expect("serve did not return after shutdown")
        .unwrap();
    assert!(closed_within(&mut idle, BOUND).await);
}
