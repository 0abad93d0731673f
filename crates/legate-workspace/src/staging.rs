//! Staging a new copy into its baseline: the baseline's index, written in-process.
//!
//! This module owns deciding each copied file's blob id and writing the baseline's index
//! (`git_index`) with the copy's own stat data, so that git afterwards trusts it without
//! re-reading the copy. A tracked file the source's index shows clean is not hashed: its id
//! is taken from that index (its object is borrowed through alternates). It is clean when
//! all of this holds:
//! - the file as it was read (measured on the open file, before and after reading) has
//!   exactly its entry's stat data: ctime and mtime to the nanosecond, device, inode, owner,
//!   group and size;
//! - the entry is a plain regular file at stage 0 (not assume-unchanged, skip-worktree or
//!   intent-to-add);
//! - it is not racily clean: its mtime and ctime fall in an earlier second than the source
//!   index file's mtime (git's own rule: a file changed in the second the index was written
//!   could have kept the stat data git recorded);
//! - its blob is in the baseline's reach and has the file's size, and no `filter`, `ident`
//!   or `working-tree-encoding` attribute applies to it in the source: git converts a file
//!   on its way into the index (CRLF to LF, a clean filter such as LFS, `$Id$`, another
//!   encoding), and only an unconverted file's blob is its bytes. Every conversion of line
//!   endings changes the size; the attributes catch a filter that would not. (One
//!   `git cat-file --batch-check` in the baseline and one `git check-attr` in the source,
//!   both run while the copy is made.)
//!
//! Everything else (untracked files, dirty, racily clean or converted files, every file when
//! the source's index cannot be read entirely or its objects are not borrowed) is hashed
//! from the copy by `git hash-object -w --no-filters`, so the baseline names the bytes
//! copied. Two windows are left, both git's own (git itself reports such a file clean): a
//! change written in the same clock tick as git's last read of the file, before that index
//! was written, keeps the stat data; and a filter that kept the size, applied when the file
//! was staged and no longer configured, is not seen.
//!
//! It must never take an id for a file whose stat data differ in any field, hash the source
//! instead of the copy, run a source's filter, or leave a half-written index behind.

use crate::baseline::Baseline;
use crate::copy::Written;
use crate::git::{Git, split_z};
use crate::git_index::{self, Entry, OID_LEN, Oid, Stat};
use crate::git_objects;
use crate::select::SelectedFile;
use legate_core::{Error, ErrorCode};
use std::collections::{HashMap, HashSet};
use std::fs::{Metadata, OpenOptions};
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::process::{Child, ChildStdin};
use std::thread::JoinHandle;

/// A source index larger than this is not read (everything is then hashed).
const MAX_INDEX_BYTES: u64 = 512 * 1024 * 1024;

/// The source repository's index, reduced to what can vouch for a file: per path, the stat
/// data and blob id of its plain entry.
#[derive(Debug)]
pub(crate) struct SourceIndex {
    entries: HashMap<Vec<u8>, (Stat, Oid)>,
    /// The index file's mtime, in seconds: entries from that second on are racy.
    written: i64,
}

impl SourceIndex {
    /// Reads the index file at `path` as one snapshot (its mtime from the same open file).
    pub(crate) fn read(path: &Path) -> Result<SourceIndex, Error> {
        let fail = |e: std::io::Error| {
            Error::internal(format!("the index {} cannot be read: {e}", path.display()))
        };
        let mut file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path)
            .map_err(fail)?;
        let meta = file.metadata().map_err(fail)?;
        if !meta.is_file() || meta.len() > MAX_INDEX_BYTES {
            return Err(Error::internal(format!(
                "the index {} is not a regular file of at most {MAX_INDEX_BYTES} bytes",
                path.display()
            )));
        }
        let mut bytes = Vec::with_capacity(meta.len() as usize);
        file.read_to_end(&mut bytes).map_err(fail)?;
        Ok(Self::from_entries(git_index::parse(&bytes)?, meta.mtime()))
    }

    /// Keeps the plain, merged, regular-file entries of an index written at `written`.
    fn from_entries(entries: Vec<Entry>, written: i64) -> SourceIndex {
        let mut plain = HashMap::with_capacity(entries.len());
        let mut conflicted = HashSet::new();
        for e in entries {
            if e.stage != 0 {
                conflicted.insert(e.path);
            } else if matches!(e.mode, 0o100644 | 0o100755)
                && !e.assume_valid
                && !e.skip_worktree
                && !e.intent_to_add
            {
                plain.insert(e.path, (e.stat, e.oid));
            }
        }
        for path in conflicted {
            plain.remove(&path);
        }
        SourceIndex {
            entries: plain,
            written,
        }
    }

    /// The blob id of `path` when the file read, measured as `meta`, is clean (see the
    /// module docs); `None` when it must be hashed.
    pub(crate) fn clean_blob(&self, path: &str, meta: &Metadata) -> Option<Oid> {
        let (stat, oid) = self.entries.get(path.as_bytes())?;
        let racy =
            i64::from(stat.mtime.0) >= self.written || i64::from(stat.ctime.0) >= self.written;
        (!racy && stat.is_exactly(meta)).then_some(*oid)
    }

    /// How many entries could vouch for a file.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

/// Where a staged file's id comes from.
#[derive(Debug, Clone, Copy)]
enum Id {
    /// The source's index vouches for it, pending the checks.
    Candidate(Oid),
    /// Sent to `git hash-object`.
    Hashing,
    /// Known.
    Known(Oid),
}

/// One copied file on its way into the baseline's index.
#[derive(Debug)]
struct Staged {
    path: String,
    /// The copy's stat data.
    stat: Stat,
    mode: u32,
    id: Id,
}

/// A copy being staged, file by file as each is written.
#[derive(Debug)]
pub(crate) struct Staging {
    git: Git,
    source: Option<SourceIndex>,
    checks: Option<Checks>,
    files: Vec<Staged>,
    hasher: Option<Hasher>,
    /// The files sent to the hasher, in order (its ids come back in that order).
    hashing: Vec<usize>,
}

impl Staging {
    /// Staging into `baseline`. `source` (the source's index) vouches for clean files
    /// among `files`; its checks start at once, in the background, in the source at `root`
    /// and in the baseline. `None`: every file is hashed.
    pub(crate) fn new(
        baseline: &Baseline,
        source: Option<(SourceIndex, &Path)>,
        files: &[SelectedFile],
    ) -> Staging {
        let git = baseline.git();
        let checks = source.as_ref().map(|(index, root)| {
            Checks::start(index, files, &Git::source(root).buffered(), &git.buffered())
        });
        Staging {
            git,
            source: source.map(|(index, _)| index),
            checks,
            files: Vec::with_capacity(files.len()),
            hasher: None,
            hashing: Vec::new(),
        }
    }

    /// Stages a file just written into the copy.
    pub(crate) fn add(&mut self, w: &Written<'_>) -> Result<(), Error> {
        let candidate = self
            .source
            .as_ref()
            .and_then(|s| s.clean_blob(w.path, w.source));
        let id = match candidate {
            Some(oid) => Id::Candidate(oid),
            None => {
                self.hash(self.files.len(), w.path)?;
                Id::Hashing
            }
        };
        self.files.push(Staged {
            path: w.path.to_string(),
            stat: Stat::of(w.copy),
            mode: if w.copy.mode() & 0o100 != 0 {
                0o100755
            } else {
                0o100644
            },
            id,
        });
        Ok(())
    }

    /// Sends file `index` (at `path`) to the hasher, started on first use.
    fn hash(&mut self, index: usize, path: &str) -> Result<(), Error> {
        if self.hasher.is_none() {
            self.hasher = Some(Hasher::start(&self.git.buffered())?);
        }
        if let Some(h) = self.hasher.as_mut() {
            h.add(path)?;
        }
        self.hashing.push(index);
        Ok(())
    }

    /// Settles every candidate with the checks (hashing those they do not clear), waits for
    /// the hashing, and writes the baseline's index and its trees. Returns the root tree and
    /// how many ids came from the source.
    pub(crate) fn finish(mut self, baseline: &Baseline) -> Result<(Oid, usize), Error> {
        let cleared = match self.checks.take().map(Checks::finish) {
            Some(Ok(cleared)) => cleared,
            Some(Err(e)) => {
                tracing::warn!(error = %e, "the source's ids could not be checked; hashing every file");
                Cleared::default()
            }
            None => Cleared::default(),
        };
        let mut borrowed = 0;
        for i in 0..self.files.len() {
            let f = &self.files[i];
            if let Id::Candidate(oid) = f.id {
                if cleared.clears(&f.path, oid, f.stat.size) {
                    self.files[i].id = Id::Known(oid);
                    borrowed += 1;
                } else {
                    let path = f.path.clone();
                    self.hash(i, &path)?;
                    self.files[i].id = Id::Hashing;
                }
            }
        }
        if let Some(h) = self.hasher.take() {
            let ids = h.finish()?;
            for (i, oid) in self.hashing.iter().zip(ids) {
                self.files[*i].id = Id::Known(oid);
            }
        }
        let entries = write_index(baseline, &self.files)?;
        let tree = git_objects::write_tree(&baseline.git_dir().join("objects"), &entries)?;
        Ok((tree, borrowed))
    }
}

/// Writes `git/index` from `files` (a temporary file renamed into place); returns its
/// entries, sorted.
fn write_index(baseline: &Baseline, files: &[Staged]) -> Result<Vec<Entry>, Error> {
    let mut entries = Vec::with_capacity(files.len());
    for f in files {
        let Id::Known(oid) = f.id else {
            return Err(Error::internal(format!(
                "git hash-object gave no id for {}",
                f.path
            )));
        };
        entries.push(Entry {
            path: f.path.as_bytes().to_vec(),
            stat: f.stat,
            mode: f.mode,
            oid,
            stage: 0,
            assume_valid: false,
            skip_worktree: false,
            intent_to_add: false,
        });
    }
    entries.sort_unstable_by(|a, b| a.path.cmp(&b.path));
    if let Some(twice) = entries.windows(2).find(|w| w[0].path == w[1].path) {
        return Err(Error::internal(format!(
            "{} was staged twice",
            String::from_utf8_lossy(&twice[0].path)
        )));
    }
    let bytes = git_index::write_v2(&entries);
    let git_dir = baseline.git_dir();
    let fail =
        |e: std::io::Error| Error::internal(format!("the baseline index cannot be written: {e}"));
    let mut tmp = tempfile::Builder::new()
        .prefix("index-")
        .tempfile_in(&git_dir)
        .map_err(fail)?;
    tmp.write_all(&bytes).map_err(fail)?;
    tmp.persist(git_dir.join("index"))
        .map_err(|e| fail(e.error))?;
    Ok(entries)
}

/// The checks on the source's ids, running in the background while the copy is made: the
/// attributes of the candidate paths (in the source) and the sizes of their blobs (in the
/// baseline, which reaches the source's objects and never fetches a missing one).
#[derive(Debug)]
struct Checks {
    attributes: JoinHandle<Result<Vec<u8>, Error>>,
    sizes: JoinHandle<Result<Vec<u8>, Error>>,
}

/// The attributes that make git convert a file on its way into the index (besides line
/// endings, which always change the size).
const CONVERTING: [&str; 3] = ["filter", "ident", "working-tree-encoding"];

impl Checks {
    fn start(index: &SourceIndex, files: &[SelectedFile], source: &Git, baseline: &Git) -> Checks {
        let mut paths = Vec::new();
        let mut ids = String::new();
        for f in files {
            if let Some((_, oid)) = index.entries.get(f.path.as_bytes()) {
                paths.extend_from_slice(f.path.as_bytes());
                paths.push(0);
                ids.push_str(&git_objects::hex(oid));
                ids.push('\n');
            }
        }
        let source = source.clone();
        let attributes = std::thread::spawn(move || {
            let args = [&["check-attr", "-z", "--stdin"][..], &CONVERTING[..]].concat();
            source.run_input(&args, Some(&paths))
        });
        let baseline = baseline.clone();
        let sizes = std::thread::spawn(move || {
            baseline.run_input(
                &[
                    "cat-file",
                    "--buffer",
                    "--batch-check=%(objectname) %(objectsize)",
                ],
                Some(ids.as_bytes()),
            )
        });
        Checks { attributes, sizes }
    }

    /// Waits for both checks and returns what they cleared.
    fn finish(self) -> Result<Cleared, Error> {
        let joined = |h: JoinHandle<Result<Vec<u8>, Error>>| {
            h.join()
                .map_err(|_| Error::internal("a check of the source's ids stopped"))?
        };
        let attributes = joined(self.attributes)?;
        let sizes = joined(self.sizes)?;
        let mut converted = HashSet::new();
        let mut items = split_z(&attributes);
        while let (Some(path), Some(_attribute), Some(info)) =
            (items.next(), items.next(), items.next())
        {
            if info != b"unspecified" && info != b"unset" {
                converted.insert(path.to_vec());
            }
        }
        let mut size = HashMap::new();
        for line in sizes.split(|b| *b == b'\n') {
            let line = String::from_utf8_lossy(line);
            // `<id> <size>`, or `<id> missing`: a missing blob clears nothing.
            if let Some((id, n)) = line.split_once(' ')
                && let (Some(id), Ok(n)) = (parse_hex(id), n.parse::<u64>())
            {
                size.insert(id, n);
            }
        }
        Ok(Cleared { converted, size })
    }
}

/// What the checks found.
#[derive(Debug, Default)]
struct Cleared {
    /// Paths a converting attribute applies to.
    converted: HashSet<Vec<u8>>,
    /// The size of each blob found.
    size: HashMap<Oid, u64>,
}

impl Cleared {
    /// Whether the source's `oid` for `path`, a file of `size` bytes, is its bytes.
    fn clears(&self, path: &str, oid: Oid, size: u32) -> bool {
        self.size.get(&oid) == Some(&u64::from(size)) && !self.converted.contains(path.as_bytes())
    }
}

/// `git hash-object -w --no-filters --stdin-paths` in the copy: hashes each file as soon as
/// its path arrives and writes its object into the baseline's store.
#[derive(Debug)]
struct Hasher {
    child: Child,
    stdin: Option<BufWriter<ChildStdin>>,
    stdout: Option<JoinHandle<std::io::Result<Vec<Oid>>>>,
    stderr: Option<JoinHandle<String>>,
    sent: usize,
}

impl Hasher {
    fn start(git: &Git) -> Result<Hasher, Error> {
        let mut child = git.spawn_piped(
            &["hash-object", "-w", "--no-filters", "--stdin-paths"],
            true,
        )?;
        let stdin = child.stdin.take().map(BufWriter::new);
        let stdout = child.stdout.take().map(|pipe| {
            std::thread::spawn(move || {
                let mut ids = Vec::new();
                for line in BufReader::new(pipe).lines() {
                    let line = line?;
                    ids.push(parse_hex(line.trim()).ok_or_else(|| {
                        std::io::Error::other(format!("not an object id: {line:?}"))
                    })?);
                }
                Ok(ids)
            })
        });
        let stderr = child.stderr.take().map(|mut pipe| {
            std::thread::spawn(move || {
                let mut text = String::new();
                let _ = pipe.read_to_string(&mut text);
                text
            })
        });
        Ok(Hasher {
            child,
            stdin,
            stdout,
            stderr,
            sent: 0,
        })
    }

    /// Sends the copy-relative `path`, C-quoted so that git takes it literally.
    fn add(&mut self, path: &str) -> Result<(), Error> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| Error::internal("git hash-object is closed"))?;
        stdin.write_all(&quote(path)).map_err(|e| {
            Error::caused_by(ErrorCode::Internal, "git hash-object stopped reading", e)
        })?;
        self.sent += 1;
        Ok(())
    }

    /// Waits for git and returns the ids, one per path sent, in order.
    fn finish(mut self) -> Result<Vec<Oid>, Error> {
        let flushed = match self.stdin.take() {
            Some(mut w) => w.flush(),
            None => Ok(()),
        };
        let status = self
            .child
            .wait()
            .map_err(|e| Error::caused_by(ErrorCode::Internal, "git hash-object failed", e))?;
        let ids = self.stdout.take().and_then(|h| h.join().ok());
        let stderr = self
            .stderr
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        if !status.success() || flushed.is_err() {
            let last = stderr.lines().rev().find(|l| !l.trim().is_empty());
            return Err(Error::internal(format!(
                "git hash-object failed ({status}): {}",
                last.unwrap_or("no message")
            )));
        }
        match ids {
            Some(Ok(ids)) if ids.len() == self.sent => Ok(ids),
            Some(Err(e)) => Err(Error::internal(format!("git hash-object failed: {e}"))),
            _ => Err(Error::internal(format!(
                "git hash-object did not give one id for each of the {} files",
                self.sent
            ))),
        }
    }
}

impl Drop for Hasher {
    fn drop(&mut self) {
        if self.stdin.take().is_some() {
            // Not finished: an error on the way; stop git.
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `path` as a C-quoted line (`"..."`, with `"`, `\` and control bytes escaped), which
/// `--stdin-paths` unquotes; a path starting with `"` is then never misread.
fn quote(path: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(path.len() + 3);
    out.push(b'"');
    for &b in path.as_bytes() {
        match b {
            b'"' | b'\\' => out.extend_from_slice(&[b'\\', b]),
            0..=0x1f | 0x7f => out.extend_from_slice(format!("\\{b:03o}").as_bytes()),
            _ => out.push(b),
        }
    }
    out.extend_from_slice(b"\"\n");
    out
}

/// A 40-digit hex object id.
fn parse_hex(hex: &str) -> Option<Oid> {
    if hex.len() != 2 * OID_LEN {
        return None;
    }
    let mut oid = [0u8; OID_LEN];
    for (i, byte) in oid.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(oid)
}

#[cfg(test)]
#[path = "staging_tests.rs"]
mod tests;
