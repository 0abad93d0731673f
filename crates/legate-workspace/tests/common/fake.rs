//! Fake credentials for the secret preflight's tests, made at run time from a fixed
//! generator, so that this repository holds no literal token a push-protection scanner
//! (or the preflight itself) would flag.

#![allow(dead_code)]

pub const ALNUM: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
pub const LOWER_ALNUM: &str = "abcdefghijklmnopqrstuvwxyz0123456789";
pub const UPPER_ALNUM: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
pub const LETTERS: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
pub const HEX: &str = "0123456789abcdef";
pub const UPPER_HEX: &str = "0123456789ABCDEF";
pub const DIGITS: &str = "0123456789";
pub const B64: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
pub const URLSAFE: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
pub const BASE32: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
pub const BECH32_UPPER: &str = "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L";

/// `n` characters of `alphabet`, pseudo-random from `seed` (the same seed, the same text).
pub fn rnd(alphabet: &str, n: usize, seed: u64) -> String {
    let a = alphabet.as_bytes();
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x2545_f491_4f6c_dd1d;
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            a[((x >> 33) % a.len() as u64) as usize] as char
        })
        .collect()
}

/// A uuid-shaped string of lower-case hex.
pub fn uuid(seed: u64) -> String {
    format!(
        "{}-{}-{}-{}-{}",
        rnd(HEX, 8, seed),
        rnd(HEX, 4, seed + 1),
        rnd(HEX, 4, seed + 2),
        rnd(HEX, 4, seed + 3),
        rnd(HEX, 12, seed + 4)
    )
}

/// A PEM block of `label` with `lines` lines of random base64 key material.
pub fn pem(label: &str, lines: usize, seed: u64) -> String {
    let body: Vec<String> = (0..lines).map(|i| rnd(B64, 64, seed + i as u64)).collect();
    format!(
        "-----BEGIN {label}-----\n{}\n-----END {label}-----\n",
        body.join("\n")
    )
}

/// The bytes of a zip archive's first local header, as a Keynote file starts.
pub fn zip_bytes() -> Vec<u8> {
    let mut v = b"PK\x03\x04\x14\x00\x00\x00\x08\x00".to_vec();
    v.extend_from_slice(b"Index/Document.iwa");
    v.extend((0..2000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8));
    v
}
