//! A two-machine fleet on one host, for the federation tests and bench: a BACK `legate serve`
//! that serves revisor over A2A, and a FRONT `legate serve` whose `[agents.back]` is
//! `kind = "a2a"` pointing at the back's card, each a [`Node`] on its own [`CliHome`] with
//! its own bearer token, both on 127.0.0.1 with ports the kernel picks (read from the banner).
//!
//! This module owns starting, killing (`kill -9`) and restarting those processes, and reading
//! their stored tasks and events through the CLI; a node's A2A streams are [`SseStream`]s. It
//! never reads a store directly and never sleeps to synchronise: every wait here is on a line
//! the other process writes, a process exiting, or a condition [`poll::until`] re-checks
//! under a generous deadline.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use serde_json::{Value, json};

use crate::cli::CliHome;
use crate::poll;
use crate::served::{Served, a2a_access, raw};
use crate::sse::SseStream;

/// The variable the front reads the back's bearer token from (`token_env`).
pub const BACK_TOKEN_ENV: &str = "LEGATE_FLEET_BACK_TOKEN";

/// A running `legate serve` on its home, restartable on the same home, with the address of
/// its A2A front. Its commands (and the server) run with `LEGATE_LOG=warn`.
#[derive(Debug)]
pub struct Node {
    served: Served,
    /// `127.0.0.1:PORT` of its A2A front.
    pub a2a: String,
    /// Its A2A bearer token, as `Bearer …`.
    pub bearer: String,
    args: Vec<String>,
    cli: CliHome,
}

impl Node {
    /// Starts `legate serve <args>` on `cli`'s home and reads its banner and A2A token.
    pub fn start(cli: CliHome, args: &[&str]) -> Node {
        let cli = cli.env("LEGATE_LOG", "warn");
        let served = cli.serve(args);
        let (a2a, bearer) = a2a_access(&served, &cli.home());
        Node {
            served,
            a2a,
            bearer,
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            cli,
        }
    }

    /// `kill -9`: the process dies at once, however far its tasks got.
    pub fn kill_9(&mut self) {
        self.served.child.kill().unwrap();
        self.served.child.wait().unwrap();
    }

    /// Starts the same `legate serve` again on the same home (a new port).
    pub fn restart(&mut self) {
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        self.served = self.cli.serve(&args);
        (self.a2a, self.bearer) = a2a_access(&self.served, &self.cli.home());
    }

    /// Its `$LEGATE_HOME`.
    pub fn home(&self) -> PathBuf {
        self.cli.home()
    }

    /// The directory its home is in (where a suite puts its project and files).
    pub fn base(&self) -> &Path {
        self.cli.base()
    }

    /// Runs `legate <args>` on this node's home and environment.
    pub fn cli(&self, args: &[&str]) -> Output {
        self.cli.run(args)
    }

    /// `legate show --json ID`.
    pub fn show(&self, id: &str) -> Value {
        self.cli.show(id)
    }

    /// Every stored event of a task, as its JSON kind (`{"type": …, …}`), in order.
    pub fn events(&self, id: &str) -> Vec<Value> {
        self.cli.events(id)
    }

    /// `legate events --follow ID`: returns once the task has ended (the follower exits then).
    pub fn follow(&self, id: &str) -> Output {
        self.cli.run(&["events", "--follow", id])
    }

    /// The JSON-RPC endpoint of agent `agent` on this node.
    pub fn rpc_path(agent: &str) -> String {
        format!("/agents/{agent}")
    }

    /// One JSON-RPC call to agent `agent`'s A2A endpoint; the parsed response (a 200).
    pub fn call(&self, agent: &str, method: &str, params: Value) -> Value {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let got = raw(
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
        let message = json!({"message": {"messageId": message_id, "role": "ROLE_USER",
            "parts": [{"text": text}]}});
        self.call_stream(agent, "SendStreamingMessage", message)
    }

    /// A streaming JSON-RPC call (`SubscribeToTask`, …) to agent `agent`, frame by frame.
    pub fn call_stream(&self, agent: &str, method: &str, params: Value) -> SseStream {
        self.call_stream_with(agent, method, params, &[])
    }

    /// [`Node::call_stream`] with `extra` headers (a caller's `traceparent`, say).
    pub fn call_stream_with(
        &self,
        agent: &str,
        method: &str,
        params: Value,
        extra: &[(&str, &str)],
    ) -> SseStream {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let mut headers = self.headers().to_vec();
        headers.extend_from_slice(extra);
        SseStream::open(
            &self.a2a,
            &Self::rpc_path(agent),
            &headers,
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

/// The two nodes of a fleet, each on its own home; the front stops first.
#[derive(Debug)]
pub struct Fleet {
    /// The node delegating to the back (its agent `back`).
    pub front: Node,
    /// The node serving revisor.
    pub back: Node,
}

impl Fleet {
    /// A back serving revisor, and a front whose `back` agent is the back's revisor over A2A;
    /// `bin` is the binary (`env!("CARGO_BIN_EXE_legate")`), and `front_extra` is appended to
    /// the front's `legate.toml`.
    pub fn start(bin: impl AsRef<Path>, front_extra: &str) -> Fleet {
        Self::start_with_env(bin, front_extra, &[], &[])
    }

    /// [`Fleet::start`], each node's processes with its own extra environment (the
    /// `OTEL_*` variables of the trace tests, say).
    pub fn start_with_env(
        bin: impl AsRef<Path>,
        front_extra: &str,
        back_env: &[(&str, &str)],
        front_env: &[(&str, &str)],
    ) -> Fleet {
        let back = with_env(CliHome::new(bin.as_ref()), back_env);
        std::fs::create_dir_all(back.home()).unwrap();
        let back = Node::start(back, &["--port", "0"]);
        let token = back.bearer.trim_start_matches("Bearer ").to_owned();
        let front = CliHome::with_config(bin, &format!("{}{front_extra}", back_agent_toml(&back)))
            .env(BACK_TOKEN_ENV, &token);
        let front = Node::start(with_env(front, front_env), &["--port", "0"]);
        Fleet { front, back }
    }

    /// The front's directory (canonical), where a suite puts its project and files.
    pub fn base(&self) -> PathBuf {
        self.front.base().to_path_buf()
    }
}

fn with_env(cli: CliHome, env: &[(&str, &str)]) -> CliHome {
    env.iter().fold(cli, |cli, (k, v)| cli.env(k, v))
}

/// The `[agents.back]` table of a front delegating to `back`'s revisor.
pub fn back_agent_toml(back: &Node) -> String {
    format!(
        "[agents.back]\nkind = \"a2a\"\nurl = \"http://{}/agents/revisor/.well-known/agent-card.json\"\ntoken_env = \"{BACK_TOKEN_ENV}\"\n",
        back.a2a
    )
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
    let sandboxes = back.home().join("sandboxes");
    poll::until(Duration::from_secs(60), "the back's gate FIFO", || {
        std::fs::read_dir(&sandboxes).ok()?.find_map(|e| {
            let p = e.ok()?.path().join("gate");
            p.exists().then_some(p)
        })
    })
}
