//! Shell wrappers that run more than their script: a login shell (profile files from the
//! agent-writable home) is never the plain command it wraps (issue 29, finding 2).

use super::*;
use serde_json::json;

/// Allows `cargo test`; asks about every other command.
const ALLOW_TESTS_ASK_THE_REST: &str = r#"
[[policy.rules]]
id = "cargo-test"
program = "cargo"
args_prefix = ["test"]
decision = "allow"
reason = "the tests may run"

[[policy.rules]]
id = "ask-other-commands"
kind = "execute"
decision = "ask"
reason = "other commands are looked at"
"#;

/// A login shell runs the profile files of the agent-writable home before its script, so
/// `bash -lc X` is more than `X`: the rule that allows `X` does not allow it, and it goes on
/// to the next rule (here: ask a supervisor), as any command that is not plain does.
#[test]
fn a_login_shell_is_never_the_plain_command_it_wraps() {
    let dir = tempfile::tempdir().unwrap();
    let s = sandbox(dir.path());
    let policed = Policed::new(policy(ALLOW_TESTS_ASK_THE_REST), Rules);
    let decide = |raw| policed.decide(&s, &execute(raw));
    for plain in [
        json!({"command": "cargo test"}),
        json!({"command": ["bash", "-c", "cargo test"]}),
    ] {
        let r = decide(plain.clone());
        assert_eq!(r.decision, Decision::Allow, "{plain}");
    }
    for login in [
        json!({"command": ["/bin/bash", "-lc", "cargo test"]}),
        json!({"command": ["bash", "--login", "-c", "cargo test"]}),
        json!({"command": "sh -l -c 'cargo test'"}),
    ] {
        let r = decide(login.clone());
        assert_eq!(r.decision, Decision::Ask, "{login}");
        assert_eq!(r.rule_id.as_deref(), Some("ask-other-commands"), "{login}");
        let why = policed.explain(&s, &execute(login.clone()));
        assert!(
            why.skipped.iter().any(|(_, miss)| *miss == Miss::NotPlain),
            "{login}: {:?}",
            why.skipped
        );
    }
    let parsed = Command::from_argv(vec!["bash".into(), "-lc".into(), "cargo test".into()]);
    assert_eq!(parsed.plain, None);
    assert!(
        parsed
            .segments
            .contains(&vec!["cargo".to_string(), "test".to_string()])
    );
}
