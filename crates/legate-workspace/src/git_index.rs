//! The git index file format (SHA-1 repositories): reading a repository's entries (versions
//! 2 to 4) and writing a version 2 index.
//!
//! This module owns the bytes only: parsing and serializing entries, with the trailing
//! SHA-1 checked on read and written on write. It never opens a file, never decides whether
//! an entry can be trusted (that is `staging`), and never returns part of an index: a split
//! index (its entries live in another file), an unknown version, a bad checksum or a
//! truncated entry is an error, so the caller trusts nothing from it.

use legate_core::Error;
use sha1::{Digest, Sha1};
use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;

/// The length of a SHA-1 object id.
pub(crate) const OID_LEN: usize = 20;

/// A SHA-1 object id.
pub(crate) type Oid = [u8; OID_LEN];

/// The bytes of an entry before its path: ten 32-bit stat and mode fields, the id, the flags.
const ENTRY_HEAD: usize = 40 + OID_LEN + 2;

/// Flags of an on-disk entry.
const FLAG_ASSUME_VALID: u16 = 0x8000;
const FLAG_EXTENDED: u16 = 0x4000;
const FLAG_STAGE: u16 = 0x3000;
const NAME_MASK: u16 = 0x0fff;
/// Extended flags (version 3 and later).
const EXT_SKIP_WORKTREE: u16 = 0x4000;
const EXT_INTENT_TO_ADD: u16 = 0x2000;

/// The stat data git keeps per entry, each field truncated to 32 bits as git does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stat {
    pub(crate) ctime: (u32, u32),
    pub(crate) mtime: (u32, u32),
    pub(crate) dev: u32,
    pub(crate) ino: u32,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) size: u32,
}

impl Stat {
    /// The stat data of `meta`, as git records it (`fill_stat_data`).
    pub(crate) fn of(meta: &Metadata) -> Stat {
        Stat {
            ctime: (meta.ctime() as u32, meta.ctime_nsec() as u32),
            mtime: (meta.mtime() as u32, meta.mtime_nsec() as u32),
            dev: meta.dev() as u32,
            ino: meta.ino() as u32,
            uid: meta.uid(),
            gid: meta.gid(),
            size: meta.size() as u32,
        }
    }

    /// Whether `meta` has exactly this stat data, with no field that 32 bits could not hold
    /// (so no truncation can make two different files look alike).
    pub(crate) fn is_exactly(&self, meta: &Metadata) -> bool {
        let whole = |v: i64| u32::try_from(v).ok();
        whole(meta.ctime()) == Some(self.ctime.0)
            && whole(meta.ctime_nsec()) == Some(self.ctime.1)
            && whole(meta.mtime()) == Some(self.mtime.0)
            && whole(meta.mtime_nsec()) == Some(self.mtime.1)
            && u64::from(self.dev) == meta.dev()
            && u64::from(self.ino) == meta.ino()
            && self.uid == meta.uid()
            && self.gid == meta.gid()
            && u64::from(self.size) == meta.size()
    }
}

/// One index entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    /// The path, as git stores it (bytes, `/`-separated).
    pub(crate) path: Vec<u8>,
    pub(crate) stat: Stat,
    /// The git mode (`0o100644`, `0o100755`, `0o120000`, `0o160000`, `0o040000`).
    pub(crate) mode: u32,
    pub(crate) oid: Oid,
    /// 0 for a merged entry, 1 to 3 during a conflict.
    pub(crate) stage: u8,
    /// `git update-index --assume-unchanged`: git no longer checks the file.
    pub(crate) assume_valid: bool,
    /// Outside the sparse checkout: git no longer checks the file.
    pub(crate) skip_worktree: bool,
    /// `git add -N`: the id is a placeholder.
    pub(crate) intent_to_add: bool,
}

fn bad(why: &str) -> Error {
    Error::internal(format!("the git index cannot be read: {why}"))
}

/// A cursor over the index bytes.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Error> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|end| *end <= self.bytes.len())
            .ok_or_else(|| bad("it ends early"))?;
        let s = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn u32(&mut self) -> Result<u32, Error> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u16(&mut self) -> Result<u16, Error> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    /// The bytes up to the next NUL, which is consumed.
    fn until_nul(&mut self) -> Result<&'a [u8], Error> {
        let rest = &self.bytes[self.pos..];
        let n = rest
            .iter()
            .position(|b| *b == 0)
            .ok_or_else(|| bad("a path has no end"))?;
        self.pos += n + 1;
        Ok(&rest[..n])
    }

    /// Git's offset varint (version 4 path compression).
    fn varint(&mut self) -> Result<usize, Error> {
        let mut c = self.take(1)?[0];
        let mut val = usize::from(c & 0x7f);
        while c & 0x80 != 0 {
            c = self.take(1)?[0];
            val = val
                .checked_add(1)
                .and_then(|v| v.checked_mul(128))
                .and_then(|v| v.checked_add(usize::from(c & 0x7f)))
                .ok_or_else(|| bad("a path prefix is too long"))?;
        }
        Ok(val)
    }
}

/// Parses a whole index file of a SHA-1 repository.
pub(crate) fn parse(bytes: &[u8]) -> Result<Vec<Entry>, Error> {
    if bytes.len() < 12 + OID_LEN {
        return Err(bad("it is too short"));
    }
    let (body, trailer) = bytes.split_at(bytes.len() - OID_LEN);
    // An all-zero trailer is git's `index.skipHash`: no checksum to check.
    if trailer.iter().any(|b| *b != 0) && Sha1::digest(body).as_slice() != trailer {
        return Err(bad("its checksum does not match"));
    }
    let mut r = Reader {
        bytes: body,
        pos: 0,
    };
    if r.take(4)? != b"DIRC" {
        return Err(bad("it has no index signature"));
    }
    let version = r.u32()?;
    if !(2..=4).contains(&version) {
        return Err(bad(&format!("version {version} is not supported")));
    }
    let count = r.u32()? as usize;
    let mut entries = Vec::with_capacity(count.min(body.len() / ENTRY_HEAD));
    let mut previous: Vec<u8> = Vec::new();
    for _ in 0..count {
        let start = r.pos;
        let mut f = [0u32; 10];
        for v in &mut f {
            *v = r.u32()?;
        }
        let mut oid = [0u8; OID_LEN];
        oid.copy_from_slice(r.take(OID_LEN)?);
        let flags = r.u16()?;
        let ext = if flags & FLAG_EXTENDED != 0 {
            if version < 3 {
                return Err(bad("an entry has extended flags in a version 2 index"));
            }
            r.u16()?
        } else {
            0
        };
        let path = if version == 4 {
            let strip = r.varint()?;
            let keep = previous
                .len()
                .checked_sub(strip)
                .ok_or_else(|| bad("a path prefix is longer than the path before it"))?;
            let mut path = previous[..keep].to_vec();
            path.extend_from_slice(r.until_nul()?);
            path
        } else {
            let name = r.until_nul()?;
            let len = usize::from(flags & NAME_MASK);
            if len < usize::from(NAME_MASK) && len != name.len() {
                return Err(bad("an entry's path length is wrong"));
            }
            // Entries are padded with 1 to 8 NULs to a multiple of 8 bytes.
            let head = r.pos - start - name.len() - 1;
            let size = (head + name.len() + 8) & !7;
            r.take(size - (r.pos - start))?;
            name.to_vec()
        };
        let [
            ctime_s,
            ctime_ns,
            mtime_s,
            mtime_ns,
            dev,
            ino,
            mode,
            uid,
            gid,
            size,
        ] = f;
        entries.push(Entry {
            stat: Stat {
                ctime: (ctime_s, ctime_ns),
                mtime: (mtime_s, mtime_ns),
                dev,
                ino,
                uid,
                gid,
                size,
            },
            mode,
            oid,
            stage: ((flags & FLAG_STAGE) >> 12) as u8,
            assume_valid: flags & FLAG_ASSUME_VALID != 0,
            skip_worktree: ext & EXT_SKIP_WORKTREE != 0,
            intent_to_add: ext & EXT_INTENT_TO_ADD != 0,
            path: path.clone(),
        });
        previous = path;
    }
    // Extensions: only a split index matters (its entries are elsewhere).
    while r.pos < body.len() {
        let signature = r.take(4)?;
        if signature == b"link" {
            return Err(bad("it is a split index"));
        }
        let len = r.u32()? as usize;
        r.take(len)?;
    }
    Ok(entries)
}

/// A version 2 index of `entries`, which must be sorted by path bytes, unique, at stage 0,
/// with none of the flags set; the trailing SHA-1 included.
pub(crate) fn write_v2(entries: &[Entry]) -> Vec<u8> {
    let size: usize = entries
        .iter()
        .map(|e| (ENTRY_HEAD + e.path.len() + 8) & !7)
        .sum();
    let mut out = Vec::with_capacity(12 + size + OID_LEN);
    out.extend_from_slice(b"DIRC");
    out.extend_from_slice(&2u32.to_be_bytes());
    out.extend_from_slice(&(entries.len() as u32).to_be_bytes());
    for e in entries {
        let s = &e.stat;
        for v in [
            s.ctime.0, s.ctime.1, s.mtime.0, s.mtime.1, s.dev, s.ino, e.mode, s.uid, s.gid, s.size,
        ] {
            out.extend_from_slice(&v.to_be_bytes());
        }
        out.extend_from_slice(&e.oid);
        // Paths of 0xfff bytes or more store 0xfff; git then finds the NUL.
        let len = e.path.len().min(usize::from(NAME_MASK)) as u16;
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(&e.path);
        let padded = (ENTRY_HEAD + e.path.len() + 8) & !7;
        out.resize(out.len() + padded - ENTRY_HEAD - e.path.len(), 0);
    }
    let sum = Sha1::digest(&out);
    out.extend_from_slice(&sum);
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::git::Git;

    fn entry(path: &str, n: u8) -> Entry {
        Entry {
            path: path.as_bytes().to_vec(),
            stat: Stat {
                ctime: (1_700_000_000, 1 + u32::from(n)),
                mtime: (1_700_000_001, 2 + u32::from(n)),
                dev: 3,
                ino: 4 + u32::from(n),
                uid: 5,
                gid: 6,
                size: 7 + u32::from(n),
            },
            mode: if n.is_multiple_of(2) {
                0o100644
            } else {
                0o100755
            },
            oid: [n + 1; OID_LEN],
            stage: 0,
            assume_valid: false,
            skip_worktree: false,
            intent_to_add: false,
        }
    }

    #[test]
    fn what_is_written_reads_back() {
        let long = "d/".repeat(2100) + "x";
        let mut entries: Vec<Entry> = ["a", "a-b", "a/b", "a0", "b/c/d", "é", &long]
            .iter()
            .enumerate()
            .map(|(i, p)| entry(p, i as u8))
            .collect();
        entries.sort_by(|a, b| a.path.cmp(&b.path));
        let bytes = write_v2(&entries);
        assert_eq!(parse(&bytes).unwrap(), entries);
    }

    #[test]
    fn a_damaged_index_is_refused() {
        let bytes = write_v2(&[entry("a", 1), entry("b", 2)]);
        let mut flipped = bytes.clone();
        flipped[20] ^= 1;
        assert!(parse(&flipped).is_err());
        assert!(parse(&bytes[..bytes.len() - 1]).is_err());
        // Without a checksum (index.skipHash), a truncated entry is still refused.
        let mut unsummed = bytes[..bytes.len() - OID_LEN - 8].to_vec();
        unsummed.extend_from_slice(&[0; OID_LEN]);
        assert!(parse(&unsummed).is_err());
        assert!(parse(b"").is_err());
    }

    /// A new repository in a temporary directory, and git in it.
    fn scratch_repo() -> (tempfile::TempDir, Git) {
        let tmp = tempfile::tempdir().unwrap();
        let git = Git::source(tmp.path());
        git.run(&["init", "-q"]).unwrap();
        (tmp, git)
    }

    /// Git itself reads what is written, in every version it can convert it to.
    #[test]
    fn git_agrees_on_every_version() {
        let (tmp, repo) = scratch_repo();
        let dir = tmp.path();
        let git = |args: &[&str]| repo.run(args).unwrap();
        let mut entries: Vec<Entry> = ["a/b", "a-b", "a", "x/y/z", "sp ace", "a0"]
            .iter()
            .enumerate()
            .map(|(i, p)| entry(p, i as u8))
            .collect();
        entries.sort_by(|a, b| a.path.cmp(&b.path));
        // `a` and `a/b` cannot both be files; drop `a`.
        entries.retain(|e| e.path != b"a");
        std::fs::write(dir.join(".git/index"), write_v2(&entries)).unwrap();
        let listed = git(&["ls-files", "-s", "-z"]);
        let want: Vec<u8> = entries
            .iter()
            .flat_map(|e| {
                let hex: String = e.oid.iter().map(|b| format!("{b:02x}")).collect();
                let mut line = format!("{:o} {hex} 0\t", e.mode).into_bytes();
                line.extend_from_slice(&e.path);
                line.push(0);
                line
            })
            .collect();
        assert_eq!(listed, want);
        for version in ["4", "3", "2"] {
            git(&["update-index", "--index-version", version]);
            if version == "3" {
                git(&["update-index", "--skip-worktree", "x/y/z"]);
                git(&["update-index", "--assume-unchanged", "a0"]);
            }
            let bytes = std::fs::read(dir.join(".git/index")).unwrap();
            let parsed = parse(&bytes).unwrap();
            assert_eq!(parsed.len(), entries.len(), "version {version}");
            for (p, e) in parsed.iter().zip(&entries) {
                assert_eq!(
                    (&p.path, p.stat, p.mode, p.oid),
                    (&e.path, e.stat, e.mode, e.oid)
                );
                // Set while at version 3, the flags stay (git keeps version 3 for them).
                assert_eq!(p.skip_worktree, e.path == b"x/y/z" && version != "4");
                assert_eq!(p.assume_valid, e.path == b"a0" && version != "4");
            }
        }
    }

    #[test]
    fn a_split_index_is_refused() {
        let (tmp, repo) = scratch_repo();
        let dir = tmp.path();
        let run = |args: &[&str]| repo.run(args).unwrap();
        std::fs::write(dir.join("f"), b"x").unwrap();
        run(&["add", "f"]);
        run(&["update-index", "--split-index"]);
        let bytes = std::fs::read(dir.join(".git/index")).unwrap();
        assert!(parse(&bytes).is_err());
    }
}
