//! A scripted model server on 127.0.0.1, so the real adapters (Claude Code, Codex, Gemini CLI)
//! can be driven through Legate with no network and no account.
//!
//! It speaks just enough of three model APIs, in the shapes `/work/shared/ACP-ADAPTERS.md`
//! records: Anthropic Messages (`POST /v1/messages`, SSE), OpenAI Responses
//! (`POST /v1/responses`, SSE) and Gemini (`:streamGenerateContent?alt=sse` and
//! `:generateContent`). Each request of the agent's main loop (one that offers tools) takes the
//! next [`Step`] of the script; when the script is used up it answers [`DONE`]. Requests that
//! offer no tools (titles, classifiers, routers) get a short text, or, when they ask for JSON,
//! an empty object. Every streamed answer sends `Connection: close` and closes the socket,
//! or the clients wait forever.
//!
//! This module owns the wire shapes and the script; it never decides anything about Legate,
//! and it only ever listens on the loopback interface.

use serde_json::{Value, json};
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the model says once the script is used up.
pub const DONE: &str = "All done.";

/// One answer of the model in the agent's main loop.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Plain text; ends the agent's turn.
    Text(String),
    /// A call of the adapter's own tool `name` with `input` (for OpenAI's `apply_patch`,
    /// `input` is a JSON string holding the patch text). For OpenAI, `namespace.tool` calls
    /// `tool` of a Responses API namespace (Codex puts each MCP server's tools in one,
    /// `mcp__<server>`); a function's name never holds a dot. A string of `input` may name
    /// `{{key}}`: it is replaced by the last `"key": "value"` that the request carries in its
    /// text (a caller's tool result, say), so a script can pass on an id it cannot know ahead.
    Tool {
        /// The tool's name, as the adapter declares it (`Write`, `Bash`, `exec_command`, …).
        name: String,
        /// Its arguments.
        input: Value,
    },
}

impl Step {
    /// A text step.
    pub fn text(t: &str) -> Self {
        Self::Text(t.to_string())
    }

    /// A tool step.
    pub fn tool(name: &str, input: Value) -> Self {
        Self::Tool {
            name: name.to_string(),
            input,
        }
    }
}

/// One request the server received.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// `POST`, `GET`, `HEAD`.
    pub method: String,
    /// The path with its query.
    pub path: String,
    /// The body, parsed when it was JSON.
    pub body: Value,
    /// When its head and body had been read (the answer goes out at once), by the wall
    /// clock, so that a suite can set it beside a store's timestamps.
    pub at: std::time::SystemTime,
    /// The script's step it took, for a request of the main loop.
    pub step: Option<Step>,
}

#[derive(Debug, Default)]
struct State {
    script: VecDeque<Step>,
    requests: Vec<Recorded>,
    calls: u64,
}

/// The running server. Dropping it stops it.
#[derive(Debug)]
pub struct ModelServer {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
}

impl ModelServer {
    /// Starts a server on an ephemeral port of 127.0.0.1.
    pub fn start() -> std::io::Result<Self> {
        Self::start_on(std::net::Ipv4Addr::LOCALHOST)
    }

    /// Starts a server on an ephemeral port of `ip`: an address of this machine (the local
    /// cluster's pod bridge, for an adapter in a pod), never one beyond it.
    pub fn start_on(ip: std::net::Ipv4Addr) -> std::io::Result<Self> {
        let listener = TcpListener::bind((ip, 0))?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Mutex::new(State::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st) = (state.clone(), stop.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if st.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let s = s.clone();
                std::thread::spawn(move || {
                    let _ = serve(conn, &s);
                });
            }
        });
        Ok(Self { addr, state, stop })
    }

    /// `http://<address>:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Replaces the script.
    pub fn script(&self, steps: Vec<Step>) {
        let mut s = lock(&self.state);
        s.script = steps.into();
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Recorded> {
        lock(&self.state).requests.clone()
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
    }
}

fn lock(m: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The API a request is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Api {
    Anthropic,
    OpenAi,
    Gemini { stream: bool },
    Other,
}

fn api_of(method: &str, path: &str) -> Api {
    if method != "POST" {
        return Api::Other;
    }
    let p = path.split('?').next().unwrap_or(path);
    if p.ends_with("/v1/messages") {
        Api::Anthropic
    } else if p.ends_with("/responses") {
        Api::OpenAi
    } else if p.ends_with(":streamGenerateContent") {
        Api::Gemini { stream: true }
    } else if p.ends_with(":generateContent") {
        Api::Gemini { stream: false }
    } else {
        Api::Other
    }
}

/// Claude Code (2.1.3xx, in claude-agent-acp 0.101) asks for a "prompt suggestion" after a
/// turn, with the main loop's tools (for its prompt cache); its last user message starts
/// with this. Such a request is not the main loop. After a turn that went through plan mode,
/// a `system` message (the plan-mode reminder) follows that user message.
pub const CLAUDE_SUGGESTION: &str = "[SUGGESTION MODE";

/// Whether the last message that is not a `system` one (its content a string or blocks) has
/// a text starting with [`CLAUDE_SUGGESTION`].
fn is_side_request(body: &Value) -> bool {
    let Some(last) = body["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] != "system"))
    else {
        return false;
    };
    let starts = |t: &str| t.trim_start().starts_with(CLAUDE_SUGGESTION);
    match &last["content"] {
        Value::String(t) => starts(t),
        Value::Array(blocks) => blocks
            .iter()
            .any(|b| b["text"].as_str().is_some_and(starts)),
        _ => false,
    }
}

/// Whether a request is the agent's main loop: it offers tools, and is not a side request
/// ([`CLAUDE_SUGGESTION`]).
fn offers_tools(api: Api, body: &Value) -> bool {
    if is_side_request(body) {
        return false;
    }
    let tools = &body["tools"];
    match api {
        Api::Gemini { .. } => tools
            .as_array()
            .is_some_and(|t| t.iter().any(|x| x.get("functionDeclarations").is_some())),
        _ => tools.as_array().is_some_and(|t| !t.is_empty()),
    }
}

/// `step` with every `{{key}}` in its tool input replaced by what `body` last said of `key`.
/// A key the body never names is left as written, so the caller's tool refuses it visibly.
fn fill(step: Step, body: &Value) -> Step {
    let Step::Tool { name, input } = step else {
        return step;
    };
    let mut texts = Vec::new();
    strings_of(body, &mut texts);
    Step::Tool {
        name,
        input: fill_value(input, &texts),
    }
}

fn strings_of<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
    match v {
        Value::String(s) => out.push(s),
        Value::Array(a) => a.iter().for_each(|x| strings_of(x, out)),
        Value::Object(o) => o.values().for_each(|x| strings_of(x, out)),
        _ => {}
    }
}

fn fill_value(v: Value, texts: &[&str]) -> Value {
    match v {
        Value::String(s) => Value::String(fill_text(&s, texts)),
        Value::Array(a) => Value::Array(a.into_iter().map(|x| fill_value(x, texts)).collect()),
        Value::Object(o) => Value::Object(
            o.into_iter()
                .map(|(k, x)| (k, fill_value(x, texts)))
                .collect(),
        ),
        other => other,
    }
}

fn fill_text(s: &str, texts: &[&str]) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(start) = rest.find("{{") {
        let Some(len) = rest[start + 2..].find("}}") else {
            break;
        };
        let key = &rest[start + 2..start + 2 + len];
        out.push_str(&rest[..start]);
        match last_said(key, texts) {
            Some(value) => out.push_str(&value),
            None => out.push_str(&rest[start..start + 4 + len]),
        }
        rest = &rest[start + 4 + len..];
    }
    out.push_str(rest);
    out
}

/// The value of the last `"key": "value"` (or `"key":"value"`) in `texts`, read in order.
fn last_said(key: &str, texts: &[&str]) -> Option<String> {
    let needle = format!("\"{key}\"");
    let mut found = None;
    for text in texts {
        let mut from = 0;
        while let Some(at) = text[from..].find(&needle) {
            let after = &text[from + at + needle.len()..];
            from += at + needle.len();
            let Some(after) = after.trim_start().strip_prefix(':') else {
                continue;
            };
            let Some(after) = after.trim_start().strip_prefix('"') else {
                continue;
            };
            if let Some(end) = after.find('"') {
                found = Some(after[..end].to_string());
            }
        }
    }
    found
}

fn serve(conn: TcpStream, state: &Mutex<State>) -> std::io::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or("").to_string();
    let path = parts.next().unwrap_or("/").to_string();
    let mut length = 0usize;
    let mut chunked = false;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h == "\r\n" || h == "\n" {
            break;
        }
        let lower = h.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
        if lower.starts_with("transfer-encoding:") && lower.contains("chunked") {
            chunked = true;
        }
    }
    let raw = if chunked {
        read_chunked(&mut reader)?
    } else {
        let mut b = vec![0; length];
        reader.read_exact(&mut b)?;
        b
    };
    let body: Value = serde_json::from_slice(&raw).unwrap_or(Value::Null);
    let api = api_of(&method, &path);
    let (step, call) = {
        let mut s = lock(state);
        s.calls += 1;
        let call = s.calls;
        let step = offers_tools(api, &body).then(|| {
            fill(
                s.script
                    .pop_front()
                    .unwrap_or_else(|| Step::Text(DONE.into())),
                &body,
            )
        });
        s.requests.push(Recorded {
            method: method.clone(),
            path: path.clone(),
            body: body.clone(),
            at: std::time::SystemTime::now(),
            step: step.clone(),
        });
        (step, call)
    };
    let mut conn = conn;
    match api {
        Api::Other => respond(&mut conn, "application/json", b"{}"),
        Api::Anthropic => {
            let step = step.unwrap_or_else(|| Step::text("ok"));
            if body["stream"].as_bool() == Some(true) {
                respond(
                    &mut conn,
                    "text/event-stream",
                    anthropic_sse(&step, call).as_bytes(),
                )
            } else {
                respond(
                    &mut conn,
                    "application/json",
                    anthropic_json(&step, call).to_string().as_bytes(),
                )
            }
        }
        Api::OpenAi => {
            let step = step.unwrap_or_else(|| Step::text("ok"));
            respond(&mut conn, "text/event-stream", openai_sse(&step).as_bytes())
        }
        Api::Gemini { stream } => {
            let wants_json = body["generationConfig"]["responseMimeType"] == "application/json"
                || body["generationConfig"].get("responseJsonSchema").is_some()
                || body["generationConfig"].get("responseSchema").is_some();
            let step = step.unwrap_or_else(|| {
                if wants_json {
                    Step::text(&gemini_router_json(&body).to_string())
                } else {
                    Step::text("ok")
                }
            });
            let response = gemini_response(&step);
            if stream {
                let sse = format!("data: {response}\r\n\r\n");
                respond(&mut conn, "text/event-stream", sse.as_bytes())
            } else {
                respond(
                    &mut conn,
                    "application/json",
                    response.to_string().as_bytes(),
                )
            }
        }
    }
}

fn read_chunked(reader: &mut impl BufRead) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let mut size = String::new();
        reader.read_line(&mut size)?;
        let n =
            usize::from_str_radix(size.trim().split(';').next().unwrap_or("0"), 16).unwrap_or(0);
        if n == 0 {
            let mut end = String::new();
            let _ = reader.read_line(&mut end);
            return Ok(out);
        }
        let mut chunk = vec![0; n + 2];
        reader.read_exact(&mut chunk)?;
        chunk.truncate(n);
        out.extend(chunk);
    }
}

fn respond(conn: &mut TcpStream, content_type: &str, body: &[u8]) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes())?;
    conn.write_all(body)?;
    conn.flush()?;
    conn.shutdown(std::net::Shutdown::Both)
}

fn sse(event: &str, data: Value) -> String {
    format!("event: {event}\ndata: {data}\n\n")
}

/// A tool_use's id: its name and the request's number, so that no two calls of one tool in a
/// conversation share an id (Claude Code keeps only the first result of a repeated id).
fn tool_use_id(name: &str, call: u64) -> String {
    format!("toolu_{}_{call}", name.to_ascii_lowercase())
}

fn anthropic_sse(step: &Step, call: u64) -> String {
    let mut out = sse(
        "message_start",
        json!({"type": "message_start", "message": {
            "id": "msg_legate", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 12, "output_tokens": 1}}}),
    );
    let stop = match step {
        Step::Text(t) => {
            out += &sse(
                "content_block_start",
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            );
            out += &sse(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": t}}),
            );
            "end_turn"
        }
        Step::Tool { name, input } => {
            out += &sse(
                "content_block_start",
                json!({"type": "content_block_start", "index": 0, "content_block": {
                    "type": "tool_use", "id": tool_use_id(name, call), "name": name, "input": {}}}),
            );
            out += &sse(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0, "delta": {
                    "type": "input_json_delta", "partial_json": input.to_string()}}),
            );
            "tool_use"
        }
    };
    out += &sse(
        "content_block_stop",
        json!({"type": "content_block_stop", "index": 0}),
    );
    out += &sse(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
               "usage": {"output_tokens": 7}}),
    );
    out += &sse("message_stop", json!({"type": "message_stop"}));
    out
}

fn anthropic_json(step: &Step, call: u64) -> Value {
    let (content, stop) = match step {
        Step::Text(t) => (json!([{"type": "text", "text": t}]), "end_turn"),
        Step::Tool { name, input } => (
            json!([{"type": "tool_use", "id": tool_use_id(name, call), "name": name, "input": input}]),
            "tool_use",
        ),
    };
    json!({"id": "msg_legate", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
           "content": content, "stop_reason": stop, "stop_sequence": null,
           "usage": {"input_tokens": 12, "output_tokens": 7}})
}

fn openai_sse(step: &Step) -> String {
    let item = match step {
        Step::Text(t) => {
            json!({"type": "message", "id": "msg_legate", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": t, "annotations": []}]})
        }
        Step::Tool { name, input } if name == "apply_patch" => json!({
            "type": "custom_tool_call", "id": "ctc_legate", "call_id": "call_patch", "status": "completed",
            "name": name, "input": input.as_str().unwrap_or_default()}),
        Step::Tool { name, input } => {
            let mut call = json!({
                "type": "function_call", "id": "fc_legate", "call_id": format!("call_{name}"), "status": "completed",
                "name": name, "arguments": input.to_string()});
            if let Some((namespace, tool)) = name.split_once('.') {
                call["namespace"] = json!(namespace);
                call["name"] = json!(tool);
            }
            call
        }
    };
    let response = |status: &str, output: Value| {
        json!({"id": "resp_legate", "object": "response", "status": status, "model": "gpt-5.3-codex",
               "output": output,
               "usage": {"input_tokens": 12, "input_tokens_details": {"cached_tokens": 0},
                         "output_tokens": 7, "output_tokens_details": {"reasoning_tokens": 0},
                         "total_tokens": 19}})
    };
    let mut out = sse(
        "response.created",
        json!({"type": "response.created", "response": response("in_progress", json!([]))}),
    );
    out += &sse(
        "response.output_item.added",
        json!({"type": "response.output_item.added", "output_index": 0, "item": item}),
    );
    out += &sse(
        "response.output_item.done",
        json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
    );
    out += &sse(
        "response.completed",
        json!({"type": "response.completed", "response": response("completed", json!([item]))}),
    );
    out
}

fn gemini_response(step: &Step) -> Value {
    let part = match step {
        Step::Text(t) => json!({"text": t}),
        Step::Tool { name, input } => json!({"functionCall": {"name": name, "args": input}}),
    };
    json!({"candidates": [{"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}],
           "usageMetadata": {"promptTokenCount": 12, "candidatesTokenCount": 7, "totalTokenCount": 19},
           "modelVersion": "gemini-2.5-pro"})
}

/// An answer to Gemini's router, which asks for JSON matching a schema: a plausible object
/// naming the default model, so the prompt goes on.
fn gemini_router_json(body: &Value) -> Value {
    let schema = &body["generationConfig"]["responseJsonSchema"];
    let mut out = serde_json::Map::new();
    if let Some(props) = schema["properties"].as_object() {
        for (k, v) in props {
            let value = match v["type"].as_str() {
                Some("string") => v["enum"]
                    .as_array()
                    .and_then(|e| e.first().cloned())
                    .unwrap_or_else(|| json!("flash")),
                Some("boolean") => json!(false),
                Some("number") | Some("integer") => json!(0),
                Some("array") => json!([]),
                _ => json!({}),
            };
            out.insert(k.clone(), value);
        }
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn post(url: &str, path: &str, body: &Value) -> String {
        let addr = url.trim_start_matches("http://");
        let mut c = TcpStream::connect(addr).unwrap();
        let body = body.to_string();
        write!(
            c,
            "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut out = String::new();
        c.read_to_string(&mut out).unwrap();
        out
    }

    #[test]
    fn claudes_prompt_suggestions_do_not_take_the_script() {
        let s = ModelServer::start().unwrap();
        s.script(vec![Step::text("first")]);
        let suggestion = json!({"tools": [{"name": "Bash"}], "messages": [
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "ok"},
                                         {"type": "text", "text": "[SUGGESTION MODE: Suggest what the user types next]"}]}]});
        let main = json!({"tools": [{"name": "Bash"}], "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Do it"}]}]});
        let a = post(&s.url(), "/v1/messages?beta=true", &suggestion);
        assert!(!a.contains("first"), "{a}");
        let m = post(&s.url(), "/v1/messages?beta=true", &main);
        assert!(m.contains("first"), "{m}");
    }

    /// After a turn that went through plan mode, Claude Code 2.1.318 (claude-agent-acp 0.101.0)
    /// puts a `system` message (the plan-mode reminder, its content a string) after the
    /// suggestion's user message; seen taking the next task's script.
    #[test]
    fn a_suggestion_followed_by_a_system_reminder_does_not_take_the_script() {
        let s = ModelServer::start().unwrap();
        s.script(vec![Step::tool("EnterPlanMode", json!({}))]);
        let suggestion = json!({"tools": [{"name": "Bash"}], "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Do it"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "planned"}]},
            {"role": "user", "content": [{"type": "text", "text": "[SUGGESTION MODE: Suggest what the user types next]"}]},
            {"role": "system", "content": "Plan mode is active. You MUST NOT make any edits."}]});
        let a = post(&s.url(), "/v1/messages?beta=true", &suggestion);
        assert!(!a.contains("EnterPlanMode"), "{a}");
        // A main-loop request whose last message is such a reminder still takes its step.
        let main = json!({"tools": [{"name": "Bash"}], "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Do it"}]},
            {"role": "system", "content": "Plan mode is active. You MUST NOT make any edits."}]});
        let m = post(&s.url(), "/v1/messages?beta=true", &main);
        assert!(m.contains("EnterPlanMode"), "{m}");
    }

    #[test]
    fn main_loop_requests_take_the_script_in_order_and_others_do_not() {
        let s = ModelServer::start().unwrap();
        s.script(vec![
            Step::tool("Write", json!({"file_path": "/x", "content": "y"})),
            Step::text("finished"),
        ]);
        let main = json!({"stream": true, "tools": [{"name": "Write"}]});
        let aux = json!({"stream": true});
        let a = post(&s.url(), "/v1/messages?beta=true", &aux);
        assert!(
            a.contains("connection: close") && a.contains("\"ok\""),
            "{a}"
        );
        let t = post(&s.url(), "/v1/messages?beta=true", &main);
        assert!(
            t.contains("input_json_delta") && t.contains("tool_use"),
            "{t}"
        );
        let f = post(&s.url(), "/v1/messages?beta=true", &main);
        assert!(f.contains("finished"), "{f}");
        let d = post(&s.url(), "/v1/messages", &main);
        assert!(d.contains(DONE), "{d}");
        assert_eq!(s.requests().len(), 4);
    }

    #[test]
    fn a_tool_input_takes_ids_from_the_last_tool_result() {
        let body = json!({"messages": [
            {"role": "user", "content": [{"type": "tool_result", "content": [
                {"type": "text", "text": "{\"taskId\":\"t-1\",\"contextId\":\"c-1\"}"}
            ]}]},
            {"role": "user", "content": "{\"taskId\": \"t-2\"}"}
        ], "tools": [{"name": "x"}]});
        let step = fill(
            Step::tool(
                "mcp__legate__wait",
                json!({"taskId": "{{taskId}}", "c": ["{{contextId}}/{{nope}}"]}),
            ),
            &body,
        );
        assert_eq!(
            step,
            Step::tool(
                "mcp__legate__wait",
                json!({"taskId": "t-2", "c": ["c-1/{{nope}}"]})
            )
        );
    }

    #[test]
    fn openai_and_gemini_shapes() {
        let s = ModelServer::start().unwrap();
        s.script(vec![
            Step::tool("exec_command", json!({"cmd": "ls"})),
            Step::tool("run_shell_command", json!({"command": "ls"})),
        ]);
        let o = post(
            &s.url(),
            "/v1/responses",
            &json!({"tools": [{"type": "function"}]}),
        );
        assert!(
            o.contains("response.completed") && o.contains("exec_command"),
            "{o}"
        );
        let g = post(
            &s.url(),
            "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse",
            &json!({"tools": [{"functionDeclarations": []}]}),
        );
        assert!(g.contains("functionCall") && g.contains("data: "), "{g}");
        let r = post(
            &s.url(),
            "/v1beta/models/flash:generateContent",
            &json!({"generationConfig": {"responseJsonSchema": {"properties": {"model_choice": {"type": "string", "enum": ["flash", "pro"]}}}}}),
        );
        assert!(r.contains("model_choice"), "{r}");
        s.script(vec![Step::tool("mcp__legate.run", json!({"prompt": "x"}))]);
        let n = post(
            &s.url(),
            "/v1/responses",
            &json!({"tools": [{"type": "namespace"}]}),
        );
        assert!(
            n.contains(r#""namespace":"mcp__legate""#) && n.contains(r#""name":"run""#),
            "{n}"
        );
    }
}
