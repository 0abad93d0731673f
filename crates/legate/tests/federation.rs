//! Federation, end to end: two real `legate serve` processes on 127.0.0.1, the front
//! configured with the back's revisor as a remote agent (`kind = "a2a"`), each with its own
//! home and token (the harness is the front kit's `fleet`). The acceptance tests of issue 15: a task through
//! the front streams every event the back stored; cancel reaches the back; `kill -9` of the
//! front mid-task, then a restart, ends the task with the back's result; a copy task run
//! remotely is reviewed and integrated on the front. The foreign agent (the official Python
//! SDK) is `federation_foreign.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_frontkit::fleet::{Fleet, GATED, Node, open_gate, wait_gate};
use legate_frontkit::poll;
use legate_frontkit::sse::{SseStream, frame_kind, frame_state};
use legate_testkit::git;
use serde_json::{Value, json};
use std::time::Duration;

const LEGATE: &str = env!("CARGO_BIN_EXE_legate");

/// The labels of a stream's content frames (`message`, `thought`, `tool_call`,
/// `tool_call_update`, `plan`), in order. Not `permission`: the back's supervisor decided
/// those, and a decision is not the front's to relay as its own (docs/permissions.md).
fn kinds(stream: &SseStream) -> Vec<String> {
    stream
        .frames
        .iter()
        .filter_map(|f| frame_kind(f).map(str::to_owned))
        .filter(|k| k != "permission")
        .collect()
}

/// `relayed` is `original` but for plans: a relay that fell behind skips a plan a later one
/// superseded (docs/architecture.md, "Plans in proportion to their change"), so every other
/// kind is the same, in order (runs of one kind as one), and the plans relayed are at most the
/// original's and at least one.
fn same_but_superseded_plans(relayed: &[String], original: &[String]) {
    let others = |kinds: &[String]| -> Vec<String> {
        let mut k: Vec<String> = kinds.iter().filter(|k| *k != "plan").cloned().collect();
        k.dedup();
        k
    };
    let plans = |kinds: &[String]| kinds.iter().filter(|k| *k == "plan").count();
    assert_eq!(
        others(relayed),
        others(original),
        "{relayed:?} against {original:?}"
    );
    assert!(
        (1..=plans(original)).contains(&plans(relayed)),
        "{relayed:?} against {original:?}"
    );
}

/// The texts of a stream's `message` frames, in order.
fn messages(stream: &SseStream) -> Vec<String> {
    stream
        .frames
        .iter()
        .filter(|f| frame_kind(f) == Some("message"))
        .filter_map(|f| {
            f["statusUpdate"]["status"]["message"]["parts"][0]["text"]
                .as_str()
                .map(str::to_owned)
        })
        .collect()
}

/// The id of the task a stream's first frame (the task itself) names.
fn first_task_id(stream: &mut SseStream) -> String {
    let first = stream.next().expect("an empty stream");
    first["task"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("the first frame is not the task: {first}"))
        .to_owned()
}

/// The remote task id the front stored on its task (`remote.taskId`).
fn remote_id(front: &Node, id: &str) -> String {
    let task = front.show(id);
    task["remote"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("no remote on the front's task: {task}"))
        .to_owned()
}

/// Waits until the front has stored the remote task on its own (the driver records it before
/// it relays anything), and returns the remote id.
fn until_remote(front: &Node, id: &str) -> String {
    poll::until(
        Duration::from_secs(60),
        "the front to record the remote task",
        || {
            front.show(id)["remote"]["taskId"]
                .as_str()
                .map(str::to_owned)
        },
    )
}

#[test]
fn a_revisor_task_through_the_front_streams_every_event_the_back_stored() {
    let fleet = Fleet::start(LEGATE, "");
    let mut caller = fleet.front.stream(
        "back",
        "fed-1",
        &format!("{GATED}\nwrite notes.md: # Notes"),
    );
    let id = first_task_id(&mut caller);
    wait_gate(&fleet.back);
    let rid = until_remote(&fleet.front, &id);
    // The back's own view of the same task, replayed from its store and then live.
    let mut direct = fleet
        .back
        .call_stream("revisor", "SubscribeToTask", json!({"id": rid}));
    open_gate(&fleet.back, "go");
    caller.drain();
    direct.drain();

    let last = caller.frames.last().unwrap();
    assert_eq!(
        frame_state(last),
        Some("TASK_STATE_COMPLETED"),
        "{:?}",
        caller.frames
    );
    // What the caller saw through one hop is what the back's own front shows of its task:
    // every content update, in order, with the same texts.
    let back_kinds = kinds(&direct);
    assert!(
        back_kinds.contains(&"tool_call".to_owned()),
        "{back_kinds:?}"
    );
    same_but_superseded_plans(&kinds(&caller), &back_kinds);
    assert_eq!(messages(&caller), messages(&direct));
    assert!(
        messages(&caller).iter().any(|m| m.contains("released: go")),
        "{:?}",
        caller.frames
    );
    // And what the front stored is what the back stored, kind for kind, for everything the
    // agent said or did (statuses, notices, sessions and file accesses are each server's own;
    // permission decisions the back's), but for plans superseded while the front's relay was
    // behind; the last plan is the same.
    // A run of message chunks is one run of message lines on the other side, so runs of one
    // kind are compared as one.
    let content = |events: Vec<Value>| -> Vec<String> {
        let mut kinds: Vec<String> = events
            .iter()
            .filter_map(|e| e["type"].as_str())
            .filter(|t| {
                matches!(
                    *t,
                    "message"
                        | "thought"
                        | "tool_call"
                        | "tool_call_update"
                        | "plan"
                        | "attachment"
                )
            })
            .map(str::to_owned)
            .collect();
        kinds.dedup();
        kinds
    };
    let (back_events, front_events) = (fleet.back.events(&rid), fleet.front.events(&id));
    let last_plan = |events: &[Value]| {
        events
            .iter()
            .rev()
            .find(|e| e["type"] == "plan")
            .map(|e| e["entries"].clone())
    };
    assert!(
        last_plan(&back_events).is_some_and(|e| e.as_array().is_some_and(|a| !a.is_empty())),
        "{back_events:?}"
    );
    assert_eq!(last_plan(&front_events), last_plan(&back_events));
    let back_stored = content(back_events);
    let front_stored = content(front_events);
    assert!(!back_stored.is_empty());
    same_but_superseded_plans(&front_stored, &back_stored);
    // The remote task is stored on the local one, and both ended the same way.
    let task = fleet.front.show(&id);
    assert_eq!(task["state"], "completed", "{task}");
    assert_eq!(task["agent"], "back", "{task}");
    assert!(
        task["remote"]["url"]
            .as_str()
            .unwrap()
            .starts_with(&format!("http://{}/", fleet.back.a2a)),
        "{task}"
    );
    let back = fleet.back.show(&rid);
    assert_eq!(back["state"], "completed");
    // The answer is the back's (its workspace's path hidden: issue 29, finding 8), and so
    // is the usage it reported, counted as local usage.
    let back_root = back["root"].as_str().unwrap();
    assert_eq!(
        task["result"]["text"].as_str().unwrap(),
        back["result"]["text"]
            .as_str()
            .unwrap()
            .replace(back_root, "<workspace>")
    );
    assert_eq!(task["usage"], back["usage"], "{task}");
}

#[test]
fn cancel_through_the_front_reaches_the_back() {
    let fleet = Fleet::start(LEGATE, "");
    let mut caller = fleet.front.stream("back", "fed-cancel", GATED);
    let id = first_task_id(&mut caller);
    wait_gate(&fleet.back);
    let rid = until_remote(&fleet.front, &id);

    let canceled = fleet.front.call("back", "CancelTask", json!({"id": id}));
    assert!(canceled.get("error").is_none(), "{canceled}");
    caller.drain();
    assert_eq!(
        frame_state(caller.frames.last().unwrap()),
        Some("TASK_STATE_CANCELED"),
        "{:?}",
        caller.frames
    );
    // The back's task ends canceled: its follower returns once it ended.
    fleet.back.follow(&rid);
    let back = fleet.back.show(&rid);
    assert_eq!(back["state"], "canceled", "{back}");
    assert_eq!(fleet.front.show(&id)["state"], "canceled");
}

#[test]
fn kill_9_of_the_front_mid_task_then_a_restart_ends_with_the_backs_result() {
    let mut fleet = Fleet::start(LEGATE, "");
    let mut caller = fleet.front.stream("back", "fed-kill", GATED);
    let id = first_task_id(&mut caller);
    wait_gate(&fleet.back);
    let rid = until_remote(&fleet.front, &id);

    fleet.front.kill_9();
    drop(caller);
    // The back keeps working on its task while no front listens.
    assert_eq!(fleet.back.show(&rid)["state"], "working");
    fleet.front.restart();
    open_gate(&fleet.back, "after-restart");

    fleet.front.follow(&id);
    let task = fleet.front.show(&id);
    assert_eq!(task["state"], "completed", "{task}");
    let text = task.to_string();
    assert!(!text.contains("SERVER_RESTARTED"), "{task}");
    assert!(text.contains("released: after-restart"), "{task}");
    assert_eq!(task["remote"]["taskId"], rid.as_str());
    assert_eq!(fleet.back.show(&rid)["state"], "completed");
    // The restarted front serves the finished task like any other.
    let got = fleet.front.call("back", "GetTask", json!({"id": id}));
    assert_eq!(
        got["result"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{got}"
    );
}

const CRITERIA: &str = r#"[
  {"id": "greets", "description": "the greeting says hi",
   "check": {"kind": "file-contains", "path": "src/greeting.txt", "text": "hi world"}}
]"#;

const REVIEWS: &str = r#"[
  {"criterionId": "greets", "verdict": "passed", "path": "src/greeting.txt", "line": 1,
   "quote": "hi world", "explanation": "the first line now says hi"}
]"#;

#[test]
fn a_copy_task_run_remotely_is_reviewed_and_integrated_on_the_front() {
    let fleet = Fleet::start(LEGATE, "");
    let base = fleet.base();
    let project = base.join("project");
    std::fs::create_dir_all(project.join("src")).unwrap();
    git(&project, &["init", "-q"]);
    std::fs::write(
        project.join("src/greeting.txt"),
        "hello world\nsecond line\n",
    )
    .unwrap();
    std::fs::write(project.join("README.md"), "# Project\n").unwrap();
    git(&project, &["add", "-A"]);
    git(&project, &["commit", "-q", "-m", "init"]);
    // Never committed: the local secret preflight keeps it from ever leaving this machine.
    std::fs::write(project.join(".env"), "SECRET=do-not-send\n").unwrap();
    let criteria = base.join("criteria.json");
    std::fs::write(&criteria, CRITERIA).unwrap();
    let reviews = base.join("reviews.json");
    std::fs::write(&reviews, REVIEWS).unwrap();
    let front = &fleet.front;

    let run = front.cli(&[
        "run",
        "--agent",
        "back",
        "--copy",
        project.to_str().unwrap(),
        "--criteria",
        criteria.to_str().unwrap(),
        "replace src/greeting.txt: hello => hi",
    ]);
    assert!(run.status.success(), "{run:?}");
    let err = String::from_utf8_lossy(&run.stderr);
    let id = err
        .lines()
        .find(|l| l.starts_with("task "))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap_or_else(|| panic!("no task line: {err}"))
        .to_owned();
    // The work ran on the back, on its own fresh copy; the original is untouched.
    let rid = remote_id(front, &id);
    assert_eq!(fleet.back.show(&rid)["state"], "completed");
    // Nothing the back answers names where it keeps things (issue 29, finding 8): not its
    // home, not the copy beneath it; and so nothing the front relayed does either.
    let back_home = fleet.back.home().to_string_lossy().into_owned();
    let answers = [
        fleet.back.call(
            "revisor",
            "GetTask",
            json!({"id": rid, "historyLength": 1000}),
        ),
        fleet.back.call(
            "revisor",
            "ListTasks",
            json!({"historyLength": 1000, "includeArtifacts": true}),
        ),
    ];
    for answer in answers {
        let text = answer.to_string();
        assert!(answer["result"].is_object(), "{text}");
        assert!(!text.contains(&back_home), "the back's home leaks: {text}");
    }
    let relayed = serde_json::to_string(&front.events(&id)).unwrap();
    assert!(
        !relayed.contains(&back_home),
        "the back's home reached the front: {relayed}"
    );
    assert_eq!(
        std::fs::read(project.join("src/greeting.txt")).unwrap(),
        b"hello world\nsecond line\n"
    );

    let stat = front.cli(&["diff", "--json", &id]);
    assert!(stat.status.success(), "{stat:?}");
    let preview: Value = serde_json::from_slice(&stat.stdout).unwrap();
    assert_eq!(preview["summary"]["filesChanged"], 1, "{preview}");
    let sha = preview["sha256"].as_str().unwrap().to_owned();
    let diff = front.cli(&["diff", &id]);
    let patch = String::from_utf8_lossy(&diff.stdout);
    assert!(patch.contains("-hello world"), "{patch}");
    assert!(patch.contains("+hi world"), "{patch}");

    let verify = front.cli(&[
        "verify",
        &id,
        "--review",
        reviews.to_str().unwrap(),
        "--sha256",
        &sha,
    ]);
    assert!(verify.status.success(), "{verify:?}");
    let test = front.cli(&[
        "test",
        &id,
        "--",
        "grep",
        "-q",
        "hi world",
        "src/greeting.txt",
    ]);
    assert!(test.status.success(), "{test:?}");
    let integrate = front.cli(&["integrate", &id, "--sha256", &sha]);
    assert!(integrate.status.success(), "{integrate:?}");

    assert_eq!(
        std::fs::read(project.join("src/greeting.txt")).unwrap(),
        b"hi world\nsecond line\n"
    );
    assert_eq!(
        git(
            &project,
            &["status", "--porcelain", "--untracked-files=all"]
        ),
        " M src/greeting.txt\n?? .env\n"
    );
    // The secret never reached the back: not in its store, not in any file it keeps.
    assert!(
        !contains_anywhere(&fleet.back.home(), b"do-not-send"),
        "the secret reached the back"
    );
}

/// Whether any regular file beneath `dir` contains `needle`.
fn contains_anywhere(dir: &std::path::Path, needle: &[u8]) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    entries.flatten().any(|e| {
        let p = e.path();
        match e.file_type() {
            Ok(t) if t.is_dir() => contains_anywhere(&p, needle),
            Ok(t) if t.is_file() => std::fs::read(&p)
                .map(|b| b.windows(needle.len()).any(|w| w == needle))
                .unwrap_or(false),
            _ => false,
        }
    })
}

/// A long stream from the back (a few hundred thoughts, each instruction also re-sending the
/// revisor's whole plan twice, so the bytes grow with the square of the count) reaches the
/// front's caller whole, in order, and ends `completed`.
#[test]
fn a_long_stream_of_thoughts_through_the_front_arrives_whole_and_ends() {
    const N: usize = 200;
    let fleet = Fleet::start(LEGATE, "");
    let prompt: String = (0..N).map(|i| format!("think: thought {i}\n")).collect();
    let mut caller = fleet.front.stream("back", "fed-long", &prompt);
    let id = first_task_id(&mut caller);
    caller.drain();
    let thoughts: Vec<String> = caller
        .frames
        .iter()
        .filter(|f| frame_kind(f) == Some("thought"))
        .map(|f| {
            f["statusUpdate"]["status"]["message"]["parts"][0]["text"]
                .as_str()
                .unwrap_or("")
                .to_owned()
        })
        .collect();
    let expected: Vec<String> = (0..N).map(|i| format!("thought {i}")).collect();
    assert_eq!(thoughts, expected);
    assert_eq!(
        frame_state(caller.frames.last().unwrap()),
        Some("TASK_STATE_COMPLETED"),
        "{:?}",
        caller.frames.last()
    );
    // Plans crossed the hop as what changed (issue 33) and were rebuilt whole: each the front
    // stored is one the back stored, in order (a relay that fell behind skips superseded
    // ones), entry for entry, down to the last.
    let plans = |events: Vec<Value>| -> Vec<Value> {
        events
            .into_iter()
            .filter(|e| e["type"] == "plan")
            .map(|e| e["entries"].clone())
            .collect()
    };
    let back_plans = plans(fleet.back.events(&remote_id(&fleet.front, &id)));
    let front_plans = plans(fleet.front.events(&id));
    assert_eq!(back_plans.len(), 1 + 2 * (N + 1));
    assert_eq!(front_plans.last(), back_plans.last());
    let mut rest = back_plans.iter();
    for p in &front_plans {
        assert!(rest.any(|b| b == p), "a plan the back never stored: {p}");
    }
}
