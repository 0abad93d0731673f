//! Which paths the original project's git ignores: its `.gitignore` files (those that ignore
//! themselves too, which a copy never holds), `.git/info/exclude` and the user's own excludes
//! file, asked of git in the original as the user runs it (`git check-ignore`).
//!
//! It owns that question only; it never reads a file's content nor writes anything.

use crate::git::Git;
use legate_core::{Error, ErrorCode};
use std::path::Path;

/// The paths of `paths` that git ignores in the project at `root`, in the order given. A path
/// that an ignore rule names and a later `!` rule takes back is not ignored.
pub fn ignored_in_source(root: &Path, paths: &[&str]) -> Result<Vec<String>, Error> {
    if paths.is_empty() {
        return Ok(Vec::new());
    }
    let mut input = Vec::new();
    for p in paths {
        input.extend_from_slice(p.as_bytes());
        input.push(0);
    }
    // `-v -n`: one record per path (source, line, pattern, path); 1 is "none ignored".
    let out = Git::source(root).run_input_allowing(
        &[
            "check-ignore",
            "-z",
            "--stdin",
            "--verbose",
            "--non-matching",
        ],
        Some(&input),
        &[0, 1],
    )?;
    let fields: Vec<&[u8]> = out.split(|b| *b == 0).collect();
    let mut ignored = Vec::new();
    for record in fields.chunks(4) {
        let [source, _line, pattern, path] = record else {
            // The split leaves one empty field after the last NUL.
            if record.iter().all(|f| f.is_empty()) {
                continue;
            }
            return Err(Error::new(
                ErrorCode::Internal,
                "git check-ignore answered a record of another shape",
            ));
        };
        if !source.is_empty() && !pattern.starts_with(b"!") {
            ignored.push(String::from_utf8_lossy(path).into_owned());
        }
    }
    Ok(ignored)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use std::process::Command;

    /// Every source of ignore rules counts: a nested `.gitignore` that ignores itself, the
    /// project's, `.git/info/exclude`; a `!` rule takes a path back; paths that do not exist
    /// are asked about as they would be written.
    #[test]
    fn the_originals_own_ignore_rules_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let ok = Command::new("git")
            .args(["init", "-q"])
            .current_dir(&root)
            .status()
            .unwrap()
            .success();
        assert!(ok);
        std::fs::create_dir(root.join(".venv")).unwrap();
        std::fs::write(root.join(".venv/.gitignore"), "*\n").unwrap();
        std::fs::write(root.join(".gitignore"), "build/\n*.log\n!keep.log\n").unwrap();
        std::fs::write(root.join(".git/info/exclude"), "local.txt\n").unwrap();
        let asked = [
            ".venv/lib/site-packages/zz.pth",
            "build/out/x.o",
            "src/main.rs",
            "debug.log",
            "keep.log",
            "local.txt",
            "a b/c\nd.txt",
        ];
        assert_eq!(
            ignored_in_source(&root, &asked).unwrap(),
            [
                ".venv/lib/site-packages/zz.pth",
                "build/out/x.o",
                "debug.log",
                "local.txt"
            ]
        );
        assert!(
            ignored_in_source(&root, &["src/main.rs"])
                .unwrap()
                .is_empty()
        );
        assert!(ignored_in_source(&root, &[]).unwrap().is_empty());
    }
}
