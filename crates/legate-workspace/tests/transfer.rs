//! The copy-workspace extension's file-system half, end to end on real copies and real git:
//! a local copy read for sending, a remote copy made from those files, the remote's patch
//! applied back to the local copy, and hostile patches and manifests that must leave the
//! local copy exactly as it was.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use legate_core::ErrorCode;
use legate_core::remote::{PostState, ReturnedManifest, baseline_id, sha256_hex};
use legate_review::*;
use legate_workspace::*;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// The transfer bound the tests apply with (the default).
const MAX: u64 = legate_core::remote::DEFAULT_MAX_TRANSFER_BYTES;

struct Pair {
    f: Fixture,
    local: Baseline,
    remote: Baseline,
}

/// A local copy of a committed project, and a remote copy made from its files as sent.
fn pair() -> Pair {
    let f = Fixture::new(&[
        ("src/lib.rs", b"fn one() {}\n"),
        ("README.md", b"hello\n"),
        ("bin/run.sh", b"#!/bin/sh\necho hi\n"),
    ]);
    std::fs::set_permissions(
        f.project.join("bin/run.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    f.commit_all();
    let (_, local) = f.copy_as("local", &[]);
    let sent = read_copy(local.copy(), u64::MAX, 100).unwrap();
    assert_eq!(
        sent.iter().map(|s| s.path.as_str()).collect::<Vec<_>>(),
        ["README.md", "bin/run.sh", "src/lib.rs"]
    );
    assert!(sent[1].executable && !sent[0].executable);
    let remote_home = f.home.join("remote");
    let (report, remote) = make_copy_from_files(
        &sent,
        &remote_home.join("copies/r1"),
        &remote_home.join("baselines/r1"),
        &CopyLimits::default(),
    )
    .unwrap();
    assert_eq!(report.included_files, 3);
    Pair { f, local, remote }
}

fn preview_of(b: &Baseline) -> Preview {
    preview(b, &SecretPatterns::default(), &CopyLimits::default()).unwrap()
}

/// What the remote returns for its copy's current state.
fn returned(remote: &Baseline) -> (Vec<u8>, ReturnedManifest) {
    let p = preview_of(remote);
    let manifest = ReturnedManifest {
        baseline_id: baseline_id(&baseline_files(remote).unwrap()),
        patch_sha256: p.sha256.clone(),
        patch_length: p.patch_length,
        post_state: post_state(remote, &p).unwrap(),
    };
    (p.patch, manifest)
}

fn snapshot(root: &Path) -> Vec<(String, Vec<u8>, u32)> {
    files_under(root)
        .into_iter()
        .map(|p| {
            let full = root.join(&p);
            let mode = std::fs::metadata(&full).unwrap().permissions().mode() & 0o777;
            (p, std::fs::read(full).unwrap(), mode)
        })
        .collect()
}

#[test]
fn both_sides_agree_on_the_baseline_and_the_patch_round_trips() {
    let t = pair();
    assert_eq!(
        baseline_id(&baseline_files(&t.local).unwrap()),
        baseline_id(&baseline_files(&t.remote).unwrap()),
        "the remote copy's baseline is exactly the files sent"
    );
    let r = t.remote.copy();
    write(r, "src/lib.rs", b"fn one() {}\nfn two() {}\n");
    write(r, "src/new.bin", &[0, 159, 146, 150, 255]);
    std::fs::remove_file(r.join("README.md")).unwrap();
    std::fs::set_permissions(
        r.join("src/new.bin"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let (patch, manifest) = returned(&t.remote);
    assert_eq!(manifest.post_state.len(), 3);
    assert!(
        manifest
            .post_state
            .iter()
            .any(|p| p.path == "README.md" && p.sha256.is_none())
    );
    let changes = apply_returned(&t.local, &patch, &manifest, MAX).unwrap();
    assert_eq!(changes.len(), 3);
    let (local, remote) = (preview_of(&t.local), preview_of(&t.remote));
    assert_eq!(
        local.sha256, remote.sha256,
        "the local patch equals the remote's"
    );
    assert_eq!(local.patch, remote.patch);
    assert_eq!(snapshot(t.local.copy()), snapshot(t.remote.copy()));
    // Applying the same cumulative patch again (a later turn's answer) changes nothing.
    apply_returned(&t.local, &patch, &manifest, MAX).unwrap();
    assert_eq!(preview_of(&t.local).sha256, remote.sha256);
    drop(t.f);
}

/// A file in the local copy an agent's process made or grew (an earlier local turn's: 2 GiB,
/// sparse, no disk to the agent) is bounded while the copy is staged to apply a remote's
/// patch: `COPY_TOO_LARGE`, the baseline's objects do not grow by it, nothing is applied.
/// Before, staging wrote the whole file into the baseline.
#[test]
fn a_huge_local_file_is_refused_as_the_copy_is_staged_for_a_remote_patch() {
    let t = pair();
    write(t.remote.copy(), "src/lib.rs", b"fn one() {}\nfn two() {}\n");
    let (patch, manifest) = returned(&t.remote);
    let objects = t.local.git_dir().join("objects");
    let before = bytes_under(&objects);
    sparse(&t.local.copy().join("huge.bin"), 2 << 30);
    let e = apply_returned(&t.local, &patch, &manifest, MAX).unwrap_err();
    assert_eq!(e.code, ErrorCode::CopyTooLarge, "{e}");
    assert!(e.message.contains("the transfer bound"), "{e}");
    let grew = bytes_under(&objects) - before;
    assert!(
        grew < 1 << 20,
        "the baseline's objects grew by {grew} bytes"
    );
    assert_eq!(
        std::fs::read(t.local.copy().join("src/lib.rs")).unwrap(),
        b"fn one() {}\n"
    );
    std::fs::remove_file(t.local.copy().join("huge.bin")).unwrap();
    apply_returned(&t.local, &patch, &manifest, MAX).unwrap();
    drop(t.f);
}

/// A patch that expands past the transfer bound (a binary hunk of zeros, which a hostile
/// remote deflates to a few kilobytes; a text file larger than the bound) is `COPY_TOO_LARGE` before any of it is read or written.
#[test]
fn a_patch_that_expands_past_the_bound_is_refused_and_changes_nothing() {
    let t = pair();
    let r = t.remote.copy();
    write(r, "zeros.bin", &vec![0u8; 4 << 20]);
    let (patch, manifest) = returned(&t.remote);
    let before = snapshot(t.local.copy());
    let e = apply_returned(&t.local, &patch, &manifest, 1 << 20).unwrap_err();
    assert_eq!(e.code, ErrorCode::CopyTooLarge, "{e}");
    assert!(e.message.contains("4194304"), "{e}");
    assert_eq!(snapshot(t.local.copy()), before);
    // Without a binary hunk to declare it, the resulting file's size still is checked.
    std::fs::remove_file(r.join("zeros.bin")).unwrap();
    write(r, "big.txt", "line\n".repeat(1000).as_bytes());
    let (patch, manifest) = returned(&t.remote);
    let e = apply_returned(&t.local, &patch, &manifest, 4000).unwrap_err();
    assert_eq!(e.code, ErrorCode::CopyTooLarge, "{e}");
    assert!(e.message.contains("5000 bytes"), "{e}");
    assert_eq!(snapshot(t.local.copy()), before);
    apply_returned(&t.local, &patch, &manifest, MAX).unwrap();
    drop(t.f);
}

/// Runs a hostile apply and checks the local copy is exactly as before.
fn refused(t: &Pair, patch: &[u8], manifest: &ReturnedManifest, says: &str) {
    let before = snapshot(t.local.copy());
    let e = apply_returned(&t.local, patch, manifest, MAX).unwrap_err();
    assert_eq!(e.code, ErrorCode::RemoteProtocolError, "{e}");
    assert!(e.message.contains(says), "{says:?} not in {}", e.message);
    assert_eq!(
        snapshot(t.local.copy()),
        before,
        "the local copy is at its baseline"
    );
    assert_eq!(preview_of(&t.local).files.len(), 0);
}

#[test]
fn a_tampered_patch_or_a_lying_manifest_leaves_the_local_copy_at_its_baseline() {
    let t = pair();
    write(t.remote.copy(), "src/lib.rs", b"changed\n");
    let (patch, manifest) = returned(&t.remote);
    let mut tampered = patch.clone();
    let at = tampered.len() - 2;
    tampered[at] ^= 1;
    refused(&t, &tampered, &manifest, "sha256");
    // A patch whose sha256 the manifest vouches for, but whose result it does not.
    let mut lie = manifest.clone();
    lie.post_state[0].sha256 = Some(sha256_hex(b"something else\n"));
    refused(&t, &patch, &lie, "src/lib.rs");
    let mut mode = manifest.clone();
    mode.post_state[0].executable = true;
    refused(&t, &patch, &mode, "src/lib.rs");
    // A manifest that hides a path the patch changes, or names one it does not.
    let mut hides = manifest.clone();
    hides.post_state.clear();
    refused(&t, &patch, &hides, "src/lib.rs");
    let mut extra = manifest.clone();
    extra.post_state.push(PostState {
        path: "zzz".into(),
        sha256: None,
        executable: false,
    });
    refused(&t, &patch, &extra, "zzz");
    let mut other = manifest.clone();
    other.baseline_id = "0".repeat(64);
    refused(&t, &patch, &other, "baseline");
}

/// A patch a hostile remote writes by hand, with a manifest that vouches for it.
fn forged(patch: &str, post: Vec<PostState>) -> (Vec<u8>, ReturnedManifest, Vec<PostState>) {
    let bytes = patch.as_bytes().to_vec();
    let m = ReturnedManifest {
        baseline_id: String::new(),
        patch_sha256: sha256_hex(&bytes),
        patch_length: bytes.len() as u64,
        post_state: post.clone(),
    };
    (bytes, m, post)
}

#[test]
fn a_patch_that_writes_outside_or_through_a_symlink_is_refused() {
    let t = pair();
    let id = baseline_id(&baseline_files(&t.local).unwrap());
    let outside = t.f.home.join("x");
    let add = |path: &str| {
        format!(
            "diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+owned\n"
        )
    };
    let owned = Some(sha256_hex(b"owned\n"));
    let post = |path: &str| PostState {
        path: path.into(),
        sha256: owned.clone(),
        executable: false,
    };
    let symlink = "diff --git a/l b/l\nnew file mode 120000\n--- /dev/null\n+++ b/l\n@@ -0,0 +1 @@\n+..\n\\ No newline at end of file\n".to_string();
    let cases = [
        (add("../x"), vec![post("../x")]),
        (add("../../home/x"), vec![post("../../home/x")]),
        (add(".git/config"), vec![post(".git/config")]),
        (symlink.clone(), vec![post("l")]),
        (symlink + &add("l/x"), vec![post("l"), post("l/x")]),
    ];
    for (text, post) in cases {
        let (bytes, mut m, _) = forged(&text, post);
        m.baseline_id = id.clone();
        let before = snapshot(t.local.copy());
        let e = apply_returned(&t.local, &bytes, &m, MAX).unwrap_err();
        assert_eq!(e.code, ErrorCode::RemoteProtocolError, "{text}: {e}");
        assert_eq!(snapshot(t.local.copy()), before, "{text}");
        assert!(
            !outside.exists() && !t.f.home.join("copies/x").exists(),
            "{text}"
        );
        assert!(
            std::fs::symlink_metadata(t.local.copy().join("l")).is_err(),
            "{text}"
        );
    }
}

/// A hand-written patch of `copy from` headers (ninety bytes each make a whole file of the
/// baseline again, all held in git's memory) is refused before git runs, the copy untouched.
/// Before, a 260 KB patch of them drove `git apply` past 3.9 GB.
#[test]
fn a_patch_that_copies_files_is_refused_before_git_runs() {
    let t = pair();
    let id = baseline_id(&baseline_files(&t.local).unwrap());
    let mut text = String::new();
    let mut post = Vec::new();
    for i in 0..200 {
        text.push_str(&format!(
            "diff --git a/README.md b/c{i}\nsimilarity index 100%\ncopy from README.md\ncopy to c{i}\n"
        ));
        post.push(PostState {
            path: format!("c{i}"),
            sha256: Some(sha256_hex(b"hello\n")),
            executable: false,
        });
    }
    let (bytes, mut m, _) = forged(&text, post);
    m.baseline_id = id;
    let before = snapshot(t.local.copy());
    let e = apply_returned(&t.local, &bytes, &m, MAX).unwrap_err();
    assert_eq!(e.code, ErrorCode::RemoteProtocolError, "{e}");
    assert!(e.message.contains("copies or renames"), "{e}");
    assert_eq!(snapshot(t.local.copy()), before);
}

#[test]
fn reading_a_copy_refuses_links_and_stops_at_the_bound_before_reading() {
    let t = pair();
    let root = t.local.copy();
    let total: u64 = read_copy(root, u64::MAX, 100)
        .unwrap()
        .iter()
        .map(|f| f.bytes.len() as u64)
        .sum();
    assert!(read_copy(root, total, 100).is_ok());
    let e = read_copy(root, total - 1, 100).unwrap_err();
    assert_eq!(e.code, ErrorCode::CopyTooLarge);
    assert_eq!(
        read_copy(root, u64::MAX, 2).unwrap_err().code,
        ErrorCode::CopyTooLarge
    );
    std::os::unix::fs::symlink("/etc/passwd", root.join("src/link")).unwrap();
    assert_eq!(
        read_copy(root, u64::MAX, 100).unwrap_err().code,
        ErrorCode::UnsafePath
    );
}

#[test]
fn a_copy_from_received_files_refuses_hostile_paths_and_leaves_nothing() {
    let f = Fixture::new(&[]);
    let file = |p: &str| FileBytes {
        path: p.into(),
        bytes: b"x".to_vec(),
        executable: false,
    };
    for bad in [
        vec![file("../escape")],
        vec![file("/abs")],
        vec![file(".git/hooks/post-checkout")],
        vec![file("a\0b")],
        vec![file("A"), file("a")],
    ] {
        let copy = f.home.join("copies/bad");
        let e = make_copy_from_files(
            &bad,
            &copy,
            &f.home.join("baselines/bad"),
            &CopyLimits::default(),
        )
        .unwrap_err();
        assert!(
            matches!(e.code, ErrorCode::UnsafePath | ErrorCode::InvalidWorkspace),
            "{e}"
        );
        assert!(!copy.exists() && !f.home.join("baselines/bad").exists());
    }
    let limits = CopyLimits {
        max_files: 1,
        ..CopyLimits::default()
    };
    let e = make_copy_from_files(
        &[file("a"), file("b")],
        &f.home.join("copies/many"),
        &f.home.join("baselines/many"),
        &limits,
    )
    .unwrap_err();
    assert_eq!(e.code, ErrorCode::CopyLimitExceeded);
}

/// A pod's workspace that came back as files becomes the same patch a remote Legate would
/// return for the same change, and it reaches the local copy through `apply_returned`: an
/// edit, an addition, a deletion and a mode change, twice in a row (a second turn).
#[test]
fn files_that_came_back_make_the_remote_patch_and_apply() {
    let p = pair();
    let mut files = read_copy(p.local.copy(), u64::MAX, 100).unwrap();
    files.retain(|f| f.path != "README.md");
    files[1].bytes = b"fn one() { two() }\n".to_vec();
    files[0].executable = false;
    files.push(FileBytes {
        path: "src/new.rs".into(),
        bytes: b"pub fn two() {}\n".to_vec(),
        executable: false,
    });
    // The same change made on a remote copy gives the same patch, byte for byte.
    let remote = p.remote.copy();
    std::fs::remove_file(remote.join("README.md")).unwrap();
    std::fs::write(remote.join("src/lib.rs"), b"fn one() { two() }\n").unwrap();
    std::fs::set_permissions(
        remote.join("bin/run.sh"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    std::fs::write(remote.join("src/new.rs"), b"pub fn two() {}\n").unwrap();
    let (want_patch, want_manifest) = returned(&p.remote);
    let (patch, manifest) = returned_from_files(&p.local, &files, &CopyLimits::default()).unwrap();
    assert_eq!(patch, want_patch);
    assert_eq!(manifest, want_manifest);
    apply_returned(&p.local, &patch, &manifest, MAX).unwrap();
    assert_eq!(snapshot(p.local.copy()), snapshot(remote));
    // A second turn: from what the copy holds now.
    files.retain(|f| f.path != "src/new.rs");
    let (patch, manifest) = returned_from_files(&p.local, &files, &CopyLimits::default()).unwrap();
    apply_returned(&p.local, &patch, &manifest, MAX).unwrap();
    assert!(!p.local.copy().join("src/new.rs").exists());
    assert!(p.local.copy().join("src/lib.rs").exists());
    // Nothing of the scratch directories is left beside the baseline.
    let left: Vec<_> = std::fs::read_dir(p.local.dir())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("returned-"))
        .collect();
    assert!(left.is_empty());
}

/// Hostile files from a pod: an unsafe path, a `.git` entry, a path given twice (by case),
/// or more than the limits allow, are refused and the copy is unchanged.
#[test]
fn hostile_files_that_came_back_are_refused() {
    let p = pair();
    let before = snapshot(p.local.copy());
    let file = |path: &str| FileBytes {
        path: path.into(),
        bytes: b"x".to_vec(),
        executable: false,
    };
    for (files, code) in [
        (vec![file("../escape")], ErrorCode::UnsafePath),
        (vec![file(".git/config")], ErrorCode::UnsafePath),
        (vec![file("/etc/passwd")], ErrorCode::UnsafePath),
        (
            vec![file("a.txt"), file("A.TXT")],
            ErrorCode::InvalidWorkspace,
        ),
    ] {
        let e = returned_from_files(&p.local, &files, &CopyLimits::default()).unwrap_err();
        assert_eq!(e.code, code, "{}", e.message);
    }
    let limits = CopyLimits {
        max_files: 1,
        ..CopyLimits::default()
    };
    let e = returned_from_files(&p.local, &[file("a"), file("b")], &limits).unwrap_err();
    assert_eq!(e.code, ErrorCode::CopyLimitExceeded);
    assert_eq!(snapshot(p.local.copy()), before);
}
