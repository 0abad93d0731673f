//! The client side of the copy-workspace extension against a hostile remote: forged `patch`
//! artifacts, applied with `legate_remote::copy::apply_returned` to a real local copy (a git
//! project copied by `legate-workspace`, with its private baseline), must be refused with
//! the copy left exactly at its baseline.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use a2a::{Artifact, Part, Task, TaskState, TaskStatus};
use legate_core::ErrorCode;
use legate_core::remote::{MANIFEST_KEY, PostState, ReturnedManifest, baseline_id, sha256_hex};
use legate_remote::copy;
use proptest::prelude::*;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::Command;

fn git(dir: &Path, args: &[&str]) {
    let ok = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@t")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@t")
        .status()
        .unwrap()
        .success();
    assert!(ok, "git {args:?}");
}

/// A committed project holding `a.txt`, and its copy as task `t` under a Legate home.
struct Local {
    _dir: tempfile::TempDir,
    home: PathBuf,
    root: PathBuf,
    id: String,
}

fn local() -> Local {
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(dir.path()).unwrap();
    let project = base.join("project");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("a.txt"), "alpha\n").unwrap();
    git(&project, &["init", "-q"]);
    git(&project, &["add", "-A"]);
    git(&project, &["commit", "-q", "-m", "init"]);
    let home = base.join("home");
    let limits = legate_workspace::CopyLimits::default();
    let secrets = legate_workspace::SecretPatterns::default();
    let sel = legate_workspace::select(&project, &[], &secrets, &limits).unwrap();
    let (report, baseline) = legate_workspace::make_copy_with_baseline(
        &sel,
        &home.join("copies/t"),
        &home.join("baselines/t"),
        &limits,
    )
    .unwrap();
    let id = baseline_id(&legate_workspace::baseline_files(&baseline).unwrap());
    Local {
        _dir: dir,
        home,
        root: report.copy_directory,
        id,
    }
}

/// A finished remote task whose `patch` artifact holds `parts`.
fn task(parts: Vec<Part>) -> Task {
    Task {
        id: "remote-1".into(),
        context_id: "c".into(),
        status: TaskStatus {
            state: TaskState::Completed,
            message: None,
            timestamp: None,
        },
        artifacts: Some(vec![Artifact {
            artifact_id: copy::PATCH_ARTIFACT.into(),
            name: None,
            description: None,
            parts,
            metadata: None,
            extensions: None,
        }]),
        history: None,
        metadata: None,
    }
}

/// A forged artifact: `patch` with a manifest that vouches for its bytes and `post`.
fn forged(l: &Local, patch: &str, post: Vec<PostState>) -> Task {
    let m = ReturnedManifest {
        baseline_id: l.id.clone(),
        patch_sha256: sha256_hex(patch.as_bytes()),
        patch_length: patch.len() as u64,
        post_state: post,
    };
    task(vec![
        Part::text(patch),
        Part::data(json!({ MANIFEST_KEY: m, "sha256": m.patch_sha256 })),
    ])
}

fn add(path: &str) -> String {
    format!(
        "diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+owned\n"
    )
}

fn post(path: &str) -> PostState {
    PostState {
        path: path.into(),
        sha256: Some(sha256_hex(b"owned\n")),
        executable: false,
    }
}

/// The copy's files and their bytes.
fn snapshot(root: &Path) -> Vec<(PathBuf, Option<Vec<u8>>)> {
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            if m.is_dir() {
                dirs.push(p.clone());
            }
            out.push((p.clone(), m.is_file().then(|| std::fs::read(&p).unwrap())));
        }
    }
    out.sort();
    out
}

fn refused_unchanged(l: &Local, t: &Task) -> legate_core::Error {
    let before = snapshot(&l.root);
    let e = copy::apply_returned(&l.root, t).unwrap_err();
    assert_eq!(snapshot(&l.root), before, "{e}");
    assert!(!l.home.join("copies/x").exists() && !l.home.join("x").exists());
    e
}

#[test]
fn writes_outside_and_through_symlinks_are_refused() {
    let l = local();
    let link = "diff --git a/l b/l\nnew file mode 120000\n--- /dev/null\n+++ b/l\n@@ -0,0 +1 @@\n+..\n\\ No newline at end of file\n";
    // The manifest vouches for the link's real content: only the mode check stands between.
    let as_link = PostState {
        path: "l".into(),
        sha256: Some(sha256_hex(b"..")),
        executable: false,
    };
    for (patch, post) in [
        (add("../x"), vec![post("../x")]),
        (add("../copies/x"), vec![post("../copies/x")]),
        (
            add(".git/hooks/post-checkout"),
            vec![post(".git/hooks/post-checkout")],
        ),
        (link.to_string(), vec![as_link.clone()]),
        (
            format!("{link}{}", add("l/x")),
            vec![as_link.clone(), post("l/x")],
        ),
        (add("ok.txt"), vec![post("ok.txt"), post("../x")]),
    ] {
        let e = refused_unchanged(&l, &forged(&l, &patch, post));
        assert_eq!(e.code, ErrorCode::RemoteProtocolError, "{patch}: {e}");
    }
    // The same shape with a safe path applies: the refusals above are the paths'.
    copy::apply_returned(&l.root, &forged(&l, &add("ok.txt"), vec![post("ok.txt")])).unwrap();
    assert_eq!(std::fs::read(l.root.join("ok.txt")).unwrap(), b"owned\n");
}

#[test]
fn missing_malformed_or_oversized_artifacts_are_refused() {
    let l = local();
    let mut none = task(vec![]);
    none.artifacts = None;
    assert!(
        refused_unchanged(&l, &none)
            .message
            .contains("no `patch` artifact")
    );
    let failed = task(vec![Part::data(
        json!({"error": {"code": "CHANGE_LIMIT_EXCEEDED", "message": "too many"}}),
    )]);
    assert!(
        refused_unchanged(&l, &failed)
            .message
            .contains("CHANGE_LIMIT_EXCEEDED")
    );
    let url = task(vec![
        Part::url("https://example.com/p.diff"),
        Part::data(json!({})),
    ]);
    assert!(refused_unchanged(&l, &url).message.contains("URL"));
    let mut unknown = forged(&l, &add("ok.txt"), vec![post("ok.txt")]);
    let parts = &mut unknown.artifacts.as_mut().unwrap()[0].parts;
    if let a2a::PartContent::Data(v) = &mut parts[1].content {
        v[MANIFEST_KEY]["extra"] = json!(1);
    }
    assert!(
        refused_unchanged(&l, &unknown)
            .message
            .contains("malformed")
    );
    let big = forged(&l, &add("ok.txt"), vec![post("ok.txt")]);
    let e = copy::apply_returned_bounded(&l.root, &big, 10).unwrap_err();
    assert_eq!(e.code, ErrorCode::CopyTooLarge);
    assert!(!l.root.join("ok.txt").exists());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Whatever patch text a remote sends with a manifest that vouches for its bytes but
    /// names nothing, the copy never changes: either git refuses it, or the paths it
    /// changes are not the manifest's.
    #[test]
    fn no_forged_patch_changes_the_copy_unless_the_manifest_names_it(
        path in "[a-z]{1,4}|\\.\\./[a-z]{1,3}|[a-z]{1,3}/\\.\\./\\.\\./[a-z]|/tmp/[a-z]{1,3}|\\.git/[a-z]{1,3}",
        body in "[a-z+ -]{0,12}",
    ) {
        let l = local();
        let patch = format!("{}{}\n", add(&path), body);
        let before = snapshot(&l.root);
        let r = copy::apply_returned(&l.root, &forged(&l, &patch, vec![]));
        prop_assert!(r.is_err());
        prop_assert_eq!(snapshot(&l.root), before);
    }
}
