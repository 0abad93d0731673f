//! Spawns `legate-scripted-agent` as a subprocess and speaks ACP to it over its pipes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    ContentBlock, InitializeRequest, NewSessionRequest, PromptRequest, SessionNotification,
    SessionUpdate, StopReason, TextContent,
};
use agent_client_protocol::{Agent, ByteStreams, Client, Error};
use legate_testkit::{FAULT_ENV, GARBAGE_LINE, directives};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};

const AGENT: &str = env!("CARGO_BIN_EXE_legate-scripted-agent");
const TIMEOUT: Duration = Duration::from_secs(20);

fn spawn(fault: &str) -> Child {
    Command::new(AGENT)
        .env(FAULT_ENV, fault)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn legate-scripted-agent")
}

#[derive(Default)]
struct Seen {
    chunks: AtomicUsize,
    texts: Mutex<String>,
}

/// Initializes, opens a session in a fresh directory and sends one prompt.
async fn one_prompt(child: &mut Child, prompt: &str) -> (Result<StopReason, Error>, Arc<Seen>) {
    let stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path().canonicalize().unwrap();
    let seen = Arc::new(Seen::default());
    let counter = seen.clone();
    let prompt = prompt.to_owned();
    let result = tokio::time::timeout(
        TIMEOUT,
        Client
            .v1()
            .on_receive_notification(
                async move |notification: SessionNotification, _cx| {
                    if let SessionUpdate::AgentMessageChunk(chunk) = notification.update {
                        counter.chunks.fetch_add(1, Ordering::Relaxed);
                        if let ContentBlock::Text(text) = chunk.content {
                            counter.texts.lock().unwrap().push_str(&text.text);
                        }
                    }
                    Ok(())
                },
                agent_client_protocol::on_receive_notification!(),
            )
            .connect_with(
                ByteStreams::new(stdin.compat_write(), stdout.compat()),
                async |cx: ConnectionTo<Agent>| {
                    cx.send_request(InitializeRequest::new(ProtocolVersion::V1))
                        .block_task()
                        .await?;
                    let session = cx
                        .send_request(NewSessionRequest::new(cwd.clone()))
                        .block_task()
                        .await?
                        .session_id;
                    let response = cx
                        .send_request(PromptRequest::new(
                            session,
                            vec![ContentBlock::Text(TextContent::new(prompt))],
                        ))
                        .block_task()
                        .await?;
                    Ok(response.stop_reason)
                },
            ),
    )
    .await
    .expect("the exchange finishes in time");
    (result, seen)
}

async fn exit_code(child: &mut Child) -> Option<i32> {
    tokio::time::timeout(TIMEOUT, child.wait())
        .await
        .expect("the agent exits")
        .unwrap()
        .code()
}

#[tokio::test]
async fn streams_a_hundred_chunks() {
    let mut child = spawn("");
    let (result, seen) = one_prompt(&mut child, "!chunks 100").await;
    assert_eq!(result.unwrap(), StopReason::EndTurn);
    assert_eq!(seen.chunks.load(Ordering::Relaxed), 100);
    assert!(seen.texts.lock().unwrap().starts_with("chunk 00000000 t="));
    // Closing stdin ends the agent cleanly.
    assert_eq!(exit_code(&mut child).await, Some(0));
}

#[tokio::test]
async fn streams_many_chunks_quickly() {
    let mut child = spawn("");
    let started = Instant::now();
    let (result, seen) = one_prompt(&mut child, "!chunks 20000").await;
    assert_eq!(result.unwrap(), StopReason::EndTurn);
    assert_eq!(seen.chunks.load(Ordering::Relaxed), 20_000);
    eprintln!("20000 chunks in {:?}", started.elapsed());
}

#[tokio::test]
async fn exit_at_start_exits_3() {
    let mut child = spawn("exit-at-start");
    assert_eq!(exit_code(&mut child).await, Some(3));
}

#[tokio::test]
async fn unknown_fault_exits_2() {
    let mut child = spawn("explode");
    assert_eq!(exit_code(&mut child).await, Some(2));
}

#[tokio::test]
async fn garbage_at_start_writes_a_non_json_line_then_serves() {
    let mut child = spawn("garbage-at-start");
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next_line().await.unwrap().unwrap();
    assert_eq!(first, GARBAGE_LINE);
    stdin
        .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":1}}\n")
        .await
        .unwrap();
    let reply = tokio::time::timeout(TIMEOUT, lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let reply: serde_json::Value = serde_json::from_str(&reply).unwrap();
    assert_eq!(reply["result"]["agentInfo"]["name"], "revisor");
    drop(stdin);
    assert_eq!(exit_code(&mut child).await, Some(0));
}

#[tokio::test]
async fn hang_initialize_never_answers() {
    let mut child = spawn("hang-initialize");
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    stdin
        .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":1}}\n")
        .await
        .unwrap();
    let mut byte = [0_u8; 1];
    let read = tokio::time::timeout(Duration::from_millis(500), stdout.read(&mut byte)).await;
    assert!(read.is_err(), "no answer expected");
    drop(stdin);
    assert_eq!(exit_code(&mut child).await, Some(0));
}

#[tokio::test]
async fn exit_directive_exits_mid_turn_after_one_chunk() {
    let mut child = spawn("");
    let (result, seen) = one_prompt(&mut child, "!exit 7\nwrite never.txt: x").await;
    assert!(result.is_err(), "the prompt cannot be answered: {result:?}");
    assert_eq!(*seen.texts.lock().unwrap(), directives::EXIT_CHUNK);
    assert_eq!(exit_code(&mut child).await, Some(7));
}

#[tokio::test]
async fn hang_directive_never_answers_the_prompt() {
    let mut child = spawn("");
    let stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path().canonicalize().unwrap();
    Client
        .v1()
        .connect_with(
            ByteStreams::new(stdin.compat_write(), stdout.compat()),
            async |cx: ConnectionTo<Agent>| {
                cx.send_request(InitializeRequest::new(ProtocolVersion::V1))
                    .block_task()
                    .await?;
                let session = cx
                    .send_request(NewSessionRequest::new(cwd.clone()))
                    .block_task()
                    .await?
                    .session_id;
                let prompt = cx
                    .send_request(PromptRequest::new(
                        session,
                        vec![ContentBlock::Text(TextContent::new("!hang"))],
                    ))
                    .block_task();
                let waited = tokio::time::timeout(Duration::from_millis(500), prompt).await;
                assert!(waited.is_err(), "the prompt must hang");
                Ok(())
            },
        )
        .await
        .unwrap();
    child.kill().await.unwrap();
}

#[tokio::test]
async fn garbage_stderr_and_write_outside_directives() {
    let mut child = spawn("");
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("outside.txt");
    let prompt = format!(
        "!stderr hello from the agent\n!garbage\n!write-outside {}\nhow big?",
        target.display()
    );
    let mut stderr = child.stderr.take().unwrap();
    let (result, seen) = one_prompt(&mut child, &prompt).await;
    // The SDK client survives a malformed line and the turn goes on to its answer.
    assert_eq!(result.unwrap(), StopReason::EndTurn);
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        directives::OUTSIDE_CONTENT
    );
    let texts = seen.texts.lock().unwrap().clone();
    assert!(texts.contains(": written"), "{texts}");
    assert!(texts.contains("holds 0 files"), "{texts}");
    assert_eq!(exit_code(&mut child).await, Some(0));
    let mut errors = String::new();
    stderr.read_to_string(&mut errors).await.unwrap();
    assert!(errors.contains("hello from the agent"), "{errors}");
}
