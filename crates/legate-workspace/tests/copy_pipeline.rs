//! The copy pipeline on real git repositories: selection, secrets, copy, baseline, preview,
//! read-only check, line endings through git, and integration.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Fixture, blob_id, bytes_under, files_under, git, sparse};
use legate_core::ErrorCode;
use legate_integration::*;
use legate_review::*;
use legate_workspace::*;
use std::fs;
use std::path::Path;
use std::process::Command;

/// Integrates into the project, journaled under the home, and removes the journal as the
/// engine does once it recorded the result.
fn integrate_into(f: &Fixture, changes: &[Change]) -> Result<Integrated, legate_core::Error> {
    let dir = f.home.join("run/integrations/t9");
    let pending = integrate(&f.project, changes, &dir, serde_json::json!({}))?;
    let done = pending.integrated.clone();
    pending.finish();
    assert!(!dir.exists());
    Ok(done)
}

#[test]
fn a_copy_held_by_one_operation_is_busy_to_the_next_and_passed_by_without_waiting() {
    let f = Fixture::new(&[("a.txt", b"one\n")]);
    f.commit_all();
    let (_, baseline) = f.copy(&[]);
    let held = baseline.lock().unwrap();
    let started = std::time::Instant::now();
    assert!(baseline.try_lock().unwrap().is_none(), "held: passed by");
    assert!(started.elapsed() < std::time::Duration::from_secs(1));
    assert_eq!(baseline.lock().unwrap_err().code, ErrorCode::CopyBusy);
    drop(held);
    let taken = baseline.try_lock().unwrap();
    assert!(taken.is_some(), "let go: taken");
    assert!(baseline.try_lock().unwrap().is_none(), "held again");
}

#[test]
fn the_selection_is_what_git_would_keep_minus_secrets_and_links() {
    // A fake key id, made at run time (a real one has no run of letters in order).
    let leak = format!("key = {}{}\n", "AKIA", "Q3ZL7RTX2WNVD6KM");
    let f = Fixture::new(&[
        ("src/lib.rs", b"pub fn x() {}\n"),
        ("README.md", b"# hi\n"),
        (".gitignore", b"target/\n*.log\nnow-ignored.txt\n"),
        ("now-ignored.txt", b"tracked, then ignored\n"),
        (".env", b"TOKEN=1\n"),
        (".env.example", b"TOKEN=\n"),
        ("config/leak.txt", leak.as_bytes()),
    ]);
    git(&f.project, &["add", "-f", "now-ignored.txt"]);
    f.commit_all();
    fs::create_dir_all(f.project.join("target")).unwrap();
    fs::write(f.project.join("target/out.bin"), b"ignored").unwrap();
    fs::write(f.project.join("debug.log"), b"ignored").unwrap();
    fs::write(f.project.join("untracked.rs"), b"// new\n").unwrap();
    std::os::unix::fs::symlink("/etc/passwd", f.project.join("link")).unwrap();
    let (report, _b) = f.copy(&[]);
    assert_eq!(
        files_under(&report.copy_directory),
        [
            ".env.example",
            ".gitignore",
            "README.md",
            "src/lib.rs",
            "untracked.rs"
        ]
    );
    let blocked: Vec<(String, &str)> = report
        .blocked_files
        .iter()
        .map(|b| (b.path.clone(), b.reason.as_str()))
        .collect();
    assert_eq!(
        blocked,
        [
            (".env".to_string(), "SECRET_FILE"),
            ("config/leak.txt".to_string(), "SECRET_CONTENT"),
            ("link".to_string(), "UNSAFE_PATH"),
        ]
    );
    let json = serde_json::to_string(&report).unwrap();
    assert!(!json.contains("AKIA"), "content leaked: {json}");
    assert!(!json.contains("TOKEN"), "content leaked: {json}");
    // The baseline is outside the copy and the copy has no .git.
    assert!(!report.copy_directory.join(".git").exists());
}

#[test]
fn include_paths_narrow_and_never_widen() {
    let f = Fixture::new(&[
        ("src/a.rs", b"a"),
        ("src/b.rs", b"b"),
        ("docs/x.md", b"x"),
        (".gitignore", b"secret-dir/\n"),
        ("secret-dir/s.txt", b"s"),
    ]);
    f.commit_all();
    // Links out of the root: a directory link and a file link (git lists both as files).
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("o.txt"), "outside").unwrap();
    std::os::unix::fs::symlink(outside.path(), f.project.join("escape")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("o.txt"), f.project.join("src/o.txt")).unwrap();
    let sel = select(
        &f.project,
        &["src/".into(), "docs/x.md".into()],
        &SecretPatterns::default(),
        &CopyLimits::default(),
    )
    .unwrap();
    let paths: Vec<_> = sel.files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(paths, ["docs/x.md", "src/a.rs", "src/b.rs"]);
    for bad in [
        "secret-dir",
        "missing",
        "../project",
        "src/../docs",
        ".git",
        "/abs",
        "escape",
        "escape/o.txt",
        "src/o.txt",
    ] {
        let err = select(
            &f.project,
            &[bad.to_string()],
            &SecretPatterns::default(),
            &CopyLimits::default(),
        )
        .unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidIncludePath, "{bad}");
    }
    // Not the root of the repository.
    let err = select(
        &f.project.join("src"),
        &[],
        &SecretPatterns::default(),
        &CopyLimits::default(),
    )
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidWorkspace);
}

#[test]
fn limits_and_a_changing_source_are_refused_and_leave_no_copy() {
    let f = Fixture::new(&[("a.txt", b"aaaa"), ("b.txt", b"bbbb"), ("c.txt", b"cc")]);
    f.commit_all();
    let tight = CopyLimits {
        max_files: 2,
        ..CopyLimits::default()
    };
    let err = select(&f.project, &[], &SecretPatterns::default(), &tight).unwrap_err();
    assert_eq!(err.code, ErrorCode::CopyLimitExceeded);
    let tight = CopyLimits {
        max_bytes: 9,
        ..CopyLimits::default()
    };
    let err = select(&f.project, &[], &SecretPatterns::default(), &tight).unwrap_err();
    assert_eq!(err.code, ErrorCode::CopyLimitExceeded);

    let sel = select(
        &f.project,
        &[],
        &SecretPatterns::default(),
        &CopyLimits::default(),
    )
    .unwrap();
    fs::write(f.project.join("b.txt"), b"bbbb and more").unwrap();
    let dir = f.home.join("copies/t9");
    let err = make_copy(&sel, &dir, &CopyLimits::default()).unwrap_err();
    assert_eq!(err.code, ErrorCode::SourceChanged);
    assert!(!dir.exists(), "a half-made copy was left behind");
    let base = f.home.join("baselines/t9");
    let err = make_copy_with_baseline(&sel, &dir, &base, &CopyLimits::default()).unwrap_err();
    assert_eq!(err.code, ErrorCode::SourceChanged);
    assert!(!dir.exists(), "a half-made copy was left behind");
    assert!(!base.exists(), "a half-made baseline was left behind");
    // A file swapped for a symlink after it was measured is not followed.
    let sel = select(
        &f.project,
        &[],
        &SecretPatterns::default(),
        &CopyLimits::default(),
    )
    .unwrap();
    fs::remove_file(f.project.join("c.txt")).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", f.project.join("c.txt")).unwrap();
    let err = make_copy(&sel, &dir, &CopyLimits::default()).unwrap_err();
    assert_eq!(err.code, ErrorCode::SourceChanged);
}

#[test]
fn preview_reports_amd_with_stats_and_binary_nulls_and_reads_by_path() {
    let f = Fixture::new(&[
        ("keep.txt", b"one\ntwo\n"),
        ("gone.txt", b"bye\n"),
        ("bin.dat", b"\x00\x01\x02"),
        ("dir with space/f.txt", b"x\n"),
    ]);
    f.commit_all();
    let (report, baseline) = f.copy(&[]);
    let copy = &report.copy_directory;
    let empty = preview(
        &baseline,
        &SecretPatterns::default(),
        &CopyLimits::default(),
    )
    .unwrap();
    assert!(empty.files.is_empty());
    assert_eq!(empty.patch_length, 0);
    assert!(
        read_only_changes(&baseline, &CopyLimits::default())
            .unwrap()
            .is_empty()
    );

    fs::write(copy.join("keep.txt"), b"one\nTWO\nthree\n").unwrap();
    fs::remove_file(copy.join("gone.txt")).unwrap();
    fs::write(copy.join("bin.dat"), b"\x00\x09\x09\x09").unwrap();
    fs::write(copy.join("new.txt"), b"fresh\n").unwrap();
    fs::write(copy.join("dir with space/f.txt"), b"y\n").unwrap();
    let p = preview(
        &baseline,
        &SecretPatterns::default(),
        &CopyLimits::default(),
    )
    .unwrap();
    let rows: Vec<(&str, ChangeStatus, Option<u64>, Option<u64>)> = p
        .files
        .iter()
        .map(|f| (f.path.as_str(), f.status, f.insertions, f.deletions))
        .collect();
    assert_eq!(
        rows,
        [
            ("bin.dat", ChangeStatus::M, None, None),
            ("dir with space/f.txt", ChangeStatus::M, Some(1), Some(1)),
            ("gone.txt", ChangeStatus::D, Some(0), Some(1)),
            ("keep.txt", ChangeStatus::M, Some(2), Some(1)),
            ("new.txt", ChangeStatus::A, Some(1), Some(0)),
        ]
    );
    assert_eq!(p.summary.added, 1);
    assert_eq!(p.summary.modified, 3);
    assert_eq!(p.summary.deleted, 1);
    assert_eq!(p.summary.binary_files, 1);
    assert_eq!(p.sha256, sha256_hex(&p.patch));
    assert!(String::from_utf8_lossy(&p.patch).contains("GIT binary patch"));
    // Same state, same sha; the baseline's own index is untouched by previews.
    let again = preview(
        &baseline,
        &SecretPatterns::default(),
        &CopyLimits::default(),
    )
    .unwrap();
    assert_eq!(again.sha256, p.sha256);
    let one = full_patch(&baseline, &p.tree, Some("dir with space/f.txt")).unwrap();
    let text = String::from_utf8(one).unwrap();
    assert!(text.contains("+y"));
    assert!(!text.contains("keep.txt"));
    // Literal pathspecs: a glob character selects nothing else.
    assert!(
        full_patch(&baseline, &p.tree, Some("*.txt"))
            .unwrap()
            .is_empty()
    );
    let c = chunk(&p.patch[..0], 0, Some(10), &p.sha256).unwrap();
    assert!(!c.has_more);
    // Read-only check sees changes, including new ignored files.
    assert_eq!(
        read_only_changes(&baseline, &CopyLimits::default())
            .unwrap()
            .len(),
        5
    );
}

#[test]
fn read_only_check_sees_ignored_files_and_limits_and_secrets_hold_in_previews() {
    let f = Fixture::new(&[(".gitignore", b"*.tmp\n"), ("a.txt", b"a\n")]);
    f.commit_all();
    let (report, baseline) = f.copy(&[]);
    let copy = &report.copy_directory;
    fs::write(copy.join("scratch.tmp"), b"ignored").unwrap();
    let p = preview(
        &baseline,
        &SecretPatterns::default(),
        &CopyLimits::default(),
    )
    .unwrap();
    assert!(p.files.is_empty(), "ignored files are not in the patch");
    assert_eq!(
        read_only_changes(&baseline, &CopyLimits::default()).unwrap(),
        ["scratch.tmp"]
    );

    for i in 0..3 {
        fs::write(copy.join(format!("n{i}.txt")), b"x").unwrap();
    }
    let tight = CopyLimits {
        max_changed_files: 2,
        ..CopyLimits::default()
    };
    let err = preview(&baseline, &SecretPatterns::default(), &tight).unwrap_err();
    assert_eq!(err.code, ErrorCode::ChangeLimitExceeded);

    fs::write(copy.join(".env.production"), b"X=1").unwrap();
    let err = preview(
        &baseline,
        &SecretPatterns::default(),
        &CopyLimits::default(),
    )
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::BlockedFileDetected);
    assert!(err.message.contains(".env.production (SECRET_FILE"));
    fs::remove_file(copy.join(".env.production")).unwrap();
    fs::write(
        copy.join("n0.txt"),
        format!("{}_{}", "ghp", "R8f2Kq9ZtL4mX7vB1nC6wD3yH5jP0sGaEuTo"),
    )
    .unwrap();
    let err = preview(
        &baseline,
        &SecretPatterns::default(),
        &CopyLimits::default(),
    )
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::BlockedFileDetected);
    assert!(!err.message.contains("ghp_"), "{}", err.message);
    fs::remove_file(copy.join("n0.txt")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", copy.join("n0.txt")).unwrap();
    let err = preview(
        &baseline,
        &SecretPatterns::default(),
        &CopyLimits::default(),
    )
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::UnsafePath);
    fs::remove_file(copy.join("n0.txt")).unwrap();
    // A name that reads as another one ("n0\u{202E}txt.sh" shows as "n0hs.txt").
    fs::write(copy.join("n0\u{202E}txt.sh"), b"x").unwrap();
    let err = preview(
        &baseline,
        &SecretPatterns::default(),
        &CopyLimits::default(),
    )
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::UnsafePath);
    assert!(err.message.contains("\\u{202e}"), "{}", err.message);
}

/// A hostile agent's sparse file far past the copy's limit (2 GiB that cost it no disk) is
/// refused as it is staged: git is stopped once its new objects pass the limit, they are
/// removed, the baseline's objects do not grow by it, and nothing reads it. So are more new
/// files than the change limit could pass. Before, `git add` wrote every byte into the
/// baseline, and the preview then read it whole.
#[test]
fn a_copy_past_its_limits_is_refused_as_it_is_staged() {
    let f = Fixture::new(&[("a.txt", b"a\n")]);
    f.commit_all();
    let (report, baseline) = f.copy(&[]);
    let copy = &report.copy_directory;
    let objects = baseline.git_dir().join("objects");
    let before = bytes_under(&objects);
    sparse(&copy.join("big.bin"), 2 << 30);
    let limits = CopyLimits::default();
    let err = preview(&baseline, &SecretPatterns::default(), &limits).unwrap_err();
    assert_eq!(err.code, ErrorCode::ChangeLimitExceeded, "{}", err.message);
    assert!(
        err.message.contains("what was staged was removed"),
        "{}",
        err.message
    );
    let err = read_only_changes(&baseline, &limits).unwrap_err();
    assert_eq!(err.code, ErrorCode::ChangeLimitExceeded, "{}", err.message);
    let grew = bytes_under(&objects) - before;
    assert!(
        grew < 1 << 20,
        "the baseline's objects grew by {grew} bytes"
    );
    fs::remove_file(copy.join("big.bin")).unwrap();

    let tight = CopyLimits {
        max_changed_files: 2,
        ..CopyLimits::default()
    };
    for i in 0..4 {
        fs::write(copy.join(format!("n{i}.txt")), format!("{i}")).unwrap();
    }
    let err = preview(&baseline, &SecretPatterns::default(), &tight).unwrap_err();
    assert_eq!(err.code, ErrorCode::ChangeLimitExceeded, "{}", err.message);
    assert!(
        err.message.contains("more than 2 new or changed files"),
        "{}",
        err.message
    );
    let grew = bytes_under(&objects) - before;
    assert!(
        grew < 1 << 20,
        "the baseline's objects grew by {grew} bytes"
    );
    fs::remove_file(copy.join("n0.txt")).unwrap();
    fs::remove_file(copy.join("n1.txt")).unwrap();
    let p = preview(&baseline, &SecretPatterns::default(), &tight).unwrap();
    assert_eq!(p.files.len(), 2);
}

/// Staging itself is bounded, whatever the file became since any look at it: a 2 GiB sparse
/// file under a 32 MiB limit stops git once its new objects pass the limit, they are
/// removed, and the baseline's objects do not grow by it; so does a file just past the
/// bound, which git may well finish writing between two looks. Before, git wrote the whole
/// file into the baseline.
#[test]
fn a_file_grown_past_the_limit_while_staged_costs_the_baseline_nothing() {
    let f = Fixture::new(&[("a.txt", b"a\n")]);
    f.commit_all();
    let (report, baseline) = f.copy(&[]);
    let copy = &report.copy_directory;
    let objects = baseline.git_dir().join("objects");
    let before = bytes_under(&objects);
    sparse(&copy.join("big.bin"), 2 << 30);
    let limits = CopyLimits {
        max_bytes: 32 << 20,
        ..CopyLimits::default()
    };
    let err = stage_tree_within(&baseline, &limits).unwrap_err();
    assert_eq!(err.code, ErrorCode::ChangeLimitExceeded, "{}", err.message);
    assert!(
        err.message.contains("as git staged them"),
        "{}",
        err.message
    );
    let grew = bytes_under(&objects) - before;
    assert!(
        grew < 1 << 20,
        "the baseline's objects grew by {grew} bytes"
    );
    let left: Vec<_> = fs::read_dir(baseline.dir())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("objects-"))
        .collect();
    assert!(left.is_empty(), "a staging directory was left: {left:?}");

    // Just past the bound: git may well finish between two looks; what it wrote is measured
    // before it joins the baseline's objects.
    sparse(&copy.join("big.bin"), 49 << 20);
    let err = stage_tree_within(&baseline, &limits).unwrap_err();
    assert_eq!(err.code, ErrorCode::ChangeLimitExceeded, "{}", err.message);
    let grew = bytes_under(&objects) - before;
    assert!(
        grew < 1 << 20,
        "the baseline's objects grew by {grew} bytes"
    );

    fs::remove_file(copy.join("big.bin")).unwrap();
    fs::write(copy.join("b.txt"), b"b\n").unwrap();
    let tree = stage_tree_within(&baseline, &limits).unwrap();
    let listed = git(
        copy,
        &[
            "--git-dir",
            baseline.git_dir().to_str().unwrap(),
            "ls-tree",
            "-r",
            &tree,
        ],
    );
    assert!(String::from_utf8_lossy(&listed).contains("b.txt"));
}

/// A hostile agent's own `.gitattributes` (`* -diff`), hidden from the patch by a
/// `.gitignore` that ignores both files, does not turn its edits into binary hunks: the
/// preview's attributes come from the baseline's commit (git 2.43 and later; before, the
/// baseline unsets `diff` for every file, and git decides by the bytes), and the edit
/// is read as text. Before, every changed file showed as `GIT binary patch`.
#[test]
fn an_agents_own_attributes_do_not_hide_its_edits_from_the_preview() {
    let version = git(Path::new("/"), &["--version"]);
    let minor: Option<u32> = String::from_utf8_lossy(&version)
        .split_whitespace()
        .nth(2)
        .and_then(|v| {
            let mut parts = v.split('.');
            let major: u32 = parts.next()?.parse().ok()?;
            let minor: u32 = parts.next()?.parse().ok()?;
            (major == 2)
                .then_some(minor)
                .or((major > 2).then_some(u32::MAX))
        });
    if minor.is_none_or(|m| m < 32) {
        eprintln!("skipped: git before 2.32 makes no copies ({version:?})");
        return;
    }
    let f = Fixture::new(&[("src/a.rs", b"fn a() {}\n")]);
    f.commit_all();
    let (report, baseline) = f.copy(&[]);
    let copy = &report.copy_directory;
    fs::write(copy.join("src/.gitattributes"), b"* -diff\n").unwrap();
    fs::write(copy.join("src/.gitignore"), b".gitignore\n.gitattributes\n").unwrap();
    fs::write(copy.join("src/a.rs"), b"fn a() {}\nfn evil() {}\n").unwrap();
    let p = preview(
        &baseline,
        &SecretPatterns::default(),
        &CopyLimits::default(),
    )
    .unwrap();
    assert_eq!(p.files.len(), 1, "{:?}", p.files);
    assert!(!p.files[0].binary, "{:?}", p.files[0]);
    assert_eq!(p.files[0].insertions, Some(1));
    let text = String::from_utf8_lossy(&p.patch);
    assert!(text.contains("+fn evil() {}"), "{text}");
}

/// The EOL/BOM matrix through the real pipeline: a project whose `.gitattributes` asks for
/// conversions, copied, edited, previewed and integrated.
#[test]
fn line_endings_and_boms_survive_the_whole_pipeline() {
    type Case<'a> = (&'a str, &'a [u8], &'a [u8], Result<&'a [u8], ErrorCode>);
    let cases: &[Case<'_>] = &[
        ("lf.txt", b"a\nb\nc\n", b"a\nB\nc\n", Ok(b"a\nB\nc\n")),
        (
            "crlf.txt",
            b"a\r\nb\r\n",
            b"a\r\nB\r\nc\r\n",
            Ok(b"a\r\nB\r\nc\r\n"),
        ),
        (
            "mixed.txt",
            b"a\r\nb\nc\r\n",
            b"a\r\nB\nc\r\nd\n",
            Ok(b"a\r\nB\nc\r\nd\n"),
        ),
        (
            "bom-kept.txt",
            b"\xEF\xBB\xBFa\nb\n",
            b"\xEF\xBB\xBFa\nB\n",
            Ok(b"\xEF\xBB\xBFa\nB\n"),
        ),
        (
            "bom-dropped.txt",
            b"\xEF\xBB\xBFa\nb\n",
            b"a\nB\n",
            Ok(b"\xEF\xBB\xBFa\nB\n"),
        ),
        (
            "lf-to-crlf.txt",
            b"a\nb\n",
            b"a\r\nb\r\n",
            Err(ErrorCode::LineEndingsChanged),
        ),
        (
            "mixed-flipped.txt",
            b"a\r\nb\nc\r\n",
            b"a\r\nb\r\nc\r\n",
            Err(ErrorCode::LineEndingsChanged),
        ),
        (
            "bom-added.txt",
            b"a\n",
            b"\xEF\xBB\xBFa\n",
            Err(ErrorCode::LineEndingsChanged),
        ),
    ];
    for (name, original, edited, expected) in cases {
        let f = Fixture::new(&[
            (".gitattributes", b"* text=auto eol=crlf\n"),
            (name, original),
        ]);
        f.commit_all();
        // Git's checkout could have converted the work tree: put the exact bytes back.
        fs::write(f.project.join(name), original).unwrap();
        let (report, baseline) = f.copy(&[]);
        assert_eq!(
            fs::read(report.copy_directory.join(name)).unwrap(),
            *original
        );
        fs::write(report.copy_directory.join(name), edited).unwrap();
        let p = preview(
            &baseline,
            &SecretPatterns::default(),
            &CopyLimits::default(),
        )
        .unwrap();
        assert_eq!(p.files.len(), 1, "{name}");
        let changes = plan(&baseline, &p).unwrap();
        assert_eq!(changes[0].baseline.as_deref(), Some(*original), "{name}");
        assert_eq!(changes[0].result.as_deref(), Some(*edited), "{name}");
        let result = integrate_into(&f, &changes);
        match expected {
            Ok(bytes) => {
                let r = result.unwrap();
                assert_eq!(fs::read(f.project.join(name)).unwrap(), *bytes, "{name}");
                assert_eq!(
                    r.restored_byte_order_marks.is_empty(),
                    *name != "bom-dropped.txt"
                );
            }
            Err(code) => {
                assert_eq!(result.unwrap_err().code, *code, "{name}");
                assert_eq!(fs::read(f.project.join(name)).unwrap(), *original, "{name}");
            }
        }
    }
}

#[test]
fn integration_applies_exactly_the_patch_and_refuses_a_changed_original() {
    let f = Fixture::new(&[("a.txt", b"a\n"), ("b.txt", b"b\n"), ("sub/c.txt", b"c\n")]);
    f.commit_all();
    let (report, baseline) = f.copy(&[]);
    let copy = &report.copy_directory;
    fs::write(copy.join("a.txt"), b"A\n").unwrap();
    fs::remove_file(copy.join("sub/c.txt")).unwrap();
    fs::create_dir_all(copy.join("new/dir")).unwrap();
    fs::write(copy.join("new/dir/d.txt"), b"d\n").unwrap();
    let p = preview(
        &baseline,
        &SecretPatterns::default(),
        &CopyLimits::default(),
    )
    .unwrap();
    let changes = plan(&baseline, &p).unwrap();

    // Someone edits the original after the preview: refused, nothing written.
    fs::write(f.project.join("sub/c.txt"), b"edited\n").unwrap();
    let err = integrate_into(&f, &changes).unwrap_err();
    assert_eq!(err.code, ErrorCode::SourceChanged);
    assert_eq!(fs::read(f.project.join("a.txt")).unwrap(), b"a\n");
    fs::write(f.project.join("sub/c.txt"), b"c\n").unwrap();

    let r = integrate_into(&f, &changes).unwrap();
    assert_eq!(r.files, ["a.txt", "new/dir/d.txt", "sub/c.txt"]);
    assert_eq!(fs::read(f.project.join("a.txt")).unwrap(), b"A\n");
    assert_eq!(fs::read(f.project.join("b.txt")).unwrap(), b"b\n");
    assert!(!f.project.join("sub/c.txt").exists());
    assert_eq!(fs::read(f.project.join("new/dir/d.txt")).unwrap(), b"d\n");
    // git in the original sees exactly those changes.
    let status = Command::new("git")
        .arg("-C")
        .arg(&f.project)
        .args(["status", "--porcelain", "--untracked-files=all"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&status.stdout),
        " M a.txt\n D sub/c.txt\n?? new/dir/d.txt\n"
    );
}

#[test]
fn the_baseline_runs_no_hooks_and_ignores_the_projects_git_config() {
    let f = Fixture::new(&[("a.txt", b"a\n")]);
    f.commit_all();
    let marker = f.project.parent().unwrap().join("hook-ran");
    let hooks = f.project.join(".git/hooks");
    for hook in ["pre-commit", "post-commit", "post-index-change"] {
        fs::write(
            hooks.join(hook),
            format!("#!/bin/sh\ntouch {}\n", marker.display()),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(hooks.join(hook), fs::Permissions::from_mode(0o755)).unwrap();
    }
    git(
        &f.project,
        &[
            "config",
            "core.fsmonitor",
            &format!("touch {}", marker.display()),
        ],
    );
    let (report, baseline) = f.copy(&[]);
    fs::write(report.copy_directory.join("a.txt"), b"b\n").unwrap();
    preview(
        &baseline,
        &SecretPatterns::default(),
        &CopyLimits::default(),
    )
    .unwrap();
    assert!(!marker.exists(), "a hook or fsmonitor of the project ran");
    assert!(baseline.git_dir().starts_with(f.home.join("baselines")));
}

fn loose(git_dir: &Path, id: &str) -> bool {
    git_dir
        .join("objects")
        .join(&id[..2])
        .join(&id[2..])
        .exists()
}

#[test]
fn a_borrowing_baseline_writes_only_what_the_source_lacks_and_still_integrates() {
    let f = Fixture::new(&[("a.txt", b"tracked a\n"), ("b.txt", b"tracked b\n")]);
    f.commit_all();
    fs::write(f.project.join("b.txt"), b"modified b\n").unwrap();
    fs::write(f.project.join("u.txt"), b"untracked u\n").unwrap();
    let (report, baseline) = f.copy(&[]);
    let git_dir = baseline.git_dir();
    let alternates = fs::read_to_string(git_dir.join("objects/info/alternates")).unwrap();
    assert_eq!(
        alternates.trim_end(),
        fs::canonicalize(f.project.join(".git/objects"))
            .unwrap()
            .to_str()
            .unwrap()
    );
    assert!(!loose(&git_dir, &blob_id(b"tracked a\n")), "borrowed");
    assert!(loose(&git_dir, &blob_id(b"modified b\n")));
    assert!(loose(&git_dir, &blob_id(b"untracked u\n")));

    // The whole pipeline works on borrowed objects.
    let copy = &report.copy_directory;
    fs::write(copy.join("a.txt"), b"new a\n").unwrap();
    let p = preview(
        &baseline,
        &SecretPatterns::default(),
        &CopyLimits::default(),
    )
    .unwrap();
    let changes = plan(&baseline, &p).unwrap();
    let r = integrate_into(&f, &changes).unwrap();
    assert_eq!(r.files, ["a.txt"]);
    assert_eq!(fs::read(f.project.join("a.txt")).unwrap(), b"new a\n");

    // Made after the copy, it borrows the same way.
    let later = Baseline::create_from(&f.home.join("baselines/later"), copy, &f.project).unwrap();
    assert!(later.git_dir().join("objects/info/alternates").exists());
    assert!(loose(&later.git_dir(), &blob_id(b"modified b\n")));
    assert!(!loose(&later.git_dir(), &blob_id(b"tracked a\n")));
    // The self-contained baseline holds every object itself.
    let own = Baseline::create(&f.home.join("baselines/own"), copy).unwrap();
    assert!(!own.git_dir().join("objects/info/alternates").exists());
    assert!(loose(&own.git_dir(), &blob_id(b"new a\n")));
}
