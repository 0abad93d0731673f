//! The permission policy end to end: `legate policy check|explain`, and a real `legate run`
//! in a shared root whose revisor agent asks to run commands, answered by a policy rule.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_frontkit::cli::{CliHome, text};
use std::path::PathBuf;

fn home(config: &str) -> CliHome {
    CliHome::with_config(env!("CARGO_BIN_EXE_legate"), config)
}

/// The shared root `<dir>/project`, created.
fn shared(home: &CliHome) -> PathBuf {
    let shared = home.path().join("project");
    std::fs::create_dir_all(&shared).unwrap();
    shared
}

const POLICY: &str = r#"
[[policy.rules]]
id = "touch-made"
kind = "execute"
program = "touch"
args_prefix = ["made.txt"]
workspace = "shared"
decision = "allow"
reason = "touching made.txt in the shared root is allowed"

[policy]
file = "policy.toml"
"#;

const FILE_RULES: &str = r#"
[[policy.rules]]
id = "no-secrets"
kind = ["edit", "delete", "move"]
paths = ["secrets/**"]
decision = "deny"
reason = "secrets are not edited by agents"
"#;

fn home_with_policy() -> CliHome {
    let home = home(POLICY);
    std::fs::write(home.path().join("home/policy.toml"), FILE_RULES).unwrap();
    home
}

#[test]
fn a_policy_allow_runs_the_named_command_in_a_shared_root_and_nothing_chained() {
    let home = home_with_policy();
    let shared = shared(&home);
    std::fs::create_dir(shared.join("secrets")).unwrap();
    let out = home.run(&[
        "run",
        "--cwd",
        shared.to_str().unwrap(),
        "run touch made.txt",
        "run touch made.txt; touch chained.txt",
        "run touch other.txt",
        "write secrets/key: stolen",
        "write notes.txt: fine",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(shared.join("made.txt").exists(), "{}", text(&out));
    assert!(!shared.join("chained.txt").exists());
    assert!(!shared.join("other.txt").exists());
    assert!(!shared.join("secrets/key").exists());
    assert_eq!(
        std::fs::read_to_string(shared.join("notes.txt")).unwrap(),
        "fine"
    );

    // The decisions are stored with their decider and rule.
    let err = String::from_utf8_lossy(&out.stderr);
    let id = err
        .lines()
        .find(|l| l.starts_with("task "))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap()
        .to_string();
    let events = home.run(&["events", &id]);
    let verdicts: Vec<serde_json::Value> = String::from_utf8_lossy(&events.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(&l[l.find('{')?..]).ok())
        .filter(|e| e["type"] == "permission")
        .map(|e| e["verdict"].clone())
        .collect();
    let by = |rule: Option<&str>| {
        verdicts
            .iter()
            .filter(|v| v["ruleId"].as_str() == rule)
            .map(|v| {
                (
                    v["decider"].as_str().unwrap().to_string(),
                    v["decision"].as_str().unwrap().to_string(),
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(
        by(Some("touch-made")),
        [("policy".into(), "allow".into())],
        "{verdicts:?}"
    );
    assert_eq!(
        by(Some("no-secrets")),
        [("policy".into(), "deny".into())],
        "{verdicts:?}"
    );
    // The chained command and the other one fell to the table, which refuses commands here.
    let table: Vec<_> = by(None);
    assert!(
        table
            .iter()
            .filter(|(d, v)| d == "table" && v == "deny")
            .count()
            >= 2,
        "{verdicts:?}"
    );
}

#[test]
fn without_the_policy_the_same_command_is_refused() {
    let home = home("");
    let shared = shared(&home);
    let out = home.run(&[
        "run",
        "--cwd",
        shared.to_str().unwrap(),
        "run touch made.txt",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(!shared.join("made.txt").exists());
}

#[test]
fn check_lists_the_rules_in_order_inline_first() {
    let home = home_with_policy();
    let out = home.run(&["policy", "check"]);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let made = stdout.find("touch-made").unwrap();
    let secrets = stdout.find("no-secrets").unwrap();
    assert!(made < secrets, "{stdout}");
    let out = home.run(&["policy", "check", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["rules"][0]["id"], "touch-made");
    assert_eq!(json["rules"][1]["paths"][0], "secrets/**");
}

#[test]
fn an_invalid_policy_exits_1_naming_the_rule_and_field_and_legate_will_not_start() {
    let home = home(
        "[[policy.rules]]\nid = \"edits\"\nkind = \"edit\"\ndecision = \"allow\"\nreason = \"widen\"\n",
    );
    let out = home.run(&["policy", "check"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("POLICY_INVALID: rule \"edits\", field decision"),
        "{err}"
    );
    let out = home.run(&["tasks"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("POLICY_INVALID"));

    // A file given with --file is checked alone; an unknown key is refused.
    let file = home.path().join("p.toml");
    std::fs::write(&file, "[[policy.rules]]\nid = \"a\"\nprogramme = \"rm\"\n").unwrap();
    let out = home.run(&["policy", "check", "--file", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("programme"));
}

#[test]
fn explain_names_the_deciding_rule_or_the_table() {
    let home = home_with_policy();
    let shared = shared(&home);
    let explain = |extra: &[&str]| {
        let mut args = vec![
            "policy",
            "explain",
            "--root",
            shared.to_str().unwrap(),
            "--json",
        ];
        args.extend_from_slice(extra);
        let out = home.run(&args);
        assert!(out.status.success(), "{}", text(&out));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let e = explain(&["--kind", "execute", "--command", "touch made.txt"]);
    assert_eq!(
        (e["decider"].as_str(), e["rule_id"].as_str()),
        (Some("policy"), Some("touch-made"))
    );
    assert_eq!(e["decision"], "allow");
    let e = explain(&[
        "--kind",
        "execute",
        "--command",
        "touch made.txt && rm -rf ~",
    ]);
    assert_eq!(
        (e["decider"].as_str(), e["decision"].as_str()),
        (Some("table"), Some("deny"))
    );
    assert!(
        e["skipped"][0]["why"].as_str().unwrap().contains("plain"),
        "{e}"
    );
    let e = explain(&["--kind", "edit", "--path", "secrets/a", "--path", "ok.txt"]);
    assert_eq!(e["rule_id"], "no-secrets");
    let e = explain(&[
        "--kind",
        "execute",
        "--command",
        "touch made.txt",
        "--workspace",
        "sandbox",
    ]);
    assert_eq!(
        e["decider"], "table",
        "the rule names the shared workspace only: {e}"
    );
    let out = home.run(&[
        "policy",
        "explain",
        "--kind",
        "execute",
        "--command",
        "touch made.txt",
        "--root",
        shared.to_str().unwrap(),
    ]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("decided by: rule \"touch-made\""),
        "{}",
        text(&out)
    );
}
