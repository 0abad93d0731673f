//! The wire tap from the binary (issue 34): `legate run` on the scripted agent with `tap =
//! true` (or `--tap`), then `legate tap ID` prints the ACP frames both ways; a task that was
//! not tapped says `TAP_OFF`; a credential the agent prints is redacted before it is stored
//! (the store's own rows are read too); and a chatty agent past a small `[tap] max_task_mb`
//! leaves at most the cap of frames and one marker saying what was dropped. Frames outside
//! the prompt are the task's too: the model set before it (`session/set_config_option`), and
//! for a remote agent (a second `legate serve`) the card fetch and the token check.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_frontkit::cli::{CliHome, scripted_config, task_id, text};
use legate_frontkit::fleet::Fleet;
use serde_json::Value;

const LEGATE: &str = env!("CARGO_BIN_EXE_legate");

/// `scripted` tapped by its configuration, and `plain`, the same agent untapped; then `extra`.
fn home(extra: &str) -> CliHome {
    let agent = legate_testkit::find_scripted_agent().expect("build legate-scripted-agent");
    let config = scripted_config(&format!(
        "tap = true\n[agents.plain]\ncommand = {:?}\n{extra}",
        agent.display().to_string()
    ));
    CliHome::with_config(LEGATE, &config)
}

/// Runs `prompt` on `agent` (with `flags` before it) and returns the task's id.
fn run(h: &CliHome, agent: &str, flags: &[&str], prompt: &str) -> String {
    let mut args = vec!["run", "--agent", agent];
    args.extend_from_slice(flags);
    args.push(prompt);
    let out = h.run(&args);
    assert!(out.status.success(), "{}", text(&out));
    task_id(&out)
}

/// `legate tap ID --json`: the frames.
fn frames(h: &CliHome, id: &str) -> Vec<Value> {
    let out = h.run(&["tap", id, "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The frames going `direction` whose JSON-RPC `method` is `method`.
fn calls<'a>(frames: &'a [Value], direction: &str, method: &str) -> Vec<&'a Value> {
    frames
        .iter()
        .filter(|f| f["direction"] == direction && f["protocol"] == "acp")
        .filter(|f| {
            serde_json::from_str::<Value>(f["frame"].as_str().unwrap())
                .is_ok_and(|m| m["method"] == method)
        })
        .collect()
}

#[test]
fn a_tapped_task_shows_its_acp_frames_both_ways_and_an_untapped_one_says_tap_off() {
    let h = home("");
    let id = run(&h, "scripted", &[], "!say hello through the tap");
    let got = frames(&h, &id);
    for method in ["initialize", "session/new", "session/prompt"] {
        assert_eq!(
            calls(&got, "to-agent", method).len(),
            1,
            "{method}: {got:#?}"
        );
    }
    let updates = calls(&got, "from-agent", "session/update");
    assert!(
        updates.iter().any(|f| f["frame"]
            .as_str()
            .unwrap()
            .contains("hello through the tap")),
        "{updates:#?}"
    );
    // The agent's answers to Legate's requests come back too (initialize's, at least).
    assert!(
        got.iter().any(|f| f["direction"] == "from-agent"
            && f["frame"].as_str().unwrap().contains("\"result\"")),
        "{got:#?}"
    );
    // Numbered from 1, in order, without gaps.
    let seqs: Vec<u64> = got.iter().map(|f| f["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=got.len() as u64).collect::<Vec<_>>());

    // The terminal form: one line a frame, an arrow for each way.
    let shown = h.run(&["tap", &id[..8]]);
    assert!(shown.status.success(), "{}", text(&shown));
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert_eq!(shown.lines().count(), got.len(), "{shown}");
    assert!(
        shown.contains(" → acp {") && shown.contains(" ← acp {"),
        "{shown}"
    );
    // Following a task that ended prints the same and ends.
    let followed = h.run(&["tap", &id, "--follow"]);
    assert!(followed.status.success(), "{}", text(&followed));
    assert_eq!(String::from_utf8_lossy(&followed.stdout), shown);

    // Not tapped: no frames, and a stable code that says why.
    let plain = run(&h, "plain", &[], "!say not tapped");
    let out = h.run(&["tap", &plain]);
    assert!(!out.status.success(), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("TAP_OFF") && err.contains("not tapped"),
        "{err}"
    );
    assert!(out.stdout.is_empty(), "{}", text(&out));

    // The same agent, tapped by the task's own ask.
    let asked = run(&h, "plain", &["--tap"], "!say tapped on request");
    let got = frames(&h, &asked);
    assert_eq!(
        calls(&got, "to-agent", "session/prompt").len(),
        1,
        "{got:#?}"
    );
}

#[test]
fn a_credential_the_agent_sends_is_redacted_before_the_frame_is_stored() {
    let h = home("");
    let token = "ghp_R8kq2ZxP0vLm7TnW4sYb9QeHc3UjDf6GaK1o";
    // The prompt holds only halves; the command's output, in the agent's frames, the whole.
    let id = run(
        &h,
        "scripted",
        &[],
        "run echo ghp_R8kq2ZxP0vLm7TnW4sYb9Q\"\"eHc3UjDf6GaK1o",
    );
    let got = frames(&h, &id);
    let all = serde_json::to_string(&got).unwrap();
    assert!(!all.contains(token), "the token was printed");
    assert!(
        got.iter().any(|f| f["direction"] == "from-agent"
            && f["frame"]
                .as_str()
                .unwrap()
                .contains("[REDACTED:github-token]")),
        "{got:#?}"
    );
    // The store's own rows, and every byte of its files.
    let db = rusqlite::Connection::open(h.home().join("legate.db")).unwrap();
    let stored: Vec<String> = db
        .prepare("SELECT frame FROM tap_frames WHERE task_id = ?1")
        .unwrap()
        .query_map([&id], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(stored.len(), got.len());
    assert!(stored.iter().all(|f| !f.contains(token)));
    assert!(stored.iter().any(|f| f.contains("[REDACTED:github-token]")));
    drop(db);
    for entry in std::fs::read_dir(h.home()).unwrap() {
        let entry = entry.unwrap();
        if entry.file_name().to_string_lossy().starts_with("legate.db") {
            let bytes = std::fs::read(entry.path()).unwrap();
            assert!(
                !bytes.windows(token.len()).any(|w| w == token.as_bytes()),
                "{} holds the token",
                entry.path().display()
            );
        }
    }
}

#[test]
fn a_chatty_agent_past_the_cap_leaves_the_cap_and_one_marker() {
    const CAP: usize = 1 << 20;
    let h = home("[tap]\nmax_task_mb = 1\n");
    // About 200 bytes a frame: 20,000 chunks are about 4 MiB of frames.
    let id = run(&h, "scripted", &[], "!chunks 20000");
    let got = frames(&h, &id);
    let (markers, kept): (Vec<&Value>, Vec<&Value>) =
        got.iter().partition(|f| f["direction"] == "marker");
    let bytes: usize = kept
        .iter()
        .map(|f| f["frame"].as_str().unwrap().len())
        .sum();
    assert!(
        bytes <= CAP,
        "{bytes} bytes of frames kept past a cap of {CAP}"
    );
    assert!(bytes > CAP / 2, "only {bytes} bytes kept");
    assert_eq!(markers.len(), 1, "{markers:#?}");
    let marker = markers[0];
    let dropped = marker["dropped"].as_u64().unwrap();
    assert!(dropped > 10_000, "{marker}");
    assert!(
        marker["frame"]
            .as_str()
            .unwrap()
            .contains(&format!("{dropped} later frames")),
        "{marker}"
    );
    // The marker comes after every frame kept.
    assert_eq!(got.last().unwrap()["direction"], "marker", "{marker}");
}

#[test]
fn the_model_set_before_the_prompt_is_in_the_tap() {
    let h = home("");
    let id = run(
        &h,
        "scripted",
        &["--model", "revisor-thorough"],
        "!say with a model",
    );
    let got = frames(&h, &id);
    let set = calls(&got, "to-agent", "session/set_config_option");
    assert_eq!(set.len(), 1, "{got:#?}");
    assert!(
        set[0]["frame"]
            .as_str()
            .unwrap()
            .contains("revisor-thorough"),
        "{set:#?}"
    );
    // Its answer (the options as they now are) comes back, before the prompt is sent.
    let seq = |f: &Value| f["seq"].as_u64().unwrap();
    let prompt = calls(&got, "to-agent", "session/prompt");
    assert_eq!(prompt.len(), 1, "{got:#?}");
    let answered = got.iter().find(|f| {
        f["direction"] == "from-agent"
            && seq(f) > seq(set[0])
            && f["frame"].as_str().unwrap().contains("configOptions")
    });
    assert!(
        answered.is_some_and(|a| seq(a) < seq(prompt[0])),
        "{got:#?}"
    );
    // A task of the same agent with the agent's own model sets nothing.
    let id = run(&h, "scripted", &[], "!say no model");
    assert!(
        calls(&frames(&h, &id), "to-agent", "session/set_config_option").is_empty(),
        "a model was set"
    );
}

#[test]
fn a_remote_tapped_task_shows_its_card_fetch_and_token_check() {
    // The front's `back` agent (the back's revisor over A2A) is tapped.
    let fleet = Fleet::start(LEGATE, "tap = true\n");
    let out = fleet
        .front
        .cli(&["run", "--agent", "back", "what is here?"]);
    assert!(out.status.success(), "{}", text(&out));
    let id = task_id(&out);
    let out = fleet.front.cli(&["tap", &id, "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    let got: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let a2a = |direction: &str| -> Vec<String> {
        got.iter()
            .filter(|f| f["direction"] == direction && f["protocol"] == "a2a")
            .map(|f| f["frame"].as_str().unwrap().to_owned())
            .collect()
    };
    let sent = a2a("to-agent");
    let read = a2a("from-agent");
    let card_url = format!(
        "GET http://{}/agents/revisor/.well-known/agent-card.json",
        fleet.back.a2a
    );
    assert_eq!(sent.first(), Some(&card_url), "{got:#?}");
    // The card, as the back served it, is the first answer; then the token check.
    let card: Value = serde_json::from_str(read.first().unwrap()).unwrap();
    assert!(card["supportedInterfaces"].is_array(), "{card}");
    assert!(
        sent.get(1)
            .is_some_and(|f| f.contains("legate-token-check")),
        "{sent:#?}"
    );
    assert!(
        read.get(1).is_some_and(|f| f.starts_with("HTTP ")),
        "{read:#?}"
    );
    // Then the task's own requests.
    assert!(
        sent.iter().skip(2).any(|f| f.contains("\"method\":\"Send")),
        "{sent:#?}"
    );
    // The bearer token travels in a header, which is never recorded.
    let token = fleet.back.bearer.trim_start_matches("Bearer ");
    let all = serde_json::to_string(&got).unwrap();
    assert!(!all.contains(token), "the back's token is in the tap");
}
