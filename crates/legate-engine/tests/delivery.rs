//! Delivery modes and artifacts through the engine, with the real scripted agent (revisor) on
//! real pipes, a real SQLite store and real files: every test is an attack by a hostile agent
//! or caller (paths leaving the workspace, links to `/etc/passwd` planted or swapped in after
//! collection, kept bytes changed, a credential in an artifact or a message, a flood of
//! messages, a huge answer, a mode switched during a wait).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_core::delivery::{MAX_MESSAGE_CHARS, MAX_MESSAGES_PER_TASK};
use legate_core::{
    ArtifactState, DeliveryMode, ErrorCode, MessageKind, MessageOrigin, TaskMode, TaskState,
};
use legate_engine::{SubmitRequest, WorkspaceRequest};
use legate_testkit::EngineHarness;
use std::path::{Path, PathBuf};

/// A shared directory under the harness with `files`, for a task to work in.
fn shared(h: &EngineHarness, name: &str, files: &[(&str, &str)]) -> PathBuf {
    let dir = h.base().join(name);
    for (path, text) in files {
        let p = dir.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn in_dir(dir: &Path, prompt: &str, artifacts: &[&str]) -> SubmitRequest {
    let mut req = SubmitRequest::new(prompt);
    req.workspace = WorkspaceRequest::Shared(dir.to_path_buf());
    req.artifact_paths = artifacts.iter().map(|s| s.to_string()).collect();
    req
}

fn kept_file(h: &EngineHarness, task: &str, sha: &str) -> PathBuf {
    h.home().join("artifacts").join(task).join(sha)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn artifacts_are_collected_with_hashes_and_read_bound_to_them() {
    let h = EngineHarness::start();
    let dir = shared(&h, "work", &[("notes.txt", "seed\n")]);
    let task = h
        .run(in_dir(
            &dir,
            "write out/report.md: the report\\nline two",
            &["out/report.md", "absent.txt"],
        ))
        .await;
    assert_eq!(task.state, TaskState::Completed, "{:?}", task.error);
    let arts = h.engine.artifacts().list(task.id.as_str()).unwrap();
    let report = arts.iter().find(|a| a.name == "out/report.md").unwrap();
    assert_eq!(report.state, ArtifactState::Collected);
    let content = std::fs::read(dir.join("out/report.md")).unwrap();
    let sha = legate_core::remote::sha256_hex(&content);
    assert_eq!(report.sha256.as_deref(), Some(sha.as_str()));
    assert_eq!(report.bytes, Some(content.len() as u64));
    let absent = arts.iter().find(|a| a.name == "absent.txt").unwrap();
    assert_eq!(absent.state, ArtifactState::Missing);

    let read = h
        .engine
        .artifacts()
        .read(task.id.as_str(), "out/report.md", &sha)
        .await
        .unwrap();
    assert_eq!(read.bytes, content);
    let stale = h
        .engine
        .artifacts()
        .read(task.id.as_str(), "out/report.md", &"0".repeat(64))
        .await
        .unwrap_err();
    assert_eq!(stale.code, ErrorCode::ContentChanged);
    let none = h
        .engine
        .artifacts()
        .read(task.id.as_str(), "absent.txt", &sha)
        .await
        .unwrap_err();
    assert_eq!(none.code, ErrorCode::ArtifactNotFound);
    let unknown = h
        .engine
        .artifacts()
        .read(task.id.as_str(), "notes.txt", &sha)
        .await
        .unwrap_err();
    assert_eq!(unknown.code, ErrorCode::ArtifactNotFound);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paths_that_leave_the_workspace_are_refused_before_anything_runs() {
    let h = EngineHarness::start();
    let dir = shared(&h, "work", &[]);
    for bad in [
        "../../etc/passwd",
        "/etc/passwd",
        "a/../../x",
        ".git/config",
        "creds/.env",
    ] {
        let e = h.engine.submit(in_dir(&dir, "hello", &[bad])).unwrap_err();
        assert_eq!(e.code, ErrorCode::BlockedArtifactPath, "{bad}: {e}");
    }
    assert!(
        h.engine
            .tasks(&legate_engine::TaskFilter::default())
            .unwrap()
            .is_empty(),
        "a refused request stored a task"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_to_etc_passwd_are_refused_never_read_through() {
    let h = EngineHarness::start();
    let dir = shared(&h, "work", &[]);
    std::os::unix::fs::symlink("/etc/passwd", dir.join("leak.txt")).unwrap();
    std::os::unix::fs::symlink("/etc", dir.join("etc")).unwrap();
    let task = h
        .run(in_dir(&dir, "hello", &["leak.txt", "etc/passwd"]))
        .await;
    let arts = h.engine.artifacts().list(task.id.as_str()).unwrap();
    assert_eq!(arts.len(), 2);
    for a in &arts {
        assert_eq!(a.state, ArtifactState::Blocked, "{a:?}");
        assert!(a.sha256.is_none());
        let e = h
            .engine
            .artifacts()
            .read(task.id.as_str(), &a.name, &"0".repeat(64))
            .await
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::BlockedArtifactPath, "{}", a.name);
    }
    // Nothing of /etc/passwd was kept.
    let kept = h.home().join("artifacts").join(task.id.as_str());
    assert!(!kept.exists() || std::fs::read_dir(&kept).unwrap().next().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swap_after_collection_changes_nothing_and_tampering_with_the_kept_bytes_is_refused() {
    let h = EngineHarness::start();
    let dir = shared(&h, "work", &[("report.txt", "the collected report\n")]);
    let task = h.run(in_dir(&dir, "hello", &["report.txt"])).await;
    let a = h
        .engine
        .artifacts()
        .list(task.id.as_str())
        .unwrap()
        .remove(0);
    assert_eq!(a.state, ArtifactState::Collected);
    let sha = a.sha256.unwrap();

    // The agent (or anyone) swaps the workspace file for a link to /etc/passwd afterwards:
    // the artifact is what was collected, never the link's target.
    std::fs::remove_file(dir.join("report.txt")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", dir.join("report.txt")).unwrap();
    let read = h
        .engine
        .artifacts()
        .read(task.id.as_str(), "report.txt", &sha)
        .await
        .unwrap();
    assert_eq!(read.bytes, b"the collected report\n");

    // The kept bytes change: refused.
    let kept = kept_file(&h, task.id.as_str(), &sha);
    std::fs::write(&kept, "the collected rePort\n").unwrap();
    let e = h
        .engine
        .artifacts()
        .read(task.id.as_str(), "report.txt", &sha)
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::BlockedArtifactPath, "{e}");

    // The kept file becomes a link to /etc/passwd: refused, not followed.
    std::fs::remove_file(&kept).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", &kept).unwrap();
    let e = h
        .engine
        .artifacts()
        .read(task.id.as_str(), "report.txt", &sha)
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::BlockedArtifactPath, "{e}");
    assert!(!e.message.contains("root:"), "{e}");
}

/// A shared workspace holding Legate's home (a task in `~`, the home `~/.legate`): the agent's
/// mount namespace covers the home, and so does what Legate serves and collects on its
/// behalf. Before, the agent read the tokens and wrote the configuration through `fs/*`, and
/// a caller collected the tokens as artifacts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legates_home_inside_a_shared_workspace_is_neither_served_nor_collected() {
    let h = EngineHarness::start();
    std::fs::write(h.home().join("mcp-token"), "MCPCANARY-41d2\n").unwrap();
    std::fs::write(h.base().join("notes.txt"), "seed\n").unwrap();
    let task = h
        .run(in_dir(
            h.base(),
            "read home/mcp-token\nwrite home/legate.toml: [network]\nwrite notes.txt: mine",
            &["home/mcp-token", "home/legate.db", "notes.txt"],
        ))
        .await;
    let answer = &task.result.as_ref().unwrap().text;
    assert!(!answer.contains("MCPCANARY"), "{answer}");
    assert!(answer.contains("Legate's home"), "{answer}");
    assert!(!h.home().join("legate.toml").exists());
    assert_eq!(
        std::fs::read_to_string(h.base().join("notes.txt")).unwrap(),
        "mine"
    );
    let arts = h.engine.artifacts().list(task.id.as_str()).unwrap();
    for name in ["home/mcp-token", "home/legate.db"] {
        let a = arts.iter().find(|a| a.name == name).unwrap();
        assert_eq!(a.state, ArtifactState::Blocked, "{name}");
        let reason = a.reason.as_deref().unwrap();
        assert!(reason.starts_with("BLOCKED_ARTIFACT_PATH"), "{reason}");
    }
    let notes = arts.iter().find(|a| a.name == "notes.txt").unwrap();
    assert_eq!(notes.state, ArtifactState::Collected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_artifact_holding_a_credential_is_blocked_and_its_value_never_echoed() {
    let h = EngineHarness::start();
    let key = format!("AKIA{}", "QWERTYUIOPASDFGH");
    let dir = shared(
        &h,
        "work",
        &[("notes.txt", &format!("aws_access_key_id = {key}\n"))],
    );
    let task = h.run(in_dir(&dir, "hello", &["notes.txt"])).await;
    let a = h
        .engine
        .artifacts()
        .list(task.id.as_str())
        .unwrap()
        .remove(0);
    assert_eq!(a.state, ArtifactState::Blocked);
    let reason = a.reason.unwrap();
    assert!(reason.starts_with("SECRET_CONTENT"), "{reason}");
    assert!(!reason.contains(&key));
    let e = h
        .engine
        .artifacts()
        .read(task.id.as_str(), "notes.txt", &"0".repeat(64))
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::BlockedArtifactPath);
    assert!(!e.message.contains(&key));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_refusals_keeps_the_newest_hundred_and_says_older_ones_were_dropped() {
    let h = EngineHarness::start();
    let writes: Vec<String> = (0..130).map(|i| format!("write f{i}.txt: x")).collect();
    let mut req = SubmitRequest::new(writes.join("\n"));
    req.mode = Some(TaskMode::ReadOnly);
    req.delivery_mode = Some(DeliveryMode::Messages);
    let task = h.run(req).await;
    assert_eq!(task.controls.delivery_mode, DeliveryMode::Messages);
    let page = h.engine.messages().list(task.id.as_str(), 0, 1000).unwrap();
    assert_eq!(page.messages.len(), MAX_MESSAGES_PER_TASK);
    // 130 refusals and the result.
    assert_eq!(page.last_seq, 131);
    assert_eq!(page.oldest_available, 32);
    assert_eq!(page.messages.first().unwrap().seq, 32);
    let last = page.messages.last().unwrap();
    assert_eq!(last.kind, MessageKind::Result);
    let blockers = page
        .messages
        .iter()
        .filter(|m| m.kind == MessageKind::Blocker && m.origin == MessageOrigin::Legate)
        .count();
    assert_eq!(blockers, 99);
    // Reading again derives nothing twice.
    let again = h.engine.messages().list(task.id.as_str(), 0, 1000).unwrap();
    assert_eq!(again.last_seq, 131);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_answer_gives_a_bounded_excerpt_pointing_at_the_whole() {
    let h = EngineHarness::start();
    let mut req = SubmitRequest::new("!chunks 30000");
    req.delivery_mode = Some(DeliveryMode::Messages);
    let task = h.run(req).await;
    let answer = &task.result.as_ref().unwrap().text;
    assert!(answer.len() > 1_000_000, "{}", answer.len());
    let page = h.engine.messages().list(task.id.as_str(), 0, 10).unwrap();
    let result = page
        .messages
        .iter()
        .find(|m| m.kind == MessageKind::Result)
        .unwrap();
    assert!(result.text.chars().count() <= MAX_MESSAGE_CHARS);
    let sha = legate_core::remote::sha256_hex(answer.as_bytes());
    assert_eq!(result.result_sha256.as_deref(), Some(sha.as_str()));
    assert!(result.text.contains("read_result"));
    assert_eq!(result.origin, MessageOrigin::AgentReported);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_is_a_message_and_the_mode_is_inherited_and_switched() {
    let h = EngineHarness::start();
    // An empty message starts a conversation that waits for input; the caller then follows
    // it as messages (the waiting task's mode changes; derivation starts from its first event).
    let waiting = h
        .engine
        .messages()
        .deliver(legate_engine::Inbound {
            agent: "agent".into(),
            text: String::new(),
            ..legate_engine::Inbound::default()
        })
        .unwrap()
        .task;
    assert_eq!(waiting.state, TaskState::InputRequired);
    let task = h
        .engine
        .messages()
        .set_delivery_mode(waiting.id.as_str(), DeliveryMode::Messages)
        .unwrap();
    assert_eq!(task.controls.delivery_mode, DeliveryMode::Messages);
    let page = h.engine.messages().list(task.id.as_str(), 0, 10).unwrap();
    assert_eq!(page.messages.len(), 1);
    assert_eq!(page.messages[0].kind, MessageKind::Question);

    // The reply continues the context in the same mode.
    let next = h.engine.reply(task.id.as_str(), "hello").unwrap();
    assert_eq!(next.controls.delivery_mode, DeliveryMode::Messages);
    let next = h.wait(&next.id).await;
    // Switched: a later continuation inherits the new mode.
    let switched = h
        .engine
        .messages()
        .set_delivery_mode(next.id.as_str(), DeliveryMode::Events)
        .unwrap();
    assert_eq!(switched.controls.delivery_mode, DeliveryMode::Events);
    let stored = h.engine.task(next.id.as_str()).unwrap();
    assert_eq!(stored.controls.delivery_mode, DeliveryMode::Events);
    // The conversation is the inbound caller's: its next message continues it (another
    // front's `resume` may not: `another_fronts_task_never_joins_…` in `deliver.rs`).
    let resumed = h
        .engine
        .messages()
        .deliver(legate_engine::Inbound {
            agent: "agent".into(),
            context_id: Some(next.context_id.clone()),
            text: "again".into(),
            ..legate_engine::Inbound::default()
        })
        .unwrap()
        .task;
    assert_eq!(resumed.controls.delivery_mode, DeliveryMode::Events);
    h.wait(&resumed.id).await;
}
