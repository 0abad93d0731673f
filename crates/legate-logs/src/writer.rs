//! Writing: [`LogFile`], the `tracing` writer that redacts each line, appends it to
//! `<kind>.log` and rotates and prunes the directory ([`crate::Rotation`]).
//!
//! Several processes of one kind may append to the same file (`O_APPEND`: each line is one
//! `write`). A process that finds its file was rotated by another reopens the current one
//! instead of rotating it again. A failure to write a log never fails the process: the line
//! is dropped.

use crate::{Rotation, parse_name};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

/// The log file of one process kind; a `tracing_subscriber` writer (`MakeWriter`).
#[derive(Debug, Clone)]
pub struct LogFile {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug)]
struct Inner {
    dir: PathBuf,
    kind: String,
    rotation: Rotation,
    file: Option<File>,
    size: u64,
}

fn millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl LogFile {
    /// Opens `<dir>/<kind>.log` for appending (the directory made `0700`, the file `0600`)
    /// and prunes the directory. `kind` is lowercase letters (`INVALID_INPUT` otherwise).
    pub fn open(dir: &Path, kind: &str, rotation: Rotation) -> io::Result<Self> {
        if parse_name(&format!("{kind}.log")) != Some((kind, None)) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a log kind is lowercase letters",
            ));
        }
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        let mut inner = Inner {
            dir: dir.to_path_buf(),
            kind: kind.to_string(),
            rotation,
            file: None,
            size: 0,
        };
        inner.reopen()?;
        inner.prune();
        Ok(Self {
            inner: Arc::new(Mutex::new(inner)),
        })
    }

    /// Appends one line (redacted), rotating and pruning when the file is full.
    fn append(&self, line: &[u8]) {
        let text = String::from_utf8_lossy(line);
        let redacted = legate_credentials::redact_escaped(&text);
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.write(redacted.as_bytes());
    }
}

impl Inner {
    fn current(&self) -> PathBuf {
        self.dir.join(format!("{}.log", self.kind))
    }

    fn reopen(&mut self) -> io::Result<()> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(self.current())?;
        self.size = file.metadata()?.len();
        self.file = Some(file);
        Ok(())
    }

    /// Whether the open file is still the one at the current path (another process may have
    /// rotated it, or pruning removed it).
    fn still_current(&self) -> bool {
        let ours = self.file.as_ref().and_then(|f| f.metadata().ok());
        let there = fs::symlink_metadata(self.current()).ok();
        matches!((&ours, &there), (Some(a), Some(b)) if a.ino() == b.ino() && a.dev() == b.dev())
    }

    fn write(&mut self, bytes: &[u8]) {
        // Each line goes to the current file, whoever rotated it: a quiet process never
        // writes into a rotated (and perhaps pruned) one.
        if (self.file.is_none() || !self.still_current()) && self.reopen().is_err() {
            return;
        }
        if let Some(f) = &mut self.file
            && f.write_all(bytes).is_ok()
        {
            // The file's own size: other processes append to it too.
            self.size = f
                .metadata()
                .map_or(self.size + bytes.len() as u64, |m| m.len());
        }
        if self.size >= self.rotation.max_file_bytes {
            self.rotate();
        }
    }

    /// Renames the current file aside (unless another process already did) and opens a
    /// new one; then prunes.
    fn rotate(&mut self) {
        if self.still_current() {
            let mut stamp = millis();
            while self.dir.join(format!("{}.{stamp}.log", self.kind)).exists() {
                stamp += 1;
            }
            let _ = fs::rename(
                self.current(),
                self.dir.join(format!("{}.{stamp}.log", self.kind)),
            );
        }
        self.file = None;
        let _ = self.reopen();
        self.prune();
    }

    /// Removes rotated files past the count, the age or the total bound (oldest first).
    fn prune(&self) {
        let Ok(entries) = fs::read_dir(&self.dir) else {
            return;
        };
        let now = millis();
        let max_age = u64::try_from(self.rotation.max_age.as_millis()).unwrap_or(u64::MAX);
        let mut rotated = Vec::new();
        let mut total = 0u64;
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some((kind, stamp)) = name.to_str().and_then(parse_name) else {
                continue;
            };
            let Ok(meta) = entry.metadata() else { continue };
            if !meta.is_file() {
                continue;
            }
            total += meta.len();
            if let Some(stamp) = stamp {
                rotated.push((stamp, kind.to_string(), entry.path(), meta.len()));
            }
        }
        // Newest first within each kind, for the count.
        rotated.sort_by_key(|r| std::cmp::Reverse(r.0));
        let mut kept_per_kind: std::collections::HashMap<String, usize> = Default::default();
        let mut keep = Vec::new();
        for (stamp, kind, path, len) in rotated {
            let kept = kept_per_kind.entry(kind).or_default();
            if *kept >= self.rotation.max_files || now.saturating_sub(stamp) > max_age {
                if fs::remove_file(&path).is_ok() {
                    total = total.saturating_sub(len);
                }
            } else {
                *kept += 1;
                keep.push((stamp, path, len));
            }
        }
        // Then the oldest, of any kind, while the whole is over its bound.
        keep.sort_by_key(|k| k.0);
        for (_, path, len) in keep {
            if total <= self.rotation.max_total_bytes {
                break;
            }
            if fs::remove_file(&path).is_ok() {
                total = total.saturating_sub(len);
            }
        }
    }
}

/// One event's bytes, appended as one line when the formatter is done with it.
#[derive(Debug)]
pub struct LineWriter<'a> {
    file: &'a LogFile,
    line: Vec<u8>,
}

impl Write for LineWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.line.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for LineWriter<'_> {
    fn drop(&mut self) {
        if !self.line.is_empty() {
            self.file.append(&self.line);
        }
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogFile {
    type Writer = LineWriter<'a>;

    fn make_writer(&'a self) -> Self::Writer {
        LineWriter {
            file: self,
            line: Vec::with_capacity(256),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::time::Duration;

    fn files(dir: &Path) -> Vec<String> {
        let mut names: Vec<_> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn lines_rotate_past_the_size_and_the_count_and_total_stay_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let rotation = Rotation {
            max_file_bytes: 1000,
            max_files: 2,
            max_age: Duration::from_secs(3600),
            max_total_bytes: 1 << 20,
        };
        let log = LogFile::open(dir.path(), "cli", rotation).unwrap();
        for i in 0..200 {
            log.append(format!("{{\"n\":{i},\"pad\":\"{}\"}}\n", "x".repeat(80)).as_bytes());
        }
        let names = files(dir.path());
        assert_eq!(names.len(), 3, "{names:?}");
        assert!(names.contains(&"cli.log".to_string()));
        let total: u64 = names
            .iter()
            .map(|n| fs::metadata(dir.path().join(n)).unwrap().len())
            .sum();
        assert!(total <= 3 * 1100, "{total}");
        // The newest lines are kept, whole.
        let current = fs::read_to_string(dir.path().join("cli.log")).unwrap();
        assert!(
            current.lines().all(|l| l.starts_with("{\"n\":")),
            "{current}"
        );
        let small = Rotation {
            max_total_bytes: 1500,
            ..rotation
        };
        let other = LogFile::open(dir.path(), "serve", small).unwrap();
        other.append(b"{}\n");
        let total: u64 = files(dir.path())
            .iter()
            .map(|n| fs::metadata(dir.path().join(n)).unwrap().len())
            .sum();
        assert!(total <= 1500 + 1100, "{total}: {:?}", files(dir.path()));
    }

    #[test]
    fn a_writer_whose_file_another_process_rotated_writes_to_the_new_one() {
        let dir = tempfile::tempdir().unwrap();
        let rotation = Rotation {
            max_file_bytes: 1 << 20,
            ..Rotation::default()
        };
        let quiet = LogFile::open(dir.path(), "mcp", rotation).unwrap();
        quiet.append(b"{\"first\":1}\n");
        // Another process rotates the file away.
        fs::rename(dir.path().join("mcp.log"), dir.path().join("mcp.5.log")).unwrap();
        quiet.append(b"{\"second\":1}\n");
        let current = fs::read_to_string(dir.path().join("mcp.log")).unwrap();
        assert_eq!(current, "{\"second\":1}\n");
    }

    #[test]
    fn a_credential_never_reaches_the_file_and_other_files_are_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("notes.txt"), "mine").unwrap();
        fs::write(dir.path().join("cli.1.log"), "ancient").unwrap();
        let log = LogFile::open(dir.path(), "cli", Rotation::default()).unwrap();
        let key = "ghp_R8kq2ZxP0vLm7TnW4sYb9QeHc3UjDf6GaK1o";
        log.append(format!("{{\"message\":\"token {key}\"}}\n").as_bytes());
        let text = fs::read_to_string(dir.path().join("cli.log")).unwrap();
        assert!(!text.contains(key), "{text}");
        assert!(text.contains("token"), "{text}");
        // The ancient rotated file is past its age; the other file is not a log.
        assert_eq!(files(dir.path()), ["cli.log", "notes.txt"]);
        assert!(LogFile::open(dir.path(), "../x", Rotation::default()).is_err());
    }
}
