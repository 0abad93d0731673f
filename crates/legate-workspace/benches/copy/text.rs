//! The text of the copy benchmark's files, one definition for the two benches that read it:
//! this crate's `copy` (which writes it to disk) and `legate-credentials`' `clearing` (which
//! scans it in memory).

/// Deterministic lower-case text with spaces and newlines (no credential pattern can match).
pub(crate) fn content(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let b = (x % 29) as u8;
        out.push(match b {
            26 | 27 => b' ',
            28 => b'\n',
            c => b'a' + c,
        });
    }
    out
}
