//! End to end, from the binary, with `$LEGATE_HOME` and the project on a btrfs image: the
//! second copy task of an unchanged project gets a snapshot of the project's base (no file
//! read), and is previewed, verified, tested, integrated and discarded as any copy.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../legate-workspace/tests/common/reflink_fs.rs"]
mod reflink_fs;

use legate_frontkit::cli::{CliHome, settle, task_id, text};

const CRITERIA: &str = r#"[
  {"id": "notes", "description": "NOTES.md exists",
   "check": {"kind": "file-exists", "path": "NOTES.md"}}
]"#;

const REVIEWS: &str = r##"[
  {"criterionId": "notes", "verdict": "passed", "path": "NOTES.md", "line": 1,
   "quote": "# Notes", "explanation": "the file starts with its title"}
]"##;

#[test]
fn a_copy_task_on_btrfs_is_a_snapshot_of_its_project_s_base() {
    let Some(fs_) = reflink_fs::ReflinkFs::mount_btrfs(512) else {
        return;
    };
    let env = CliHome::at(env!("CARGO_BIN_EXE_legate"), &fs_.path().join("home"));
    let project = env.make_project(&[
        ("src/greeting.txt", "hello world\n"),
        ("README.md", "# Project\n"),
    ]);
    std::fs::write(project.join(".env"), "SECRET=do-not-copy\n").unwrap();
    settle(&["src/greeting.txt", "README.md", ".env"].map(|p| project.join(p)));
    let p = project.to_string_lossy().into_owned();
    let criteria = env.write("criteria.json", CRITERIA);
    let mut ids = Vec::new();
    for _ in 0..2 {
        let out = env.run(&[
            "run",
            "--copy",
            &p,
            "--criteria",
            &criteria,
            "write NOTES.md: # Notes",
        ]);
        assert!(out.status.success(), "{}", text(&out));
        ids.push(task_id(&out));
    }
    let events = text(&env.run(&["events", &ids[1]]));
    let ready = events
        .lines()
        .find(|l| l.contains("copy.ready"))
        .expect("copy.ready");
    assert!(ready.contains(r#""snapshot":true"#), "{ready}");
    assert!(ready.contains(r#""scannedFiles":0"#), "{ready}");
    assert!(ready.contains(r#""path":".env""#), "{ready}");
    let copy = env.home().join("copies").join(&ids[1]);
    assert!(!copy.join(".env").exists());
    let shown = text(&env.run(&["show", &ids[1]]));
    assert!(
        shown.contains("a snapshot of the project's base"),
        "{shown}"
    );
    // The first task's change is not in the second's copy, nor the base's.
    let diff = env.run(&["diff", "--json", &ids[1]]);
    assert!(diff.status.success(), "{}", text(&diff));
    let preview: serde_json::Value = serde_json::from_slice(&diff.stdout).unwrap();
    assert_eq!(preview["summary"]["filesChanged"], 1, "{preview}");
    let sha = preview["sha256"].as_str().unwrap().to_string();
    let reviews = env.write("reviews.json", REVIEWS);
    let verify = env.run(&["verify", &ids[1], "--review", &reviews, "--sha256", &sha]);
    assert!(verify.status.success(), "{}", text(&verify));
    let test = env.run(&["test", &ids[1], "--", "grep", "-q", "Notes", "NOTES.md"]);
    assert!(test.status.success(), "{}", text(&test));
    let integrate = env.run(&["integrate", &ids[1], "--sha256", &sha]);
    assert!(integrate.status.success(), "{}", text(&integrate));
    assert_eq!(std::fs::read(project.join("NOTES.md")).unwrap(), b"# Notes");
    for id in &ids {
        let discard = env.run(&["discard", id]);
        assert!(discard.status.success(), "{}", text(&discard));
        assert!(!env.home().join("copies").join(id).exists());
        assert!(!env.home().join("baselines").join(id).exists());
    }
    let cleanup = env.run(&["cleanup"]);
    assert!(cleanup.status.success(), "{}", text(&cleanup));
}
