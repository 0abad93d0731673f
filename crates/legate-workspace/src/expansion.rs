//! The bound on what a returned patch expands to: a few megabytes of patch can describe a
//! gigabyte file (a git binary hunk is deflated; a delta copies its base again and again).
//! Three checks, all before any byte of the result is read into memory or written to the copy:
//! [`no_copies`], no file copied or renamed (a header that makes a whole file again);
//! [`declared`], the sizes the patch's binary hunks declare, read from the patch text before
//! git sees it, and [`resulting`], the sizes of the blobs the patch led to in the scratch
//! index, asked of git without reading them. Past the bound the patch is `COPY_TOO_LARGE`
//! and the copy is untouched.
//!
//! This module never reads a blob's contents and never writes anything.

use crate::baseline::Baseline;
use legate_core::{Error, ErrorCode};

fn too_large(what: String, max_bytes: u64) -> Error {
    Error::new(
        ErrorCode::CopyTooLarge,
        format!(
            "the remote's patch {what}, over the {max_bytes}-byte transfer bound; nothing was applied (the agent's max_transfer_bytes sets it)"
        ),
    )
}

/// git's base85 alphabet (`base85.c`).
const BASE85: &[u8; 85] =
    b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~";

/// One line of a binary hunk: its length character (`A`–`Z` 1–26, `a`–`z` 27–52 bytes),
/// then base85 groups of 5 characters for 4 bytes. `None` for a line that is not one.
fn base85_line(line: &[u8]) -> Option<Vec<u8>> {
    let (&len, body) = line.split_first()?;
    let len = match len {
        b'A'..=b'Z' => usize::from(len - b'A') + 1,
        b'a'..=b'z' => usize::from(len - b'a') + 27,
        _ => return None,
    };
    let mut out = Vec::with_capacity(len + 4);
    for group in body.chunks(5) {
        let mut acc: u64 = 0;
        for c in group {
            let v = BASE85.iter().position(|b| b == c)?;
            acc = acc * 85 + v as u64;
        }
        if group.len() != 5 || acc > u64::from(u32::MAX) {
            return None;
        }
        out.extend_from_slice(&(acc as u32).to_be_bytes());
    }
    (out.len() >= len).then(|| {
        out.truncate(len);
        out
    })
}

/// The size of the file a `delta` hunk makes, read from the delta's own header (after the
/// base's size) in the first inflated bytes of the hunk's `lines`. `None` when it cannot be
/// read: such a hunk is refused, never taken as small.
fn delta_result_size<'a>(lines: impl Iterator<Item = &'a [u8]>) -> Option<u64> {
    let mut inflate = flate2::Decompress::new(true);
    let mut head = [0u8; 32];
    let mut got = 0usize;
    for line in lines {
        if line.is_empty() {
            break;
        }
        let bytes = base85_line(line)?;
        let before = inflate.total_out();
        inflate
            .decompress(&bytes, &mut head[got..], flate2::FlushDecompress::None)
            .ok()?;
        got += usize::try_from(inflate.total_out() - before).ok()?;
        if got == head.len() {
            break;
        }
    }
    // Two varints: the base's size, then the result's (7 bits a byte, low first).
    let mut at = 0;
    let mut varint = || -> Option<u64> {
        let mut size: u64 = 0;
        for shift in (0..64).step_by(7) {
            let b = *head[..got].get(at)?;
            at += 1;
            size |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Some(size);
            }
        }
        None
    };
    varint()?;
    varint()
}

/// Refuses a patch whose binary hunks declare more than `max_bytes` in one file or in all:
/// `literal N` declares `N`; a `delta` hunk declares the size of its delta, not of the file it
/// makes (a few bytes can copy a base again and again), so the file's size is read from the
/// delta's own header. (A `copy to` makes a file as large as one of the baseline's, and git
/// holds every one in memory: [`no_copies`] refuses them before git runs.)
pub(crate) fn declared(patch: &[u8], max_bytes: u64) -> Result<(), Error> {
    let mut total: u64 = 0;
    let lines: Vec<&[u8]> = patch.split(|b| *b == b'\n').collect();
    // Only the hunk right after `GIT binary patch` is applied; the one after it (the
    // reverse, to undo) is not, and is not counted.
    let mut forward = false;
    for (i, line) in lines.iter().enumerate() {
        if line.starts_with(b"GIT binary patch") {
            forward = true;
            continue;
        }
        if !(line.starts_with(b"literal ") || line.starts_with(b"delta ")) {
            continue;
        }
        if !std::mem::take(&mut forward) {
            continue;
        }
        let size = if let Some(n) = line.strip_prefix(b"literal ") {
            std::str::from_utf8(n)
                .ok()
                .and_then(|n| n.trim().parse::<u64>().ok())
                .unwrap_or(u64::MAX)
        } else if line.starts_with(b"delta ") {
            delta_result_size(lines[i + 1..].iter().copied()).ok_or_else(|| {
                Error::new(
                    ErrorCode::RemoteProtocolError,
                    "the remote's patch has a binary delta whose size cannot be read; nothing was applied",
                )
            })?
        } else {
            continue;
        };
        if size > max_bytes {
            return Err(too_large(
                format!("declares a binary file of {size} bytes"),
                max_bytes,
            ));
        }
        total = total.saturating_add(size);
        if total > max_bytes {
            return Err(too_large(
                format!("declares binary files of over {total} bytes in all"),
                max_bytes,
            ));
        }
    }
    Ok(())
}

/// Refuses a result whose blobs `ids` (the files the patch writes) are over `max_bytes` one
/// by one or in all, by the sizes git gives (`cat-file --batch-check`), before any is read.
pub(crate) fn resulting(baseline: &Baseline, ids: &[&str], max_bytes: u64) -> Result<(), Error> {
    let mut total: u64 = 0;
    for size in baseline.blob_sizes(ids)? {
        if size > max_bytes {
            return Err(too_large(
                format!("writes a file of {size} bytes"),
                max_bytes,
            ));
        }
        total = total.saturating_add(size);
        if total > max_bytes {
            return Err(too_large(
                format!("writes over {total} bytes in all"),
                max_bytes,
            ));
        }
    }
    Ok(())
}

/// Refuses a patch that copies or renames a file (`copy from`, `rename to`, … in a file's
/// extended header). A header of ninety bytes makes a whole file of the baseline again, and
/// `git apply` holds every result in memory until it ends (`GIT_ALLOC_LIMIT` bounds one
/// allocation, not their sum): a few hundred kilobytes of such headers asked git for
/// gigabytes. Legate's own patches are made with `--no-renames`, so none carries one.
pub(crate) fn no_copies(patch: &[u8]) -> Result<(), Error> {
    let mut in_header = false;
    for line in patch.split(|b| *b == b'\n') {
        if line.starts_with(b"diff --git ") {
            in_header = true;
            continue;
        }
        if !in_header {
            continue;
        }
        // git reads header lines past `---` and `+++` too: only a hunk ends the header.
        if line.starts_with(b"@@")
            || line.starts_with(b"GIT binary patch")
            || line.starts_with(b"Binary files ")
        {
            in_header = false;
            continue;
        }
        let copies = [
            &b"copy from "[..],
            b"copy to ",
            b"rename from ",
            b"rename to ",
            b"rename old ",
            b"rename new ",
        ];
        if copies.iter().any(|c| line.starts_with(c)) {
            return Err(Error::new(
                ErrorCode::RemoteProtocolError,
                "the remote's patch copies or renames a file, which Legate's patches never do (they are made with --no-renames); nothing was applied",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_patch_that_copies_or_renames_is_refused_before_git_sees_it() {
        let plain = b"diff --git a/a.txt b/a.txt\nindex 1..2 100644\n--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-copy from x\n+rename to y\n";
        assert!(no_copies(plain).is_ok());
        let mut copies = Vec::new();
        for i in 0..3 {
            copies.extend_from_slice(
                format!("diff --git a/big.bin b/c{i}\nsimilarity index 100%\ncopy from big.bin\ncopy to c{i}\n").as_bytes(),
            );
        }
        let e = no_copies(&copies).unwrap_err();
        assert_eq!(e.code, ErrorCode::RemoteProtocolError);
        let renamed = b"diff --git a/a b/b\nsimilarity index 90%\nrename from a\nrename to b\n--- a/a\n+++ b/b\n";
        assert!(no_copies(renamed).is_err());
        // git takes header lines after `---` and `+++` as well (the review's bypass).
        let after =
            b"diff --git a/big.txt b/k1\n--- a/big.txt\n+++ b/k1\ncopy from big.txt\ncopy to k1\n";
        assert!(no_copies(after).is_err());
        let renamed_after = b"diff --git a/a b/r\n--- a/a\n+++ b/r\nrename from a\nrename to r\n";
        assert!(no_copies(renamed_after).is_err());
    }

    #[test]
    fn declared_binary_sizes_are_bounded_one_by_one_and_in_all() {
        let one = b"GIT binary patch\nliteral 1073741824\nzcmeIuF\n\nliteral 0\nHcmV?d00001\n";
        let e = declared(one, 1 << 20).unwrap_err();
        assert_eq!(e.code, ErrorCode::CopyTooLarge);
        assert!(e.message.contains("1073741824"), "{e}");
        let many = b"GIT binary patch\nliteral 600\nx\n\nliteral 9000\n\nGIT binary patch\nliteral 600\ny\n\n";
        assert_eq!(
            declared(many, 1000).unwrap_err().code,
            ErrorCode::CopyTooLarge
        );
        assert!(declared(many, 1200).is_ok());
        // A size that is not a number is taken as too large, never as zero.
        assert!(
            declared(
                b"GIT binary patch\nliteral 99999999999999999999999\n",
                1 << 30
            )
            .is_err()
        );
        assert!(declared(b"+literal text in a hunk\n", 10).is_ok());
    }

    /// git's own encoding of a delta hunk (zlib, then base85 lines), for the tests.
    fn hunk(delta: &[u8]) -> Vec<u8> {
        use std::io::Write;
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        z.write_all(delta).unwrap();
        let deflated = z.finish().unwrap();
        let mut out = format!("GIT binary patch\ndelta {}\n", delta.len()).into_bytes();
        for chunk in deflated.chunks(52) {
            let len = chunk.len();
            out.push(if len <= 26 {
                b'A' + len as u8 - 1
            } else {
                b'a' + len as u8 - 27
            });
            let mut padded = chunk.to_vec();
            padded.resize(len.div_ceil(4) * 4, 0);
            for word in padded.chunks(4) {
                let mut acc = u32::from_be_bytes([word[0], word[1], word[2], word[3]]) as u64;
                let mut group = [0u8; 5];
                for g in group.iter_mut().rev() {
                    *g = BASE85[(acc % 85) as usize];
                    acc /= 85;
                }
                out.extend_from_slice(&group);
            }
            out.push(b'\n');
        }
        out.push(b'\n');
        out
    }

    fn varint(mut n: u64) -> Vec<u8> {
        let mut out = Vec::new();
        loop {
            let b = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(b);
                return out;
            }
            out.push(b | 0x80);
        }
    }

    #[test]
    fn a_small_delta_that_makes_a_huge_file_is_refused_by_the_size_it_makes() {
        // Base of 64 KiB, result of 1 GiB: 16,384 copy instructions of the whole base.
        let mut delta = varint(65_536);
        delta.extend(varint(1 << 30));
        for _ in 0..16_384 {
            delta.extend_from_slice(&[0x80 | 0x10 | 0x20, 0x00, 0x00]);
        }
        let patch = hunk(&delta);
        assert!(patch.len() < 64 << 10, "{} bytes", patch.len());
        let e = declared(&patch, 64 << 20).unwrap_err();
        assert_eq!(e.code, ErrorCode::CopyTooLarge);
        assert!(e.message.contains("1073741824"), "{e}");
        // A delta that makes a small file passes.
        let mut small = varint(10);
        small.extend(varint(12));
        small.extend_from_slice(&[0x90, 0x0a, 2, b'h', b'i']);
        assert!(declared(&hunk(&small), 1 << 20).is_ok());
        // git's own delta hunk: the size read is the file git makes.
        let repo = tempfile::tempdir().unwrap();
        let git = |args: &[&str]| {
            let out = std::process::Command::new("git")
                .arg("-C")
                .arg(repo.path())
                .args([
                    "-c",
                    "user.name=t",
                    "-c",
                    "user.email=t@t",
                    "-c",
                    "core.autocrlf=false",
                ])
                .args(args)
                .output()
                .unwrap();
            assert!(out.status.success(), "{out:?}");
            out.stdout
        };
        git(&["init", "-q"]);
        let base: Vec<u8> = (0..200_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        std::fs::write(repo.path().join("f.bin"), &base).unwrap();
        git(&["add", "f.bin"]);
        git(&["commit", "-qm", "base"]);
        let mut grown = base.clone();
        grown.extend_from_slice(&base[..50_000]);
        std::fs::write(repo.path().join("f.bin"), &grown).unwrap();
        let patch = git(&["diff", "--binary"]);
        assert!(
            patch.windows(6).any(|w| w == b"delta "),
            "{}",
            String::from_utf8_lossy(&patch)
        );
        let size = grown.len() as u64;
        assert!(declared(&patch, size).is_ok());
        let e = declared(&patch, size - 1).unwrap_err();
        assert!(e.message.contains(&size.to_string()), "{e}");
        // One whose lines are not base85 is refused, never taken as small.
        let e = declared(b"GIT binary patch\ndelta 5\n!!!!!\n\n", 1 << 20).unwrap_err();
        assert_eq!(e.code, ErrorCode::RemoteProtocolError);
    }
}
