//! The integration journal: the intent log that lets an integration survive a crash.
//!
//! This module owns the files under `$LEGATE_HOME/run/integrations/<task>/` (never anything in
//! the user's project): `lock` (an exclusive `flock`, held by the integrating process, or by
//! the one recovering it), `journal` (what is about to happen), `pre/<n>` (the pre-image of
//! each modified or deleted original), and two empty markers, `staged` and `abort`.
//!
//! `journal` is the intent's JSON, a newline, the sha256 of that JSON in hex, and a newline.
//! It is written as `journal.tmp`, synced, renamed to `journal`, and the directory synced,
//! all before anything is created in the user's project. So a `journal` that is missing,
//! torn, truncated or fails its checksum means that nothing was done in the project; it is
//! never read in part. Temporary and set-aside names in the project are derived from the
//! journal's id (`.legate-<id>-<n>.tmp`, `.legate-<id>-<n>.del`), never stored, so a journal
//! names nothing but relative paths that pass [`check_path`].
//!
//! It must never follow a symlink, keep a secret, or treat a journal it could not verify
//! whole as anything but "nothing happened".

use legate_core::{Error, ErrorCode};
use legate_workspace::{ChangeStatus, check_path, sha256_hex};
use serde::{Deserialize, Serialize};
use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The format version written and accepted.
pub(crate) const VERSION: u32 = 1;
/// Every new content is durably staged: recovery rolls forward.
pub(crate) const STAGED: &str = "staged";
/// The integration decided to undo itself: recovery rolls back.
pub(crate) const ABORT: &str = "abort";

/// What an integration is about to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Intent {
    pub version: u32,
    /// Random hex; names the temporary files.
    pub id: String,
    /// The project (canonical).
    pub root: PathBuf,
    /// The caller's own data (the engine keeps the patch's sha256 and the approval mode).
    pub meta: serde_json::Value,
    /// Directories to create, relative, parents first.
    pub dirs: Vec<String>,
    /// One per file, in order; `pre/<index>` holds a step's pre-image.
    pub steps: Vec<Step>,
}

/// One file of an intent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Step {
    pub path: String,
    pub status: ChangeStatus,
    /// The original (M, D).
    pub before: Option<Content>,
    /// The result (A, M).
    pub after: Option<Content>,
}

/// A file's contents by hash, and its mode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Content {
    pub sha256: String,
    pub mode: u32,
}

impl Intent {
    /// Whether everything in it is well formed (see the module docs).
    fn is_valid(&self) -> bool {
        let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
        let content = |c: &Option<Content>| {
            c.as_ref()
                .is_none_or(|c| hex(&c.sha256, 64) && c.mode <= 0o7777)
        };
        self.version == VERSION
            && (8..=32).contains(&self.id.len())
            && hex(&self.id, self.id.len())
            && self.root.is_absolute()
            && self.dirs.iter().all(|d| check_path(d).is_ok())
            && self.steps.iter().all(|s| {
                check_path(&s.path).is_ok()
                    && content(&s.before)
                    && content(&s.after)
                    && match s.status {
                        ChangeStatus::A => s.before.is_none() && s.after.is_some(),
                        ChangeStatus::M => s.before.is_some() && s.after.is_some(),
                        ChangeStatus::D => s.before.is_some() && s.after.is_none(),
                    }
            })
    }

    /// The journal file's bytes.
    pub(crate) fn encode(&self) -> Vec<u8> {
        // Serializing plain strings, numbers and a JSON value cannot fail.
        let mut out = serde_json::to_vec(self).unwrap_or_default();
        let sum = sha256_hex(&out);
        out.push(b'\n');
        out.extend_from_slice(sum.as_bytes());
        out.push(b'\n');
        out
    }

    /// The intent in `bytes`, or `None` unless they are a whole, valid journal.
    pub(crate) fn decode(bytes: &[u8]) -> Option<Intent> {
        let text = bytes.strip_suffix(b"\n")?;
        let nl = text.iter().rposition(|b| *b == b'\n')?;
        let (body, sum) = (&text[..nl], &text[nl + 1..]);
        if sum != sha256_hex(body).as_bytes() {
            return None;
        }
        let intent: Intent = serde_json::from_slice(body).ok()?;
        intent.is_valid().then_some(intent)
    }

    /// Where step `index` of `path` is staged, relative to the root.
    pub(crate) fn staged(&self, index: usize) -> Option<String> {
        self.sibling(index, "tmp")
    }

    /// Where step `index` sets a deleted file aside, relative to the root.
    pub(crate) fn aside(&self, index: usize) -> Option<String> {
        self.sibling(index, "del")
    }

    fn sibling(&self, index: usize, ext: &str) -> Option<String> {
        let path = &self.steps.get(index)?.path;
        let name = format!(".legate-{}-{index}.{ext}", self.id);
        Some(match path.rsplit_once('/') {
            Some((dir, _)) => format!("{dir}/{name}"),
            None => name,
        })
    }
}

/// A journal directory, locked by this process.
#[derive(Debug)]
pub(crate) struct Journal {
    dir: PathBuf,
    _lock: File,
    pub intent: Intent,
}

/// What [`Journal::open`] found.
#[derive(Debug)]
pub(crate) enum Found {
    /// Another process holds the lock: its integration (or recovery) is under way.
    Busy,
    /// No whole journal: nothing was done in the project; the directory was removed.
    Nothing,
    /// A journal to recover.
    Journal(Box<Journal>),
}

fn failed(what: &str, dir: &Path, e: impl std::fmt::Display) -> Error {
    Error::new(
        ErrorCode::IntegrationFailed,
        format!(
            "the integration journal {} could not {what}: {e}; nothing was integrated",
            dir.display()
        ),
    )
}

/// Takes the lock of `dir` without waiting; `None` when another process holds it, or when
/// the lock file was removed while we waited (its holder finished).
fn lock(dir: &Path) -> io::Result<Option<File>> {
    let path = dir.join("lock");
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)?;
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => return Ok(None),
        Err(TryLockError::Error(e)) => return Err(e),
    }
    let (held, now) = (file.metadata()?, fs::symlink_metadata(&path));
    Ok(match now {
        Ok(m) if m.ino() == held.ino() && m.dev() == held.dev() => Some(file),
        _ => None,
    })
}

/// Syncs the directory `dir` (its entries: files created, renamed or removed in it).
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Writes `bytes` to a new file `path` (mode 0600) without syncing it.
fn write_new(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    f.write_all(bytes)
}

/// Removes everything in the journal directory but the lock (leftovers of a begin that
/// never committed).
fn clear(dir: &Path) -> io::Result<()> {
    for e in fs::read_dir(dir)? {
        let e = e?;
        if e.file_name() == "lock" {
            continue;
        }
        if e.file_type()?.is_dir() {
            fs::remove_dir_all(e.path())?;
        } else {
            fs::remove_file(e.path())?;
        }
    }
    Ok(())
}

impl Journal {
    /// Commits `intent` in `dir` (created 0700 if missing), with the pre-images `pre`
    /// (step index, bytes), all synced before it returns. Refused while another process
    /// holds the directory, or while an earlier journal there waits for recovery.
    pub(crate) fn begin(
        dir: &Path,
        intent: Intent,
        pre: &[(usize, &[u8])],
    ) -> Result<Journal, Error> {
        legate_workspace::private_dir(dir).map_err(|e| failed("be created", dir, e.message))?;
        let lock = lock(dir)
            .map_err(|e| failed("be locked", dir, e))?
            .ok_or_else(|| {
                failed(
                    "be locked",
                    dir,
                    "another integration of this task is under way",
                )
            })?;
        let journal = dir.join("journal");
        if fs::symlink_metadata(&journal).is_ok() {
            return Err(failed(
                "be started",
                dir,
                "an earlier integration of this task awaits recovery (any legate command recovers it)",
            ));
        }
        let io = |e: io::Error| failed("be written", dir, e);
        clear(dir).map_err(io)?;
        let pre_dir = dir.join("pre");
        fs::create_dir(&pre_dir).map_err(io)?;
        let mut files = Vec::with_capacity(pre.len() + 1);
        for (index, bytes) in pre {
            let p = pre_dir.join(index.to_string());
            write_new(&p, bytes).map_err(io)?;
            files.push(p);
        }
        let tmp = dir.join("journal.tmp");
        write_new(&tmp, &intent.encode()).map_err(io)?;
        files.push(tmp.clone());
        let paths: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
        crate::integrate::sync_parallel(&paths, |p| File::open(p)?.sync_all()).map_err(io)?;
        sync_dir(&pre_dir).map_err(io)?;
        fs::rename(&tmp, &journal).map_err(io)?;
        sync_dir(dir).map_err(io)?;
        Ok(Journal {
            dir: dir.to_path_buf(),
            _lock: lock,
            intent,
        })
    }

    /// Locks `dir` and reads its journal (see [`Found`]).
    pub(crate) fn open(dir: &Path) -> Result<Found, Error> {
        let lock = match lock(dir) {
            Ok(Some(l)) => l,
            Ok(None) => return Ok(Found::Busy),
            // Another process finished it since it was listed.
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Found::Nothing),
            Err(e) => return Err(failed("be locked", dir, e)),
        };
        let intent = match fs::read(dir.join("journal")) {
            Ok(bytes) => Intent::decode(&bytes),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(failed("be read", dir, e)),
        };
        let journal = Journal {
            dir: dir.to_path_buf(),
            _lock: lock,
            intent: intent.clone().unwrap_or(Intent {
                version: VERSION,
                id: String::new(),
                root: PathBuf::new(),
                meta: serde_json::Value::Null,
                dirs: Vec::new(),
                steps: Vec::new(),
            }),
        };
        if intent.is_none() {
            tracing::warn!(dir = %dir.display(), "an integration journal that never committed; nothing was done");
            journal.finish().map_err(|e| failed("be removed", dir, e))?;
            return Ok(Found::Nothing);
        }
        Ok(Found::Journal(Box::new(journal)))
    }

    /// Writes the marker `name`, durably.
    pub(crate) fn mark(&self, name: &str) -> io::Result<()> {
        let path = self.dir.join(name);
        if !self.has(name) {
            write_new(&path, b"")?;
        }
        File::open(&path)?.sync_all()?;
        sync_dir(&self.dir)
    }

    /// Whether the marker `name` is there.
    pub(crate) fn has(&self, name: &str) -> bool {
        fs::symlink_metadata(self.dir.join(name)).is_ok_and(|m| m.is_file())
    }

    /// The pre-image of step `index`.
    pub(crate) fn pre_image(&self, index: usize) -> io::Result<Vec<u8>> {
        fs::read(self.dir.join("pre").join(index.to_string()))
    }

    /// Removes the journal directory: the job is done and recorded. The lock goes last.
    pub(crate) fn finish(self) -> io::Result<()> {
        clear(&self.dir)?;
        fs::remove_file(self.dir.join("lock"))?;
        fs::remove_dir(&self.dir)
    }
}

/// The journal directories under `integrations` (`$LEGATE_HOME/run/integrations`).
pub(crate) fn directories(integrations: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(integrations) else {
        return Vec::new();
    };
    let mut dirs: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter(|e| {
            e.file_name().to_str().is_some_and(|n| {
                !n.is_empty()
                    && n.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            })
        })
        .map(|e| e.path())
        .collect();
    dirs.sort();
    dirs
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    fn intent() -> Intent {
        Intent {
            version: VERSION,
            id: "0123456789abcdef".into(),
            root: "/project".into(),
            meta: serde_json::json!({"sha256": "ab"}),
            dirs: vec!["new".into(), "new/deep".into()],
            steps: vec![
                Step {
                    path: "src/a.rs".into(),
                    status: ChangeStatus::M,
                    before: Some(Content {
                        sha256: "a".repeat(64),
                        mode: 0o644,
                    }),
                    after: Some(Content {
                        sha256: "b".repeat(64),
                        mode: 0o644,
                    }),
                },
                Step {
                    path: "new/deep/c.sh".into(),
                    status: ChangeStatus::A,
                    before: None,
                    after: Some(Content {
                        sha256: "c".repeat(64),
                        mode: 0o755,
                    }),
                },
                Step {
                    path: "gone".into(),
                    status: ChangeStatus::D,
                    before: Some(Content {
                        sha256: "d".repeat(64),
                        mode: 0o600,
                    }),
                    after: None,
                },
            ],
        }
    }

    #[test]
    fn a_whole_journal_round_trips_and_names_siblings() {
        let i = intent();
        assert_eq!(Intent::decode(&i.encode()), Some(i.clone()));
        assert_eq!(i.staged(0).unwrap(), "src/.legate-0123456789abcdef-0.tmp");
        assert_eq!(i.aside(2).unwrap(), ".legate-0123456789abcdef-2.del");
        assert_eq!(i.staged(3), None);
    }

    #[test]
    fn a_hostile_but_well_summed_journal_is_refused() {
        let mut bad = vec![];
        for edit in [
            (|i: &mut Intent| i.steps[0].path = "../escape".into()) as fn(&mut Intent),
            |i| i.steps[0].path = "/etc/passwd".into(),
            |i| i.dirs.push("a/../../b".into()),
            |i| i.id = "../x".into(),
            |i| i.root = "relative".into(),
            |i| i.steps[1].before = i.steps[0].before.clone(),
            |i| i.steps[2].after = i.steps[0].after.clone(),
            |i| i.version = 2,
            |i| i.steps[0].after.as_mut().unwrap().mode = 0o100644,
        ] {
            let mut i = intent();
            edit(&mut i);
            bad.push(Intent::decode(&i.encode()));
        }
        assert!(bad.iter().all(Option::is_none), "{bad:?}");
    }

    proptest! {
        /// A crash while writing the journal leaves a prefix of it: never a journal.
        #[test]
        fn a_truncated_journal_is_nothing(cut in 0usize..2000) {
            let bytes = intent().encode();
            let cut = cut % bytes.len();
            prop_assert_eq!(Intent::decode(&bytes[..cut]), None);
        }

        /// Torn writes (a block of zeroes or garbage anywhere) are nothing too.
        #[test]
        fn a_torn_journal_is_nothing(at in 0usize..2000, len in 1usize..64, byte in any::<u8>()) {
            let mut bytes = intent().encode();
            let at = at % bytes.len();
            let end = (at + len).min(bytes.len());
            let before = bytes.clone();
            bytes[at..end].iter_mut().for_each(|b| *b = byte);
            prop_assume!(bytes != before);
            prop_assert_eq!(Intent::decode(&bytes), None);
        }

        #[test]
        fn arbitrary_bytes_are_nothing(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            prop_assert_eq!(Intent::decode(&bytes), None);
        }
    }

    #[test]
    fn a_journal_that_never_committed_is_removed_and_a_held_one_is_busy() {
        let home = tempfile::tempdir().unwrap();
        let dir = home.path().join("t1");
        let j = Journal::begin(&dir, intent(), &[(0, b"old")]).unwrap();
        assert!(matches!(Journal::open(&dir).unwrap(), Found::Busy));
        assert!(Journal::begin(&dir, intent(), &[]).is_err());
        drop(j);
        // Torn: the committed journal loses its tail.
        let bytes = fs::read(dir.join("journal")).unwrap();
        fs::write(dir.join("journal"), &bytes[..bytes.len() / 2]).unwrap();
        assert!(matches!(Journal::open(&dir).unwrap(), Found::Nothing));
        assert!(!dir.exists());
        let j = Journal::begin(&dir, intent(), &[(0, b"old")]).unwrap();
        drop(j);
        match Journal::open(&dir).unwrap() {
            Found::Journal(j) => {
                assert_eq!(j.pre_image(0).unwrap(), b"old");
                assert!(!j.has(STAGED));
                j.mark(STAGED).unwrap();
                assert!(j.has(STAGED));
                j.finish().unwrap();
            }
            other => panic!("{other:?}"),
        }
        assert!(!dir.exists());
        assert!(directories(home.path()).is_empty());
    }
}
