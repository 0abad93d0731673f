//! Found attacking the fronts: a token holder's connection is as evictable as a flooder's until its
//! first request has been parsed, so a token-less flood that keeps opening connections closes
//! it before it can authenticate. Fixed by the grace a new connection gets (`conns::GRACE`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{BOUND, authorized_get, response, start};
use legate_token::serve::ServeOptions;
use std::task::Poll;
use std::time::Duration;
use tokio::io::{AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

#[tokio::test]
async fn a_token_holder_that_just_connected_is_not_evicted_by_a_token_less_flood() {
    let (addr, stop) = start(ServeOptions {
        header_timeout: Duration::from_secs(600),
        body_timeout: Duration::from_secs(600),
        max_connections: 8,
        ..ServeOptions::default()
    })
    .await;
    // The token holder connects; its request is a moment behind (a client building it).
    let mut client = TcpStream::connect(addr).await.unwrap();
    // The scenario's subject: the holder's request comes a moment after its connection.
    tokio::time::sleep(Duration::from_millis(50)).await;
    // Meanwhile a token-less client opens connections, never sending a byte.
    let mut flood = Vec::new();
    // As many as there are places (the cap, and the room kept beyond it for the supervisor).
    for _ in 0..(8 + legate_token::serve::SUPERVISOR_RESERVE) {
        flood.push(TcpStream::connect(addr).await.unwrap());
    }
    // One connection too many: the server closes one, the refused flood connection
    // (answered 503) or, without the grace, the holder's. Wait until one of them hears from it.
    tokio::time::timeout(BOUND, first_to_hear(&client, &flood))
        .await
        .expect("the server closed or answered no connection over its cap");
    client.write_all(authorized_get().as_bytes()).await.unwrap();
    let mut probe = [0u8; 1];
    let peek = tokio::time::timeout(BOUND, client.peek(&mut probe))
        .await
        .unwrap();
    assert!(
        matches!(peek, Ok(n) if n > 0),
        "the token holder's connection was closed by the flood before its request was read"
    );
    assert_eq!(response(&mut client).await, (200, "ok".into()));
    stop.cancel();
}

/// Resolves once any of these connections can be read from (a response, or its end), without
/// consuming a byte.
async fn first_to_hear(client: &TcpStream, flood: &[TcpStream]) {
    std::future::poll_fn(|cx| {
        for conn in std::iter::once(client).chain(flood) {
            let mut byte = [0u8; 1];
            if conn.poll_peek(cx, &mut ReadBuf::new(&mut byte)).is_ready() {
                return Poll::Ready(());
            }
        }
        Poll::Pending
    })
    .await;
}
