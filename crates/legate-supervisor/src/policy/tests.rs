#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::Preset;
use legate_core::{Boundary, OptionKind, PermissionOption};
use serde_json::json;
use std::path::{Path, PathBuf};

mod props;
mod shells;

pub(super) fn claude_opts() -> Vec<PermissionOption> {
    [
        ("allow_always", OptionKind::AllowAlways),
        ("allow", OptionKind::AllowOnce),
        ("reject", OptionKind::RejectOnce),
    ]
    .iter()
    .map(|(id, kind)| PermissionOption {
        id: id.to_string(),
        name: id.to_string(),
        kind: *kind,
    })
    .collect()
}

pub(super) fn policy(text: &str) -> Policy {
    let rules = parse_file(text).unwrap();
    Policy::from_tables(Vec::new(), rules).unwrap()
}

pub(super) fn error(text: &str) -> PolicyError {
    let rules = match parse_file(text) {
        Ok(rules) => rules,
        Err(e) => return e,
    };
    Policy::from_tables(Vec::new(), rules).unwrap_err()
}

pub(super) fn shared(root: &Path) -> Supervision {
    let boundary = Boundary {
        root: std::fs::canonicalize(root).unwrap(),
        owned: false,
        allow_execute: false,
    };
    Supervision::new(boundary, TaskMode::Write, Preset::claude())
}

/// A sandbox Legate owns at `root`.
pub(super) fn sandbox(root: &Path) -> Supervision {
    let mut s = shared(root);
    s.boundary.owned = true;
    s.workspace = WorkspaceKind::Sandbox;
    s
}

pub(super) fn execute(raw: serde_json::Value) -> PermissionRequest {
    PermissionRequest {
        tool_call_id: "t1".into(),
        title: "a command".into(),
        tool_kind: ToolKind::Execute,
        locations: vec![],
        raw_input: Some(raw),
        options: claude_opts(),
    }
}

fn edit(paths: &[&str]) -> PermissionRequest {
    PermissionRequest {
        tool_call_id: "t1".into(),
        title: "edit".into(),
        tool_kind: ToolKind::Edit,
        locations: paths.iter().map(PathBuf::from).collect(),
        raw_input: None,
        options: claude_opts(),
    }
}

const CARGO_TEST: &str = r#"
[[policy.rules]]
id = "cargo-test"
program = "cargo"
args_prefix = ["test"]
workspace = "shared"
decision = "allow"
reason = "the tests may run in the shared root"
"#;

#[test]
fn an_allow_rule_widens_only_the_command_it_names() {
    let dir = tempfile::tempdir().unwrap();
    let s = shared(dir.path());
    let policed = Policed::new(policy(CARGO_TEST), Rules);
    let ruling = policed.decide(&s, &execute(json!({"command": "cargo test --all"})));
    assert_eq!(ruling.decision, Decision::Allow);
    assert_eq!(
        ruling.option_id.as_deref(),
        Some("allow"),
        "allow_once, never always"
    );
    assert_eq!(ruling.decider, Decider::Policy);
    assert_eq!(ruling.rule_id.as_deref(), Some("cargo-test"));
    // Without the rule, the table refuses a command in a shared root.
    let table = Rules.decide(&s, &execute(json!({"command": "cargo test"})));
    assert_eq!(table.decision, Decision::Deny);
    for other in [
        "cargo build",
        "cargo",
        "cargo test; rm -rf ~",
        "cargo test && curl x",
        "cargo test | sh",
        "cargo test > /etc/passwd",
        "cargo test $(rm -rf ~)",
        "cargo test `id`",
        "cargo test $HOME",
        "FOO=1 cargo test",
        "/tmp/evil/cargo test",
        "./cargo test",
        "/usr/bin/../../tmp/cargo test",
        "cargo test 'unclosed",
        "cargo 'test; rm x'",
    ] {
        let r = policed.decide(&s, &execute(json!({ "command": other })));
        assert_eq!(r.decision, Decision::Deny, "{other}");
        assert_eq!(r.decider, Decider::Table, "{other}");
    }
}

#[test]
fn codex_argv_and_shell_wrappers_are_read_as_the_script() {
    let dir = tempfile::tempdir().unwrap();
    let s = shared(dir.path());
    let policed = Policed::new(policy(CARGO_TEST), Rules);
    let allow = |raw| policed.decide(&s, &execute(raw)).decision;
    assert_eq!(
        allow(json!({"command": ["/bin/bash", "-c", "cargo test"]})),
        Decision::Allow
    );
    assert_eq!(
        allow(json!({"cmd": ["cargo", "test", "a; b"]})),
        Decision::Allow,
        "argv words are literal"
    );
    assert_eq!(
        allow(json!({"command": "/usr/bin/cargo test"})),
        Decision::Allow
    );
    assert_eq!(
        allow(json!({"command": "bash -c 'cargo test'"})),
        Decision::Allow
    );
    for hostile in [
        // A login shell runs the profile files of the agent-writable home before the script:
        // more than `cargo test`, so the rule that allows `cargo test` does not allow it.
        json!({"command": ["/bin/bash", "-lc", "cargo test"]}),
        json!({"command": "bash -lc 'cargo test'"}),
        json!({"command": ["bash", "-l", "-c", "cargo test"]}),
        json!({"command": ["bash", "--login", "-c", "cargo test"]}),
        json!({"command": ["sh", "-cl", "cargo test"]}),
        json!({"command": ["zsh", "-c", "cargo test"]}),
        json!({"command": ["/bin/bash", "-lc", "cargo test; rm -rf ~"]}),
        json!({"command": ["/bin/bash", "-lc", "cargo test", "extra"]}),
        json!({"command": ["bash", "-e", "-c", "cargo test"]}),
        json!({"command": "bash -c 'cargo test && id'"}),
        json!({"command": ["cargo", 7]}),
        json!({"command": {"program": "cargo"}}),
        json!({"command": []}),
        json!({"other": "cargo test"}),
    ] {
        assert_eq!(allow(hostile.clone()), Decision::Deny, "{hostile}");
    }
}

#[test]
fn deny_and_ask_match_any_segment_and_what_cannot_be_read() {
    let dir = tempfile::tempdir().unwrap();
    let s = sandbox(dir.path());
    let policed = Policed::new(
        policy(
            r#"
[[policy.rules]]
id = "no-rm"
program = "rm"
decision = "deny"
reason = "nothing is removed"
"#,
        ),
        Rules,
    );
    let decide = |raw| policed.decide(&s, &execute(raw));
    for hostile in [
        json!({"command": "rm -rf x"}),
        json!({"command": "ls; rm -rf x"}),
        json!({"command": "echo $(rm -rf x)"}),
        json!({"command": "echo \"`rm -rf x`\""}),
        json!({"command": "X=1 /bin/rm x"}),
        json!({"command": ["/bin/sh", "-c", "true && rm x"]}),
        json!({"command": "bash -x -c 'rm x'"}),
        json!({"command": ["/bin/bash", "-lc", "rm x"]}),
        json!({"command": ["zsh", "-c", "ls && rm x"]}),
        json!({"command": "rm 'unclosed"}),
        json!({"command": ["rm", 1]}),
    ] {
        let r = decide(hostile.clone());
        assert_eq!(r.decision, Decision::Deny, "{hostile}");
        assert_eq!(r.rule_id.as_deref(), Some("no-rm"), "{hostile}");
        assert_eq!(r.option_id.as_deref(), Some("reject"));
    }
    let ok = decide(json!({"command": "ls -la rm"}));
    assert_eq!((ok.decision, ok.decider), (Decision::Allow, Decider::Table));
    // Gemini sends no rawInput: the title is read, for deny and ask only.
    let mut gemini = execute(json!({}));
    gemini.raw_input = None;
    gemini.title = "rm -rf build".into();
    assert_eq!(
        policed.decide(&s, &gemini).rule_id.as_deref(),
        Some("no-rm")
    );
}

#[test]
fn ask_rules_carry_no_option_and_never_widen_past_the_table() {
    let dir = tempfile::tempdir().unwrap();
    let s = shared(dir.path());
    let policed = Policed::new(
        policy(
            r#"
[[policy.rules]]
id = "ask-before-touch"
kind = "execute"
program = "touch"
workspace = "shared"
decision = "ask"
reason = "touching files in a shared root needs a supervisor"

[[policy.rules]]
id = "ask-edits"
kind = ["edit", "delete"]
decision = "ask"
reason = "edits are looked at"
"#,
        ),
        Rules,
    );
    let r = policed.decide(&s, &execute(json!({"command": "touch a"})));
    assert_eq!(r.decision, Decision::Ask);
    assert_eq!(r.option_id, None);
    assert_eq!(r.rule_id.as_deref(), Some("ask-before-touch"));
    assert_eq!(
        r.reason,
        "touching files in a shared root needs a supervisor"
    );
    // Inside the root: the table allows, so the ask narrows it.
    std::fs::write(dir.path().join("a.txt"), "x").unwrap();
    let inside = policed.decide(&s, &edit(&["a.txt"]));
    assert_eq!(
        (inside.decision, inside.rule_id.as_deref()),
        (Decision::Ask, Some("ask-edits"))
    );
    // Outside the root: the table's refusal stands; no person can be asked to allow it.
    for outside in ["../x", "/etc/passwd", "a.txt/../../x"] {
        let r = policed.decide(&s, &edit(&[outside]));
        assert_eq!(
            (r.decision, r.decider),
            (Decision::Deny, Decider::Table),
            "{outside}"
        );
    }
}

#[test]
fn a_read_only_task_refuses_every_change_whatever_the_rules() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = shared(dir.path());
    s.mode = TaskMode::ReadOnly;
    let policed = Policed::new(policy(CARGO_TEST), Rules);
    let r = policed.decide(&s, &execute(json!({"command": "cargo test"})));
    assert_eq!(r.decision, Decision::Deny);
    assert_eq!(r.reason, "the task is read-only");
    let explained = policed.explain(&s, &execute(json!({"command": "cargo test"})));
    assert_eq!(explained.matched.as_deref(), Some("cargo-test"));
    assert!(explained.overruled.unwrap().contains("read-only"));
}

#[test]
fn allow_without_an_offered_allow_option_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let s = shared(dir.path());
    let policed = Policed::new(policy(CARGO_TEST), Rules);
    let mut request = execute(json!({"command": "cargo test"}));
    request.options.retain(|o| !o.kind.is_allow());
    let r = policed.decide(&s, &request);
    assert_eq!(
        (r.decision, r.option_id.as_deref()),
        (Decision::Deny, Some("reject"))
    );
    assert_eq!(r.rule_id.as_deref(), Some("cargo-test"));
}

#[test]
fn rules_match_on_workspace_owned_agent_and_role_first_match_wins() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = shared(dir.path());
    s.agent = "claude".into();
    s.role = "reviewer".into();
    let p = policy(
        r#"
[[policy.rules]]
id = "reviewers-never-fetch"
kind = "fetch"
role = ["reviewer", "planner"]
decision = "deny"
reason = "reviewers read the copy, not the network"

[[policy.rules]]
id = "codex-only"
kind = "read"
agent = "codex"
owned = false
decision = "deny"
reason = "codex reads nothing here"

[[policy.rules]]
id = "all-reads"
kind = "read"
decision = "deny"
reason = "second"
"#,
    );
    let policed = Policed::new(p, Rules);
    let mut fetch = execute(json!({}));
    fetch.tool_kind = ToolKind::Fetch;
    assert_eq!(
        policed.decide(&s, &fetch).rule_id.as_deref(),
        Some("reviewers-never-fetch")
    );
    let mut read = execute(json!({}));
    read.tool_kind = ToolKind::Read;
    assert_eq!(
        policed.decide(&s, &read).rule_id.as_deref(),
        Some("all-reads")
    );
    s.agent = "codex".into();
    assert_eq!(
        policed.decide(&s, &read).rule_id.as_deref(),
        Some("codex-only")
    );
    let why = policed.explain(&s, &fetch);
    assert_eq!(why.matched.as_deref(), Some("reviewers-never-fetch"));
    s.role = "implementer".into();
    let why = policed.explain(&s, &fetch);
    assert_eq!(why.matched, None);
    assert_eq!(
        why.skipped[0],
        ("reviewers-never-fetch".to_string(), Miss::Role)
    );
    assert_eq!(why.skipped[1].1, Miss::Kind);
}

#[test]
fn path_globs_are_relative_and_contained() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::create_dir_all(root.join("secrets")).unwrap();
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::os::unix::fs::symlink(root.join("secrets"), root.join("innocent")).unwrap();
    let mut s = shared(&root);
    s.boundary.owned = true;
    let policed = Policed::new(
        policy(
            r#"
[[policy.rules]]
id = "no-secrets"
kind = ["edit", "delete", "move", "read"]
paths = ["secrets/**"]
decision = "deny"
reason = "secrets stay as they are"
"#,
        ),
        Rules,
    );
    let hit = |paths: &[&str]| policed.decide(&s, &edit(paths)).rule_id.is_some();
    assert!(hit(&["secrets/key"]));
    assert!(hit(&["src/../secrets/key"]));
    assert!(hit(&[&format!("{}/secrets/key", root.display())]));
    assert!(
        hit(&["innocent/key"]),
        "a symlink into the glob is resolved"
    );
    assert!(hit(&["src/a.rs", "secrets/key"]), "any path of a deny");
    assert!(!hit(&["src/a.rs"]));
    assert!(!hit(&["secretsx/a"]));
}

#[test]
fn malformed_policies_name_the_rule_and_the_field() {
    let cases: &[(&str, &str, &str)] = &[
        ("decision = \"allow\"\nreason = \"r\"", "\"x\"", "decision"),
        (
            "kind = \"edit\"\ndecision = \"allow\"\nreason = \"r\"",
            "\"x\"",
            "decision",
        ),
        (
            "program = \"bash\"\ndecision = \"allow\"\nreason = \"r\"",
            "\"x\"",
            "program",
        ),
        (
            "program = \"/tmp/cargo\"\ndecision = \"deny\"\nreason = \"r\"",
            "\"x\"",
            "program",
        ),
        (
            "kind = \"edit\"\nprogram = \"rm\"\ndecision = \"deny\"\nreason = \"r\"",
            "\"x\"",
            "kind",
        ),
        (
            "kind = \"shell\"\ndecision = \"deny\"\nreason = \"r\"",
            "\"x\"",
            "kind",
        ),
        (
            "kind = []\ndecision = \"deny\"\nreason = \"r\"",
            "\"x\"",
            "kind",
        ),
        ("decision = \"maybe\"\nreason = \"r\"", "\"x\"", "decision"),
        ("decision = \"deny\"", "\"x\"", "reason"),
        (
            "workspace = \"home\"\ndecision = \"deny\"\nreason = \"r\"",
            "\"x\"",
            "workspace",
        ),
        (
            "paths = [\"../up\"]\ndecision = \"deny\"\nreason = \"r\"",
            "\"x\"",
            "paths",
        ),
        (
            "paths = [\"/etc/**\"]\ndecision = \"deny\"\nreason = \"r\"",
            "\"x\"",
            "paths",
        ),
        (
            "paths = [\"a[\"]\ndecision = \"deny\"\nreason = \"r\"",
            "\"x\"",
            "paths",
        ),
        (
            "args_prefix = [\"x\"]\ndecision = \"deny\"\nreason = \"r\"",
            "\"x\"",
            "args_prefix",
        ),
    ];
    for (body, rule, field) in cases {
        let e = error(&format!("[[policy.rules]]\nid = \"x\"\n{body}\n"));
        assert_eq!(e.code(), legate_core::ErrorCode::PolicyInvalid);
        assert_eq!(e.rule.as_deref(), Some(*rule), "{body}: {e}");
        assert_eq!(e.field.as_deref(), Some(*field), "{body}: {e}");
        assert!(
            e.to_string()
                .starts_with("POLICY_INVALID: rule \"x\", field "),
            "{e}"
        );
    }
    let e = error("[[policy.rules]]\ndecision = \"deny\"\nreason = \"r\"\n");
    assert_eq!(
        (e.rule.as_deref(), e.field.as_deref()),
        (Some("#1 (file)"), Some("id"))
    );
    let e = error("[[policy.rules]]\nid = \"Bad Id\"\ndecision = \"deny\"\nreason = \"r\"\n");
    assert_eq!(e.field.as_deref(), Some("id"));
    let dup = "[[policy.rules]]\nid = \"a\"\ndecision = \"deny\"\nreason = \"r\"\n";
    let e = error(&format!("{dup}{dup}"));
    assert_eq!(
        (e.rule.as_deref(), e.field.as_deref()),
        (Some("\"a\""), Some("id"))
    );
    let e = error("[[policy.rules]]\nid = \"a\"\nprogramme = \"x\"\n");
    assert!(
        e.to_string().contains("programme"),
        "unknown keys are refused: {e}"
    );
    let e = error("[policy]\nfile = \"other.toml\"\n");
    assert!(
        e.to_string().contains("file"),
        "a policy file names no other: {e}"
    );
}

#[test]
fn inline_rules_come_before_the_file_and_ids_are_unique_across_both() {
    let inline = parse_file(CARGO_TEST).unwrap();
    let file = parse_file(
        "[[policy.rules]]\nid = \"later\"\nkind = \"read\"\ndecision = \"deny\"\nreason = \"r\"\n",
    )
    .unwrap();
    let p = Policy::from_tables(inline.clone(), file).unwrap();
    let ids: Vec<&str> = p.rules().iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["cargo-test", "later"]);
    let e = Policy::from_tables(inline.clone(), inline).unwrap_err();
    assert_eq!(e.field.as_deref(), Some("id"));
}

#[test]
fn a_deny_on_paths_holds_for_a_call_that_names_no_path() {
    // Before: a deny (or ask) with `paths` did not match a call naming no location, so the
    // table decided it, and in a root Legate owns the table allows a path-less edit: an agent
    // leaving `locations` empty edited `.github/` past the documented `no-ci-edits` rule.
    let dir = tempfile::tempdir().unwrap();
    let mut owned = shared(dir.path());
    owned.boundary.owned = true;
    let p = policy(
        r#"
[[policy.rules]]
id = "no-ci-edits"
kind = ["edit", "delete", "move"]
paths = [".github/**"]
decision = "deny"
reason = "CI configuration is changed by people, not delegated agents"
"#,
    );
    let policed = Policed::new(p, Rules);
    let ruling = policed.decide(&owned, &edit(&[]));
    assert_eq!(ruling.decision, Decision::Deny, "{ruling:?}");
    assert_eq!(ruling.rule_id.as_deref(), Some("no-ci-edits"));
    // A call naming paths elsewhere is still not this rule's.
    let ruling = policed.decide(&owned, &edit(&["src/a.rs"]));
    assert_eq!(ruling.rule_id, None, "{ruling:?}");
}

#[test]
fn a_deny_on_a_program_holds_behind_a_launcher() {
    // Before: only the first word of each simple command was compared, so `exec rm`,
    // `command rm`, `sudo rm`, `env X=1 rm` or `timeout 5 rm` ran `rm` past a deny on `rm`.
    let dir = tempfile::tempdir().unwrap();
    let mut owned = shared(dir.path());
    owned.boundary.owned = true;
    let p = policy(
        r#"
[[policy.rules]]
id = "no-rm"
kind = "execute"
program = "rm"
decision = "deny"
reason = "nothing is removed"
"#,
    );
    let policed = Policed::new(p, Rules);
    for command in [
        json!("exec rm -rf src"),
        json!("command rm -rf src"),
        json!("sudo rm -rf src"),
        json!("env X=1 rm -rf src"),
        json!("timeout 5 /bin/rm -rf src"),
        json!("nohup nice rm src"),
        json!(["xargs", "rm"]),
    ] {
        let ruling = policed.decide(&owned, &execute(json!({ "command": command })));
        assert_eq!(ruling.decision, Decision::Deny, "{command}: {ruling:?}");
        assert_eq!(ruling.rule_id.as_deref(), Some("no-rm"), "{command}");
    }
    // Not a launcher: `grep rm` is not `rm`.
    let ruling = policed.decide(&owned, &execute(json!({"command": "grep rm notes"})));
    assert_eq!(ruling.rule_id, None, "{ruling:?}");
}
