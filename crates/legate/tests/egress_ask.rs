//! A connection no rule decides, put to a supervisor: a real `legate run --sandbox` whose
//! built-in `revisor` agent runs a Python probe that asks the egress proxy for
//! `localhost:PORT` under `[network] unknown = "ask"`. The name matches no rule, so the proxy
//! asks; the answer comes from a person (`legate approve` / `legate deny` from another
//! process), the supervising agent, or the deadline. Once allowed, Legate resolves `localhost`
//! (from /etc/hosts) to 127.0.0.1, which the one allow rule names exactly, and reaches the
//! loopback origin this test runs. A refusal must leave the origin untouched.
//!
//! Every address used is on this machine: the host's loopback, or the namespace's own.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use legate_frontkit::cli::{CliHome, KillOnDrop, text};
use legate_frontkit::poll::until;
use legate_frontkit::served::origin;

const LEGATE: &str = env!("CARGO_BIN_EXE_legate");

/// The supervisor token this test writes to the home before anything starts.
const SUPERVISOR_TOKEN: &str = "5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e";

/// How long any one wait of a test may take before it fails.
const LIMIT: Duration = Duration::from_secs(25);

/// What the agent runs: `python3 probe.py <origin port>`. One absolute-form GET of
/// `http://localhost:PORT/ask` through the namespace's proxy, writing `name=value` lines
/// (the status line, the body) into `net.txt` in its workspace.
const PROBE: &str = r#"
import socket, sys
port = int(sys.argv[1])
out = open("net.txt", "w")
def say(name, value):
    out.write(f"{name}={value}\n"); out.flush()
interfaces = ",".join(sorted(l.split(":")[0].strip() for l in open("/proc/net/dev").read().splitlines()[2:]))
say("interfaces", interfaces)
if interfaces != "lo":
    # Not in a namespace of its own: never send anything toward another host from a test.
    say("done", "no-namespace"); sys.exit(0)
try:
    s = socket.create_connection(("127.0.0.1", 3128), timeout=60)
    s.sendall(f"GET http://localhost:{port}/ask HTTP/1.1\r\nHost: localhost:{port}\r\nConnection: close\r\n\r\n".encode())
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk: break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode(errors="replace").split("\r\n")
    length = None
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    while length is None or len(body) < length:
        chunk = s.recv(65536)
        if not chunk: break
        body += chunk
    s.close()
    say("status", lines[0])
    say("body", body.decode(errors="replace").replace("\n", " "))
except Exception as e:
    say("error", type(e).__name__ + ":" + str(e))
say("done", "yes")
"#;

/// A background `legate run`, killed when the test ends, and the file its stderr goes to.
struct Run {
    child: KillOnDrop,
    stderr: PathBuf,
}

/// What a finished run left: its task, the probe's report and the task's events.
struct Finished {
    id: String,
    report: String,
    events: Vec<Value>,
}

impl Finished {
    /// The probe's value for `name`.
    fn outcome(&self, name: &str) -> &str {
        self.report
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("{name} missing: {}", self.report))
    }

    /// The one `connection` event for `destination`.
    fn connection(&self, destination: &str) -> &Value {
        let found: Vec<&Value> = self
            .events
            .iter()
            .filter(|e| e["type"] == "connection" && e["destination"] == destination)
            .collect();
        assert_eq!(
            found.len(),
            1,
            "one connection event for {destination}: {:?}",
            self.events
        );
        found[0]
    }
}

/// A home configured for one test, with the origin and the probe.
struct Setup {
    home: CliHome,
    script: String,
    port: u16,
    hits: Arc<AtomicUsize>,
}

impl Setup {
    /// A home whose `legate.toml` allows exactly the origin's loopback address, asks about
    /// every unknown destination, and adds `extra`; its commands carry the supervisor token.
    fn new(extra: &str) -> Self {
        let (port, hits) = origin();
        let home = CliHome::with_config(
            LEGATE,
            &format!("[network]\nallow = [\"127.0.0.1:{port}\"]\nunknown = \"ask\"\n{extra}"),
        )
        .env("LEGATE_LOG", "warn")
        .env("LEGATE_SUPERVISOR_TOKEN", SUPERVISOR_TOKEN);
        {
            use std::os::unix::fs::OpenOptionsExt;
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .truncate(true)
                .write(true)
                .mode(0o600)
                .open(home.home().join("supervisor-token"))
                .unwrap();
            f.write_all(SUPERVISOR_TOKEN.as_bytes()).unwrap();
        }
        let script = home.write("probe.py", PROBE);
        Self {
            home,
            script,
            port,
            hits,
        }
    }

    /// `localhost:PORT`, as the agent asks for it.
    fn destination(&self) -> String {
        format!("localhost:{}", self.port)
    }

    /// Starts `legate run --sandbox "run python3 probe.py PORT"` in the background.
    fn start(&self) -> Run {
        let stderr = self.home.home().join("run.stderr");
        let child = self
            .home
            .cmd(&[
                "run",
                "--sandbox",
                &format!("run /usr/bin/python3 {} {}", self.script, self.port),
            ])
            .env_remove("LEGATE_LOG")
            .env_remove("LEGATE_SUPERVISOR_TOKEN")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap();
        Run {
            child: KillOnDrop(child),
            stderr,
        }
    }

    /// The pending approval for the probe's connection, once it is in the queue; `None` when
    /// the run ended first (no approval will come).
    fn pending(&self, run: &mut Run) -> Option<Value> {
        let destination = self.destination();
        until(LIMIT, "the connection's approval", || {
            let pending = self.home.json_lines(&["approvals", "--json"]);
            if let Some(a) = pending
                .into_iter()
                .find(|a| a["tool"]["destination"] == destination.as_str())
            {
                return Some(Some(a));
            }
            run.child.0.try_wait().unwrap().map(|_| None)
        })
    }

    /// Waits for the run to end (within [`LIMIT`]) and reads what it left; `None` when the
    /// agent had no network namespace of its own here (nothing more to check).
    fn finish(&self, run: &mut Run) -> Option<Finished> {
        let status = until(LIMIT, "the run to end", || run.child.0.try_wait().unwrap());
        let err = std::fs::read_to_string(&run.stderr).unwrap();
        assert!(status.success(), "{status:?}: {err}");
        let id = err
            .lines()
            .find(|l| l.starts_with("task "))
            .and_then(|l| l.split_whitespace().nth(1))
            .unwrap_or_else(|| panic!("no task line: {err}"))
            .to_string();
        let shown = self.home.run(&["show", "--json", &id]);
        let task: Value = serde_json::from_slice(&shown.stdout).unwrap();
        let root = Path::new(task["root"].as_str().unwrap());
        let report = std::fs::read_to_string(root.join("net.txt")).unwrap();
        eprintln!("{report}");
        let events = String::from_utf8_lossy(&self.home.run(&["events", &id]).stdout)
            .lines()
            .filter_map(|l| l.trim_start().splitn(3, ' ').nth(2).map(str::to_owned))
            .filter_map(|l| serde_json::from_str(l.trim()).ok())
            .collect();
        let finished = Finished { id, report, events };
        if finished.outcome("done") == "no-namespace" {
            eprintln!("the agent has no network namespace here; nothing more to check");
            return None;
        }
        assert_eq!(finished.outcome("done"), "yes");
        Some(finished)
    }

    /// The audit rows of task `id` for the probe's connection.
    fn audit(&self, id: &str) -> Vec<Value> {
        let destination = self.destination();
        self.home
            .json_lines(&["audit", "--json", "--task", id])
            .into_iter()
            .filter(|e| e["tool"]["destination"] == destination.as_str())
            .collect()
    }

    /// Every approval of task `id`, closed ones too.
    fn approvals_of(&self, id: &str) -> Vec<Value> {
        self.home
            .json_lines(&["approvals", "--json", "--all", "--task", id])
    }
}

/// The approval a person sees: Legate's own words for the connection, and where to.
fn check_listed(setup: &Setup, approval: &Value) {
    let destination = setup.destination();
    assert_eq!(approval["state"], "pending", "{approval}");
    assert_eq!(approval["agent"], "revisor", "{approval}");
    assert_eq!(approval["tool"]["kind"], "fetch", "{approval}");
    assert_eq!(
        approval["tool"]["title"],
        format!("connect to {destination}"),
        "{approval}"
    );
    let options: Vec<&str> = approval["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["id"].as_str().unwrap())
        .collect();
    assert_eq!(options, ["allow", "reject"], "{approval}");
    // The text form names the destination on a line of its own.
    let out = setup.home.run(&["approvals"]);
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.contains(&format!("    connects {destination}")),
        "{shown}"
    );
    assert!(shown.contains(approval["id"].as_str().unwrap()), "{shown}");
}

#[test]
fn a_person_allows_the_connection_and_it_reaches_the_origin() {
    let setup = Setup::new("[supervision]\ndeadline_secs = 60\n");
    let mut run = setup.start();
    let Some(approval) = setup.pending(&mut run) else {
        assert!(setup.finish(&mut run).is_none(), "no approval was asked");
        return;
    };
    check_listed(&setup, &approval);
    let id = approval["id"].as_str().unwrap();
    // Nothing reached the origin while the request waited.
    assert_eq!(setup.hits.load(Ordering::SeqCst), 0);

    let out = setup.home.run(&["approve", id]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("allowed"),
        "{}",
        text(&out)
    );

    let done = setup.finish(&mut run).expect("a namespace: it asked");
    assert_eq!(done.outcome("status"), "HTTP/1.1 200 OK", "{}", done.report);
    assert_eq!(done.outcome("body"), "ORIGIN GET /ask HTTP/1.1");
    assert_eq!(setup.hits.load(Ordering::SeqCst), 1);
    assert_eq!(approval["taskId"], done.id.as_str());

    let c = done.connection(&setup.destination());
    assert_eq!(c["decision"], "allow", "{c}");
    assert_eq!(c["decider"], "human", "{c}");
    assert_eq!(c["method"], "GET", "{c}");
    assert_eq!(c["address"], format!("127.0.0.1:{}", setup.port), "{c}");
    assert!(c["received"].as_u64().unwrap() > 0, "{c}");

    let audit = setup.audit(&done.id);
    assert_eq!(audit.len(), 1, "{audit:?}");
    let row = &audit[0];
    assert_eq!(row["decider"], "human", "{row}");
    assert_eq!(row["decision"], "allow", "{row}");
    assert_eq!(row["channel"], "cli", "{row}");
    assert_eq!(row["approvalId"], id, "{row}");
    assert_eq!(row["optionId"], "allow", "{row}");
    let closed = setup.approvals_of(&done.id);
    assert_eq!(closed.len(), 1, "{closed:?}");
    assert_eq!(closed[0]["state"], "allowed", "{closed:?}");
}

#[test]
fn a_person_denies_the_connection_and_nothing_reaches_the_origin() {
    let setup = Setup::new("[supervision]\ndeadline_secs = 60\n");
    let mut run = setup.start();
    let Some(approval) = setup.pending(&mut run) else {
        assert!(setup.finish(&mut run).is_none(), "no approval was asked");
        return;
    };
    check_listed(&setup, &approval);
    let id = approval["id"].as_str().unwrap();

    let out = setup.home.run(&["deny", id, "--reason", "not this host"]);
    assert!(out.status.success(), "{}", text(&out));

    let done = setup.finish(&mut run).expect("a namespace: it asked");
    assert!(
        done.outcome("status").starts_with("HTTP/1.1 403"),
        "{}",
        done.report
    );
    assert_eq!(setup.hits.load(Ordering::SeqCst), 0);

    let c = done.connection(&setup.destination());
    assert_eq!(c["decision"], "deny", "{c}");
    assert_eq!(c["decider"], "human", "{c}");
    assert!(c.get("address").is_none(), "no connection was made: {c}");
    assert!(
        c["reason"].as_str().unwrap().contains("not this host"),
        "{c}"
    );

    let audit = setup.audit(&done.id);
    assert_eq!(audit.len(), 1, "{audit:?}");
    let row = &audit[0];
    assert_eq!(row["decider"], "human", "{row}");
    assert_eq!(row["decision"], "deny", "{row}");
    assert_eq!(row["channel"], "cli", "{row}");
    assert_eq!(row["approvalId"], id, "{row}");
    assert!(
        row["reason"].as_str().unwrap().contains("not this host"),
        "{row}"
    );
    let closed = setup.approvals_of(&done.id);
    assert_eq!(closed.len(), 1, "{closed:?}");
    assert_eq!(closed[0]["state"], "denied", "{closed:?}");
}

/// Revisor as the supervising agent (under another name, so it is not the asking agent):
/// it allows only reads, so it refuses a connection at once, deterministically.
#[test]
fn the_supervising_agent_refuses_the_connection() {
    let setup = Setup::new(&format!(
        "[supervision]\nagent = \"judge\"\nagent_timeout_secs = 15\ndeadline_secs = 20\n\n\
         [agents.judge]\ncommand = {LEGATE:?}\nargs = [\"agent\", \"revisor\"]\n"
    ));
    let mut run = setup.start();
    let Some(done) = setup.finish(&mut run) else {
        return;
    };
    assert!(
        done.outcome("status").starts_with("HTTP/1.1 403"),
        "{}",
        done.report
    );
    assert_eq!(setup.hits.load(Ordering::SeqCst), 0);

    let c = done.connection(&setup.destination());
    assert_eq!(c["decision"], "deny", "{c}");
    assert_eq!(c["decider"], "agent", "{c}");
    assert!(c.get("address").is_none(), "no connection was made: {c}");
    assert!(c["reason"].as_str().unwrap().contains("agent:judge"), "{c}");

    let audit = setup.audit(&done.id);
    assert_eq!(audit.len(), 1, "{audit:?}");
    let row = &audit[0];
    assert_eq!(row["decider"], "agent", "{row}");
    assert_eq!(row["decision"], "deny", "{row}");
    assert_eq!(row["channel"], "agent:judge", "{row}");
    assert_eq!(row["optionId"], "reject", "{row}");
    let closed = setup.approvals_of(&done.id);
    assert_eq!(closed.len(), 1, "{closed:?}");
    assert_eq!(closed[0]["state"], "denied", "{closed:?}");
    assert_eq!(closed[0]["tool"]["destination"], setup.destination());
    assert_eq!(row["approvalId"], closed[0]["id"], "{row}");
}

#[test]
fn the_deadline_refuses_the_connection_nobody_answered() {
    let setup = Setup::new("[supervision]\ndeadline_secs = 1\n");
    let mut run = setup.start();
    let Some(done) = setup.finish(&mut run) else {
        return;
    };
    assert!(
        done.outcome("status").starts_with("HTTP/1.1 403"),
        "{}",
        done.report
    );
    assert_eq!(setup.hits.load(Ordering::SeqCst), 0);

    let c = done.connection(&setup.destination());
    assert_eq!(c["decision"], "deny", "{c}");
    assert_eq!(c["decider"], "deadline", "{c}");
    assert!(c.get("address").is_none(), "no connection was made: {c}");

    let audit = setup.audit(&done.id);
    assert_eq!(audit.len(), 1, "{audit:?}");
    let row = &audit[0];
    assert_eq!(row["decider"], "deadline", "{row}");
    assert_eq!(row["decision"], "deny", "{row}");
    let closed = setup.approvals_of(&done.id);
    assert_eq!(closed.len(), 1, "{closed:?}");
    assert_eq!(closed[0]["state"], "expired", "{closed:?}");
    assert_eq!(row["approvalId"], closed[0]["id"], "{row}");
}
