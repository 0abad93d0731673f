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
//! target's text, never opened). The agent's processes may still run while it walks, so it
//! never names an agent-made path by its full name: each directory is opened beneath the
//! held root by `legate-beneath` (a directory swapped for a symlink is refused, not
//! followed) and its entries are stat'ed relative to that descriptor.

use legate_core::{NOTICE_SILENT_TURN, TaskNotice};
use rustix::fs;
use sha2::{Digest, Sha256};
use std::ffi::{CString, OsStr};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

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
    /// be read. Never follows a symlink: each directory is opened beneath the held root by
    /// `legate-beneath` (a symlink anywhere on its path is refused, so an agent that swaps a
    /// directory for a symlink mid-walk cannot lead it outside), and its entries are read and
    /// stat'ed relative to that descriptor. A directory's entries are counted as they are
    /// read, so a huge one costs at most `limit` names.
    pub fn of(root: &Path, limit: usize) -> Option<Self> {
        let held = legate_beneath::Root::open(root).ok()?;
        let mut hash = Sha256::new();
        let mut stack = vec![PathBuf::new()];
        let mut seen = 0usize;
        while let Some(rel) = stack.pop() {
            let (dir, names) = match list(&held, &rel, limit - seen) {
                Ok(Some(listed)) => listed,
                Ok(None) => return None,
                Err(_) if rel.as_os_str().is_empty() => return None,
                Err(e) => {
                    // An unreadable directory (or one swapped for a symlink) is part of the
                    // picture; what it says can change.
                    hash.update(rel.as_os_str().as_bytes());
                    hash.update(format!("\0unreadable {e}\0").as_bytes());
                    continue;
                }
            };
            for name in names {
                seen += 1;
                if seen > limit {
                    return None;
                }
                let child = rel.join(OsStr::from_bytes(name.to_bytes()));
                hash.update(child.as_os_str().as_bytes());
                hash.update(b"\0");
                let Ok(meta) = fs::statat(&dir, name.as_c_str(), fs::AtFlags::SYMLINK_NOFOLLOW)
                else {
                    hash.update(b"\0gone\0");
                    continue;
                };
                match fs::FileType::from_raw_mode(meta.st_mode) {
                    fs::FileType::Symlink => {
                        let target =
                            fs::readlinkat(&dir, name.as_c_str(), Vec::new()).unwrap_or_default();
                        hash.update(b"l");
                        hash.update(target.as_bytes());
                    }
                    fs::FileType::Directory => {
                        hash.update(b"d");
                        stack.push(child);
                    }
                    _ => {
                        hash.update(b"f");
                        // The fields' types differ between targets (`i64` or `u64`).
                        #[allow(clippy::unnecessary_cast)]
                        let numbers = [
                            meta.st_size as u64,
                            meta.st_ino,
                            meta.st_mtime as u64,
                            meta.st_mtime_nsec as u64,
                            meta.st_ctime as u64,
                            meta.st_ctime_nsec as u64,
                        ];
                        for n in numbers {
                            hash.update(n.to_le_bytes());
                        }
                    }
                }
                hash.update(b"\0");
            }
        }
        Some(Self(hash.finalize().into()))
    }
}

/// Why a directory could not be listed; its text is part of the fingerprint.
#[derive(Debug, thiserror::Error)]
enum Unreadable {
    #[error(transparent)]
    Beneath(#[from] legate_beneath::BeneathError),
    #[error(transparent)]
    Os(#[from] rustix::io::Errno),
}

/// The directory `rel` beneath `held` (its `O_PATH` descriptor) and its entries' names,
/// sorted, without `.`, `..` and (at the top) the preset's temp directory; `None` when it
/// holds more than `room` of them (reading stops there).
fn list(
    held: &legate_beneath::Root,
    rel: &Path,
    room: usize,
) -> std::result::Result<Option<(OwnedFd, Vec<CString>)>, Unreadable> {
    let dir = held.open_dir(rel)?;
    let readable = fs::openat(
        &dir,
        c".",
        fs::OFlags::RDONLY | fs::OFlags::DIRECTORY | fs::OFlags::CLOEXEC,
        fs::Mode::empty(),
    )?;
    let mut names = Vec::new();
    for entry in fs::Dir::new(readable)? {
        let entry = entry?;
        let name = entry.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        if rel.as_os_str().is_empty()
            && name.to_bytes() == legate_backend::acp::CODEX_TMP.as_bytes()
        {
            continue;
        }
        if names.len() >= room {
            return Ok(None);
        }
        names.push(name.to_owned());
    }
    names.sort();
    Ok(Some((dir, names)))
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

impl Watch {
    /// Whether the owned root is as it was before the turn (every entry, ignored files
    /// included); `None` when that cannot be told: a shared root, or a fingerprint that could
    /// not be taken (more than [`MAX_ENTRIES`] entries, an unreadable root).
    pub async fn unchanged(&self, root: &Path) -> Option<bool> {
        match self {
            Self::Owned(Some(before)) => Some(fingerprint(root).await.as_ref() == Some(before)),
            Self::Owned(None) | Self::Shared => None,
        }
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
    fn a_flipping_symlink_never_leads_the_walk_outside_the_root() {
        // The agent's processes may still run while Legate fingerprints (a pooled session, a
        // background child): one swaps `0sub` between a directory and a symlink to a large
        // directory outside. A walk that follows it sees more than the limit and gives up.
        let outside = tempfile::tempdir().unwrap();
        for i in 0..1200 {
            std::fs::write(outside.path().join(format!("f{i}")), "x").unwrap();
        }
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        std::fs::write(root.join("a.txt"), "a").unwrap();
        for i in 0..300 {
            std::fs::create_dir_all(root.join(format!("d{i}/e"))).unwrap();
        }
        // `0sub` and `.x` swap places in one call each time (`RENAME_EXCHANGE`): one is the
        // directory, the other the symlink, and both always exist.
        std::fs::create_dir(root.join("0sub")).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join(".x")).unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flipper = {
            let (root, stop) = (root.clone(), stop.clone());
            std::thread::spawn(move || {
                let (a, b) = (root.join("0sub"), root.join(".x"));
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    rustix::fs::renameat_with(
                        rustix::fs::CWD,
                        &a,
                        rustix::fs::CWD,
                        &b,
                        rustix::fs::RenameFlags::EXCHANGE,
                    )
                    .unwrap();
                }
            })
        };
        let mut escaped = 0;
        for _ in 0..60 {
            if Fingerprint::of(&root, 1000).is_none() {
                escaped += 1;
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        flipper.join().unwrap();
        assert_eq!(escaped, 0, "walks that left the root");
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
