//! `legate supervisor-token`: a person at a terminal makes the supervisor token for a script
//! that answers approvals; anything without a terminal (a caller agent's shell tool) is
//! refused and makes nothing. The terminal is a real pseudo-terminal (`openpty`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_frontkit::cli::{CliHome, text};
use std::os::unix::fs::PermissionsExt;
use std::process::{Output, Stdio};

fn home() -> CliHome {
    CliHome::new(env!("CARGO_BIN_EXE_legate")).env_remove("LEGATE_SUPERVISOR_TOKEN")
}

/// Runs `legate args` with stdin and stderr on a fresh pseudo-terminal (stdout piped).
fn at_a_terminal(home: &CliHome, args: &[&str]) -> Output {
    let terminal = legate_testkit::terminal::open().unwrap();
    let out = home
        .cmd(args)
        .stdin(Stdio::from(terminal.device.try_clone().unwrap()))
        .stderr(Stdio::from(terminal.device))
        .stdout(Stdio::piped())
        .output()
        .unwrap();
    // The terminal stays open until the command has ended.
    drop(terminal.controller);
    out
}

#[test]
fn without_a_terminal_nothing_is_made() {
    let home = home();
    let out = home.run(&["supervisor-token"]);
    assert!(!out.status.success());
    let err = text(&out);
    assert!(err.contains("UNAUTHORIZED"), "{err}");
    assert!(err.contains("terminal"), "{err}");
    assert!(!home.home().join("supervisor-token").exists());
    assert!(out.stdout.is_empty());
}

#[test]
fn a_person_at_a_terminal_makes_the_token_a_script_then_answers_with() {
    let home = home();
    let file = home.home().join("supervisor-token");

    let out = at_a_terminal(&home, &["supervisor-token"]);
    assert!(out.status.success(), "{out:?}");
    let printed = String::from_utf8(out.stdout).unwrap();
    assert_eq!(printed.trim(), file.display().to_string());
    let token = std::fs::read_to_string(&file).unwrap();
    assert!(
        !printed.contains(token.trim()),
        "the token itself is never printed"
    );
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);

    // Asked again, the token is kept.
    assert!(at_a_terminal(&home, &["supervisor-token"]).status.success());
    assert_eq!(std::fs::read_to_string(&file).unwrap(), token);

    // A script without a terminal: refused without the token, heard with it (the approval
    // does not exist, which is the next thing checked).
    let refused = home.run(&["deny", "no-such-approval", "--reason", "no"]);
    assert!(
        text(&refused).contains("UNAUTHORIZED"),
        "{}",
        text(&refused)
    );
    let heard = home
        .cmd(&["deny", "no-such-approval", "--reason", "no"])
        .env("LEGATE_SUPERVISOR_TOKEN", token.trim())
        .output()
        .unwrap();
    assert!(!heard.status.success());
    assert!(!text(&heard).contains("UNAUTHORIZED"), "{}", text(&heard));
}

#[test]
fn a_caller_token_is_never_made_the_supervisors() {
    let home = home();
    let caller = "c".repeat(64);
    std::fs::create_dir_all(home.home()).unwrap();
    std::fs::write(home.home().join("supervisor-token"), &caller).unwrap();
    let out = at_a_terminal(
        &home.env("LEGATE_MCP_TOKEN", &caller),
        &["supervisor-token"],
    );
    assert!(!out.status.success(), "{out:?}");
    assert!(out.stdout.is_empty());
}
