//! The agent's stdin and stdout as JSON-RPC lines for the SDK, checked on the way in.
//!
//! Legate reads stdout itself (rather than through `ByteStreams`) to see each line before
//! the SDK does. The SDK alone answers what it cannot read with an error to the agent, logs
//! it, and carries on: nothing would reach the task, and a response to a request nobody sent
//! would leave the turn waiting for the real one until its timeout. So each line is checked
//! first ([`check`]), and what is wrong is reported on the current turn as a `workspace`
//! notice (`detail.malformed` says what, `detail.line` quotes up to 256 bytes; at most
//! [`MAX_STDOUT_NOTICES`] a turn):
//!
//! | the line | what happens |
//! |---|---|
//! | blank | skipped |
//! | longer than [`MAX_LINE`] | the connection ends: `AGENT_PROTOCOL_ERROR` |
//! | not JSON (a stray log line) | a notice; not passed on (the SDK would answer it with a parse error); tolerated |
//! | JSON, but not a JSON-RPC 2.0 message: not an object (`[1,2,3]`: ACP has no batches), no `"jsonrpc": "2.0"`, neither a call nor a response (`{"hello":"world"}`), an id neither an integer nor a string, params neither an object nor an array | a notice, counted; passed on (the SDK answers a request with an error) |
//! | a call Legate serves (`session/update`, `session/request_permission`, `fs/read_text_file`, `fs/write_text_file`) whose params do not fit it | a notice, counted; passed on |
//! | a `session/update` of a kind this Legate does not know (a newer ACP) | a notice, not counted; not passed on |
//! | an error response with id `null` (the agent could not read something Legate sent) | a notice, counted |
//! | a response whose id matches no request Legate sent and is still waiting for | the connection ends at once: `AGENT_PROTOCOL_ERROR` (the answer the turn waits for will not come) |
//!
//! The [`MAX_MALFORMED`]th counted message in one turn (or in the handshake) ends the
//! connection, and with it the turn: `AGENT_PROTOCOL_ERROR` naming the last problem (the
//! session is then dead and its processes are stopped). Messages outside a turn have no task
//! to be reported on and are not counted. Invalid UTF-8 is replaced.
//!
//! A `session/update` notification that fits its type is read here once and handled here
//! (`handlers::session_update`): it never reaches the SDK, whose own reading (a JSON value,
//! then the type, then its handler chain) cost more than Legate's store and relay together.
//! It becomes an event before the next line is read, so every update the agent sent before a
//! response is on the turn's sink before the SDK sees that response (what ends a turn). A
//! request that came before it may still wait in the SDK's queue: the SDK dispatches it
//! after; nothing Legate does with an update depends on such a request having been handled
//! (a tool is marked asked by the request, and ends only after the agent has its answer).
//!
//! Every line written, and every line read (before it is checked), goes to the wire tap of
//! the route's task when it is tapped (`HandlerState::tap`).
//!
//! Before each line is read, the turn's sink is asked for room (`EventSink::room`): while
//! what the agent sent waits unread there, stdout is not read and the agent waits on its
//! pipe.

use super::asked::Asked;
use super::handlers;
use super::plan_read;
use super::state::HandlerState;
use super::translate;
use agent_client_protocol::v1::schema as acp;
use agent_client_protocol::{Lines, RawJsonRpcId};
use futures::{Sink, Stream};
use legate_core::TapDirection;
use serde::de::IgnoredAny;
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::collections::HashSet;
use std::io;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tracing::warn;

/// One JSON-RPC line from the agent may be at most this long (8 MiB): room for a large
/// diff or file in one message, and a bound on what one line costs in memory while it is
/// read, checked and parsed (a few times its size). A longer line is never read whole: the
/// reading stops one byte past the limit and the connection ends.
pub(crate) const MAX_LINE: u64 = 8 * 1024 * 1024;

/// How much of the agent's stdout one read takes at most: a long plan's update is one line
/// of tens of KiB. Allocated once per connection (a warm session's too); a line is still cut
/// at [`MAX_LINE`] however much is buffered.
const READ_BUFFER: usize = 256 * 1024;
/// The turn fails at this many malformed JSON-RPC messages from the agent in one turn.
pub(crate) const MAX_MALFORMED: usize = 3;
/// At most this many stdout notices (non-JSON lines, malformed messages) per turn.
pub(crate) const MAX_STDOUT_NOTICES: usize = 20;

/// The ids of requests Legate sent that have not been answered yet.
#[derive(Debug, Default)]
struct Pending(Mutex<HashSet<RawJsonRpcId>>);

impl Pending {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<RawJsonRpcId>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Notes a line Legate sends: a request's id is now waiting for its answer. Returns the
    /// id a response answers (one of the agent's requests).
    fn sent(&self, line: &str) -> Option<RawJsonRpcId> {
        match serde_json::from_str::<Outgoing>(line) {
            Ok(Outgoing {
                id: Some(id),
                method: Some(_),
            }) => {
                self.lock().insert(id);
                None
            }
            Ok(Outgoing {
                id: Some(id),
                method: None,
            }) => Some(id),
            _ => None,
        }
    }

    /// Takes the answer to `id`: whether a request was waiting for it.
    fn answered(&self, id: &RawJsonRpcId) -> bool {
        self.lock().remove(id)
    }
}

/// A field that is there, even as `null` (serde's `Option` alone reads `null` as absent).
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// What Legate looks at in a line it sends.
#[derive(Deserialize)]
struct Outgoing {
    #[serde(default, deserialize_with = "present")]
    id: Option<RawJsonRpcId>,
    #[serde(default, deserialize_with = "present")]
    method: Option<IgnoredAny>,
}

/// A JSON-RPC 2.0 message's members, as the SDK tells requests, notifications and responses
/// apart (`RawJsonRpcMessage`), without reading params or results.
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(default, borrow)]
    jsonrpc: Option<Cow<'a, str>>,
    #[serde(default, deserialize_with = "present")]
    id: Option<RawJsonRpcId>,
    #[serde(default, deserialize_with = "present")]
    method: Option<String>,
    #[serde(default, borrow)]
    params: Option<&'a RawValue>,
    #[serde(default, deserialize_with = "present")]
    result: Option<IgnoredAny>,
    #[serde(default, deserialize_with = "present")]
    error: Option<ErrorObject>,
}

/// A JSON-RPC error object: an integer code and a message.
#[derive(Deserialize)]
struct ErrorObject {
    #[serde(rename = "code")]
    _code: i64,
    #[serde(rename = "message")]
    _message: String,
}

/// What is wrong with a line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Problem {
    /// Not JSON at all (a stray log line): reported, not counted, not passed on.
    NotJson,
    /// Not a JSON-RPC message, or params that do not fit: counted.
    Malformed(String),
    /// A `session/update` of an unknown kind: reported, not counted.
    UnknownUpdate(String),
    /// A response to no waiting request: the connection ends.
    UnknownResponse(String),
}

/// What a checked line is.
#[derive(Debug)]
pub(crate) enum Checked {
    /// A `session/update` notification, read: Legate handles it here, not the SDK.
    Update(Box<acp::SessionNotification>),
    /// A `session/update` that is a plan fitting ACP's types, read straight into its entries
    /// (`plan_read`): handled here as [`Checked::Update`] is.
    Plan(Vec<legate_core::PlanEntry>),
    /// Anything else: the SDK's to dispatch; with its id when it is a request, which
    /// Legate will answer ([`Asked`]).
    Pass(Option<RawJsonRpcId>),
}

/// Checks one JSON line from the agent against JSON-RPC 2.0 and the calls Legate serves,
/// and takes a response's id off `pending`. A line that is not JSON at all is
/// [`Problem::NotJson`]; one read once here, never twice.
fn check(line: &str, pending: &Pending) -> Result<Checked, Problem> {
    let malformed = |why: &str| Problem::Malformed(why.to_string());
    let Ok(m) = serde_json::from_str::<Envelope<'_>>(line) else {
        // Only a line that is not a JSON-RPC message is read a second time, to tell a
        // stray log line from JSON of the wrong shape.
        if serde_json::from_str::<IgnoredAny>(line).is_err() {
            return Err(Problem::NotJson);
        }
        return Err(malformed(if line.trim_start().starts_with('[') {
            "a JSON array, not a JSON-RPC message (ACP does not batch)"
        } else {
            "not a JSON-RPC message (not an object, or a member of the wrong type)"
        }));
    };
    if m.jsonrpc.as_deref() != Some("2.0") {
        return Err(malformed("no \"jsonrpc\": \"2.0\""));
    }
    match (&m.method, &m.id, m.result.is_some(), m.error.is_some()) {
        (Some(method), id, false, false) => {
            if let Some(params) = m.params
                && !params.get().starts_with(['{', '['])
            {
                return Err(malformed("params neither an object nor an array"));
            }
            let params = m.params.map_or("null", RawValue::get);
            if method == "session/update" && id.is_none() {
                if let Some(entries) = plan_read::plan_entries(params) {
                    return Ok(Checked::Plan(entries));
                }
                return read_update(params).map(|n| Checked::Update(Box::new(n)));
            }
            check_params(method, params).map(|()| Checked::Pass(id.clone()))
        }
        (None, Some(RawJsonRpcId::Null), _, _) => Err(malformed(
            "a response with id null: the agent could not read a message Legate sent",
        )),
        (None, Some(id), true, false) | (None, Some(id), false, true) => {
            if pending.answered(id) {
                Ok(Checked::Pass(None))
            } else {
                Err(Problem::UnknownResponse(format!(
                    "a response with id {}, which answers no request Legate is waiting for",
                    translate::truncate(&id.to_string(), 64)
                )))
            }
        }
        _ => Err(malformed(
            "neither a request, a notification nor a response",
        )),
    }
}

/// A `session/update`'s params, read into the ACP type: the one time they are read.
fn read_update(params: &str) -> Result<acp::SessionNotification, Problem> {
    serde_json::from_str::<acp::SessionNotification>(params).map_err(|e| {
        let why = e.to_string();
        // serde's wording for an internally tagged enum's unknown tag.
        if why.starts_with("unknown variant") {
            Problem::UnknownUpdate(format!(
                "a session/update of a kind Legate does not know ({})",
                translate::truncate(&why, 80)
            ))
        } else {
            Problem::Malformed(format!(
                "session/update with params that do not fit it ({})",
                translate::truncate(&why, 160)
            ))
        }
    })
}

/// The params of a call Legate serves must fit its type (the SDK would only log it).
fn check_params(method: &str, params: &str) -> Result<(), Problem> {
    let fits = match method {
        "session/request_permission" => {
            serde_json::from_str::<acp::RequestPermissionRequest>(params).map(drop)
        }
        "fs/read_text_file" => serde_json::from_str::<acp::ReadTextFileRequest>(params).map(drop),
        "fs/write_text_file" => serde_json::from_str::<acp::WriteTextFileRequest>(params).map(drop),
        _ => Ok(()),
    };
    // Kept as text: the words go back to the agent in a JSON-RPC error, which has no source.
    fits.map_err(|e| {
        Problem::Malformed(format!(
            "{method} with params that do not fit it ({})",
            translate::truncate(&e.to_string(), 160)
        ))
    })
}

/// Ends the connection with `message` as the reason the turn fails.
fn give_up<S>(shared: &HandlerState, message: String) -> Option<(io::Result<String>, Option<S>)> {
    warn!(reason = %message, "ending the connection to a misbehaving agent");
    shared.fail_protocol(message.clone());
    Some((
        Err(io::Error::new(io::ErrorKind::InvalidData, message)),
        None,
    ))
}

/// The SDK transport over the agent's pipes.
pub(crate) fn lines(
    stdin: impl AsyncWrite + Unpin + Send + 'static,
    stdout: impl AsyncRead + Unpin + Send + 'static,
    shared: Arc<HandlerState>,
) -> Lines<
    impl Sink<String, Error = io::Error> + Send + 'static,
    impl Stream<Item = io::Result<String>> + Send + 'static,
> {
    let (outgoing, incoming) = parts(stdin, stdout, shared);
    Lines::new(outgoing, incoming)
}

/// The two halves of [`lines`]: the lines Legate writes, and the checked lines it reads.
fn parts(
    stdin: impl AsyncWrite + Unpin + Send + 'static,
    stdout: impl AsyncRead + Unpin + Send + 'static,
    shared: Arc<HandlerState>,
) -> (
    impl Sink<String, Error = io::Error> + Send + 'static,
    impl Stream<Item = io::Result<String>> + Send + 'static,
) {
    let pending = Arc::new(Pending::default());
    let asked = Arc::new(Asked::default());
    let outgoing = futures::sink::unfold(
        (stdin, pending.clone(), shared.clone(), asked.clone()),
        |(mut w, pending, shared, asked), line: String| async move {
            // Before it is written: the answer cannot come first.
            let answers = pending.sent(&line);
            shared.tap(TapDirection::ToAgent, &line);
            let wrote = async {
                w.write_all(line.as_bytes()).await?;
                w.write_all(b"\n").await?;
                w.flush().await
            }
            .await;
            if let Err(e) = wrote {
                asked.close();
                return Err(e);
            }
            if let Some(id) = answers {
                shared.unwritten().written(line.len() + 1);
                asked.answered(&id);
            }
            Ok::<_, io::Error>((w, pending, shared, asked))
        },
    );
    let incoming = futures::stream::unfold(
        Some((
            BufReader::with_capacity(READ_BUFFER, stdout),
            shared,
            pending,
            asked,
        )),
        |state| async move {
            let (mut reader, shared, pending, asked) = state?;
            loop {
                // While the turn's reader is behind, or too many of the agent's requests
                // wait for their answers, the agent waits on its pipe.
                shared.room().await;
                asked.room().await;
                let mut buf = Vec::new();
                let n = match (&mut reader)
                    .take(MAX_LINE + 1)
                    .read_until(b'\n', &mut buf)
                    .await
                {
                    Ok(n) => n,
                    Err(e) => return Some((Err(e), None)),
                };
                if n == 0 {
                    return None;
                }
                if buf.len() as u64 > MAX_LINE {
                    shared.tap(TapDirection::FromAgent, &String::from_utf8_lossy(&buf));
                    return give_up(
                        &shared,
                        format!("the agent wrote a line longer than {MAX_LINE} bytes on stdout"),
                    );
                }
                let text = String::from_utf8_lossy(&buf);
                let text = text.trim_end_matches(['\n', '\r']);
                if text.trim().is_empty() {
                    continue;
                }
                shared.tap(TapDirection::FromAgent, text);
                match check(text, &pending) {
                    Ok(Checked::Pass(request)) => {
                        if let Some(id) = request {
                            asked.asked(id);
                        }
                    }
                    Ok(Checked::Update(notification)) => {
                        // As the SDK traces every line it reads (the log's redaction applies).
                        tracing::trace!(message = %text, "Received JSON-RPC message");
                        // Handled before the next line is read: every update the agent sent
                        // before a response is an event before that response is dispatched.
                        handlers::session_update(&shared, &notification);
                        continue;
                    }
                    Ok(Checked::Plan(entries)) => {
                        tracing::trace!(message = %text, "Received JSON-RPC message");
                        handlers::session_plan(&shared, entries);
                        continue;
                    }
                    Err(Problem::NotJson) => {
                        warn!(
                            bytes = text.len(),
                            "the agent wrote a non-JSON line on stdout; ignored"
                        );
                        shared.stdout_notice("not JSON; ignored", text, false);
                        continue;
                    }
                    Err(Problem::UnknownResponse(why)) => {
                        shared.stdout_notice(&why, text, false);
                        return give_up(&shared, format!("the agent broke JSON-RPC: {why}"));
                    }
                    Err(Problem::UnknownUpdate(why)) => {
                        // A newer ACP's update: nothing here can read it, the SDK neither.
                        shared.stdout_notice(&why, text, false);
                        continue;
                    }
                    Err(Problem::Malformed(why)) => {
                        let count = shared.stdout_notice(&why, text, true);
                        if count >= MAX_MALFORMED {
                            return give_up(
                                &shared,
                                format!(
                                    "the agent sent {count} malformed JSON-RPC messages in one turn (the last: {why})"
                                ),
                            );
                        }
                        // Outside a turn nothing counts them, and the SDK would answer each,
                        // echoing its params: not passed on.
                        if !shared.routed() {
                            continue;
                        }
                        // In a turn the SDK answers a malformed request too: it counts.
                        if let Ok(Outgoing {
                            id: Some(id),
                            method: Some(_),
                        }) = serde_json::from_str::<Outgoing>(text)
                        {
                            asked.asked(id);
                        }
                    }
                }
                let line = text.to_string();
                return Some((Ok(line), Some((reader, shared, pending, asked))));
            }
        },
    );
    (outgoing, incoming)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn checked(line: &str) -> Result<(), Problem> {
        check(line, &Pending::default()).map(drop)
    }

    fn checked_with(line: &str, pending: &Pending) -> Result<(), Problem> {
        check(line, pending).map(drop)
    }

    /// A write session's handler state, asking the rule table.
    fn handler_state() -> Arc<HandlerState> {
        use legate_core::{Boundary, TaskMode};
        use legate_supervisor::{Preset, Supervision};
        let root = std::env::temp_dir();
        let boundary = Boundary {
            root: root.clone(),
            owned: true,
            allow_execute: false,
        };
        Arc::new(HandlerState::new(
            Arc::new(legate_supervisor::Rules),
            Supervision::new(boundary, TaskMode::Write, Preset::claude()),
            root,
        ))
    }

    /// A malformed request outside a turn is not passed on (nothing counts it, and the SDK
    /// would answer it echoing its params); in a turn it is, as before.
    #[tokio::test]
    async fn a_malformed_request_outside_a_turn_is_not_passed_on() {
        use futures::StreamExt;
        let shared = handler_state();
        let (mut agent_stdout, legate_reads) = tokio::io::duplex(1 << 20);
        let (legate_writes, _agent_stdin) = tokio::io::duplex(1 << 20);
        let (_sink, stream) = parts(legate_writes, legate_reads, shared.clone());
        tokio::pin!(stream);
        let bad = r#"{"jsonrpc":"2.0","id":1,"method":"fs/read_text_file","params":{"path":7}}"#;
        let good = r#"{"jsonrpc":"2.0","id":2,"method":"terminal/create","params":{}}"#;
        agent_stdout
            .write_all(format!("{bad}\n{good}\n").as_bytes())
            .await
            .unwrap();
        assert_eq!(stream.next().await.unwrap().unwrap(), good);
        let (sink, _events) = crate::EventSink::channel();
        shared.route_to(sink, Some(legate_core::TaskMode::Write));
        agent_stdout
            .write_all(format!("{bad}\n").as_bytes())
            .await
            .unwrap();
        assert_eq!(stream.next().await.unwrap().unwrap(), bad);
    }

    /// An agent that sends requests faster than they are answered: past
    /// [`super::super::asked::MAX_ASKED`] unanswered, its stdout is not read until an answer is
    /// written to it. Before, the SDK queued every one.
    #[tokio::test]
    async fn past_the_unanswered_bound_the_agent_is_not_read() {
        use super::super::asked::MAX_ASKED;
        use futures::{FutureExt, SinkExt, StreamExt};
        let shared = handler_state();
        let (mut agent_stdout, legate_reads) = tokio::io::duplex(1 << 20);
        let (legate_writes, _agent_stdin) = tokio::io::duplex(1 << 20);
        let (sink, stream) = parts(legate_writes, legate_reads, shared);
        tokio::pin!(sink);
        tokio::pin!(stream);
        let mut flood = String::new();
        for i in 0..MAX_ASKED + 10 {
            flood.push_str(&format!(
                "{{\"jsonrpc\":\"2.0\",\"id\":{i},\"method\":\"fs/read_text_file\",\"params\":{{\"sessionId\":\"s\",\"path\":\"/r/a\"}}}}\n"
            ));
        }
        agent_stdout.write_all(flood.as_bytes()).await.unwrap();
        for _ in 0..MAX_ASKED {
            stream.next().await.unwrap().unwrap();
        }
        assert!(
            stream.next().now_or_never().is_none(),
            "read past the bound"
        );
        sink.send(r#"{"jsonrpc":"2.0","id":5,"result":{"content":""}}"#.to_string())
            .await
            .unwrap();
        let next = stream.next().await.unwrap().unwrap();
        assert!(next.contains(&format!("\"id\":{MAX_ASKED}")), "{next}");
        assert!(stream.next().now_or_never().is_none());
    }

    fn is_malformed(line: &str) -> bool {
        matches!(checked(line), Err(Problem::Malformed(_)))
    }

    const CHUNK: &str = r#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"}}}}"#;

    #[test]
    fn well_formed_calls_pass() {
        assert_eq!(checked(CHUNK), Ok(()));
        // Methods Legate does not serve are the SDK's to answer.
        assert_eq!(
            checked(r#"{"jsonrpc":"2.0","id":"x","method":"terminal/create","params":{}}"#),
            Ok(())
        );
        assert_eq!(
            checked(r#"{"jsonrpc":"2.0","method":"_vendor/ping"}"#),
            Ok(())
        );
        assert_eq!(
            checked(
                r#"{"jsonrpc":"2.0","id":7,"method":"fs/read_text_file","params":{"sessionId":"s","path":"/r/a"}}"#
            ),
            Ok(())
        );
    }

    #[test]
    fn an_update_is_read_here_and_everything_else_passes_to_the_sdk() {
        match check(CHUNK, &Pending::default()) {
            Ok(Checked::Update(n)) => {
                assert!(matches!(n.update, acp::SessionUpdate::AgentMessageChunk(_)))
            }
            other => panic!("{other:?}"),
        }
        // A session/update sent as a request is not ACP: the SDK answers it.
        let as_request = r#"{"jsonrpc":"2.0","id":9,"method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"}}}}"#;
        assert!(matches!(
            check(as_request, &Pending::default()),
            Ok(Checked::Pass(_))
        ));
        assert!(matches!(
            check(
                r#"{"jsonrpc":"2.0","id":7,"method":"fs/read_text_file","params":{"sessionId":"s","path":"/r/a"}}"#,
                &Pending::default()
            ),
            Ok(Checked::Pass(_))
        ));
    }

    #[test]
    fn a_line_that_is_not_json_is_told_from_json_of_the_wrong_shape() {
        for line in ["hello", "{\"jsonrpc\":", "Error: x at line 3", "{]"] {
            assert_eq!(checked(line), Err(Problem::NotJson), "{line}");
        }
        assert!(is_malformed("[1,2,3]"));
        assert!(is_malformed("42"));
    }

    #[test]
    fn json_that_is_not_json_rpc_is_malformed() {
        for line in [
            r#"{"hello":"world"}"#,
            "[1,2,3]",
            "[]",
            "42",
            r#""text""#,
            "null",
            r#"{"method":"session/update","params":{}}"#,
            r#"{"jsonrpc":"1.0","method":"x"}"#,
            r#"{"jsonrpc":"2.0"}"#,
            r#"{"jsonrpc":"2.0","method":null}"#,
            r#"{"jsonrpc":"2.0","method":3}"#,
            r#"{"jsonrpc":"2.0","id":1.5,"method":"x"}"#,
            r#"{"jsonrpc":"2.0","id":{},"method":"x"}"#,
            r#"{"jsonrpc":"2.0","method":"x","params":3}"#,
            r#"{"jsonrpc":"2.0","method":"x","result":1}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":1,"error":{"code":1,"message":"m"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"error":"bad"}"#,
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}"#,
        ] {
            assert!(is_malformed(line), "{line}: {:?}", checked(line));
        }
    }

    #[test]
    fn params_that_do_not_fit_a_served_call_are_malformed() {
        for line in [
            r#"{"jsonrpc":"2.0","method":"session/update","params":{"bogus":1}}"#,
            r#"{"jsonrpc":"2.0","method":"session/update"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"session/request_permission","params":{"sessionId":"s"}}"#,
            r#"{"jsonrpc":"2.0","id":2,"method":"fs/read_text_file","params":[1]}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"fs/write_text_file","params":{"path":"/a"}}"#,
        ] {
            assert!(is_malformed(line), "{line}: {:?}", checked(line));
        }
        // A kind of update this Legate does not know is a newer ACP, not a broken agent.
        let newer = r#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"hologram","x":1}}}"#;
        assert!(
            matches!(checked(newer), Err(Problem::UnknownUpdate(_))),
            "{:?}",
            checked(newer)
        );
    }

    #[test]
    fn a_response_must_answer_a_waiting_request_once() {
        let pending = Pending::default();
        pending.sent(r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}"#);
        pending.sent(r#"{"jsonrpc":"2.0","id":"a","method":"session/new","params":{}}"#);
        // A notification and a response Legate sends wait for nothing.
        pending.sent(r#"{"jsonrpc":"2.0","method":"session/cancel","params":{}}"#);
        pending.sent(r#"{"jsonrpc":"2.0","id":5,"result":{}}"#);

        assert_eq!(
            checked_with(r#"{"jsonrpc":"2.0","id":0,"result":{}}"#, &pending),
            Ok(())
        );
        let again = checked_with(r#"{"jsonrpc":"2.0","id":0,"result":{}}"#, &pending);
        assert!(
            matches!(again, Err(Problem::UnknownResponse(_))),
            "{again:?}"
        );
        // "a" and 0 are different ids from "0" and 5.
        for stray in [
            r#"{"jsonrpc":"2.0","id":"0","result":null}"#,
            r#"{"jsonrpc":"2.0","id":5,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":987654,"error":{"code":-1,"message":"m"}}"#,
        ] {
            let got = checked_with(stray, &pending);
            assert!(
                matches!(got, Err(Problem::UnknownResponse(_))),
                "{stray}: {got:?}"
            );
        }
        assert_eq!(
            checked_with(
                r#"{"jsonrpc":"2.0","id":"a","error":{"code":-32603,"message":"no"}}"#,
                &pending
            ),
            Ok(())
        );
    }
}
