//! A two-machine fleet on one host, for the federation tests: a BACK `legate serve` that
//! serves revisor over A2A, and a FRONT `legate serve` whose `[agents.back]` is `kind = "a2a"`
//! pointing at the back's card, each with its own `LEGATE_HOME` and bearer token, both on
//! 127.0.0.1 with ports the kernel picks (read from the banner, as `serve.rs` does).
//!
//! This module owns starting, killing and restarting those processes, reading their stored
//! tasks and events through the CLI, and reading an A2A SSE stream frame by frame (so a test
//! can act mid-task). It never reads a store directly and never sleeps to synchronise: every
//! wait here is on a line the other process writes, a process exiting, or a condition retried
//! under a generous deadline.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use legate_frontkit::served::{addr_of, banner, request_text, terminate, url_on};

const LEGATE: &str = env!("CARGO_BIN_EXE_legate");

/// The variable the front reads the back's bearer token from (`token_env`).
pub const BACK_TOKEN_ENV: &str = "LEGATE_FLEET_BACK_TOKEN";

/// A running `legate serve`, with its home and the address of its A2A front.
pub struct Node {
    pub home: PathBuf,
    child: Child,
    /// `127.0.0.1:PORT` of its A2A front.
    pub a2a: String,
    /// Its A2A bearer token, as `Bearer …`.
    pub bearer: String,
    envs: Vec<(String, String)>,
    args: Vec<String>,
}

impl Node {
    /// Starts `legate serve <args>` on `home` with `envs` and reads its banner up to
    /// "Ctrl-C stops the server".
    pub fn start(home: &Path, args: &[&str], envs: &[(&str, &str)]) -> Node {
        let envs: Vec<(String, String)> = envs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        let (child, a2a) = spawn_serve(home, &args, &envs);
        let token = std::fs::read_to_string(home.join("a2a-token")).unwrap();
        Node {
            home: home.to_path_buf(),
            child,
            a2a,
            bearer: format!("Bearer {}", token.trim()),
            envs,
            args,
        }
    }

    /// `kill -9`: the process dies at once, however far its tasks got.
    pub fn kill_9(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// Starts the same `legate serve` again on the same home (a new port).
    pub fn restart(&mut self) {
        let (child, a2a) = spawn_serve(&self.home, &self.args, &self.envs);
        self.child = child;
        self.a2a = a2a;
    }

    /// The environment this node's processes run with (the front's carries the back's token).
    pub fn envs(&self) -> Vec<(&str, &str)> {
        self.envs
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect()
    }

    /// Runs `legate <args>` on this node's home and environment.
    pub fn cli(&self, args: &[&str]) -> Output {
        let mut c = Command::new(LEGATE);
        c.args(args)
            .env("LEGATE_HOME", &self.home)
            .env("LEGATE_LOG", "warn");
        for (k, v) in &self.envs {
            c.env(k, v);
        }
        c.output().unwrap()
    }

    /// `legate show ID --json`.
    pub fn show(&self, id: &str) -> Value {
        let out = self.cli(&["show", id, "--json"]);
        assert!(out.status.success(), "legate show {id}: {out:?}");
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// Every stored event of a task, as its JSON kind (`{"type": …, …}`), in order.
    pub fn events(&self, id: &str) -> Vec<Value> {
        let out = self.cli(&["events", id]);
        assert!(out.status.success(), "legate events {id}: {out:?}");
        parse_event_lines(&String::from_utf8_lossy(&out.stdout))
    }

    /// `legate events --follow ID`: returns once the task has ended (the follower exits then),
    /// with every event it printed.
    pub fn follow(&self, id: &str) -> Vec<Value> {
        let out = self.cli(&["events", "--follow", id]);
        parse_event_lines(&String::from_utf8_lossy(&out.stdout))
    }

    /// The JSON-RPC endpoint of agent `agent` on this node.
    pub fn rpc_path(agent: &str) -> String {
        format!("/agents/{agent}")
    }

    /// One JSON-RPC call to agent `agent`'s A2A endpoint; the parsed response.
    pub fn call(&self, agent: &str, method: &str, params: Value) -> Value {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let got = legate_frontkit::served::raw(
            &self.a2a,
            "POST",
            &Self::rpc_path(agent),
            &self.a2a,
            &self.headers(),
            &body.to_string(),
        );
        assert_eq!(got.status, 200, "{method}: {got:?}");
        serde_json::from_str(&got.body).unwrap()
    }

    /// `SendStreamingMessage` to agent `agent` with `text`, as a frame-by-frame stream.
    pub fn stream(&self, agent: &str, message_id: &str, text: &str) -> SseStream {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
            "params": {"message": {"messageId": message_id, "role": "ROLE_USER",
                "parts": [{"text": text}]}}});
        SseStream::open(
            &self.a2a,
            &Self::rpc_path(agent),
            &self.headers(),
            &body.to_string(),
        )
    }

    /// A streaming JSON-RPC call (`SubscribeToTask`, …) to agent `agent`, frame by frame.
    pub fn call_stream(&self, agent: &str, method: &str, params: Value) -> SseStream {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        SseStream::open(
            &self.a2a,
            &Self::rpc_path(agent),
            &self.headers(),
            &body.to_string(),
        )
    }

    fn headers(&self) -> [(&str, &str); 3] {
        [
            ("Content-Type", "application/json"),
            ("A2A-Version", "1.0"),
            ("Authorization", self.bearer.as_str()),
        ]
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            terminate(&mut self.child);
        }
    }
}

fn spawn_serve(home: &Path, args: &[String], envs: &[(String, String)]) -> (Child, String) {
    let mut c = Command::new(LEGATE);
    c.arg("serve")
        .args(args)
        .env("LEGATE_HOME", home)
        .env("LEGATE_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for (k, v) in envs {
        c.env(k, v);
    }
    let mut child = c.spawn().unwrap();
    let printed = banner(&mut child);
    (child, addr_of(&url_on(&printed, "Legate A2A server")))
}

/// Parses `legate events` lines (`SEQ TIME JSON`) into their JSON kinds.
pub fn parse_event_lines(text: &str) -> Vec<Value> {
    text.lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let (_, rest) = l.split_once(' ')?;
            let (_, json) = rest.split_once(' ')?;
            serde_json::from_str(json).ok()
        })
        .collect()
}

/// The two homes of a fleet and its processes.
pub struct Fleet {
    pub dir: tempfile::TempDir,
    pub back: Node,
    pub front: Node,
}

impl Fleet {
    /// A back serving revisor, and a front whose `back` agent is the back's revisor over A2A.
    /// `front_extra` is appended to the front's `legate.toml`.
    pub fn start(front_extra: &str) -> Fleet {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let back = start_back(&base.join("back"));
        let front = start_front(&base.join("front"), &back, front_extra);
        Fleet { dir, back, front }
    }

    /// The base directory (canonical) both homes live under.
    pub fn base(&self) -> PathBuf {
        self.dir.path().canonicalize().unwrap()
    }
}

/// Starts a back on `home`: `legate serve` with its default agents (revisor among them).
pub fn start_back(home: &Path) -> Node {
    std::fs::create_dir_all(home).unwrap();
    Node::start(home, &["--port", "0"], &[])
}

/// The `[agents.back]` table of a front delegating to `back`'s revisor.
pub fn back_agent_toml(back: &Node) -> String {
    format!(
        "[agents.back]\nkind = \"a2a\"\nurl = \"http://{}/agents/revisor/.well-known/agent-card.json\"\ntoken_env = \"{BACK_TOKEN_ENV}\"\n",
        back.a2a
    )
}

/// Writes the front's configuration (the back as agent `back`, plus `extra`) on `home`.
pub fn write_front_config(home: &Path, back: &Node, extra: &str) {
    std::fs::create_dir_all(home).unwrap();
    std::fs::write(
        home.join("legate.toml"),
        format!("{}{extra}", back_agent_toml(back)),
    )
    .unwrap();
}

/// Starts a front on `home` delegating to `back`.
pub fn start_front(home: &Path, back: &Node, extra: &str) -> Node {
    write_front_config(home, back, extra);
    let token = back.bearer.trim_start_matches("Bearer ").to_owned();
    Node::start(home, &["--port", "0"], &[(BACK_TOKEN_ENV, token.as_str())])
}

/// An A2A SSE response read one `data:` frame at a time.
pub struct SseStream {
    reader: BufReader<TcpStream>,
    /// Every frame read so far.
    pub frames: Vec<Value>,
}

impl SseStream {
    fn open(addr: &str, path: &str, headers: &[(&str, &str)], body: &str) -> SseStream {
        let mut extra = vec![("Accept", "text/event-stream")];
        extra.extend_from_slice(headers);
        let mut stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        let request = request_text("POST", path, addr, &extra, body);
        stream.write_all(request.as_bytes()).unwrap();
        let mut reader = BufReader::new(stream);
        let mut status = String::new();
        reader.read_line(&mut status).unwrap();
        assert!(status.contains(" 200 "), "stream refused: {status:?}");
        // The head, up to its blank line.
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap() == 0 || line == "\r\n" {
                break;
            }
        }
        SseStream {
            reader,
            frames: Vec::new(),
        }
    }

    /// The next frame's JSON-RPC `result` (or the whole frame when it has none), or `None` at
    /// the end of the stream.
    pub fn next(&mut self) -> Option<Value> {
        let mut line = String::new();
        loop {
            line.clear();
            // Chunked transfer: size lines and blank lines are skipped; data lines are parsed.
            match self.reader.read_line(&mut line) {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
            if let Some(data) = line.trim().strip_prefix("data:") {
                let frame: Value = serde_json::from_str(data.trim()).unwrap();
                let result = frame.get("result").cloned().unwrap_or(frame);
                self.frames.push(result.clone());
                return Some(result);
            }
        }
    }

    /// Reads frames until one satisfies `pred`; panics when the stream ends first.
    pub fn until(&mut self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        while let Some(f) = self.next() {
            if pred(&f) {
                return f;
            }
        }
        panic!("the stream ended before {what}: {:?}", self.frames);
    }

    /// Reads every remaining frame.
    pub fn drain(&mut self) {
        while self.next().is_some() {}
    }
}

/// The `metadata.kind` of a frame's status message (`message`, `tool_call`, …), if any.
pub fn frame_kind(frame: &Value) -> Option<&str> {
    frame["statusUpdate"]["status"]["message"]["metadata"]["kind"].as_str()
}

/// The A2A state a frame carries (the task's, or a status update's).
pub fn frame_state(frame: &Value) -> Option<&str> {
    frame["statusUpdate"]["status"]["state"]
        .as_str()
        .or_else(|| frame["task"]["status"]["state"].as_str())
}

/// Retries `probe` every few ms until it returns `Some`, for up to `secs` seconds: for a
/// condition no event reports (a file appearing in another process's workspace).
pub fn retry<T>(what: &str, secs: u64, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = probe() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        // Paces a retry of a condition no event reports (see the module doc).
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The revisor instructions that make a turn wait on a gate the test opens: it makes a FIFO
/// `gate` in its sandbox, reads one line from it into `released.txt`, then quotes that file
/// in its answer (`released: <line>`).
pub const GATED: &str = "run mkfifo gate && read line < gate && echo \"released: $line\" > released.txt\nread released.txt";

/// Waits for the gate of the back's only sandbox to appear, then writes `word` into it (which
/// releases the turn blocked on it).
pub fn open_gate(back: &Node, word: &str) {
    let gate = wait_gate(back);
    let mut f = std::fs::OpenOptions::new().write(true).open(&gate).unwrap();
    writeln!(f, "{word}").unwrap();
}

/// The path of the gate FIFO in the back's sandboxes, once the turn made it.
pub fn wait_gate(back: &Node) -> PathBuf {
    let sandboxes = back.home.join("sandboxes");
    retry("the back's gate FIFO", 60, || {
        std::fs::read_dir(&sandboxes).ok()?.find_map(|e| {
            let p = e.ok()?.path().join("gate");
            p.exists().then_some(p)
        })
    })
}
