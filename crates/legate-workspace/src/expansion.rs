//! The bound on what a returned patch expands to: a few megabytes of patch can describe a
//! gigabyte file (a git binary hunk is deflated; a delta copies its base again and again).
//! Two checks, both before any byte of the result is read into memory or written to the copy:
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

/// Refuses a patch whose binary hunks (`literal N`, `delta N`) declare more than `max_bytes`
/// in one hunk or in all.
pub(crate) fn declared(patch: &[u8], max_bytes: u64) -> Result<(), Error> {
    let mut total: u64 = 0;
    for line in patch.split(|b| *b == b'\n') {
        let size = line
            .strip_prefix(b"literal ")
            .or_else(|| line.strip_prefix(b"delta "))
            .and_then(|n| std::str::from_utf8(n).ok())
            .map(|n| n.trim().parse::<u64>().unwrap_or(u64::MAX));
        let Some(size) = size else { continue };
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
    if ids.is_empty() {
        return Ok(());
    }
    let input: Vec<u8> = ids
        .iter()
        .flat_map(|id| format!("{id}\n").into_bytes())
        .collect();
    let out = baseline
        .git()
        .run_input(&["cat-file", "--batch-check=%(objectsize)"], Some(&input))?;
    let mut total: u64 = 0;
    for line in String::from_utf8_lossy(&out).lines() {
        let size: u64 = line
            .trim()
            .parse()
            .map_err(|_| Error::internal(format!("unexpected cat-file line {line:?}")))?;
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn declared_binary_sizes_are_bounded_one_by_one_and_in_all() {
        let one = b"GIT binary patch\nliteral 1073741824\nzcmeIuF\n\nliteral 0\nHcmV?d00001\n";
        let e = declared(one, 1 << 20).unwrap_err();
        assert_eq!(e.code, ErrorCode::CopyTooLarge);
        assert!(e.message.contains("1073741824"), "{e}");
        let many = b"literal 600\nx\ndelta 600\ny\n";
        assert_eq!(
            declared(many, 1000).unwrap_err().code,
            ErrorCode::CopyTooLarge
        );
        assert!(declared(many, 1200).is_ok());
        // A size that is not a number is taken as too large, never as zero.
        assert!(declared(b"literal 99999999999999999999999\n", 1 << 30).is_err());
        assert!(declared(b"+literal text in a hunk\n", 10).is_ok());
    }
}
