//! `legate_token::serve` out of descriptors: a child process (this test binary again) lowers
//! its own descriptor limit, uses up all but a few, and serves; the parent floods it with idle
//! unauthenticated connections, then a token holder must still be answered, twice (the
//! listener neither spun itself to death nor stopped).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{BOUND, authorized_get, call};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;
use tokio::net::TcpStream;

const CHILD: &str = "LEGATE_TEST_FD_EXHAUSTION_CHILD";
/// Descriptors the child leaves free after filling its table.
const FREE: usize = 6;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_out_of_descriptors_still_answers_a_token_holder() {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "serve_with_few_descriptors", "--nocapture"])
        .env(CHILD, "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    // Read the child's stdout to its end (so its test harness can report), passing on the port.
    let stdout = child.stdout.take().unwrap();
    let (port_tx, port_rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let mut port_tx = Some(port_tx);
        for line in BufReader::new(stdout).lines().map_while(|l| l.ok()) {
            if let Some(p) = line.strip_prefix("PORT=")
                && let Some(tx) = port_tx.take()
            {
                let _ = tx.send(p.trim().parse::<u16>().unwrap());
            }
        }
    });
    let port = tokio::time::timeout(BOUND, port_rx)
        .await
        .expect("the child never said its port")
        .expect("the child never said its port");
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    // Far more idle connections than the child has descriptors for.
    let mut idle = Vec::new();
    for _ in 0..(FREE * 5) {
        idle.push(TcpStream::connect(addr).await.unwrap());
    }
    for round in 0..2 {
        let answered = tokio::time::timeout(BOUND, call(addr, &authorized_get())).await;
        assert_eq!(
            answered.map(|r| r.0).ok(),
            Some(200),
            "round {round}: a token holder was not answered"
        );
    }
    // Closing stdin stops the child.
    drop(child.stdin.take());
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "the child failed: {status}");
}

/// The child's half: does nothing unless started by the test above.
#[test]
fn serve_with_few_descriptors() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        // A low limit, then fill the table but for FREE descriptors.
        let limit = rustix::process::Rlimit {
            current: Some(64),
            maximum: rustix::process::getrlimit(rustix::process::Resource::Nofile).maximum,
        };
        rustix::process::setrlimit(rustix::process::Resource::Nofile, limit).unwrap();
        let mut hog = Vec::new();
        while let Ok(f) = std::fs::File::open("/dev/null") {
            hog.push(f);
        }
        hog.truncate(hog.len().saturating_sub(FREE));
        let stop = tokio_util::sync::CancellationToken::new();
        let options = legate_token::serve::ServeOptions {
            header_timeout: Duration::from_secs(600),
            body_timeout: Duration::from_secs(600),
            max_connections: 1000,
            ..legate_token::serve::ServeOptions::default()
        };
        let served = tokio::spawn(legate_token::serve::serve(
            listener,
            common::router(),
            options,
            "test",
            stop.clone(),
        ));
        {
            let mut out = std::io::stdout();
            writeln!(out, "PORT={port}").unwrap();
            out.flush().unwrap();
        }
        // Until the parent closes stdin. (A blocking read: its thread needs no descriptor.)
        let _ = tokio::task::spawn_blocking(|| {
            let mut sink = String::new();
            while std::io::stdin().read_line(&mut sink).is_ok_and(|n| n > 0) {}
        })
        .await;
        stop.cancel();
        let _ = served.await;
        drop(hog);
    });
}
