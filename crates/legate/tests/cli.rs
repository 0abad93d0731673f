//! End-to-end tests of the `legate` binary: real processes, the real revisor agent over ACP,
//! a real SQLite store in a private `$LEGATE_HOME`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_frontkit::cli::{CliHome, task_id, text};
use legate_frontkit::poll::{exit_within, until_cmdline};
use std::path::PathBuf;
use std::process::Child;
use std::time::{Duration, Instant};

const LEGATE: &str = env!("CARGO_BIN_EXE_legate");

/// Starts `legate run "run sleep SECONDS"` and waits until the agent runs that command;
/// the process and the task's id.
fn run_sleeping(home: &CliHome, seconds: &str) -> (Child, String) {
    let child = home.spawn(&["run", &format!("run sleep {seconds}")]);
    let id = home.wait_for_state("working", Duration::from_secs(30));
    let command = format!("sleep {seconds}");
    until_cmdline(&command, true, "the agent never ran its command");
    (child, id)
}

#[test]
fn the_readme_task_completes_with_tool_calls_and_decisions_and_survives_in_the_store() {
    let home = CliHome::new(LEGATE);
    let out = home.run(&[
        "run",
        "write hello.md: # Hello from a delegated agent",
        "run cat hello.md",
        "write ../escape.txt: should be refused",
        "What is in this workspace?",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("✔ allowed"), "{err}");
    assert!(err.contains("⛔ refused"), "{err}");
    assert!(err.contains("refused by the supervisor"), "{err}");
    let id = task_id(&out);

    // A new process reads it back from the store.
    let task = home.show(&id);
    assert_eq!(task["state"], "completed");
    let root = PathBuf::from(task["root"].as_str().unwrap());
    assert!(root.starts_with(home.path().join("home/sandboxes")));
    assert_eq!(
        std::fs::read_to_string(root.join("hello.md")).unwrap(),
        "# Hello from a delegated agent"
    );
    assert!(!root.parent().unwrap().join("escape.txt").exists());
    let result = &task["result"];
    assert_eq!(result["refusals"].as_array().unwrap().len(), 1);
    assert!(result["toolCalls"].as_u64().unwrap() >= 3);
    assert!(
        task["statusMessage"]
            .as_str()
            .unwrap()
            .starts_with("refused by the supervisor: ")
    );

    let events = home.events(&id);
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    let decisions: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["type"] == "permission")
        .collect();
    assert!(decisions.len() >= 3, "{events:?}");
    for d in &decisions {
        let offered: Vec<&str> = d["offered"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        if let Some(chosen) = d["verdict"]["optionId"].as_str() {
            assert!(offered.contains(&chosen), "{d}");
        }
    }
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    assert_eq!(events.first().unwrap()["state"], "submitted");
    assert_eq!(events.last().unwrap()["state"], "completed");

    let human = home.run(&["show", &id[..8]]);
    assert!(human.status.success(), "{}", text(&human));
    assert!(String::from_utf8_lossy(&human.stdout).contains("state    completed"));
}

#[test]
fn bad_input_gets_a_code_and_stores_nothing() {
    let home = CliHome::new(LEGATE);
    let out = home.run(&["run", "--agent", "nobody", "hi"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("AGENT_NOT_FOUND"));

    let missing = home.path().join("missing");
    let out = home.run(&["run", "--cwd", missing.to_str().unwrap(), "hi"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("INVALID_WORKSPACE"));

    let file = home.path().join("file");
    std::fs::write(&file, "x").unwrap();
    let out = home.run(&["run", "--cwd", file.to_str().unwrap(), "hi"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("INVALID_WORKSPACE"));

    let out = home.run(&["run", "   "]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("INVALID_INPUT"));

    assert!(home.tasks_json().is_empty());
    let out = home.run(&["show", "0000"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("TASK_NOT_FOUND"));
}

#[test]
fn a_shared_directory_refuses_shell_commands_and_the_task_still_completes() {
    let home = CliHome::new(LEGATE);
    let shared = home.path().join("project");
    std::fs::create_dir(&shared).unwrap();
    std::fs::write(shared.join("README.md"), "# Project\nhello\n").unwrap();
    let out = home.run(&[
        "run",
        "--cwd",
        shared.to_str().unwrap(),
        "run touch ran.txt",
        "write inside.txt: fine",
        "What is in README?",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(!shared.join("ran.txt").exists());
    assert_eq!(
        std::fs::read_to_string(shared.join("inside.txt")).unwrap(),
        "fine"
    );
    let task = home.show(&task_id(&out));
    assert_eq!(task["workspace"], "shared");
    let refusals = task["result"]["refusals"].as_array().unwrap();
    assert_eq!(refusals.len(), 1, "{task}");
}

#[test]
fn roles_are_listed_and_a_planner_run_is_read_only_and_shows_its_role() {
    let home = CliHome::new(LEGATE);
    std::fs::create_dir_all(home.path().join("home")).unwrap();
    std::fs::write(
        home.path().join("home/legate.toml"),
        "[roles.security-review]\nbase = \"reviewer\"\ninstructions = \"Check access control.\"\n",
    )
    .unwrap();
    let out = home.run(&["roles", "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    let roles: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = roles
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["implementer", "planner", "reviewer", "security-review"]
    );
    assert_eq!(roles[3]["instructionsChars"], 21);
    let table = home.run(&["roles"]);
    assert!(String::from_utf8_lossy(&table.stdout).contains("security-review"));

    let out = home.run(&["run", "--role", "architect", "hi"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("ROLE_NOT_FOUND"));
    let out = home.run(&[
        "run",
        "--role",
        "planner",
        "write a.txt: no",
        "What is here?",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let id = task_id(&out);
    let task = home.show(&id);
    assert_eq!(task["mode"], "read-only", "{task}");
    assert_eq!(task["role"]["name"], "planner", "{task}");
    let shown = home.run(&["show", &id]);
    assert!(String::from_utf8_lossy(&shown.stdout).contains("role     planner"));

    // A bad role stops every command that reads the configuration, naming it.
    std::fs::write(
        home.path().join("home/legate.toml"),
        "[roles.reviewer]\nbase = \"reviewer\"\ninstructions = \"x\"\n",
    )
    .unwrap();
    let out = home.run(&["roles"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        err.contains("CONFIG_INVALID") && err.contains("roles.reviewer"),
        "{err}"
    );
}

#[test]
fn read_only_tasks_change_nothing() {
    let home = CliHome::new(LEGATE);
    let shared = home.path().join("ro");
    std::fs::create_dir(&shared).unwrap();
    let out = home.run(&[
        "run",
        "--read-only",
        "--cwd",
        shared.to_str().unwrap(),
        "write a.txt: no",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(!shared.join("a.txt").exists());
}

#[test]
fn a_context_keeps_its_sandbox_across_processes() {
    let home = CliHome::new(LEGATE);
    let first = home.run(&["run", "--context", "demo", "write notes.txt: one"]);
    assert!(first.status.success(), "{}", text(&first));
    let second = home.run(&["run", "--context", "demo", "read notes.txt"]);
    assert!(second.status.success(), "{}", text(&second));
    assert!(
        String::from_utf8_lossy(&second.stdout).contains("one"),
        "{}",
        text(&second)
    );
    let a = home.show(&task_id(&first));
    let b = home.show(&task_id(&second));
    assert_eq!(a["root"], b["root"]);
    assert_eq!(a["contextId"], "demo");
    let name = PathBuf::from(a["root"].as_str().unwrap());
    assert!(
        name.file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("demo-")
    );
}

#[test]
fn two_processes_run_one_contexts_turns_one_at_a_time() {
    let home = CliHome::new(LEGATE);
    let runs: Vec<Child> = (0..2)
        .map(|_| home.spawn(&["run", "--context", "par", "run sleep 1"]))
        .collect();
    let mut ids = Vec::new();
    for child in runs {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", text(&out));
        ids.push(task_id(&out));
    }
    // (started working, ended) of each task, from its stored events.
    // Time stamps share one format, so they compare as text.
    let span = |id: &str| {
        (
            events_line(&home, id, "working"),
            events_line(&home, id, "completed"),
        )
    };
    let (a, b) = (span(&ids[0]), span(&ids[1]));
    let (first, second) = if a.0 <= b.0 { (a, b) } else { (b, a) };
    assert!(
        first.1 <= second.0,
        "the turns overlapped: {first:?} and {second:?}"
    );
    assert_eq!(home.show(&ids[0])["root"], home.show(&ids[1])["root"]);
}

/// The time stamp of the status event that put task `id` in `state`.
fn events_line(home: &CliHome, id: &str, state: &str) -> String {
    let out = home.run(&["events", id]);
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .find(|l| l.contains(&format!("\"type\":\"status\",\"state\":\"{state}\"")))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap_or_else(|| panic!("task {id} never was {state}"))
        .to_string()
}

#[test]
fn a_kill_9_leaves_the_task_failed_with_server_restarted() {
    let home = CliHome::new(LEGATE);
    let (mut child, id) = run_sleeping(&home, "62.5");
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let task = home.show(&id);
    assert_eq!(task["state"], "failed", "{task}");
    // The agent died with legate; the next start killed what it left running.
    until_cmdline(
        "sleep 62.5",
        false,
        "a process of the dead run outlived recovery",
    );
    assert_eq!(task["error"]["code"], "SERVER_RESTARTED");
    let events = home.events(&id);
    assert_eq!(events.last().unwrap()["error"]["code"], "SERVER_RESTARTED");
}

/// The `status` events in `legate events` output, as JSON.
fn statuses(stdout: &[u8]) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(&l[l.find('{')?..]).ok())
        .filter(|v| v["type"] == "status")
        .collect()
}

#[test]
fn events_follow_prints_a_task_of_another_process_to_its_end() {
    let home = CliHome::new(LEGATE);
    let runner = home.spawn(&["run", "run sleep 1.5", "write done.txt: yes"]);
    let id = home.wait_for_state("working", Duration::from_secs(30));
    let follower = home.spawn(&["events", &id, "--follow"]);
    let out = exit_within(follower, Duration::from_secs(60), "the follower");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let states: Vec<_> = statuses(&out.stdout)
        .iter()
        .map(|s| s["state"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(states.first().map(String::as_str), Some("submitted"));
    assert_eq!(states.last().map(String::as_str), Some("completed"));
    let run = runner.wait_with_output().unwrap();
    assert!(run.status.success(), "{}", text(&run));
    // The whole stream, the same as a plain read of the store.
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).lines().count(),
        home.events(&id).len()
    );

    // A finished task: everything, at once, whatever the cursor.
    let again = exit_within(
        home.spawn(&["events", &id, "--follow", "--after", "100000"]),
        Duration::from_secs(30),
        "a follower past the end",
    );
    assert_eq!(again.status.code(), Some(0), "{}", text(&again));
    assert!(again.stdout.is_empty(), "{}", text(&again));
}

#[test]
fn events_follow_ends_with_server_restarted_when_the_runner_is_killed() {
    let home = CliHome::new(LEGATE);
    let (mut runner, id) = run_sleeping(&home, "63.75");
    let mut follower = home.spawn(&["events", &id, "--follow"]);
    // The follower is following once it has printed the task's first event.
    let mut stdout = std::io::BufReader::new(follower.stdout.take().unwrap());
    let mut first = String::new();
    assert!(std::io::BufRead::read_line(&mut stdout, &mut first).unwrap() > 0);
    let rest = std::thread::spawn(move || {
        let mut rest = Vec::new();
        std::io::Read::read_to_end(&mut stdout, &mut rest).unwrap();
        rest
    });
    runner.kill().unwrap(); // SIGKILL: the runner cannot say anything.
    runner.wait().unwrap();

    let mut out = exit_within(follower, Duration::from_secs(30), "the follower");
    out.stdout = [first.into_bytes(), rest.join().unwrap()].concat();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let last = statuses(&out.stdout).pop().unwrap();
    assert_eq!(last["state"], "failed", "{}", text(&out));
    assert_eq!(last["error"]["code"], "SERVER_RESTARTED", "{}", text(&out));
    assert_eq!(home.show(&id)["error"]["code"], "SERVER_RESTARTED");
    // The follower's recovery also killed what the dead run left running.
    until_cmdline("sleep 63.75", false, "the dead run's command survived");
}

#[test]
fn cancel_from_another_process_ends_the_task_canceled() {
    let home = CliHome::new(LEGATE);
    // Cancelled while the agent runs its command.
    let (child, id) = run_sleeping(&home, "60.375");
    let out = home.run(&["cancel", &id]);
    assert!(out.status.success(), "{}", text(&out));
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_eq!(home.show(&id)["state"], "canceled");
    let again = home.run(&["cancel", &id]);
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("TASK_NOT_CANCELABLE"));
}

#[test]
fn cancel_ends_a_task_that_waits_for_input() {
    let home = CliHome::new(LEGATE);
    std::fs::create_dir_all(home.path().join("home")).unwrap();
    std::fs::write(home.path().join("home/legate.toml"), "[agents.tck]\n").unwrap();
    // The TCK agent asks for input when the prompt's first word says so; `legate run` ends
    // with the task waiting.
    let out = home.run(&["run", "--agent", "tck", "tck-input-required"]);
    let id = task_id(&out);
    assert_eq!(home.show(&id)["state"], "input-required", "{}", text(&out));
    let out = home.run(&["cancel", &id]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("canceled"),
        "{}",
        text(&out)
    );
    assert_eq!(home.show(&id)["state"], "canceled");
}

#[test]
fn a_task_past_its_timeout_fails_with_task_timeout() {
    let home = CliHome::new(LEGATE);
    let started = Instant::now();
    let out = home.run(&["run", "--timeout", "2", "run sleep 61.25"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(started.elapsed() < Duration::from_secs(50));
    let task = home.show(&task_id(&out));
    assert_eq!(task["state"], "failed");
    assert_eq!(task["error"]["code"], "TASK_TIMEOUT");
    // The agent's whole process group went with it, the command it was running included.
    until_cmdline(
        "sleep 61.25",
        false,
        "the agent's command outlived the timeout",
    );
}

#[test]
fn agents_lists_revisor_and_says_it_starts() {
    let home = CliHome::new(LEGATE);
    let out = home.run(&["agents", "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    let rows: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let revisor = rows.iter().find(|r| r["name"] == "revisor").unwrap();
    assert_eq!(revisor["starts"], true, "{revisor}");
    assert_eq!(revisor["default"], true);
    // Landlock is on in Legate's test kernels; LEGATE_NO_LANDLOCK=1 where it is not.
    if std::env::var_os("LEGATE_NO_LANDLOCK").is_none() {
        assert_eq!(revisor["confinement"], "full", "{revisor}");
    }
    for preset in ["claude", "codex", "gemini"] {
        assert!(rows.iter().any(|r| r["name"] == preset));
    }
}

#[test]
fn a_fresh_home_lists_nothing_and_succeeds() {
    let home = CliHome::new(LEGATE);
    let out = home.run(&["tasks"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(out.stdout.is_empty(), "{}", text(&out));
    assert!(home.tasks_json().is_empty());
    let out = home.run(&["usage", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    // Listing makes no store; a task that is not there is still not found.
    assert!(!home.path().join("home/legate.db").exists());
    let out = home.run(&["show", "0000"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("TASK_NOT_FOUND"));
}

#[test]
fn warnings_of_libraries_stay_out_of_run_output_unless_asked_for() {
    let home = CliHome::new(LEGATE);
    let agent = legate_testkit::find_scripted_agent().expect("build legate-scripted-agent first");
    std::fs::create_dir_all(home.path().join("home")).unwrap();
    std::fs::write(
        home.path().join("home/legate.toml"),
        format!(
            "[agents.scripted]\ncommand = {:?}\n",
            agent.display().to_string()
        ),
    )
    .unwrap();
    // JSON that is not JSON-RPC: the ACP SDK warns as it answers it with an error.
    let args = ["run", "--agent", "scripted", "!not-jsonrpc 1", "hello?"];
    let quiet = home.run(&args);
    assert!(quiet.status.success(), "{}", text(&quiet));
    let err = String::from_utf8_lossy(&quiet.stderr);
    // The task's own notice says it; the SDK's warning does not.
    assert!(err.contains("not JSON-RPC Legate can use"), "{err}");
    assert!(!err.contains("agent_client_protocol"), "{err}");

    let loud = home.cmd(&args).env("LEGATE_LOG", "warn").output().unwrap();
    assert!(loud.status.success(), "{}", text(&loud));
    let err = String::from_utf8_lossy(&loud.stderr);
    assert!(err.contains("agent_client_protocol"), "{err}");
}

#[test]
fn invalid_configuration_names_the_key() {
    let home = CliHome::new(LEGATE);
    std::fs::create_dir_all(home.path().join("home")).unwrap();
    std::fs::write(home.path().join("home/legate.toml"), "max_queued = -1\n").unwrap();
    let out = home.run(&["tasks"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("max_queued"),
        "{}",
        text(&out)
    );
}

#[test]
fn required_confinement_is_reported_per_agent_and_the_first_event_says_how_it_is_confined() {
    let home = CliHome::new(LEGATE);
    std::fs::create_dir_all(home.path().join("home")).unwrap();
    std::fs::write(
        home.path().join("home/legate.toml"),
        "confinement = \"required\"\n",
    )
    .unwrap();
    let out = home.run(&["agents", "--no-probe"]);
    assert!(out.status.success(), "{}", text(&out));
    let listing = text(&out);
    assert!(listing.contains("confinement "), "{listing}");
    let out = home.run(&["run", "write a.txt: hello"]);
    assert!(out.status.success(), "{}", text(&out));
    let id = task_id(&out);
    let events = home.events(&id);
    let first = events
        .iter()
        .find(|e| e["type"] == "notice")
        .expect("a workspace event");
    assert!(first.to_string().contains("\"confinement\""), "{first}");
}

#[test]
fn models_are_listed_and_a_saved_preference_selects_an_acp_agents_model() {
    let home = CliHome::new(LEGATE);
    let out = home.run(&["models", "revisor"]);
    assert!(out.status.success(), "{}", text(&out));
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(listed.contains("* revisor-standard"), "{listed}");
    assert!(listed.contains("  revisor-thorough"), "{listed}");

    let out = home.run(&["model", "revisor", "revisor-thorough"]);
    assert!(out.status.success(), "{}", text(&out));
    // Kept in $LEGATE_HOME/models, out of the agent's own HOME.
    let saved = home.path().join("home/models/revisor.json");
    assert!(saved.exists());
    assert!(
        !home
            .path()
            .join("home/agents/revisor/model-selection.json")
            .exists()
    );
    let out = home.run(&["model", "revisor"]);
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.contains("saved preference  revisor-thorough"),
        "{shown}"
    );
    assert!(shown.contains("runs with: revisor-thorough"), "{shown}");

    // A task that names no model runs with the saved preference; one that names a model,
    // with its own.
    let selected = |prompt_args: &[&str]| {
        let mut args = vec!["run"];
        args.extend_from_slice(prompt_args);
        let out = home.run(&args);
        assert!(out.status.success(), "{}", text(&out));
        home.events(&task_id(&out)).into_iter().find_map(|e| {
            e["detail"]["configId"]
                .as_str()
                .map(|_| e["detail"]["model"].clone())
        })
    };
    assert_eq!(
        selected(&["what is here?"]),
        Some(serde_json::json!("revisor-thorough"))
    );
    assert_eq!(
        selected(&["--model", "revisor-standard", "what is here?"]),
        None,
        "the agent's default is already selected: nothing is set"
    );
    // `auto` is a saved Auto: the agent keeps its own choice.
    let out = home.run(&["model", "revisor", "auto"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(selected(&["what is here?"]), None);
    let out = home.run(&["model", "revisor", "--unset"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(!saved.exists());

    let out = home.run(&["model", "nosuch", "x"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("AGENT_NOT_FOUND"));
    let out = home.run(&["model", "revisor", "bad id"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("INVALID_INPUT"));
}

/// What an agent writes cannot act on the terminal of the person reading `legate run` or
/// `legate show` (issue 29, finding 7): a clipboard-write sequence, a bell, a right-to-left
/// override and a newline meant to forge one of Legate's lines are shown, not obeyed.
#[test]
fn an_agents_escape_sequences_reach_no_terminal_raw() {
    let home = CliHome::new(LEGATE);
    let hostile = "a\u{1b}]52;c;eA==\u{7}b\u{202e}Z\u{9b}2J";
    let out = home.run(&["run", &format!("write f.txt: {hostile}"), "recite f.txt"]);
    assert!(out.status.success(), "{}", text(&out));
    let id = task_id(&out);
    let show = home.run(&["show", &id]);
    // JSON keeps the text, escaped: the same value for a program, inert on a terminal.
    let show_json = home.run(&["show", "--json", &id]);
    let tasks_json = home.run(&["tasks", "--json"]);
    let shown: serde_json::Value = serde_json::from_slice(&show_json.stdout).unwrap();
    assert!(
        shown["result"]["text"].as_str().unwrap().contains(hostile),
        "{shown:#}"
    );
    for (what, bytes) in [
        ("run's stdout", &out.stdout),
        ("run's stderr", &out.stderr),
        ("show", &show.stdout),
        ("show --json", &show_json.stdout),
        ("tasks --json", &tasks_json.stdout),
    ] {
        let shown = String::from_utf8_lossy(bytes);
        for raw in ['\u{1b}', '\u{7}', '\u{202e}', '\u{9b}'] {
            assert!(!shown.contains(raw), "{what} passed {raw:?} raw: {shown:?}");
        }
    }
    let answer = String::from_utf8_lossy(&out.stdout);
    assert!(
        answer.contains("a\\u{1b}]52;c;eA==\\u{7}b\\u{202e}Z\\u{9b}2J"),
        "{answer}"
    );
}

/// `legate doctor`: what holds, each problem with its fix; a token file others may read and
/// an invalid configuration fail it, and neither stops the other checks.
#[test]
fn the_doctor_names_each_problem_with_its_fix_and_fails_on_what_breaks_a_promise() {
    use std::os::unix::fs::PermissionsExt;
    let h = CliHome::new(env!("CARGO_BIN_EXE_legate"));
    let out = h.run(&["doctor"]);
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    for line in [
        "✔ configuration",
        "landlock:",
        "namespaces:",
        "limits:",
        "✔ agent revisor: starts",
    ] {
        assert!(shown.contains(line), "{line}: {shown}");
    }
    // A token file anyone may read: a failure naming the file and the fix, never the token.
    let token = h.home().join("mcp-token");
    std::fs::write(&token, "0123456789abcdef-doctor-secret").unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = h.run(&["doctor", "--no-probe", "--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(!text(&out).contains("doctor-secret"));
    let checks: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let failed: Vec<_> = checks.iter().filter(|c| c["status"] == "fail").collect();
    assert_eq!(failed.len(), 1, "{checks:?}");
    assert_eq!(failed[0]["name"], "token file mcp");
    assert!(
        failed[0]["fix"].as_str().unwrap().starts_with("chmod 600"),
        "{checks:?}"
    );
    assert!(
        !checks
            .iter()
            .any(|c| c["name"].as_str().unwrap().starts_with("agent "))
    );
    // An invalid configuration is a failed check; the kernel's are still made.
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    h.configure("max_running = \"many\"\n");
    let out = h.run(&["doctor"]);
    let shown = text(&out);
    assert_eq!(out.status.code(), Some(1), "{shown}");
    assert!(
        shown.contains("✗ configuration:") && shown.contains("fix: fix legate.toml"),
        "{shown}"
    );
    assert!(shown.contains("landlock:"), "{shown}");
}

/// `legate doctor` and warm sessions: none asked for, no check; asked for within
/// `max_idle_sessions` by agents that start, it holds; an agent kept warm that does not start,
/// or more sessions than the idle cap, is a warning with its fix (never a failure: tasks start
/// their agents themselves).
#[test]
fn the_doctor_says_whether_the_warm_sessions_asked_for_can_be_kept() {
    let h = CliHome::new(env!("CARGO_BIN_EXE_legate"));
    let out = h.run(&["doctor", "--no-probe"]);
    assert!(!text(&out).contains("warm sessions"), "{}", text(&out));
    h.configure("max_idle_sessions = 2\n[agents.revisor]\nwarm = 2\n");
    let out = h.run(&["doctor"]);
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    assert!(
        shown.contains("✔ warm sessions: revisor 2 kept ready")
            && shown.contains("2 of max_idle_sessions 2"),
        "{shown}"
    );
    h.configure(
        "max_idle_sessions = 2\n[agents.revisor]\nwarm = 2\n[agents.gone]\ncommand = \"/nonexistent/legate-doctor-agent\"\nwarm = 1\n",
    );
    let out = h.run(&["doctor"]);
    let shown = text(&out);
    assert!(
        out.status.success(),
        "only the default agent's failure fails: {shown}"
    );
    assert!(
        shown.contains("! warm sessions: gone 1, revisor 2 asked for; gone does not start")
            && shown.contains("fix: fix gone (its check above), or set its warm to 0"),
        "{shown}"
    );
    // Not started (`--no-probe`): what the cap allows is still said.
    let out = h.run(&["doctor", "--no-probe", "--json"]);
    let warm: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|c| c["name"] == "warm sessions")
        .collect();
    assert_eq!(warm.len(), 1, "{}", text(&out));
    assert_eq!(warm[0]["status"], "warn", "{warm:?}");
    assert!(
        warm[0]["found"]
            .as_str()
            .unwrap()
            .contains("3 in all, but max_idle_sessions is 2"),
        "{warm:?}"
    );
}

/// The log files: a task that printed a credential leaves none of it in them (even at
/// `trace`, where whole ACP frames are logged), they rotate within `[logs]`' bounds, and
/// `legate logs --task` reads one task's lines back.
#[test]
fn logs_hold_no_credential_rotate_within_their_bounds_and_read_back_by_task() {
    let h = CliHome::with_config(
        env!("CARGO_BIN_EXE_legate"),
        "[logs]\nmax_file_mb = 1\nmax_files = 1\nmax_total_mb = 2\n",
    )
    .env("LEGATE_LOG_FILE", "trace");
    // The prompt holds only halves; the command's output holds the whole token.
    let token = "ghp_R8kq2ZxP0vLm7TnW4sYb9QeHc3UjDf6GaK1o";
    // Each thought is two plan updates of up to 8 KB of trace lines once the plan is long
    // (a field is cut there): three tasks of 80 thoughts pass 2 MiB, and the last of them
    // stays within the two files kept.
    let prompt =
        std::iter::once("run echo ghp_R8kq2ZxP0vLm7TnW4sYb9Q\"\"eHc3UjDf6GaK1o".to_string())
            .chain((0..80).map(|i| format!("think: a step of the plan, number {i}")))
            .collect::<Vec<_>>()
            .join("\n");
    let prompt = prompt.as_str();
    let mut ids = Vec::new();
    for _ in 0..3 {
        let out = h.run(&["run", prompt]);
        assert!(out.status.success(), "{}", text(&out));
        ids.push(task_id(&out));
    }
    let dir = h.home().join("logs");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert!(
        names.len() == 2 && names.contains(&"cli.log".to_string()),
        "{names:?}"
    );
    let mut total = 0;
    let mut redacted = 0;
    for name in &names {
        let body = std::fs::read_to_string(dir.join(name)).unwrap();
        total += body.len();
        assert!(!body.contains(token), "{name} holds the token");
        redacted += body.matches("[REDACTED:github-token]").count();
    }
    assert!(redacted > 0, "the token never reached a log line");
    // Two files: the current one and one rotated, each rotated at 1 MiB (plus its last line).
    assert!(total < 4 << 20, "{total} bytes of logs");
    // One task's lines, read back.
    let last = ids.last().unwrap();
    let out = h.run(&["logs", "--task", &last[..8], "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        lines.iter().any(|l| l["fields"]["message"] == "task ended"),
        "{lines:?}"
    );
    assert!(
        lines.iter().all(|l| l.to_string().contains(last.as_str())),
        "{lines:?}"
    );
    let shown = h.run(&["logs", "--task", last]);
    assert!(text(&shown).contains("task ended"), "{}", text(&shown));
}

/// What an agent says of itself in `initialize` (its name and version) reaches no terminal
/// raw through `legate agents`, as text or as JSON.
#[test]
fn an_agents_self_description_reaches_no_terminal_raw() {
    // An agent whose `initialize` names it with a terminal title, a bell, a right-to-left
    // override and a C1 clear-screen (TOML's own escapes).
    let config = legate_frontkit::cli::scripted_config(&format!(
        "env = {{ {} = \"evil\\u001b]0;pwned\\u0007\\u202e\\u009b2J 1.0\" }}\n",
        legate_testkit::AGENT_INFO_ENV,
    ));
    let home = CliHome::with_config(LEGATE, &config);
    for args in [&["agents"][..], &["agents", "--json"]] {
        let out = home.run(args);
        assert!(out.status.success(), "{}", text(&out));
        let shown = String::from_utf8_lossy(&out.stdout);
        assert!(shown.contains("evil"), "{args:?}: {shown}");
        for raw in ['\u{1b}', '\u{7}', '\u{202e}', '\u{9b}'] {
            assert!(
                !shown.contains(raw),
                "{args:?} passed {raw:?} raw: {shown:?}"
            );
        }
    }
}

/// `legate agents` says which agents keep warm sessions (`[agents.NAME] warm`), and that only
/// the long-lived fronts keep them.
#[test]
fn the_agents_list_says_which_agents_keep_warm_sessions() {
    let home = CliHome::with_config(LEGATE, &legate_frontkit::cli::scripted_config("warm = 2\n"));
    let out = home.run(&["agents", "--no-probe"]);
    assert!(out.status.success(), "{}", text(&out));
    let listing = String::from_utf8_lossy(&out.stdout);
    assert!(
        listing.contains("keeps 2 warm sessions ready under `legate serve` and `legate mcp`"),
        "{listing}"
    );
    let out = home.run(&["agents", "--no-probe", "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    let warm: Vec<(String, u64)> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .map(|a| {
            (
                a["name"].as_str().unwrap().to_owned(),
                a["warm"].as_u64().unwrap(),
            )
        })
        .collect();
    assert!(warm.contains(&("scripted".to_owned(), 2)), "{warm:?}");
    assert!(warm.contains(&("revisor".to_owned(), 0)), "{warm:?}");
}
