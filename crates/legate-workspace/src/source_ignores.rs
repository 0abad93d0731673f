//! Which paths the original project's git ignores: its `.gitignore` files (those that ignore
//! themselves too, which a copy never holds), `.git/info/exclude` and the user's own excludes
//! file, asked of git in the original (`git check-ignore`), with the user's global
//! configuration and without the system's, as Legate reads a project (`Git::source`).
//!
//! It owns that question only; it never reads a file's content nor writes anything.

use crate::git::Git;
use legate_core::{Error, ErrorCode};
use std::path::Path;

/// The paths of `paths` that git ignores in the project at `root`, in the order given. A path
/// that an ignore rule names and a later `!` rule takes back is not ignored. A path git cannot
/// answer for (one inside a submodule, or past a symbolic link, of the original) is
/// `UNSAFE_PATH`, naming it: nothing is assumed of it.
pub fn ignored_in_source(root: &Path, paths: &[&str]) -> Result<Vec<String>, Error> {
    match ask(root, paths) {
        Ok(ignored) => Ok(ignored),
        // One path git cannot answer for fails the whole batch: ask each alone, to name it.
        Err(_) if paths.len() > 1 => {
            let mut ignored = Vec::new();
            for p in paths {
                ignored.extend(ask(root, std::slice::from_ref(p))?);
            }
            Ok(ignored)
        }
        Err(e) => Err(e),
    }
}

/// One `check-ignore` for `paths`.
fn ask(root: &Path, paths: &[&str]) -> Result<Vec<String>, Error> {
    if paths.is_empty() {
        return Ok(Vec::new());
    }
    // Each line of `--stdin` is a pathspec: `./` makes a name that starts with `:` (`:!x`,
    // `:(top)…`) the path it is, not magic.
    let mut input = Vec::new();
    for p in paths {
        input.extend_from_slice(b"./");
        input.extend_from_slice(p.as_bytes());
        input.push(0);
    }
    let unanswered = |why: String| {
        Error::new(
            ErrorCode::UnsafePath,
            format!(
                "{}: the original project's git could not say whether it ignores this path ({why}); nothing was written",
                paths[0]
            ),
        )
    };
    // `-v -n`: one record per path (source, line, pattern, path); 1 is "none ignored".
    let out = Git::source(root)
        .run_input_allowing(
            &[
                "check-ignore",
                "-z",
                "--stdin",
                "--verbose",
                "--non-matching",
            ],
            Some(&input),
            &[0, 1],
        )
        .map_err(|e| {
            Error::caused_by(
                ErrorCode::UnsafePath,
                format!(
                    "{}: the original project's git could not say whether it ignores this path; nothing was written",
                    paths[0]
                ),
                e,
            )
        })?;
    let mut fields: Vec<&[u8]> = out.split(|b| *b == 0).collect();
    // The last record's NUL leaves one empty field after it.
    if fields.last().is_some_and(|f| f.is_empty()) {
        fields.pop();
    }
    if fields.len() != paths.len() * 4 {
        return Err(unanswered("it answered another number of paths".into()));
    }
    let mut ignored = Vec::new();
    for (record, asked) in fields.chunks(4).zip(paths) {
        let [source, _line, pattern, path] = record else {
            return Err(unanswered("it answered a record of another shape".into()));
        };
        // In order, each the path it was asked (its `./` kept).
        if path.strip_prefix(b"./") != Some(asked.as_bytes()) {
            return Err(unanswered("it answered for another path".into()));
        }
        if !source.is_empty() && !pattern.starts_with(b"!") {
            ignored.push((*asked).to_string());
        }
    }
    Ok(ignored)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use std::process::Command;

    fn project() -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let ok = Command::new("git")
            .args(["init", "-q"])
            .current_dir(&root)
            .status()
            .unwrap()
            .success();
        assert!(ok);
        (dir, root)
    }

    /// Every source of ignore rules counts: a nested `.gitignore` that ignores itself, the
    /// project's, `.git/info/exclude`; a `!` rule takes a path back; paths that do not exist
    /// are asked about as they would be written, and names git would read as pathspec magic
    /// as the names they are.
    #[test]
    fn the_originals_own_ignore_rules_are_read() {
        let (_dir, root) = project();
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
            ":!x.log",
            ":(top)src/y.rs",
        ];
        assert_eq!(
            ignored_in_source(&root, &asked).unwrap(),
            [
                ".venv/lib/site-packages/zz.pth",
                "build/out/x.o",
                "debug.log",
                "local.txt",
                ":!x.log",
            ]
        );
        assert!(
            ignored_in_source(&root, &["src/main.rs"])
                .unwrap()
                .is_empty()
        );
        assert!(ignored_in_source(&root, &[]).unwrap().is_empty());
    }

    /// A path past a symbolic link of the original is one git cannot answer for: refused,
    /// named, whatever else was asked with it.
    #[test]
    fn a_path_git_cannot_answer_for_is_refused_by_name() {
        let (_dir, root) = project();
        std::os::unix::fs::symlink("/tmp", root.join("linked")).unwrap();
        let err = ignored_in_source(&root, &["src/a.rs", "linked/x.txt"]).unwrap_err();
        assert_eq!(err.code, ErrorCode::UnsafePath, "{}", err.message);
        assert!(err.message.starts_with("linked/x.txt:"), "{}", err.message);
    }
}
