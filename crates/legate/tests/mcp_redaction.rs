//! Credential redaction end to end: revisor reads a file of fake credentials in a shared
//! directory (a GitHub token, an AWS key pair, a PEM private key), quotes it in its answer and
//! its tool output, and recites it in 5-byte pieces as answer and reasoning interleaved (so
//! each credential is cut between chunks). None of them may be found in any MCP answer (the
//! official Python client: run, wait, events, status, result, read_result; tests/mcp/
//! redaction_flow.py), in the server's log at debug level, in `legate show` (text and
//! JSON) and `legate events` (at the default log level and at debug), in the dashboard's task page, or in any
//! byte of any file under `$LEGATE_HOME` (the SQLite file, its WAL, side files). Each is
//! replaced by a marker naming its kind, which those answers carry.
//!
//! Needs only `python3` (the pinned `mcp` package is provisioned under the target directory,
//! see `legate_testkit::python`); without it the test says so and skips, except in CI.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_frontkit::cli::CliHome;
use legate_frontkit::served::{A2aServed, addr_of, path_of, raw};
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::path::Path;

const LEGATE: &str = env!("CARGO_BIN_EXE_legate");

/// `n` random characters of `alphabet`, different on every run.
fn random(alphabet: &str, n: usize) -> String {
    let a = alphabet.as_bytes();
    (0..n)
        .map(|i| {
            let mut h = RandomState::new().build_hasher();
            h.write_usize(i);
            a[(h.finish() % a.len() as u64) as usize] as char
        })
        .collect()
}

const ALNUM: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
const B64: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Fake credentials in the detector's formats, each starting with `FAKE` after its prefix, and
/// the file that holds them. Returns the file and every piece that must never show.
fn fake_credentials() -> (String, Vec<String>) {
    let token = format!("{}FAKE{}", "ghp_", random(ALNUM, 32));
    let key_id = format!(
        "{}FAKE{}",
        "AKIA",
        random("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 12)
    );
    let secret_key = format!("FAKE{}", random(B64, 36));
    let label = ["RSA", "PRIVATE", "KEY"].join(" ");
    let body: Vec<String> = (0..5)
        .map(|i| format!("FAKE{i}{}", random(B64, 59)))
        .collect();
    let file = format!(
        "GITHUB_TOKEN={token}\naws_access_key_id = {key_id}\naws_secret_access_key = {secret_key}\n-----BEGIN {label}-----\n{}\n-----END {label}-----\n",
        body.join("\n")
    );
    let mut hidden = vec![token, key_id, secret_key];
    hidden.extend(body);
    (file, hidden)
}

const MARKERS: [&str; 4] = [
    "[REDACTED:github-token]",
    "[REDACTED:aws-access-key-id]",
    "[REDACTED:aws-secret-access-key]",
    "[REDACTED:private-key-block]",
];

/// Fails naming `what` when any credential (or a 16-character piece of one) is in `text`.
fn assert_clean(what: &str, text: &[u8], hidden: &[String]) {
    let text = String::from_utf8_lossy(text);
    for h in hidden {
        for piece in [h.as_str(), &h[h.len() - 16..]] {
            assert!(
                !text.contains(piece),
                "{what} holds a credential piece ({} bytes in)",
                text.find(piece).unwrap_or(0)
            );
        }
    }
}

fn assert_marked(what: &str, text: &[u8]) {
    let text = String::from_utf8_lossy(text);
    for m in MARKERS {
        assert!(text.contains(m), "{what} lacks {m}:\n{text}");
    }
}

/// Every file under `dir`, with its bytes.
fn files(dir: &Path, out: &mut Vec<(String, Vec<u8>)>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            files(&path, out);
        } else if kind.is_file()
            && let Ok(bytes) = std::fs::read(&path)
        {
            out.push((path.display().to_string(), bytes));
        }
    }
}

#[test]
fn credentials_an_agent_prints_are_redacted_everywhere() {
    let Some(python) = legate_testkit::python("mcp") else {
        return;
    };
    let (file, hidden) = fake_credentials();
    let env = CliHome::new(LEGATE).env("LEGATE_LOG", "debug");
    let shared = tempfile::tempdir().unwrap();
    std::fs::write(shared.path().join("notes.txt"), &file).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/redaction_flow.py");
    let out = env
        .program(python)
        .arg(script)
        .arg(LEGATE)
        .arg(shared.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "redaction_flow.py failed:\n{}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value =
        serde_json::from_str(stdout.lines().last().expect("no report")).unwrap();
    assert_eq!(r["state"], "completed", "{r}");
    let id = r["taskId"].as_str().unwrap().to_string();
    // Every MCP answer, and the server's log at debug level (its stderr).
    assert_clean("the MCP answers", &out.stdout, &hidden);
    assert_marked("the MCP answers", &out.stdout);
    assert_clean("the server's debug log", &out.stderr, &hidden);

    // The CLI, at the default log level and at debug.
    let env = env.env_remove("LEGATE_LOG");
    for args in [
        vec!["show", id.as_str()],
        vec!["show", id.as_str(), "--json"],
        vec!["events", id.as_str()],
    ] {
        for level in [None, Some("debug")] {
            let o = match level {
                Some(l) => env.run_with(&args, &[("LEGATE_LOG", l)]),
                None => env.run(&args),
            };
            assert!(o.status.success(), "{args:?}: {o:?}");
            assert_clean(&format!("legate {args:?}"), &o.stdout, &hidden);
            assert_clean(&format!("legate {args:?}'s log"), &o.stderr, &hidden);
        }
    }
    let shown = env.run(&["events", &id]);
    assert_marked("legate events", &shown.stdout);

    // Every byte Legate keeps.
    let mut kept = Vec::new();
    files(&env.home(), &mut kept);
    assert!(
        kept.iter().any(|(p, _)| p.ends_with(".db")),
        "{:?}",
        kept.iter().map(|k| &k.0).collect::<Vec<_>>()
    );
    for (path, bytes) in &kept {
        assert_clean(path, bytes, &hidden);
    }

    // The A2A front's GetTask (history and artifacts) and the dashboard's task page, from one
    // `legate serve`. A caller over A2A reaches only conversations started over A2A: the MCP
    // task is not found there; one started there, whose command prints a credential it
    // assembles (the prompt holds none), is read back redacted.
    let sut = A2aServed::start(env, &["--a2a", "--ui", "--port", "0", "--ui-port", "0"]);
    let other = sut.rpc(
        "GetTask",
        serde_json::json!({"id": id, "historyLength": 100}),
    );
    assert_eq!(other["error"]["code"], -32001, "{other}");
    let key = hidden.iter().find(|h| h.starts_with("AKIA")).unwrap();
    let (head, tail) = key.split_at(8);
    let sent = sut.rpc(
        "SendMessage",
        serde_json::json!({"message": {"messageId": "m-redact", "role": "ROLE_USER",
            "parts": [{"text": format!("run printf '%s%s\\n' {head} {tail} > k.txt\nrecite k.txt")}]}}),
    );
    let a2a_id = sent["result"]["task"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{sent}"));
    let got = sut.rpc(
        "GetTask",
        serde_json::json!({"id": a2a_id, "historyLength": 100}),
    );
    assert_eq!(
        got["result"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{got}"
    );
    let wire = got.to_string();
    assert_clean("the A2A task", wire.as_bytes(), &hidden);
    assert!(wire.contains("[REDACTED:"), "{wire}");
    let line = sut
        .served
        .printed
        .iter()
        .find(|l| l.starts_with("dashboard: "))
        .unwrap()
        .clone();
    let url = line.trim_start_matches("dashboard: ").to_string();
    let ui = addr_of(&url);
    let first = raw(&ui, "GET", &path_of(&url), &ui, &[], "");
    let cookie = first.cookie().unwrap();
    let page = raw(
        &ui,
        "GET",
        &format!("/tasks/{id}"),
        &ui,
        &[("Cookie", &cookie)],
        "",
    );
    assert_eq!(page.status, 200, "{page:?}");
    assert_clean("the dashboard's task page", page.body.as_bytes(), &hidden);
    assert!(page.body.contains("[REDACTED:"), "{}", page.body);
}
