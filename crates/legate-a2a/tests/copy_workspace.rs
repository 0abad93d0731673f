//! Remote work, local review: Legate's copy-workspace extension over real A2A on 127.0.0.1.
//!
//! A local engine makes a copy of a git project (the testkit's harness, the secret
//! preflight included); `legate_remote::copy::outbound` sends its files with a message to a
//! second engine served by `legate_a2a`, whose scripted agent changes the copy made from
//! them; the `patch` artifact and its returned manifest come back, `apply_returned` applies
//! them to the local copy, and the local engine previews, verifies and integrates it as if
//! its own agent had made the change. Hostile bundles and tampered patches are refused and
//! leave both sides as they were.
//!
//! The agent binary must be built first: `cargo build -p legate-testkit --bin
//! legate-scripted-agent` (a plain `cargo test --workspace` does it).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use a2a::{GetTaskRequest, Message, Part, PartContent, Role, SendMessageRequest};
use a2a_client::A2AClientFactory;
use a2a_client::agent_card::AgentCardResolver;
use a2a_client::auth::AuthInterceptor;
use futures::StreamExt;
use legate_core::ErrorCode;
use legate_core::remote::{MANIFEST_KEY, ManifestFile, SentManifest, sha256_hex};
use legate_engine::{Criterion, Review, Verdict};
use legate_frontkit::a2a::{A2aFront, A2aServe};
use legate_remote::copy;
use legate_testkit::{EngineHarness, TestAgent};
use serde_json::json;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

const TOKEN: &str = "0123456789abcdef0123456789abcdef0123456789abcdef";

/// A remote Legate on 127.0.0.1 serving the scripted agent as `revisor`, accepting at most
/// `max_transfer` bytes of files.
async fn remote(base: &Path, max_transfer: u64) -> A2aFront {
    let engine = EngineHarness::builder()
        .agent(TestAgent::scripted("revisor"))
        .config(move |c| c.fronts.max_transfer_bytes = max_transfer)
        .engine_in(base);
    A2aFront::serve(
        engine,
        A2aServe::default()
            .agents(&["revisor"])
            .max_body_bytes(8 << 20),
    )
    .await
}

async fn client(base: &str) -> a2a_client::A2AClient<Box<dyn a2a_client::Transport>> {
    let card = AgentCardResolver::new(None).resolve(base).await.unwrap();
    A2AClientFactory::builder()
        .with_interceptor(Arc::new(AuthInterceptor::bearer(TOKEN)))
        .preferred_bindings(vec![a2a::TRANSPORT_PROTOCOL_JSONRPC.into()])
        .build()
        .create_from_card(&card)
        .await
        .unwrap()
}

fn request(message: Message) -> SendMessageRequest {
    SendMessageRequest {
        message,
        configuration: None,
        metadata: None,
        tenant: None,
    }
}

/// Sends `message` streaming, waits for the stream's end, and returns the task with its
/// artifacts.
async fn run_remote(base: &str, message: Message) -> a2a::Task {
    let c = client(base).await;
    let mut stream = c.send_streaming_message(&request(message)).await.unwrap();
    let mut id = None;
    while let Some(e) = stream.next().await {
        if let a2a::StreamResponse::Task(t) = e.unwrap() {
            id.get_or_insert(t.id);
        }
    }
    c.get_task(&GetTaskRequest {
        id: id.expect("the stream named its task"),
        history_length: Some(0),
        tenant: None,
    })
    .await
    .unwrap()
}

fn criteria() -> Vec<Criterion> {
    serde_json::from_value(json!([{"id": "beta", "description": "a.txt says beta",
        "check": {"kind": "file-contains", "path": "a.txt", "text": "beta"}}]))
    .unwrap()
}

/// A local copy task whose own agent changes nothing: its copy is what travels.
async fn local_copy(h: &EngineHarness) -> (String, PathBuf) {
    let mut req = h.on_copy("What is in this workspace?");
    if let legate_engine::WorkspaceRequest::Copy { criteria: c, .. } = &mut req.workspace {
        *c = criteria();
    }
    let done = h.run(req).await;
    assert_eq!(
        done.state,
        legate_core::TaskState::Completed,
        "{:?}",
        done.error
    );
    let id = done.id.to_string();
    (id.clone(), h.home().join("copies").join(id))
}

fn harness() -> EngineHarness {
    EngineHarness::builder()
        .project(&[("a.txt", "alpha\n"), ("src/lib.rs", "fn one() {}\n")])
        .start()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_runs_remotely_and_is_reviewed_and_integrated_locally() {
    let h = harness();
    let (id, root) = local_copy(&h).await;
    let dir = tempfile::tempdir().unwrap();
    let r = remote(dir.path(), 1 << 20).await;
    let card = AgentCardResolver::new(None)
        .resolve(&r.agent("revisor"))
        .await
        .unwrap();
    // The card's extension list is f4's to declare; the check itself is the client's.
    let mut declared = card.clone();
    declared.capabilities.extensions = Some(vec![a2a::AgentExtension {
        uri: legate_core::remote::COPY_WORKSPACE_EXTENSION.into(),
        description: None,
        required: None,
        params: None,
    }]);
    copy::require_extension(&declared).unwrap();
    let mut bare = card;
    bare.capabilities.extensions = None;
    assert_eq!(
        copy::require_extension(&bare).unwrap_err().code,
        ErrorCode::RemoteWorkspaceUnsupported
    );

    let out = copy::outbound(&root, 1 << 20).unwrap();
    assert_eq!(out.manifest.files.len(), 2);
    let mut m = Message::new(Role::User, vec![Part::text("replace a.txt: alpha => beta")]);
    out.attach(&mut m);
    let task = run_remote(&r.agent("revisor"), m).await;
    assert_eq!(
        task.status.state,
        a2a::TaskState::Completed,
        "{:?}",
        task.status
    );
    let remote_patch = r
        .engine
        .reviews()
        .patch(task.id.as_str(), None)
        .await
        .unwrap();
    assert_eq!(remote_patch.files.len(), 1);
    assert_eq!(r.copies().len(), 1, "one fresh copy on the remote");

    // A tampered artifact is refused and leaves the local copy at its baseline.
    let mut tampered = task.clone();
    for a in tampered.artifacts.iter_mut().flatten() {
        for p in &mut a.parts {
            if let PartContent::Text(t) = &mut p.content {
                *t = t.replace("+beta", "+gamma");
            }
        }
    }
    let e = copy::apply_returned(&root, &tampered).unwrap_err();
    assert_eq!(e.code, ErrorCode::RemoteProtocolError, "{e}");
    assert!(
        h.engine
            .reviews()
            .patch(&id, None)
            .await
            .unwrap()
            .files
            .is_empty()
    );
    assert_eq!(
        std::fs::read_to_string(root.join("a.txt")).unwrap(),
        "alpha\n"
    );

    let applied = copy::apply_returned(&root, &task).unwrap();
    assert_eq!(applied.patch_sha256, remote_patch.sha256);
    let local = h.engine.reviews().patch(&id, None).await.unwrap();
    assert_eq!(
        local.patch, remote_patch.patch,
        "the local patch is the remote's"
    );
    assert_eq!(local.sha256, remote_patch.sha256);
    // The remote never integrates a copy it was sent.
    let e = r
        .engine
        .reviews()
        .integrate(task.id.as_str(), Some(&remote_patch.sha256), None)
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidWorkspace);

    // Local review, unchanged: verify, integrate; the original gets exactly the change.
    let review: Vec<Review> = vec![Review {
        criterion_id: "beta".into(),
        verdict: Verdict::Passed,
        path: "a.txt".into(),
        line: 1,
        quote: "beta".into(),
        explanation: "replaced remotely".into(),
    }];
    let v = h
        .engine
        .reviews()
        .verify(&id, &local.sha256, review)
        .await
        .unwrap();
    assert!(v.passed, "{v:?}");
    let done = h
        .engine
        .reviews()
        .integrate(&id, Some(&local.sha256), None)
        .await
        .unwrap();
    assert_eq!(done.result.files, ["a.txt"]);
    assert_eq!(
        std::fs::read_to_string(h.project().join("a.txt")).unwrap(),
        "beta\n"
    );
    assert_eq!(
        std::fs::read_to_string(h.project().join("src/lib.rs")).unwrap(),
        "fn one() {}\n"
    );
    r.stop().await;
    h.engine.shutdown().await;
}

/// Sends a hand-made copy-workspace message and returns the A2A error's text.
async fn refused(base: &str, parts: Vec<Part>) -> String {
    let mut m = Message::new(Role::User, parts);
    m.metadata = Some(HashMap::from([(MANIFEST_KEY.to_string(), json!({}))]));
    let c = client(base).await;
    let e = c.send_message(&request(m)).await.unwrap_err();
    format!("{e:?}")
}

fn file_part(path: &str, bytes: &[u8]) -> Part {
    let mut p = Part::raw(bytes.to_vec());
    p.filename = Some(path.into());
    p.metadata = Some(HashMap::from([(MANIFEST_KEY.to_string(), json!("file"))]));
    p
}

fn manifest_part(files: &[(&str, &[u8])]) -> Part {
    let m = SentManifest::of(
        files
            .iter()
            .map(|(p, b)| ManifestFile {
                path: (*p).into(),
                size: b.len() as u64,
                sha256: sha256_hex(b),
                executable: false,
            })
            .collect(),
    );
    let mut p = Part::data(serde_json::to_value(m).unwrap());
    p.metadata = Some(HashMap::from([(
        MANIFEST_KEY.to_string(),
        json!("manifest"),
    )]));
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_bundles_are_refused_before_any_copy_is_made() {
    let dir = tempfile::tempdir().unwrap();
    let r = remote(dir.path(), 64).await;
    let prompt = || Part::text("write x: y");
    let cases: Vec<(Vec<Part>, &str)> = vec![
        (
            vec![
                prompt(),
                file_part("../x", b"1"),
                manifest_part(&[("../x", b"1")]),
            ],
            "INVALID_WORKSPACE",
        ),
        (
            vec![
                prompt(),
                file_part(".git/config", b"1"),
                manifest_part(&[(".git/config", b"1")]),
            ],
            "INVALID_WORKSPACE",
        ),
        (
            vec![
                prompt(),
                file_part("a", b"1"),
                manifest_part(&[("a", b"2")]),
            ],
            "does not match",
        ),
        (
            vec![
                prompt(),
                file_part("a", b"1"),
                file_part("A", b"1"),
                manifest_part(&[("a", b"1"), ("A", b"1")]),
            ],
            "twice",
        ),
        (
            vec![
                prompt(),
                file_part("a", b"1"),
                manifest_part(&[("a", b"1"), ("b", b"")]),
            ],
            "INVALID_WORKSPACE",
        ),
        (
            vec![
                prompt(),
                file_part("big", &[7; 65]),
                manifest_part(&[("big", &[7; 65])]),
            ],
            "COPY_TOO_LARGE",
        ),
        (vec![prompt(), file_part("a", b"1")], "no manifest"),
    ];
    for (parts, says) in cases {
        let e = refused(&r.agent("revisor"), parts).await;
        assert!(e.contains(says), "{says:?} not in {e}");
        assert!(r.copies().is_empty(), "{says}: a copy was made");
    }
    assert!(r.engine.tasks(&Default::default()).unwrap().is_empty());
    r.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_past_the_bound_is_too_large_before_anything_is_sent() {
    let h = harness();
    let (_, root) = local_copy(&h).await;
    let e = copy::outbound(&root, 10).unwrap_err();
    assert_eq!(e.code, ErrorCode::CopyTooLarge);
    // The remote's own bound holds whatever the client allows itself.
    let dir = tempfile::tempdir().unwrap();
    let r = remote(dir.path(), 10).await;
    let out = copy::outbound(&root, 1 << 20).unwrap();
    let mut m = Message::new(Role::User, vec![Part::text("write x: y")]);
    out.attach(&mut m);
    let c = client(&r.agent("revisor")).await;
    let e = c.send_message(&request(m)).await.unwrap_err();
    assert!(format!("{e:?}").contains("COPY_TOO_LARGE"), "{e:?}");
    assert!(r.copies().is_empty());
    r.stop().await;
    h.engine.shutdown().await;
}
