//! `legate serve` in a test: [`Served`] starts the binary's server on a home, reads its
//! banner (the URLs it serves on) and stops it with SIGTERM when dropped; [`addr_of`] and
//! [`raw`] send one blocking HTTP/1.1 request to it, and [`origin`] is a plain HTTP origin on
//! 127.0.0.1 for the network suites. Owns the process's start and stop and the bytes on the
//! wire; it never checks what the server answered.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `legate serve …`; stopped with SIGTERM when dropped.
#[derive(Debug)]
pub struct Served {
    /// The server process.
    pub child: Child,
    /// What it printed up to and including "Ctrl-C stops the server".
    pub printed: Vec<String>,
}

impl Served {
    /// Starts `bin serve <args>` (`bin` is `env!("CARGO_BIN_EXE_legate")`) with `home` as
    /// `$LEGATE_HOME` and `LEGATE_LOG=warn`, and reads its banner.
    pub fn start(bin: impl AsRef<Path>, home: &Path, args: &[&str]) -> Served {
        let mut command = Command::new(bin.as_ref());
        command
            .arg("serve")
            .args(args)
            .env("LEGATE_HOME", home)
            .env("LEGATE_LOG", "warn")
            .stdin(Stdio::null());
        Served::spawn(&mut command)
    }

    /// Starts `command` (a `legate serve …` a suite built, with the options it needs), its
    /// stdout piped and stderr inherited, and reads its banner.
    pub fn spawn(command: &mut Command) -> Served {
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let printed = banner(&mut child);
        Served { child, printed }
    }

    /// The first URL on the banner line that starts with `prefix`.
    pub fn url(&self, prefix: &str) -> String {
        url_on(&self.printed, prefix)
    }

    /// Stops the server with SIGTERM; its exit status, if it stopped within 10 s.
    pub fn stop(&mut self) -> Option<std::process::ExitStatus> {
        terminate(&mut self.child)
    }
}

/// Stops `child` with SIGTERM; its exit status if it stopped within 10 s, else it is killed.
pub fn terminate(child: &mut Child) -> Option<std::process::ExitStatus> {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.stop();
        }
    }
}

/// Reads a started `legate serve`'s stdout (which must be piped) up to and including
/// "Ctrl-C stops the server", then keeps draining it so the server never blocks on a full
/// pipe; the lines read.
pub fn banner(child: &mut Child) -> Vec<String> {
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut printed = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        let done = line.starts_with("Ctrl-C stops");
        printed.push(line);
        if done {
            break;
        }
    }
    assert!(
        printed.last().is_some_and(|l| l.starts_with("Ctrl-C")),
        "serve stopped early: {printed:?}"
    );
    std::thread::spawn(move || for _ in lines {});
    printed
}

/// The first URL on the banner line (of `printed`) that starts with `prefix`.
pub fn url_on(printed: &[String], prefix: &str) -> String {
    let line = printed
        .iter()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line starting {prefix:?} in {printed:?}"));
    line.split_whitespace()
        .find(|w| w.starts_with("http://") || w.starts_with("https://"))
        .unwrap_or_else(|| panic!("no URL in {line:?}"))
        .to_string()
}

/// `host:port` of an `http://host:port/...` URL.
pub fn addr_of(url: &str) -> String {
    url.trim_start_matches("http://")
        .trim_start_matches("https://")
        .split('/')
        .next()
        .unwrap()
        .to_string()
}

/// The path (and query) of an `http://host:port/...` URL.
pub fn path_of(url: &str) -> String {
    let rest = url.trim_start_matches("http://");
    rest[rest.find('/').unwrap_or(rest.len())..].to_string()
}

/// A raw HTTP/1.1 response: status, lowercased head, body.
#[derive(Debug)]
pub struct Raw {
    /// The status code.
    pub status: u16,
    /// The head, lowercased.
    pub head: String,
    /// The body as sent.
    pub body: String,
}

impl Raw {
    /// The first cookie the response sets, as a `Cookie` header's `name=value`.
    pub fn cookie(&self) -> Option<String> {
        let set = self
            .head
            .lines()
            .find_map(|l| l.strip_prefix("set-cookie: "))?;
        set.split(';').next().map(str::to_string)
    }
}

/// One HTTP/1.1 request's bytes: `Connection: close`, then the `extra` headers, with the
/// `Host` header `host`.
pub fn request_text(
    method: &str,
    path: &str,
    host: &str,
    extra: &[(&str, &str)],
    body: &str,
) -> String {
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in extra {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    request
}

/// Sends one raw HTTP/1.1 request to `addr` with the `Host` header `host`.
pub fn raw(
    addr: &str,
    method: &str,
    path: &str,
    host: &str,
    extra: &[(&str, &str)],
    body: &str,
) -> Raw {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let request = request_text(method, path, host, extra, body);
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    let text = String::from_utf8_lossy(&response).to_string();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {text:?}"));
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    Raw {
        status,
        head: head.to_lowercase(),
        body: body.to_string(),
    }
}

/// A plain HTTP origin on the host's loopback for the network suites: answers every request
/// with `ORIGIN <request line>` and counts the connections it accepted.
pub fn origin() -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::Ordering;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = hits.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            counted.fetch_add(1, Ordering::SeqCst);
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap_or(0) == 1 {
                head.push(byte[0]);
            }
            let line = String::from_utf8_lossy(&head)
                .lines()
                .next()
                .unwrap_or("")
                .to_string();
            let body = format!("ORIGIN {line}");
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (port, hits)
}

/// `legate serve` on a home with its A2A front, and what a client needs to call it: the
/// front's `host:port` and `Bearer <a2a-token>`. The home lives as long as the server.
#[derive(Debug)]
pub struct A2aServed {
    /// The server.
    pub served: Served,
    /// `127.0.0.1:PORT` of the A2A front.
    pub addr: String,
    /// `Bearer <the home's a2a-token>`.
    pub bearer: String,
    _home: crate::cli::CliHome,
}

impl A2aServed {
    /// Serves `home` with `legate serve <args>` and reads the A2A front's address and token.
    pub fn start(home: crate::cli::CliHome, args: &[&str]) -> A2aServed {
        let served = home.serve(args);
        let (addr, bearer) = a2a_access(&served, &home.home());
        A2aServed {
            served,
            addr,
            bearer,
            _home: home,
        }
    }

    /// A JSON-RPC call to the default agent at `/`; the parsed response (which must be a 200).
    pub fn rpc(&self, method: &str, params: serde_json::Value) -> serde_json::Value {
        let body =
            serde_json::json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params});
        let r = raw(
            &self.addr,
            "POST",
            "/",
            &self.addr,
            &[
                ("Content-Type", "application/json"),
                ("A2A-Version", "1.0"),
                ("Authorization", &self.bearer),
            ],
            &body.to_string(),
        );
        assert_eq!(r.status, 200, "{r:?}");
        serde_json::from_str(&r.body).unwrap()
    }

    /// A blocking `SendMessage` of `text` (into task `task_id`, if given); the task it answers.
    pub fn send(&self, message_id: &str, text: &str, task_id: Option<&str>) -> serde_json::Value {
        let mut message = serde_json::json!(
            {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": text}]});
        if let Some(id) = task_id {
            message["taskId"] = serde_json::json!(id);
        }
        let answer = self.rpc("SendMessage", serde_json::json!({"message": message}));
        answer["result"]["task"].clone()
    }
}

/// What a client of `served`'s A2A front needs: the front's `host:port` (from the banner) and
/// `Bearer <home's a2a-token>`.
pub fn a2a_access(served: &Served, home: &Path) -> (String, String) {
    let addr = addr_of(&served.url("Legate A2A server"));
    let token = std::fs::read_to_string(home.join("a2a-token")).unwrap();
    (addr, format!("Bearer {}", token.trim()))
}

/// `legate serve --mcp` on a home, and what a client needs to call it: the front's URL, its
/// `host:port` and the home's `mcp-token`.
#[derive(Debug)]
pub struct McpServed {
    /// The server.
    pub served: Served,
    /// The MCP front's URL, as the banner prints it.
    pub url: String,
    /// The home's `mcp-token`.
    pub token: String,
    /// `127.0.0.1:PORT` of the MCP front.
    pub addr: String,
}

impl McpServed {
    /// Serves `home` with `legate serve <args>` and reads the MCP front's URL and token.
    pub fn start(home: &crate::cli::CliHome, args: &[&str]) -> McpServed {
        let served = home.serve(args);
        let url = served.url("Legate MCP server");
        let token = std::fs::read_to_string(home.home().join("mcp-token"))
            .unwrap()
            .trim()
            .to_string();
        let addr = addr_of(&url);
        McpServed {
            served,
            url,
            token,
            addr,
        }
    }
}
