//! End to end, from the binary: a revisor task on a copy of a real git repository, then
//! diff, verify, test and integrate; the original ends with exactly the change.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_frontkit::cli::{CliHome, settle, task_id, text};
use legate_testkit::git;

/// A home and the project its tasks copy: a git repository with CRLF line endings, an ignored
/// directory and an uncommitted `.env` that is never copied.
fn fixture() -> CliHome {
    let env = CliHome::new(env!("CARGO_BIN_EXE_legate"));
    let project = env.make_project(&[
        ("src/greeting.txt", "hello world\r\nsecond line\r\n"),
        ("README.md", "# Project\n"),
        (".gitignore", "target/\n"),
    ]);
    // Never committed, never copied.
    std::fs::write(project.join(".env"), "SECRET=do-not-copy\n").unwrap();
    env
}

const CRITERIA: &str = r#"[
  {"id": "greets", "description": "the greeting says hi",
   "check": {"kind": "file-contains", "path": "src/greeting.txt", "text": "hi world"}},
  {"id": "notes", "description": "NOTES.md exists",
   "check": {"kind": "file-exists", "path": "NOTES.md"}}
]"#;

const REVIEWS: &str = r##"[
  {"criterionId": "greets", "verdict": "passed", "path": "src/greeting.txt", "line": 1,
   "quote": "hi world", "explanation": "the first line now says hi"},
  {"criterionId": "notes", "verdict": "passed", "path": "NOTES.md", "line": 1,
   "quote": "# Notes", "explanation": "the file starts with its title"}
]"##;

fn start(env: &CliHome) -> String {
    let criteria = env.write("criteria.json", CRITERIA);
    let project = env.project().to_string_lossy().into_owned();
    let out = env.run(&[
        "run",
        "--copy",
        &project,
        "--criteria",
        &criteria,
        "replace src/greeting.txt: hello => hi",
        "write NOTES.md: # Notes",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    task_id(&out)
}

#[test]
fn a_copy_task_is_previewed_verified_tested_and_integrated_exactly() {
    let env = fixture();
    let id = start(&env);
    // The agent never touched the original.
    assert_eq!(
        std::fs::read(env.project().join("src/greeting.txt")).unwrap(),
        b"hello world\r\nsecond line\r\n"
    );
    assert!(!env.project().join("NOTES.md").exists());
    // copy.ready lists the blocked .env by path and reason, never its content.
    let events = env.run(&["events", &id]);
    let events = String::from_utf8_lossy(&events.stdout).into_owned();
    let ready = events
        .lines()
        .find(|l| l.contains("copy.ready"))
        .expect("copy.ready");
    assert!(ready.contains(r#""path":".env""#), "{ready}");
    assert!(ready.contains("SECRET_FILE"), "{ready}");
    assert!(!events.contains("do-not-copy"));
    assert!(events.contains("copy.patch"));
    assert!(ready.contains(r#""reflinkedFiles":0"#), "{ready}");
    // `legate show` reports the copy's disk use: written in full on this file system (no
    // reflinks), and what its directory has allocated now.
    let shown = env.run(&["show", &id]);
    let shown = String::from_utf8_lossy(&shown.stdout).into_owned();
    let line = shown
        .lines()
        .find(|l| l.starts_with("copy "))
        .unwrap_or_else(|| panic!("no copy line in: {shown}"));
    assert!(
        line.contains("3 files") && line.contains("written in full"),
        "{line}"
    );
    assert!(line.contains("allocated now"), "{line}");
    // The project's first copy: no verdict recorded before, so every copied file was read
    // and scanned.
    assert!(
        line.ends_with("content: 3 files scanned, 0 trusted from the scan cache"),
        "{line}"
    );
    let json = env.run(&["show", "--json", &id]);
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let disk = &json["copyDisk"];
    assert_eq!(disk["includedFiles"], 3, "{json}");
    assert_eq!(disk["reflinkedFiles"], 0, "{json}");
    assert_eq!(disk["scannedFiles"], 3, "{json}");
    assert_eq!(disk["trustedFiles"], 0, "{json}");
    assert_eq!(disk["complete"], true, "{json}");
    assert!(disk["allocatedBytes"].as_u64().unwrap() > 0, "{json}");
    assert_eq!(
        json["id"],
        id.as_str(),
        "the task's own fields stay: {json}"
    );
    let home = env.base().join("home");
    assert!(!home.join("copies").join(&id).join(".env").exists());
    assert!(home.join("baselines").join(&id).join("git/HEAD").exists());

    let diff = env.run(&["diff", &id]);
    assert!(diff.status.success(), "{}", text(&diff));
    let patch = String::from_utf8_lossy(&diff.stdout);
    assert!(patch.contains("-hello world\r"), "{patch}");
    assert!(patch.contains("+hi world\r"), "{patch}");
    assert!(patch.contains("+++ b/NOTES.md"), "{patch}");
    let stat = env.run(&["diff", "--json", &id]);
    assert!(stat.status.success(), "{}", text(&stat));
    let preview: serde_json::Value = serde_json::from_slice(&stat.stdout).unwrap();
    assert_eq!(preview["summary"]["filesChanged"], 2);
    let sha = preview["sha256"].as_str().unwrap().to_string();

    // Integration before verification is refused and touches nothing.
    let early = env.run(&["integrate", &id]);
    assert_eq!(early.status.code(), Some(2), "{}", text(&early));
    assert!(String::from_utf8_lossy(&early.stderr).contains("VERIFICATION_REQUIRED"));
    // Every form of `diff` is bound the same way, by the engine, with one wording.
    for args in [
        &["diff", "--sha256", "00", &id][..],
        &["diff", "--stat", "--sha256", "00", &id],
    ] {
        let wrong = env.run(args);
        assert_eq!(wrong.status.code(), Some(2), "{}", text(&wrong));
        let err = String::from_utf8_lossy(&wrong.stderr);
        assert!(err.contains("PATCH_CHANGED"), "{err}");
        assert!(err.contains("not the 00 you named; preview again"), "{err}");
    }

    let reviews = env.write("reviews.json", REVIEWS);
    let verify = env.run(&["verify", &id, "--review", &reviews, "--sha256", &sha]);
    assert!(verify.status.success(), "{}", text(&verify));
    assert!(String::from_utf8_lossy(&verify.stdout).contains("verification passed"));

    let test = env.run(&[
        "test",
        &id,
        "--",
        "grep",
        "-q",
        "hi world",
        "src/greeting.txt",
    ]);
    assert!(test.status.success(), "{}", text(&test));
    let out = String::from_utf8_lossy(&test.stdout);
    let confinement = legate_confine::Confinement::probe().as_str();
    assert!(
        out.contains(&format!("confinement {confinement}, network ")),
        "{out}"
    );

    let integrate = env.run(&["integrate", &id, "--sha256", &sha]);
    assert!(integrate.status.success(), "{}", text(&integrate));
    assert_eq!(
        std::fs::read(env.project().join("src/greeting.txt")).unwrap(),
        b"hi world\r\nsecond line\r\n"
    );
    assert_eq!(
        std::fs::read(env.project().join("NOTES.md")).unwrap(),
        b"# Notes"
    );
    assert_eq!(
        git(
            &env.project(),
            &["status", "--porcelain", "--untracked-files=all"]
        ),
        " M src/greeting.txt\n?? .env\n?? NOTES.md\n"
    );
    assert_eq!(
        std::fs::read(env.project().join(".env")).unwrap(),
        b"SECRET=do-not-copy\n"
    );
    let again = env.run(&["integrate", &id]);
    assert!(String::from_utf8_lossy(&again.stderr).contains("COPY_UNAVAILABLE"));

    let discard = env.run(&["discard", &id]);
    assert!(discard.status.success(), "{}", text(&discard));
    assert!(!home.join("copies").join(&id).exists());
    assert!(!home.join("baselines").join(&id).exists());
    let cleanup = env.run(&["cleanup"]);
    assert!(cleanup.status.success(), "{}", text(&cleanup));
}

#[test]
fn evidence_goes_stale_when_a_test_changes_the_patch_and_bad_input_stores_nothing() {
    let env = fixture();
    let project = env.project().to_string_lossy().into_owned();
    let bad = env.run(&["run", "--copy", &project, "--include", "missing", "hi"]);
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("INVALID_INCLUDE_PATH"));
    let sub = env.project().join("src").to_string_lossy().into_owned();
    let bad = env.run(&["run", "--copy", &sub, "hi"]);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("INVALID_WORKSPACE"));

    let id = start(&env);
    let reviews = env.write("reviews.json", REVIEWS);
    let verify = env.run(&["verify", &id, "--review", &reviews]);
    assert!(verify.status.success(), "{}", text(&verify));
    let test = env.run(&["test", &id, "--", "touch", "made-by-test.txt"]);
    assert_eq!(test.status.code(), Some(1), "{}", text(&test));
    assert!(String::from_utf8_lossy(&test.stdout).contains("TEST_CHANGED_PATCH"));
    let integrate = env.run(&["integrate", &id]);
    assert_eq!(integrate.status.code(), Some(2));
    let err = String::from_utf8_lossy(&integrate.stderr);
    assert!(
        err.contains("VERIFICATION_REQUIRED") && err.contains("stale"),
        "{err}"
    );
    assert!(!env.project().join("NOTES.md").exists());
    let failing = env.run(&["test", &id, "--", "false"]);
    assert_eq!(failing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&failing.stdout).contains("TEST_FAILED"));
}

#[test]
fn a_second_copy_of_an_unchanged_project_trusts_the_first_copys_verdicts() {
    use std::os::unix::fs::MetadataExt;
    let env = fixture();
    let project = env.project();
    settle(&["src/greeting.txt", "README.md", ".gitignore"].map(|p| project.join(p)));
    let p = project.to_string_lossy().into_owned();
    let mut disks = Vec::new();
    for _ in 0..2 {
        let out = env.run(&["run", "--copy", &p, "write NOTES.md: # Notes"]);
        assert!(out.status.success(), "{}", text(&out));
        let id = task_id(&out);
        disks.push((env.show(&id)["copyDisk"].clone(), id));
    }
    assert_eq!(disks[0].0["scannedFiles"], 3, "{:?}", disks[0]);
    assert_eq!(disks[0].0["trustedFiles"], 0, "{:?}", disks[0]);
    // The second copy read no file: every verdict came from the first.
    assert_eq!(disks[1].0["scannedFiles"], 0, "{:?}", disks[1]);
    assert_eq!(disks[1].0["trustedFiles"], 3, "{:?}", disks[1]);
    let shown = env.run(&["show", &disks[1].1]);
    let shown = String::from_utf8_lossy(&shown.stdout).into_owned();
    assert!(
        shown.contains("content: 0 files scanned, 3 trusted from the scan cache"),
        "{shown}"
    );
    // Kept privately in Legate's home: one directory per project, no content in it.
    let dirs: Vec<_> = std::fs::read_dir(env.home().join("scan-verdicts"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(dirs.len(), 1);
    assert_eq!(std::fs::metadata(&dirs[0]).unwrap().mode() & 0o777, 0o700);
    let file = dirs[0].join("verdicts");
    assert_eq!(std::fs::metadata(&file).unwrap().mode() & 0o777, 0o600);
    let cache = std::fs::read_to_string(&file).unwrap();
    assert!(!cache.contains("hello world"), "{cache}");

    // Not copied for 30 days: `legate cleanup` (and the sweep) removes the project's cache,
    // and the next copy reads and scans every file again.
    let fresh = env.run(&["cleanup"]);
    assert!(!text(&fresh).contains("scan verdicts"), "{}", text(&fresh));
    assert!(file.exists());
    let then = std::time::SystemTime::now() - std::time::Duration::from_secs(31 * 24 * 3600);
    std::fs::File::open(&file)
        .unwrap()
        .set_times(std::fs::FileTimes::new().set_modified(then))
        .unwrap();
    let swept = env.run(&["cleanup"]);
    assert!(swept.status.success(), "{}", text(&swept));
    // Whichever removed it, the engine's own sweep at start or the command's, the command
    // reports it (`review::cleanup` keeps the first sweep's report for it).
    let said = text(&swept);
    assert!(
        said.contains("removed the scan verdicts of 1 projects not copied for 30 days"),
        "{said}"
    );
    assert!(!dirs[0].exists(), "{said}");
    let out = env.run(&["run", "--copy", &p, "write NOTES.md: # Notes"]);
    assert!(out.status.success(), "{}", text(&out));
    let disk = env.show(&task_id(&out))["copyDisk"].clone();
    assert_eq!(disk["scannedFiles"], 3, "{disk:?}");
    assert_eq!(disk["trustedFiles"], 0, "{disk:?}");
}
