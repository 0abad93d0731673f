//! The `a2a` backend over `https://`: a remote Legate (an engine serving revisor over A2A)
//! behind the fronts' own TLS server (`legate_token::serve::serve_tls`) on 127.0.0.1, its
//! certificate signed by a CA of the test's own (`legate_testkit::tls`). The front trusts that
//! CA through the agent's `tls_ca_file`, or does not; and a token never travels in clear to
//! another machine.
//!
//! The agent binary must be built first: `cargo build -p legate-testkit --bin
//! legate-scripted-agent` (a plain `cargo test --workspace` does it).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::open_err;

use legate_a2a::{A2aOptions, Token};
use legate_core::{AgentSpec, ErrorCode, TaskState, TokenRef};
use legate_engine::{Engine, SubmitRequest};
use legate_testkit::tls::{Identity, TestCa};
use legate_testkit::{EngineHarness, TestAgent};
use legate_token::serve::{ServeOptions, ServerTls};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

const TOKEN: &str = "0123456789abcdef0123456789abcdef0123456789abcdef";

/// A remote Legate served over TLS with `identity`, whose cards advertise its address with
/// `card_scheme` (`https`, or `http` for a card that would move the calls to plain HTTP).
struct Back {
    url: String,
    engine: Engine,
    stop: CancellationToken,
}

impl Back {
    async fn start(base: &Path, identity: &Identity, card_scheme: &str) -> Back {
        let engine = EngineHarness::builder()
            .agent(TestAgent::scripted("revisor"))
            .engine_in(base);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let url = format!("https://{address}");
        let options = A2aOptions {
            token: Some(Token::configured(TOKEN).unwrap()),
            public_url: format!("{card_scheme}://{address}"),
            max_body_bytes: 1 << 20,
            probe_limit: Duration::from_secs(20),
            copy_roots: Vec::new(),
            agents: vec!["revisor".into()],
        };
        let (router, report) = legate_a2a::boot(&engine, &options).await;
        assert_eq!(report.served.len(), 1, "{:?}", report.failed);
        let tls =
            ServerTls::from_pem(identity.cert_pem.as_bytes(), identity.key_pem.as_bytes()).unwrap();
        let stop = CancellationToken::new();
        let s = stop.clone();
        tokio::spawn(legate_token::serve::serve_tls(
            listener,
            router,
            ServeOptions::default(),
            tls,
            "a2a",
            s,
        ));
        Back { url, engine, stop }
    }

    async fn stop(self) {
        self.stop.cancel();
        self.engine.shutdown().await;
    }
}

fn token_file(dir: &Path) -> PathBuf {
    common::token_file(dir, TOKEN)
}

fn far(url: &str, token: Option<PathBuf>, ca: Option<PathBuf>) -> AgentSpec {
    let mut spec = AgentSpec::url("far", legate_remote::kind(), url);
    if let legate_core::Transport::Url(r) = &mut spec.transport {
        r.token = token.map(TokenRef::File);
        r.agent = Some("revisor".into());
        r.allow_unsupervised = true;
        r.tls_ca_file = ca;
    }
    spec
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_runs_over_https_trusting_the_federations_own_ca() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("federation CA");
    let back = Back::start(
        &dir.path().join("back"),
        &ca.issue(&["127.0.0.1", "localhost"]),
        "https",
    )
    .await;
    let spec = far(
        &back.url,
        Some(token_file(dir.path())),
        Some(ca.write(dir.path(), "ca")),
    );
    let front = EngineHarness::builder()
        .config(move |c| {
            c.agents.insert("far".into(), spec);
        })
        .engine_in(&dir.path().join("front"));
    let mut req = SubmitRequest::new("!say done over tls");
    req.agent = Some("far".into());
    let task = front.submit(req).unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(60), front.wait(&task.id))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ended.state, TaskState::Completed, "{:?}", ended.error);
    assert!(ended.result.unwrap().text.starts_with("done over tls\n"));
    front.shutdown().await;
    back.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_no_trusted_ca_signed_or_for_another_name_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("federation CA");
    let ca_file = ca.write(dir.path(), "ca");
    let stranger = TestCa::new("someone else's CA");
    let stranger_file = stranger.write(dir.path(), "stranger");

    // Signed by the federation's CA, which neither the system nor a stranger's file trusts.
    let back = Back::start(&dir.path().join("back"), &ca.issue(&["127.0.0.1"]), "https").await;
    for trusted in [None, Some(stranger_file.clone())] {
        let e = open_err(far(
            &back.url,
            Some(token_file(dir.path())),
            trusted.clone(),
        ))
        .await;
        assert_eq!(e.code, ErrorCode::RemoteUnreachable, "{trusted:?}: {e}");
        assert!(e.message.to_lowercase().contains("certificate"), "{e}");
        assert!(!e.message.contains(TOKEN), "{e}");
    }
    back.stop().await;

    // The trusted CA's certificate, but for another name than the one dialled.
    let back = Back::start(
        &dir.path().join("back2"),
        &ca.issue(&["build-1.example"]),
        "https",
    )
    .await;
    let e = open_err(far(
        &back.url,
        Some(token_file(dir.path())),
        Some(ca_file.clone()),
    ))
    .await;
    assert_eq!(e.code, ErrorCode::RemoteUnreachable, "{e}");
    assert!(e.message.to_lowercase().contains("certificate"), "{e}");
    back.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_card_cannot_move_the_calls_to_plain_http() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("federation CA");
    // A card served over TLS whose interface says http:// on the same host and port.
    let back = Back::start(&dir.path().join("back"), &ca.issue(&["127.0.0.1"]), "http").await;
    let e = open_err(far(
        &back.url,
        Some(token_file(dir.path())),
        Some(ca.write(dir.path(), "ca")),
    ))
    .await;
    assert_eq!(e.code, ErrorCode::RemoteProtocolError, "{e}");
    back.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_is_never_sent_in_clear_to_another_machine() {
    let dir = tempfile::tempdir().unwrap();
    // Refused before any connection is made (nothing listens there, nothing is sent).
    let e = open_err(far(
        "http://10.255.255.1:9/",
        Some(token_file(dir.path())),
        None,
    ))
    .await;
    assert_eq!(e.code, ErrorCode::ConfigInvalid, "{e}");
    assert!(e.message.contains("in clear"), "{e}");
}
