//! "Nothing happens silently": the notice for a turn whose answer claims tool work that
//! Legate never saw.
//!
//! An agent's own sandbox can stop a command without a word (Codex in `read-only` mode), and
//! the agent then answers as if the work were done. When a completed turn's answer claims
//! tool work ([`claim`]: a short, documented list of English first-person phrases) while
//! Legate saw no tool call and no change, the task's result carries a
//! [`NOTICE_SILENT_TURN`] notice and the turn gets a notice event. "No change" is, in a root
//! Legate owns (a sandbox or a copy), an unchanged [`Fingerprint`] of the root taken before
//! and after the turn; in a shared root (a user's directory, which others may change at the
//! same time), no write through the ACP file service.
//!
//! This module only observes: it never changes the task's state, and it never follows a
//! symlink or leaves the root while fingerprinting (an agent-made symlink is hashed as its
//! target's text, never opened).

use legate_core::{NOTICE_SILENT_TURN, TaskNotice};
use sha2::{Digest, Sha256};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The most entries a [`Fingerprint`] walks; a larger root is not fingerprinted (no notice
/// can then be given from its changes).
pub const MAX_ENTRIES: usize = 20_000;

/// Who may claim: the first person, singular or plural, with or without "have".
const SUBJECTS: [&[&str]; 6] = [
    &["i"],
    &["i've"],
    &["i", "have"],
    &["we"],
    &["we've"],
    &["we", "have"],
];

/// Words that may stand between the subject and the verb ("I have just written").
const ADVERBS: [&str; 6] = ["just", "also", "now", "already", "successfully", "then"];

/// The verbs of tool work, past tense or participle.
const VERBS: [&str; 19] = [
    "wrote",
    "written",
    "created",
    "edited",
    "updated",
    "modified",
    "changed",
    "saved",
    "deleted",
    "removed",
    "renamed",
    "moved",
    "ran",
    "run",
    "executed",
    "installed",
    "applied",
    "added",
    "appended",
];

/// The lower-case words of `text`: letters, digits and apostrophes (typographic ones made
/// plain), everything else a separator.
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '\'' || c == '\u{2019}'))
        .filter(|w| !w.is_empty())
        .map(|w| w.replace('\u{2019}', "'").to_lowercase())
        .collect()
}

/// How much of a long answer is read for a claim: its first and its last this many bytes
/// (an answer's claim is in its summary, and the agent chooses the answer's length).
pub const SCANNED_BYTES: usize = 64 * 1024;

/// The first phrase of `answer` that claims tool work ("I wrote", "we've created", "I have
/// just run", …), as the words matched; `None` when it claims none. A negation breaks a
/// phrase ("I have not written", "I didn't write" claim nothing). Of an answer longer than
/// twice [`SCANNED_BYTES`], only its head and tail are read.
pub fn claim(answer: &str) -> Option<String> {
    if answer.len() > 2 * SCANNED_BYTES {
        // Char boundaries by hand (`floor_char_boundary` is newer than the MSRV).
        let mut head = SCANNED_BYTES;
        while !answer.is_char_boundary(head) {
            head -= 1;
        }
        let mut tail = answer.len() - SCANNED_BYTES;
        while !answer.is_char_boundary(tail) {
            tail += 1;
        }
        return claim_in(&answer[..head]).or_else(|| claim_in(&answer[tail..]));
    }
    claim_in(answer)
}

fn claim_in(answer: &str) -> Option<String> {
    let words = words(answer);
    for start in 0..words.len() {
        for subject in SUBJECTS {
            let end = start + subject.len();
            if end > words.len() || words[start..end] != *subject {
                continue;
            }
            let mut at = end;
            while at < words.len() && ADVERBS.contains(&words[at].as_str()) {
                at += 1;
            }
            if at < words.len() && VERBS.contains(&words[at].as_str()) {
                return Some(words[start..=at].join(" "));
            }
        }
    }
    None
}

/// A digest of a root's tree: every entry's path, type, size, inode, and modification and
/// change times (files), or link text (symlinks). The ACP preset's per-session temp
/// directory (`.legate-tmp` at the top) is left out: Legate makes it before the turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint([u8; 32]);

impl Fingerprint {
    /// The fingerprint of `root`, or `None` when it has more than `limit` entries or cannot
    /// be read. Never follows a symlink.
    pub fn of(root: &Path, limit: usize) -> Option<Self> {
        let mut hash = Sha256::new();
        let mut stack = vec![root.to_path_buf()];
        let mut seen = 0usize;
        while let Some(dir) = stack.pop() {
            let mut entries: Vec<_> = match std::fs::read_dir(&dir) {
                Ok(read) => read.filter_map(|e| e.ok()).collect(),
                Err(_) if dir == root => return None,
                Err(e) => {
                    // An unreadable directory is part of the picture; what it says can change.
                    hash.update(dir.as_os_str().as_bytes());
                    hash.update(format!("\0unreadable {:?}\0", e.kind()).as_bytes());
                    continue;
                }
            };
            entries.sort_by_key(|e| e.file_name());
            for entry in entries {
                let path = entry.path();
                if dir == root && entry.file_name() == legate_backend::acp::CODEX_TMP {
                    continue;
                }
                seen += 1;
                if seen > limit {
                    return None;
                }
                let Ok(meta) = std::fs::symlink_metadata(&path) else {
                    hash.update(path.as_os_str().as_bytes());
                    hash.update(b"\0gone\0");
                    continue;
                };
                let rel = path.strip_prefix(root).unwrap_or(&path);
                hash.update(rel.as_os_str().as_bytes());
                hash.update(b"\0");
                let kind = meta.file_type();
                if kind.is_symlink() {
                    let target = std::fs::read_link(&path).unwrap_or_default();
                    hash.update(b"l");
                    hash.update(target.as_os_str().as_bytes());
                } else if kind.is_dir() {
                    hash.update(b"d");
                    stack.push(path);
                } else {
                    hash.update(b"f");
                    for n in [
                        meta.size(),
                        meta.ino(),
                        meta.mtime() as u64,
                        meta.mtime_nsec() as u64,
                        meta.ctime() as u64,
                        meta.ctime_nsec() as u64,
                    ] {
                        hash.update(n.to_le_bytes());
                    }
                }
                hash.update(b"\0");
            }
        }
        Some(Self(hash.finalize().into()))
    }
}

/// What a turn is watched by: a fingerprint of a root Legate owns, taken before the turn
/// (`None` when it could not be taken), or nothing for a shared root.
#[derive(Debug, Clone)]
pub enum Watch {
    /// A sandbox or a copy.
    Owned(Option<Fingerprint>),
    /// A directory the user named.
    Shared,
}

/// What Legate saw of a completed turn.
#[derive(Debug, Clone, Copy, Default)]
pub struct Seen {
    /// Tool calls announced.
    pub tool_calls: u32,
    /// Writes served by the ACP file service.
    pub fs_writes: u32,
}

impl Watch {
    /// The watch of a turn about to run in `root`.
    pub async fn before(root: &Path, owned: bool) -> Self {
        if !owned {
            return Self::Shared;
        }
        Self::Owned(fingerprint(root).await)
    }

    /// The notice for a completed turn whose `answer` claims tool work that `seen` and the
    /// root's fingerprint now do not show; `None` otherwise.
    pub async fn notice(&self, root: &Path, answer: &str, seen: Seen) -> Option<TaskNotice> {
        let phrase = claim(answer)?;
        if seen.tool_calls > 0 || seen.fs_writes > 0 {
            return None;
        }
        let (unchanged, what) = match self {
            Self::Owned(Some(before)) => (
                fingerprint(root).await.as_ref() == Some(before),
                "no file in the workspace changed",
            ),
            Self::Owned(None) => (false, ""),
            Self::Shared => (true, "no file was written through Legate"),
        };
        unchanged.then(|| TaskNotice {
            code: NOTICE_SILENT_TURN.to_string(),
            message: format!(
                "the agent's answer claims tool work (\"{phrase}\"), but Legate saw no tool call and {what}: the work may not have been done"
            ),
        })
    }
}

async fn fingerprint(root: &Path) -> Option<Fingerprint> {
    let root = root.to_path_buf();
    tokio::task::spawn_blocking(move || Fingerprint::of(&root, MAX_ENTRIES))
        .await
        .ok()
        .flatten()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn first_person_claims_of_tool_work_are_found() {
        for (answer, phrase) in [
            ("Done! I wrote hello.txt with the greeting.", "i wrote"),
            ("I've created `a.rs`.", "i've created"),
            ("I’ve updated the config", "i've updated"),
            ("I have just run the tests: all pass.", "i have just run"),
            ("We ran `cargo fmt`.", "we ran"),
            ("OK. I EDITED main.rs", "i edited"),
        ] {
            assert_eq!(claim(answer).as_deref(), Some(phrase), "{answer}");
        }
    }

    #[test]
    fn questions_negations_and_other_subjects_claim_nothing() {
        for answer in [
            "",
            "The workspace has 3 files.",
            "I have not written anything.",
            "I didn't write the file: permission was refused.",
            "I could not run the command.",
            "You wrote this file earlier.",
            "It was created yesterday.",
            "I will create it next.",
            "Iwrote",
        ] {
            assert_eq!(claim(answer), None, "{answer}");
        }
    }

    #[test]
    fn fingerprints_see_changes_but_not_the_session_temp_dir() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "a").unwrap();
        let before = Fingerprint::of(dir.path(), 100).unwrap();
        assert_eq!(Fingerprint::of(dir.path(), 100).unwrap(), before);
        std::fs::create_dir_all(dir.path().join(".legate-tmp/s1")).unwrap();
        assert_eq!(Fingerprint::of(dir.path(), 100).unwrap(), before);
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        let with_dir = Fingerprint::of(dir.path(), 100).unwrap();
        assert_ne!(with_dir, before);
        std::fs::write(dir.path().join("sub/b.txt"), "b").unwrap();
        assert_ne!(Fingerprint::of(dir.path(), 100).unwrap(), with_dir);
        std::os::unix::fs::symlink("/etc", dir.path().join("link")).unwrap();
        let linked = Fingerprint::of(dir.path(), 100).unwrap();
        assert_eq!(Fingerprint::of(dir.path(), 100).unwrap(), linked);
        // Past the limit there is no fingerprint, rather than a partial one.
        assert_eq!(Fingerprint::of(dir.path(), 2), None);
    }

    #[test]
    fn a_long_answer_is_read_at_both_ends_only() {
        let filler = "lorem ipsum ".repeat(2 * SCANNED_BYTES / 12 + 10);
        assert_eq!(
            claim(&format!("{filler}é I wrote it")).as_deref(),
            Some("i wrote")
        );
        assert_eq!(
            claim(&format!("I created it é{filler}")).as_deref(),
            Some("i created")
        );
        let middle = format!("{filler}I wrote it{filler}");
        assert_eq!(claim(&middle), None);
        // Cuts that fall inside a two-byte character.
        let wide = format!("x{}", "é".repeat(SCANNED_BYTES + 7));
        assert_eq!(claim(&format!("{wide} I ran it")).as_deref(), Some("i ran"));
    }

    proptest! {
        #[test]
        fn any_text_is_scanned_without_panic(text in "\\PC{0,200}") {
            let _ = claim(&text);
        }

        #[test]
        fn a_claim_is_found_wherever_it_stands(
            before in "[a-z ,.]{0,40}",
            after in "[a-z ,.]{0,40}",
            verb in prop::sample::select(VERBS.to_vec()),
        ) {
            let text = format!("{before}. I {verb} {after}");
            prop_assert!(claim(&text).is_some());
        }

        #[test]
        fn a_negation_is_never_a_claim(verb in prop::sample::select(VERBS.to_vec())) {
            prop_assert_eq!(claim(&format!("I have not {verb} anything")), None);
            prop_assert_eq!(claim(&format!("I did not {verb} it")), None);
        }
    }
}
