//! Writing a baseline's commit without running git: the trees of its index's entries and the
//! commit, as loose objects.
//!
//! This module owns the object formats it writes (tree entries in git's order, the commit
//! text with the baseline's fixed identity and date, so the ids are those `git commit` would
//! give) and the loose-object encoding (zlib with stored blocks, which is what
//! `core.compression=0` writes). It never rewrites an object that exists, writes objects
//! only into the directory it is given, and touches no ref (the caller points the branch at
//! the commit).

use crate::git_index::{Entry, OID_LEN, Oid};
use legate_core::Error;
use sha1::{Digest, Sha1};
use std::fs;
use std::io::Write;
use std::path::Path;

/// The commit's author and committer, and its message: those of `git commit` in a baseline
/// (the identity and date `git` fixes for private repositories).
const SIGNATURE: &str = "Legate <legate@localhost> 946684800 +0000";
const MESSAGE: &str = "baseline\n";

fn failed(e: std::io::Error) -> Error {
    Error::internal(format!("a baseline object could not be written: {e}"))
}

/// Writes the trees of `entries` (sorted by path bytes, stage 0, files only) into the object
/// directory `objects`, and returns the root tree's id.
pub(crate) fn write_tree(objects: &Path, entries: &[Entry]) -> Result<Oid, Error> {
    tree(objects, entries, 0)
}

/// The tree of `entries`, which all start with the same `prefix` bytes.
fn tree(objects: &Path, entries: &[Entry], prefix: usize) -> Result<Oid, Error> {
    let mut content = Vec::new();
    let mut i = 0;
    // In path order, a directory's entries are contiguous, and a directory `d` falls where
    // `d/` sorts: git's tree order, which compares a directory's name as if it ended in `/`.
    while i < entries.len() {
        let rest = &entries[i].path[prefix..];
        match rest.iter().position(|b| *b == b'/') {
            Some(slash) => {
                let dir = &entries[i].path[..prefix + slash + 1];
                let end = i + entries[i..]
                    .iter()
                    .take_while(|e| e.path.starts_with(dir))
                    .count();
                let id = tree(objects, &entries[i..end], prefix + slash + 1)?;
                content.extend_from_slice(b"40000 ");
                content.extend_from_slice(&rest[..slash]);
                content.push(0);
                content.extend_from_slice(&id);
                i = end;
            }
            None => {
                content.extend_from_slice(format!("{:o} ", entries[i].mode).as_bytes());
                content.extend_from_slice(rest);
                content.push(0);
                content.extend_from_slice(&entries[i].oid);
                i += 1;
            }
        }
    }
    write_object(objects, "tree", &content)
}

/// Writes the baseline commit of `tree` into `objects` and returns its id.
pub(crate) fn write_commit(objects: &Path, tree: &Oid) -> Result<Oid, Error> {
    let text = format!(
        "tree {}\nauthor {SIGNATURE}\ncommitter {SIGNATURE}\n\n{MESSAGE}",
        hex(tree)
    );
    write_object(objects, "commit", text.as_bytes())
}

/// The lower-case hex form of `oid`.
pub(crate) fn hex(oid: &Oid) -> String {
    oid.iter().map(|b| format!("{b:02x}")).collect()
}

/// Writes a loose object of `kind` unless it exists; returns its id.
fn write_object(objects: &Path, kind: &str, content: &[u8]) -> Result<Oid, Error> {
    let mut raw = format!("{kind} {}\0", content.len()).into_bytes();
    raw.extend_from_slice(content);
    let mut oid = [0u8; OID_LEN];
    oid.copy_from_slice(&Sha1::digest(&raw));
    let name = hex(&oid);
    let dir = objects.join(&name[..2]);
    let path = dir.join(&name[2..]);
    if path.exists() {
        return Ok(oid);
    }
    fs::create_dir_all(&dir).map_err(failed)?;
    let mut tmp = tempfile::Builder::new()
        .prefix("tmp_obj_")
        .tempfile_in(&dir)
        .map_err(failed)?;
    tmp.write_all(&zlib_stored(&raw)).map_err(failed)?;
    match tmp.persist_noclobber(&path) {
        Ok(_) => Ok(oid),
        // Made meanwhile by another writer: the same bytes (dropping the temporary file
        // removes it).
        Err(e) if path.exists() => {
            drop(e);
            Ok(oid)
        }
        Err(e) => Err(failed(e.error)),
    }
}

/// `data` as a zlib stream of stored (uncompressed) deflate blocks.
fn zlib_stored(data: &[u8]) -> Vec<u8> {
    const BLOCK: usize = 0xffff;
    let mut out = Vec::with_capacity(data.len() + data.len() / BLOCK * 5 + 11);
    // CMF: deflate, 32 KiB window; FLG: fastest level, no dictionary, check bits.
    out.extend_from_slice(&[0x78, 0x01]);
    let mut chunks = data.chunks(BLOCK).peekable();
    if chunks.peek().is_none() {
        out.extend_from_slice(&[1, 0, 0, 0xff, 0xff]);
    }
    while let Some(chunk) = chunks.next() {
        out.push(u8::from(chunks.peek().is_none()));
        let len = chunk.len() as u16;
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(chunk);
    }
    out.extend_from_slice(&adler32(data).to_be_bytes());
    out
}

fn adler32(data: &[u8]) -> u32 {
    const MOD: u32 = 65521;
    let (mut a, mut b) = (1u32, 0u32);
    // 5552 bytes is the most that can be summed before `b` could overflow.
    for chunk in data.chunks(5552) {
        for &byte in chunk {
            a += u32::from(byte);
            b += a;
        }
        a %= MOD;
        b %= MOD;
    }
    (b << 16) | a
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::git::Git;
    use crate::git_index::Stat;

    #[test]
    fn adler32_matches_the_reference_values() {
        assert_eq!(adler32(b""), 1);
        assert_eq!(adler32(b"Wikipedia"), 0x11e6_0398);
        let big = vec![0xffu8; 100_000];
        // Reference: the definition, summed without the chunking shortcut.
        let (mut a, mut b) = (1u64, 0u64);
        for &x in &big {
            a = (a + u64::from(x)) % 65521;
            b = (b + a) % 65521;
        }
        assert_eq!(u64::from(adler32(&big)), (b << 16) | a);
    }

    /// Git reads the objects, and gives the same ids for the same trees and commit.
    #[test]
    fn git_agrees_with_the_trees_and_the_commit() {
        let tmp = tempfile::tempdir().unwrap();
        let git = Git::source(tmp.path());
        git.run(&["init", "-q"]).unwrap();
        let mut entries = Vec::new();
        // Names that sort differently as files and as directories (`-` and `.` before `/`,
        // `0` after): as files at the top, and as directories under `d/`.
        let mut paths = vec!["big".to_string(), "sp ace".into(), "é".into()];
        for name in ["a", "a-b", "a.b", "a0", "b-", "b.c"] {
            paths.push(name.to_string());
            paths.push(format!("d/{name}/x"));
            paths.push(format!("d/{name}y"));
        }
        for (i, p) in paths.iter().enumerate() {
            let content = if p == "big" {
                vec![b'x'; 200_000]
            } else {
                format!("{p}\n").into_bytes()
            };
            let path = tmp.path().join(p);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(&path, &content).unwrap();
            let id =
                String::from_utf8(git.run(&["hash-object", "-w", p.as_str()]).unwrap()).unwrap();
            let mut oid = [0u8; OID_LEN];
            for (j, byte) in oid.iter_mut().enumerate() {
                *byte = u8::from_str_radix(&id[2 * j..2 * j + 2], 16).unwrap();
            }
            entries.push(Entry {
                path: p.as_bytes().to_vec(),
                stat: Stat::of(&fs::metadata(&path).unwrap()),
                mode: if i % 3 == 0 { 0o100755 } else { 0o100644 },
                oid,
                stage: 0,
                assume_valid: false,
                skip_worktree: false,
                intent_to_add: false,
            });
        }
        entries.sort_by(|a, b| a.path.cmp(&b.path));
        let objects = tmp.path().join(".git/objects");
        let root = write_tree(&objects, &entries).unwrap();
        // Git's own tree of the same index.
        let index = tmp.path().join(".git/index");
        fs::write(&index, crate::git_index::write_v2(&entries)).unwrap();
        let theirs = git.run(&["write-tree"]).unwrap();
        assert_eq!(String::from_utf8(theirs).unwrap().trim(), hex(&root));
        // The same bytes as git's (object files are compared by their content).
        let ours = write_object(&objects, "blob", &[b'x'; 200_000]).unwrap();
        let shown = git.run(&["cat-file", "-p", &hex(&ours)]).unwrap();
        assert_eq!(shown, vec![b'x'; 200_000]);
        let commit = write_commit(&objects, &root).unwrap();
        let made = Git::source(tmp.path())
            .command(&["commit-tree", &hex(&root), "-m", "baseline"])
            .env("GIT_AUTHOR_NAME", "Legate")
            .env("GIT_AUTHOR_EMAIL", "legate@localhost")
            .env("GIT_AUTHOR_DATE", "2000-01-01T00:00:00Z")
            .env("GIT_COMMITTER_NAME", "Legate")
            .env("GIT_COMMITTER_EMAIL", "legate@localhost")
            .env("GIT_COMMITTER_DATE", "2000-01-01T00:00:00Z")
            .output()
            .unwrap();
        assert!(made.status.success(), "{made:?}");
        assert_eq!(String::from_utf8(made.stdout).unwrap().trim(), hex(&commit));
        git.run(&["update-ref", "HEAD", &hex(&commit)]).unwrap();
        git.run(&["fsck", "--strict", "--no-dangling"]).unwrap();
    }
}
