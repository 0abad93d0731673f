//! TLS end to end, with certificates a CA of the test's own signed (`legate_testkit::tls`):
//! federation (a back `legate serve` whose `[a2a]` serves HTTPS, and a front `legate run`
//! whose `[agents.back]` is an `https://` url trusting that CA through `tls_ca_file`; without
//! it the front refuses the certificate), a token to another machine over plain `http://`
//! refused before anything is sent, and the MCP front served over HTTPS (`[mcp] tls_*`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_frontkit::cli::CliHome;
use legate_frontkit::fleet::{BACK_TOKEN_ENV, Node};
use legate_frontkit::served::McpServed;
use legate_testkit::tls::TestCa;

const LEGATE: &str = env!("CARGO_BIN_EXE_legate");

/// A back serving revisor over HTTPS with a certificate for 127.0.0.1 that `ca` signed.
fn tls_back(ca: &TestCa) -> Node {
    let back = CliHome::new(LEGATE);
    std::fs::create_dir_all(back.home()).unwrap();
    let (cert, key) = ca.issue(&["127.0.0.1"]).write(back.base(), "back");
    back.configure(&format!(
        "[a2a]\ntls_cert_file = \"{}\"\ntls_key_file = \"{}\"\n",
        cert.display(),
        key.display()
    ));
    Node::start(back, &["--port", "0"])
}

/// A front whose agent `back` is `back`'s revisor at an `https://` url, with `extra` lines.
fn front(back: &Node, extra: &str) -> CliHome {
    let token = back.bearer.trim_start_matches("Bearer ").to_owned();
    CliHome::with_config(
        LEGATE,
        &format!(
            "[agents.back]\nkind = \"a2a\"\nurl = \"https://{}/agents/revisor/.well-known/agent-card.json\"\ntoken_env = \"{BACK_TOKEN_ENV}\"\n{extra}",
            back.a2a
        ),
    )
    .env(BACK_TOKEN_ENV, &token)
}

#[test]
fn a_task_crosses_to_a_back_served_over_tls_and_an_untrusted_certificate_is_refused() {
    let ca = TestCa::new("fleet CA");
    let back = tls_back(&ca);
    let ca_file = ca.write(back.base(), "fleet-ca");

    let trusting = front(&back, &format!("tls_ca_file = \"{}\"\n", ca_file.display()));
    let out = trusting.run(&["run", "--agent", "back", "What is in this workspace?"]);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{said}");

    // The system's roots do not hold the fleet's CA: refused, the task failed, nothing sent.
    let untrusting = front(&back, "");
    let out = untrusting.run(&["run", "--agent", "back", "What is in this workspace?"]);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("REMOTE_UNREACHABLE"), "{said}");
    assert!(said.contains("certificate"), "{said}");
}

#[test]
fn a_token_to_another_machine_over_plain_http_is_refused_when_the_configuration_is_read() {
    let front = CliHome::with_config(
        LEGATE,
        &format!(
            "[agents.far]\nkind = \"a2a\"\nurl = \"http://10.255.255.1:9/\"\ntoken_env = \"{BACK_TOKEN_ENV}\"\n"
        ),
    )
    .env(BACK_TOKEN_ENV, "0123456789abcdef0123456789abcdef");
    let out = front.run(&["agents", "--no-probe"]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("CONFIG_INVALID") && said.contains("agents.far.url"),
        "{said}"
    );
}

#[tokio::test]
async fn the_mcp_front_serves_https_to_a_client_that_trusts_its_certificate() {
    let ca = TestCa::new("callers' CA");
    let home = CliHome::new(LEGATE);
    std::fs::create_dir_all(home.home()).unwrap();
    let (cert, key) = ca.issue(&["127.0.0.1"]).write(home.base(), "mcp");
    home.configure(&format!(
        "[mcp]\ntls_cert_file = \"{}\"\ntls_key_file = \"{}\"\n",
        cert.display(),
        key.display()
    ));
    let served = McpServed::start(&home, &["--mcp", "--port", "0"]);
    assert!(served.url.starts_with("https://"), "{}", served.url);

    let client = |roots: rustls::RootCertStore| {
        let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        reqwest::Client::builder()
            .tls_backend_preconfigured(config)
            .build()
            .unwrap()
    };
    let initialize = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "tls-test", "version": "1"}}});
    let call = |client: reqwest::Client| {
        client
            .post(&served.url)
            .header("Accept", "application/json, text/event-stream")
            .header("Authorization", format!("Bearer {}", served.token))
            .header("Content-Type", "application/json")
            .body(initialize.to_string())
            .send()
    };

    let mut trusted = rustls::RootCertStore::empty();
    trusted.add_parsable_certificates(
        rustls::pki_types::pem::PemObject::pem_slice_iter(ca.cert_pem().as_bytes())
            .map(Result::unwrap)
            .collect::<Vec<rustls::pki_types::CertificateDer<'static>>>(),
    );
    let answer = call(client(trusted)).await.unwrap();
    assert_eq!(answer.status(), 200);
    let body = answer.text().await.unwrap();
    assert!(body.contains("serverInfo"), "{body}");

    // A client that does not trust the CA never gets as far as a request.
    let refused = call(client(rustls::RootCertStore::empty()))
        .await
        .unwrap_err();
    assert!(refused.is_connect(), "{refused:?}");
}

#[test]
fn a_plain_loopback_remote_is_reached_directly_whatever_proxy_the_environment_names() {
    // A proxy that would receive the bearer token in clear (nothing listens there: a request
    // sent through it fails the task).
    let proxy = "http://127.0.0.1:9";
    let env = [
        ("http_proxy", proxy),
        ("HTTP_PROXY", proxy),
        ("ALL_PROXY", proxy),
        ("all_proxy", proxy),
        ("NO_PROXY", ""),
        ("no_proxy", ""),
    ];
    let fleet = legate_frontkit::fleet::Fleet::start_with_env(LEGATE, "", &[], &env);
    let out = fleet
        .front
        .cli(&["run", "--agent", "back", "What is in this workspace?"]);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{said}");
}
