//! `legate compare` and `legate comparison` from the binary, on revisor: two targets review a
//! finished copy task's files, the command waits for both and prints the comparison (exit 0
//! when complete); a single target and a stale context are refused before anything runs; the
//! stored comparison is printed again by a later process.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_frontkit::cli::{CliHome, text};

#[test]
fn compare_waits_for_every_review_and_prints_the_grouped_findings() {
    let home = CliHome::new(env!("CARGO_BIN_EXE_legate"));
    let project = home.make_project(&[(
        "src/lib.rs",
        "pub fn f(x: Option<u8>) -> u8 {\n    x.unwrap()\n}\n",
    )]);
    let out = home.run(&[
        "run",
        "--copy",
        project.to_str().unwrap(),
        "write notes.md: n",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let source = err
        .lines()
        .find(|l| l.starts_with("task "))
        .and_then(|l| l.split_whitespace().nth(1))
        .expect("a task line")
        .to_string();

    let one = home.run(&[
        "compare", &source, "--prompt", "Review", "--target", "revisor",
    ]);
    assert_eq!(one.status.code(), Some(2), "{}", text(&one));
    assert!(text(&one).contains("INVALID_INPUT"), "{}", text(&one));
    let stale = home.run(&[
        "compare",
        &source,
        "--prompt",
        "Review",
        "--context-sha",
        &"0".repeat(64),
        "--target",
        "revisor",
        "--target",
        "revisor:revisor-thorough",
    ]);
    assert_eq!(stale.status.code(), Some(2), "{}", text(&stale));
    assert!(text(&stale).contains("CONTEXT_CHANGED"), "{}", text(&stale));

    let out = home.run(&[
        "compare",
        &source,
        "--prompt",
        "Review the crate",
        "--json",
        "--target",
        "revisor",
        "--target",
        "revisor:revisor-thorough",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let c: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(c["complete"], true, "{c}");
    assert_eq!(c["reviews"].as_array().unwrap().len(), 2, "{c}");
    let at_unwrap = c["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == "src/lib.rs" && f["line"] == 2)
        .unwrap_or_else(|| panic!("no finding at src/lib.rs:2: {c}"));
    assert_eq!(at_unwrap["agreement"], "identical", "{c}");

    // A later process prints the stored comparison.
    let id = c["comparisonId"].as_str().unwrap();
    let shown = home.run(&["comparison", id]);
    assert!(shown.status.success(), "{}", text(&shown));
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.contains("complete true"), "{shown}");
    assert!(
        shown.contains("src/lib.rs:2 · identical · reported by 2"),
        "{shown}"
    );
    let missing = home.run(&["comparison", "nope"]);
    assert!(
        text(&missing).contains("COMPARISON_NOT_FOUND"),
        "{}",
        text(&missing)
    );
}
