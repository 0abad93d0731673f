//! Line endings and byte order marks across an integration.
//!
//! This module owns the one rule integration applies to a modified file's bytes: a file that
//! used LF only keeps LF only, CRLF only keeps CRLF only, a mixed file keeps the ending of
//! every line the patch did not edit; a UTF-8 BOM the original had is kept, and one the patch
//! dropped is put back while the rest is UTF-8. Any other change of line ending or BOM is
//! `LINE_ENDINGS_CHANGED`. It is pure: bytes in, bytes out, no I/O.

use legate_core::{Error, ErrorCode};

/// The UTF-8 byte order mark.
pub const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Above this many line pairs, the middle of a mixed file is not matched line by line and
/// only the lines around the edit are held to their endings.
const MAX_MATCH_CELLS: usize = 4_000_000;

/// A line's ending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    None,
    Lf,
    CrLf,
}

/// The result to write, and whether a BOM was put back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// The bytes to write.
    pub bytes: Vec<u8>,
    /// True when the patch dropped the original's BOM and it was restored.
    pub restored_bom: bool,
}

/// Checks `result` (the patched file) against `original` for `path`; see the module docs.
pub fn check(path: &str, original: &[u8], result: &[u8]) -> Result<Checked, Error> {
    let changed = |why: &str| {
        Error::new(
            ErrorCode::LineEndingsChanged,
            format!("{path}: {why}; nothing was written"),
        )
    };
    let orig_bom = original.starts_with(BOM);
    let res_bom = result.starts_with(BOM);
    let mut restored_bom = false;
    let bytes = match (orig_bom, res_bom) {
        (true, false) => {
            if std::str::from_utf8(result).is_err() {
                return Err(changed(
                    "the patch removed the byte order mark and the rest is not UTF-8",
                ));
            }
            restored_bom = true;
            [BOM, result].concat()
        }
        (false, true) => return Err(changed("the patch added a byte order mark")),
        _ => result.to_vec(),
    };
    let before = lines(strip_bom(original));
    let after = lines(strip_bom(&bytes));
    let lf = before.iter().filter(|l| l.1 == Ending::Lf).count();
    let crlf = before.iter().filter(|l| l.1 == Ending::CrLf).count();
    match (lf > 0, crlf > 0) {
        (true, false) => {
            if after.iter().any(|l| l.1 == Ending::CrLf) {
                return Err(changed("an LF file got CRLF line endings"));
            }
        }
        (false, true) => {
            if after.iter().any(|l| l.1 == Ending::Lf) {
                return Err(changed("a CRLF file got LF line endings"));
            }
        }
        (true, true) => {
            if let Some(line) = mixed_ending_changed(&before, &after) {
                return Err(changed(&format!(
                    "line {line} was not edited but its line ending changed"
                )));
            }
        }
        (false, false) => {}
    }
    Ok(Checked {
        bytes,
        restored_bom,
    })
}

fn strip_bom(b: &[u8]) -> &[u8] {
    b.strip_prefix(BOM).unwrap_or(b)
}

/// Splits into (content, ending).
fn lines(b: &[u8]) -> Vec<(&[u8], Ending)> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, byte) in b.iter().enumerate() {
        if *byte == b'\n' {
            if i > start && b[i - 1] == b'\r' {
                out.push((&b[start..i - 1], Ending::CrLf));
            } else {
                out.push((&b[start..i], Ending::Lf));
            }
            start = i + 1;
        }
    }
    if start < b.len() {
        out.push((&b[start..], Ending::None));
    }
    out
}

/// For a mixed file: the 1-based number (in the result) of an unedited line whose ending
/// changed, if any. Lines are matched by content (longest common subsequence after the
/// common head and tail). An original last line without an ending may gain one.
fn mixed_ending_changed(before: &[(&[u8], Ending)], after: &[(&[u8], Ending)]) -> Option<usize> {
    let same = |a: &(&[u8], Ending), b: &(&[u8], Ending)| a.1 == b.1 || a.1 == Ending::None;
    let mut head = 0;
    while head < before.len() && head < after.len() && before[head].0 == after[head].0 {
        if !same(&before[head], &after[head]) {
            return Some(head + 1);
        }
        head += 1;
    }
    let mut tail = 0;
    while tail < before.len() - head
        && tail < after.len() - head
        && before[before.len() - 1 - tail].0 == after[after.len() - 1 - tail].0
    {
        let (b, a) = (
            &before[before.len() - 1 - tail],
            &after[after.len() - 1 - tail],
        );
        if !same(b, a) {
            return Some(after.len() - tail);
        }
        tail += 1;
    }
    let b = &before[head..before.len() - tail];
    let a = &after[head..after.len() - tail];
    if b.is_empty() || a.is_empty() || b.len().saturating_mul(a.len()) > MAX_MATCH_CELLS {
        return None;
    }
    // Longest common subsequence by content; walk it and compare endings.
    let (n, m) = (b.len(), a.len());
    let mut table = vec![0u32; (n + 1) * (m + 1)];
    let at = |i: usize, j: usize| i * (m + 1) + j;
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            table[at(i, j)] = if b[i].0 == a[j].0 {
                table[at(i + 1, j + 1)] + 1
            } else {
                table[at(i + 1, j)].max(table[at(i, j + 1)])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    while i < n && j < m {
        if b[i].0 == a[j].0 {
            if !same(&b[i], &a[j]) {
                return Some(head + j + 1);
            }
            i += 1;
            j += 1;
        } else if table[at(i + 1, j)] >= table[at(i, j + 1)] {
            i += 1;
        } else {
            j += 1;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(orig: &[u8], res: &[u8]) -> Checked {
        check("f", orig, res).unwrap()
    }

    fn refused(orig: &[u8], res: &[u8]) -> String {
        let e = check("f", orig, res).unwrap_err();
        assert_eq!(e.code, ErrorCode::LineEndingsChanged);
        e.message
    }

    #[test]
    fn lf_and_crlf_files_keep_their_style() {
        assert_eq!(ok(b"a\nb\n", b"a\nB\nc\n").bytes, b"a\nB\nc\n");
        assert_eq!(ok(b"a\r\nb\r\n", b"a\r\nB\r\n").bytes, b"a\r\nB\r\n");
        assert!(refused(b"a\nb\n", b"a\r\nb\r\n").contains("LF file got CRLF"));
        assert!(refused(b"a\r\nb\r\n", b"a\r\nb\r\nc\n").contains("CRLF file got LF"));
        // A last line without an ending may gain the file's ending.
        assert_eq!(ok(b"a\nb", b"a\nb\nc").bytes, b"a\nb\nc");
    }

    #[test]
    fn mixed_files_keep_each_unedited_line_ending() {
        let orig = b"one\r\ntwo\nthree\r\nfour\n";
        assert_eq!(
            ok(orig, b"one\r\nTWO\nthree\r\nfour\nfive\r\n").bytes,
            b"one\r\nTWO\nthree\r\nfour\nfive\r\n"
        );
        let msg = refused(orig, b"one\r\ntwo\r\nthree\r\nfour\n");
        assert!(msg.contains("line 2"), "{msg}");
        let msg = refused(orig, b"zero\none\ntwo\nthree\r\nfour\n");
        assert!(msg.contains("line 2"), "{msg}");
    }

    #[test]
    fn a_bom_is_kept_restored_or_refused() {
        let orig = b"\xEF\xBB\xBFa\nb\n";
        let kept = ok(orig, b"\xEF\xBB\xBFa\nc\n");
        assert!(!kept.restored_bom);
        let restored = ok(orig, b"a\nc\n");
        assert!(restored.restored_bom);
        assert_eq!(restored.bytes, b"\xEF\xBB\xBFa\nc\n");
        assert!(refused(orig, b"a\n\xFF\n").contains("not UTF-8"));
        assert!(refused(b"a\n", b"\xEF\xBB\xBFa\n").contains("added a byte order mark"));
    }
}
