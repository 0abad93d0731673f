//! Prompt-level fault directives (`!exit`, `!hang`, `!garbage`, `!not-jsonrpc`,
//! `!unknown-response`, `!chunks`, `!write-outside`, `!stderr`, `!fail-tool`, `!stop`,
//! `!usage`, `!nousage`, `!flip`, `!say`, `!history`, `!pending-tools`, `!write-inside`, `!chmod-inside`,
//! `!fs-write`, `!mcp-servers`, `!answer`, and `!as TAG <directive>`, which performs the directive only in
//! an agent started with [`TAG_ENV`] set to `TAG`, so one prompt makes several agents answer
//! differently), implemented as a [`DirectiveHook`] installed into revisor.
//!
//! This module owns what each directive does. Revisor knows nothing about them. Directives
//! that need raw bytes on stdout (a malformed line, a hand-made notification before an exit)
//! go through the [`Injection`] channel to the [pump](mod@crate::pump); everything else goes
//! through the ACP connection like any other update. Directives must never run outside the
//! scripted agent binary: `!write-outside` deliberately writes without asking.

use std::path::Path;

use agent_client_protocol::v1::schema::{
    ContentBlock, ContentChunk, SessionNotification, SessionUpdate, StopReason, TextContent,
    ToolCall, ToolCallContent, ToolCallStatus, ToolCallUpdate, ToolCallUpdateFields, ToolKind,
};
use futures::FutureExt;
use futures::future::BoxFuture;
use legate_revisor::{Directed, DirectiveContext, DirectiveHook};
use tokio::sync::mpsc;

use crate::pump::Injection;

/// The malformed JSON-RPC line `!garbage` writes mid-turn.
pub const MALFORMED_LINE: &str = r#"{"jsonrpc":"2.0","method":"session/update","params":{"#;
/// What `!not-jsonrpc` writes, one after the other and round again: JSON that is not a
/// JSON-RPC message Legate can take (no `jsonrpc` member; an array; a `session/update`
/// whose params do not fit it).
pub const NOT_JSONRPC_LINES: [&str; 3] = [
    r#"{"hello":"world"}"#,
    "[1,2,3]",
    r#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk"}}}"#,
];
/// The id of the response `!unknown-response` writes, which answers no request of Legate's.
pub const UNKNOWN_RESPONSE_ID: u64 = 987_654_321;
/// What `!write-outside` writes into its file.
pub const OUTSIDE_CONTENT: &str = "written by legate-scripted-agent without asking\n";
/// The text of the one message chunk `!exit` sends before exiting.
pub const EXIT_CHUNK: &str = "legate-scripted-agent: exiting mid-turn\n";

/// The text of the tool call `!fail-tool` fails.
pub const FAILED_TOOL_TEXT: &str = "exit status 1";

/// The environment variable naming the tag `!as TAG <directive>` matches.
pub const TAG_ENV: &str = "LEGATE_TESTKIT_TAG";

/// The environment variable naming a line start: a prompt line that begins with it (after
/// trimming) is performed as `!hang`, so a prompt Legate writes itself (a peer message's
/// turn, say), which a test cannot put a directive into, can be left unanswered.
pub const HANG_ON_ENV: &str = "LEGATE_TESTKIT_HANG_ON";

/// The directive verbs (after `!`), case-insensitive.
pub const VERBS: [&str; 22] = [
    "as",
    "exit",
    "hang",
    "garbage",
    "not-jsonrpc",
    "unknown-response",
    "chunks",
    "write-outside",
    "stderr",
    "fail-tool",
    "stop",
    "usage",
    "nousage",
    "flip",
    "say",
    "history",
    "pending-tools",
    "write-inside",
    "chmod-inside",
    "fs-write",
    "mcp-servers",
    "answer",
];

/// What `!mcp-servers` starts its one line with, before the JSON array of the MCP servers the
/// session was handed (`session/new`'s `mcpServers`, as received).
pub const MCP_SERVERS_HEAD: &str = "mcp-servers:";

/// What `!history` starts its answer with, before the count of earlier prompts.
pub const HISTORY_HEAD: &str = "history: earlier prompts of this session:";

/// `!chmod-inside`: sets the mode (octal) of `rest`'s path, relative to `cwd`.
async fn chmod_inside(cwd: &Path, rest: &str) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let (mode, path) = rest
        .split_once(' ')
        .ok_or_else(|| "usage: !chmod-inside <octal mode> <relative path>".to_owned())?;
    let mode = u32::from_str_radix(mode, 8).map_err(|e| format!("bad mode {mode:?}: {e}"))?;
    tokio::fs::set_permissions(cwd.join(path), std::fs::Permissions::from_mode(mode))
        .await
        .map_err(|e| e.to_string())
}

/// `!fail-tool`: a tool call that fails without asking (the way Codex reports a command that
/// failed), announced `in_progress` and then `failed` with [`FAILED_TOOL_TEXT`].
fn fail_tool(context: &DirectiveContext, title: &str) -> Result<(), agent_client_protocol::Error> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let id = format!(
        "fail-tool-{}",
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    let title = if title.is_empty() { "a command" } else { title };
    context.send_update(SessionUpdate::ToolCall(
        ToolCall::new(id.clone(), title)
            .kind(ToolKind::Execute)
            .status(ToolCallStatus::InProgress),
    ))?;
    context.send_update(SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
        id,
        ToolCallUpdateFields::new()
            .status(ToolCallStatus::Failed)
            .content(vec![ToolCallContent::from(ContentBlock::Text(
                TextContent::new(FAILED_TOOL_TEXT),
            ))]),
    )))
}

/// `!pending-tools <N>`: N tool calls (kind `read`) announced `pending` that never end, as
/// a hostile agent would flood Legate's memory of tool calls; at most 100 000.
fn pending_tools(
    context: &DirectiveContext,
    count: &str,
) -> Result<(), agent_client_protocol::Error> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let count: usize = count.trim().parse().unwrap_or(1).min(100_000);
    for _ in 0..count {
        let id = format!(
            "pending-tool-{}",
            NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        context.send_update(SessionUpdate::ToolCall(
            ToolCall::new(id, "pending")
                .kind(ToolKind::Read)
                .status(ToolCallStatus::Pending),
        ))?;
    }
    Ok(())
}

/// The scripted agent's directives.
#[derive(Debug, Clone)]
pub struct ScriptedDirectives {
    inject: mpsc::UnboundedSender<Injection>,
    sessions: Option<std::sync::Arc<crate::sessions::DiskSessions>>,
    judge: Option<crate::judge::JudgeAnswer>,
    hang_on: Option<String>,
}

impl ScriptedDirectives {
    /// Directives whose raw output goes to `inject` (read by the pump).
    #[must_use]
    pub fn new(inject: mpsc::UnboundedSender<Injection>) -> Self {
        Self {
            inject,
            sessions: None,
            judge: None,
            hang_on: None,
        }
    }

    /// The same directives, hanging on every prompt line that begins with `start` (see
    /// [`HANG_ON_ENV`]); `None` or an empty `start` hangs on nothing more.
    #[must_use]
    pub fn with_hang_on(mut self, start: Option<String>) -> Self {
        self.hang_on = start.filter(|s| !s.trim().is_empty());
        self
    }

    fn hangs_on(&self, line: &str) -> bool {
        self.hang_on
            .as_deref()
            .is_some_and(|start| line.trim().starts_with(start.trim()))
    }

    /// The same directives, answering Legate's judge prompt as `judge` says (see
    /// [`crate::judge`]) instead of revisor's own rule.
    #[must_use]
    pub fn with_judge(mut self, judge: Option<crate::judge::JudgeAnswer>) -> Self {
        self.judge = judge;
        self
    }

    /// The same directives, `!history` reading the sessions of `sessions`.
    #[must_use]
    pub fn with_sessions(
        mut self,
        sessions: Option<std::sync::Arc<crate::sessions::DiskSessions>>,
    ) -> Self {
        self.sessions = sessions;
        self
    }
}

/// Splits `!verb rest` into a lower-case verb and the trimmed rest.
fn split(line: &str) -> Option<(String, &str)> {
    let body = line.trim().strip_prefix('!')?;
    let (verb, rest) = body.split_once(char::is_whitespace).unwrap_or((body, ""));
    Some((verb.to_ascii_lowercase(), rest.trim()))
}

/// Chunk `i` of `!chunks`: about 40 bytes, stamped with the wall-clock time it was made
/// (`t=<nanoseconds since the epoch>`), so a benchmark can measure the latency from the agent
/// to a subscriber in another process.
pub fn chunk_text(i: u64) -> String {
    let ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("chunk {i:08} t={ns}\n")
}

/// The creation time stamped into a `!chunks` chunk, in nanoseconds since the epoch.
pub fn chunk_time(text: &str) -> Option<u128> {
    text.split_once("t=")?.1.trim().parse().ok()
}

impl DirectiveHook for ScriptedDirectives {
    fn claims(&self, line: &str) -> bool {
        if self.judge.is_some() && line == legate_revisor::judge::JUDGE_HEADER {
            return true;
        }
        if self.hangs_on(line) {
            return true;
        }
        split(line).is_some_and(|(verb, _)| VERBS.contains(&verb.as_str()))
    }

    fn perform(&self, line: String, context: DirectiveContext) -> BoxFuture<'static, Directed> {
        let inject = self.inject.clone();
        let sessions = self.sessions.clone();
        if let Some(judge) = self
            .judge
            .filter(|_| line == legate_revisor::judge::JUDGE_HEADER)
        {
            return crate::judge::perform(judge, context).boxed();
        }
        if self.hangs_on(&line) {
            return futures::future::pending::<Directed>().boxed();
        }
        async move {
            let Some((mut verb, mut rest)) = split(&line) else {
                return Directed::Continue;
            };
            if verb == "as" {
                // `!as TAG <directive>`: only the agent tagged TAG performs it.
                let (tag, inner) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
                if std::env::var(TAG_ENV).ok().as_deref() != Some(tag) {
                    return Directed::Continue;
                }
                let Some((v, r)) = split(inner) else {
                    return Directed::Continue;
                };
                (verb, rest) = (v, r);
            }
            match verb.as_str() {
                "exit" => {
                    let code = rest.parse::<i32>().unwrap_or(1);
                    let chunk = SessionNotification::new(
                        context.session_id().clone(),
                        SessionUpdate::AgentMessageChunk(ContentChunk::new(ContentBlock::Text(
                            TextContent::new(EXIT_CHUNK),
                        ))),
                    );
                    let line = serde_json::json!({
                        "jsonrpc": "2.0",
                        "method": "session/update",
                        "params": chunk,
                    });
                    let _ = inject.send(Injection::Line(line.to_string()));
                    let _ = inject.send(Injection::Exit(code));
                    // The pump ends the process; this turn never finishes.
                    futures::future::pending::<Directed>().await
                }
                "hang" => futures::future::pending::<Directed>().await,
                "garbage" => {
                    let _ = inject.send(Injection::Line(MALFORMED_LINE.to_owned()));
                    Directed::Continue
                }
                "not-jsonrpc" => {
                    let count = rest.parse::<usize>().unwrap_or(1);
                    for line in NOT_JSONRPC_LINES.iter().cycle().take(count) {
                        let _ = inject.send(Injection::Line((*line).to_owned()));
                    }
                    Directed::Continue
                }
                "unknown-response" => {
                    let line = serde_json::json!({
                        "jsonrpc": "2.0",
                        "id": UNKNOWN_RESPONSE_ID,
                        "result": {"stopReason": "end_turn"},
                    });
                    let _ = inject.send(Injection::Line(line.to_string()));
                    // The turn's real answer never comes, as if it went out under that id.
                    futures::future::pending::<Directed>().await
                }
                "chunks" => {
                    // `!chunks N` sends N chunks as fast as it can; `!chunks N R` paces them at
                    // R chunks per second (for latency measured at a steady load).
                    let mut words = rest.split_whitespace();
                    let count = words.next().and_then(|w| w.parse::<u64>().ok());
                    let rate = words.next().map(str::parse::<u64>);
                    let (Some(count), None | Some(Ok(1..))) = (count, &rate) else {
                        let _ = context.send_message_chunk(&format!(
                            "!chunks needs a count and an optional positive rate, not {rest:?}\n"
                        ));
                        return Directed::Continue;
                    };
                    let rate = rate.and_then(Result::ok);
                    let started = tokio::time::Instant::now();
                    for i in 0..count {
                        if let Some(rate) = rate {
                            let due =
                                started + std::time::Duration::from_nanos(i * 1_000_000_000 / rate);
                            tokio::time::sleep_until(due).await;
                        }
                        if context.send_message_chunk(&chunk_text(i)).is_err() {
                            break;
                        }
                        // Let the writer drain now and then instead of queueing everything.
                        if i % 1024 == 1023 {
                            tokio::task::yield_now().await;
                        }
                    }
                    Directed::EndTurn(StopReason::EndTurn)
                }
                "write-outside" => {
                    let path = Path::new(rest);
                    let result = if path.is_absolute() {
                        tokio::fs::write(path, OUTSIDE_CONTENT)
                            .await
                            .map_err(|error| error.to_string())
                    } else {
                        Err("the path must be absolute".to_owned())
                    };
                    let text = match result {
                        Ok(()) => format!("write-outside {rest}: written\n"),
                        Err(error) => format!("write-outside {rest}: failed: {error}\n"),
                    };
                    let _ = context.send_message_chunk(&text);
                    Directed::Continue
                }
                "write-inside" => {
                    // `!write-inside <relative path>`: writes [`OUTSIDE_CONTENT`] into the
                    // working directory without asking (a read-only task's agent that
                    // changes its workspace behind the supervisor's back).
                    let path = context.cwd().join(rest);
                    let text = match tokio::fs::write(&path, OUTSIDE_CONTENT).await {
                        Ok(()) => format!("write-inside {rest}: written\n"),
                        Err(error) => format!("write-inside {rest}: failed: {error}\n"),
                    };
                    let _ = context.send_message_chunk(&text);
                    Directed::Continue
                }
                "chmod-inside" => {
                    // `!chmod-inside <octal mode> <relative path>`: changes a file's mode in
                    // the working directory without asking (Landlock does not govern chmod).
                    let text = match chmod_inside(context.cwd(), rest).await {
                        Ok(()) => format!("chmod-inside {rest}: done\n"),
                        Err(error) => format!("chmod-inside {rest}: failed: {error}\n"),
                    };
                    let _ = context.send_message_chunk(&text);
                    Directed::Continue
                }
                "fs-write" => {
                    // `!fs-write <relative path>`: writes [`OUTSIDE_CONTENT`] through the
                    // client's `fs/write_text_file` without asking permission first (an agent
                    // that skips the permission request).
                    let path = context.cwd().join(rest);
                    let request = agent_client_protocol::v1::schema::WriteTextFileRequest::new(
                        context.session_id().clone(),
                        path,
                        OUTSIDE_CONTENT.to_owned(),
                    );
                    let text = match context.connection().send_request(request).block_task().await {
                        Ok(_) => format!("fs-write {rest}: written\n"),
                        Err(error) => format!("fs-write {rest}: refused: {}\n", error.message),
                    };
                    let _ = context.send_message_chunk(&text);
                    Directed::Continue
                }
                "mcp-servers" => {
                    let json = serde_json::to_string(context.mcp_servers())
                        .unwrap_or_else(|e| format!("\"{e}\""));
                    let _ = context.send_message_chunk(&format!("{MCP_SERVERS_HEAD} {json}\n"));
                    Directed::Continue
                }
                "stderr" => {
                    eprintln!("{rest}");
                    Directed::Continue
                }
                "answer" => {
                    // `!answer BYTES [PIECES]`: an answer of BYTES letters in PIECES message
                    // chunks as fast as it can (a runaway or hostile agent); one piece is one
                    // line written a piece at a time, never held whole.
                    let mut n = rest.split_whitespace().map(str::parse::<u64>);
                    match (n.next(), n.next()) {
                        (Some(Ok(bytes)), None) => {
                            let _ = inject.send(Injection::LongChunk {
                                session: context.session_id().0.to_string(),
                                bytes,
                            });
                        }
                        (Some(Ok(bytes)), Some(Ok(pieces @ 1..))) => {
                            let size = bytes.div_ceil(pieces);
                            let piece = "a".repeat(usize::try_from(size).unwrap_or(0));
                            let mut left = bytes;
                            while left > 0 {
                                let n = usize::try_from(left.min(size)).unwrap_or(0);
                                if context.send_message_chunk(&piece[..n]).is_err() {
                                    break;
                                }
                                left -= n as u64;
                                tokio::task::yield_now().await;
                            }
                        }
                        _ => {
                            let _ = context.send_message_chunk(&format!(
                                "!answer needs a size and an optional positive number of pieces, not {rest:?}\n"
                            ));
                        }
                    }
                    Directed::EndTurn(StopReason::EndTurn)
                }
                "fail-tool" => {
                    let _ = fail_tool(&context, rest);
                    Directed::Continue
                }
                "pending-tools" => {
                    let _ = pending_tools(&context, rest);
                    Directed::Continue
                }
                "stop" => match serde_json::from_value::<StopReason>(serde_json::json!(rest)) {
                    Ok(reason) => Directed::EndTurn(reason),
                    Err(_) => {
                        let _ = context.send_message_chunk(&format!(
                            "!stop needs an ACP stop reason (end_turn, max_tokens, max_turn_requests, refusal, cancelled), not {rest:?}\n"
                        ));
                        Directed::Continue
                    }
                },
                "usage" => {
                    // `!usage IN OUT`: the prompt's answer reports IN input and OUT output
                    // tokens (ACP's end-of-turn usage, instead of revisor's zero).
                    let mut n = rest.split_whitespace().map(str::parse::<u64>);
                    if let (Some(Ok(input)), Some(Ok(output))) = (n.next(), n.next()) {
                        let _ = inject.send(Injection::ResponseUsage(serde_json::json!({
                            "inputTokens": input,
                            "outputTokens": output,
                            "totalTokens": input + output,
                        })));
                    } else {
                        let _ = context.send_message_chunk(&format!(
                            "!usage needs two counts, not {rest:?}\n"
                        ));
                    }
                    Directed::Continue
                }
                "nousage" => {
                    // `!nousage`: the prompt's answer reports no usage at all (revisor's own
                    // answer reports zero tokens), as an agent that counts nothing would.
                    let _ = inject.send(Injection::ResponseUsage(serde_json::Value::Null));
                    Directed::Continue
                }
                "flip" => {
                    let text = match crate::flip::parse(rest) {
                        Ok((n, file, dir, hold)) => {
                            crate::flip::run(&context, n, file, dir, hold).await.text()
                        }
                        Err(usage) => format!("{usage}\n"),
                    };
                    let _ = context.send_message_chunk(&text);
                    Directed::Continue
                }
                "say" => {
                    let _ = context.send_message_chunk(&format!("{}\n", rest.replace("\\n", "\n")));
                    Directed::Continue
                }
                "history" => {
                    let text = match &sessions {
                        Some(store) => {
                            let mut prompts = store.prompts(&context.session_id().0);
                            // The running prompt is the last one: only earlier ones count.
                            prompts.pop();
                            let mut text = format!("{HISTORY_HEAD} {}\n", prompts.len());
                            for p in prompts {
                                text.push_str(&format!("history: {}\n", p.replace('\n', " / ")));
                            }
                            text
                        }
                        None => "history: this agent keeps no sessions\n".to_owned(),
                    };
                    let _ = context.send_message_chunk(&text);
                    Directed::Continue
                }
                _ => Directed::Continue,
            }
        }
        .boxed()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn claims_only_known_bang_verbs() {
        let (tx, _rx) = mpsc::unbounded_channel();
        let hook = ScriptedDirectives::new(tx);
        assert!(hook.claims("!exit 3"));
        assert!(hook.claims("!HANG"));
        assert!(hook.claims("!chunks 100"));
        assert!(hook.claims("!not-jsonrpc 3"));
        assert!(hook.claims("!unknown-response"));
        assert!(hook.claims("!write-outside /tmp/x"));
        assert!(hook.claims("!chmod-inside 755 a.sh"));
        assert!(hook.claims("!fail-tool cargo build"));
        assert!(hook.claims("!stop refusal"));
        assert!(hook.claims("!flip 100 /tmp/f /tmp/d"));
        assert!(!hook.claims("!nope"));
        assert!(!hook.claims("exit 3"));
        assert!(!hook.claims("write a: b"));
    }

    #[test]
    fn a_hang_on_start_claims_the_lines_that_begin_with_it_only() {
        let (tx, _rx) = mpsc::unbounded_channel();
        let hook = ScriptedDirectives::new(tx).with_hang_on(Some("A peer message".into()));
        assert!(hook.claims("A peer message for you (node \"r\")"));
        assert!(hook.claims("   A peer message"));
        assert!(!hook.claims("Not A peer message"));
        assert!(!hook.claims("write a: b"));
        let (tx, _rx) = mpsc::unbounded_channel();
        let none = ScriptedDirectives::new(tx).with_hang_on(Some("  ".into()));
        assert!(!none.claims("anything"));
        assert!(!none.claims(""));
    }

    #[test]
    fn chunks_carry_their_number_and_creation_time() {
        let text = chunk_text(7);
        assert!(text.starts_with("chunk 00000007 t="), "{text}");
        assert!(text.len() < 48, "{text}");
        let t = chunk_time(&text).unwrap();
        assert!(t > 1_600_000_000_000_000_000, "{t}");
    }
}
