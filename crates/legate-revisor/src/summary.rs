//! The deterministic answer to a question: a summary of the session's directory.
//!
//! This module owns walking the working directory and describing it. It only reads: it
//! never writes, never follows symbolic links, skips `.git`, stops after
//! [`MAX_FILES`] files, and reads at most [`MAX_READ`] bytes of any file. Its functions block,
//! so callers run them on a blocking thread.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The most files a walk looks at.
pub const MAX_FILES: usize = 10_000;
/// The most bytes read from one file to count its lines.
pub const MAX_READ: u64 = 1 << 20;
/// How many of the largest files the summary lists.
const LARGEST: usize = 5;
/// How many first lines are quoted for each mentioned file.
const FIRST_LINES: usize = 5;
/// How many files one mentioned name may match.
const MATCHES_PER_NAME: usize = 3;

/// One regular file found by the walk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileEntry {
    /// The path relative to the root, with `/` separators.
    pub relative: String,
    /// The size in bytes.
    pub bytes: u64,
}

/// The result of walking a root.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Walk {
    /// Files in path order.
    pub files: Vec<FileEntry>,
    /// Whether the walk stopped at [`MAX_FILES`].
    pub truncated: bool,
}

impl Walk {
    /// The sum of all file sizes.
    #[must_use]
    pub fn total_bytes(&self) -> u64 {
        self.files.iter().map(|f| f.bytes).sum()
    }
}

/// Walks `root` (not following links, skipping `.git`), in sorted order.
#[must_use]
pub fn walk(root: &Path) -> Walk {
    let mut out = Walk::default();
    let mut stack = vec![PathBuf::new()];
    while let Some(relative_dir) = stack.pop() {
        let Ok(read_dir) = fs::read_dir(root.join(&relative_dir)) else {
            continue;
        };
        let mut entries: Vec<_> = read_dir.filter_map(Result::ok).collect();
        entries.sort_by_key(std::fs::DirEntry::file_name);
        let mut subdirs = Vec::new();
        for entry in entries {
            let name = entry.file_name();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let relative = relative_dir.join(&name);
            if kind.is_dir() {
                if name != ".git" {
                    subdirs.push(relative);
                }
            } else if kind.is_file() {
                if out.files.len() >= MAX_FILES {
                    out.truncated = true;
                    return out;
                }
                let bytes = entry.metadata().map_or(0, |m| m.len());
                out.files.push(FileEntry {
                    relative: relative.to_string_lossy().replace('\\', "/"),
                    bytes,
                });
            }
        }
        // Depth first, in name order.
        stack.extend(subdirs.into_iter().rev());
    }
    out.files.sort_by(|a, b| a.relative.cmp(&b.relative));
    out
}

/// Words of the question that may name a file: runs of letters, digits, `.`, `_`, `-`, `/`
/// at least three characters long, first occurrence only.
#[must_use]
pub fn mentioned_names(question: &str) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for word in question.split(|c: char| !(c.is_alphanumeric() || "._-/".contains(c))) {
        let word = word.trim_matches(|c| c == '.' || c == '/');
        if word.chars().count() >= 3 && !names.iter().any(|n| n == word) {
            names.push(word.to_owned());
        }
    }
    names
}

/// Whether `file` is named by `name`: its path, its file name, or its stem (case-insensitive).
pub(crate) fn matches(file: &FileEntry, name: &str) -> bool {
    let lower_name = name.to_lowercase();
    let lower_path = file.relative.to_lowercase();
    if lower_path == lower_name || (name.contains('/') && lower_path.ends_with(&lower_name)) {
        return true;
    }
    let file_name = lower_path.rsplit('/').next().unwrap_or(&lower_path);
    if file_name == lower_name {
        return true;
    }
    let stem = match file_name.rsplit_once('.') {
        Some((stem, _)) if !stem.is_empty() => stem,
        _ => file_name,
    };
    stem == lower_name
}

/// Reads up to [`MAX_READ`] bytes of a file as (lossy) text.
#[must_use]
pub fn read_prefix(path: &Path) -> Option<String> {
    let file = fs::File::open(path).ok()?;
    let mut bytes = Vec::new();
    file.take(MAX_READ).read_to_end(&mut bytes).ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// The answer's description of `root` for `question`, as lines of text.
#[must_use]
pub fn describe(root: &Path, question: &str) -> Vec<String> {
    let walk = walk(root);
    let mut lines = Vec::new();
    lines.push(format!(
        "The directory {} holds {}{} file{}, {} byte{} in all.",
        root.display(),
        if walk.truncated { "at least " } else { "" },
        walk.files.len(),
        if walk.files.len() == 1 { "" } else { "s" },
        walk.total_bytes(),
        if walk.total_bytes() == 1 { "" } else { "s" }
    ));
    if !walk.files.is_empty() {
        let mut largest: Vec<&FileEntry> = walk.files.iter().collect();
        largest.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.relative.cmp(&b.relative)));
        lines.push("Largest files:".to_owned());
        for file in largest.into_iter().take(LARGEST) {
            lines.push(format!("- {} ({} bytes)", file.relative, file.bytes));
        }
    }
    for name in mentioned_names(question) {
        let found: Vec<&FileEntry> = walk.files.iter().filter(|f| matches(f, &name)).collect();
        for file in found.iter().take(MATCHES_PER_NAME) {
            let Some(text) = read_prefix(&root.join(&file.relative)) else {
                continue;
            };
            let count = text.lines().count();
            lines.push(format!(
                "{} ({name}): {count} lines{}",
                file.relative,
                if count == 0 { "." } else { "; it begins:" }
            ));
            for line in text.lines().take(FIRST_LINES) {
                lines.push(format!("    {line}"));
            }
        }
    }
    lines
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn walks_skips_git_and_describes() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join(".git")).unwrap();
        fs::write(dir.path().join(".git/HEAD"), "ref").unwrap();
        fs::create_dir_all(dir.path().join("src")).unwrap();
        fs::write(dir.path().join("src/main.rs"), "fn main() {}\n// two\n").unwrap();
        fs::write(dir.path().join("README.md"), "# hi\n").unwrap();
        let walk = walk(dir.path());
        let names: Vec<_> = walk.files.iter().map(|f| f.relative.as_str()).collect();
        assert_eq!(names, vec!["README.md", "src/main.rs"]);
        let text = describe(dir.path(), "what is in main.rs and the readme?").join("\n");
        assert!(text.contains("holds 2 files, 25 bytes"), "{text}");
        assert!(text.contains("src/main.rs (main.rs): 2 lines"), "{text}");
        assert!(text.contains("README.md (readme): 1 lines"), "{text}");
    }

    #[test]
    fn mentioned_names_are_deduplicated_and_long_enough() {
        assert_eq!(
            mentioned_names("is a.rs in src/lib.rs? lib.rs, ok"),
            vec!["a.rs", "src/lib.rs", "lib.rs"]
        );
    }
}
