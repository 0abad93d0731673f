//! Fake credentials for this crate's tests, one of every kind the input check names, made
//! from a fixed generator so that the repository holds no literal token.
//!
//! It owns nothing the product uses (compiled for tests only) and must never hold a real
//! credential.

/// `n` pseudo-random characters of `alphabet` (a fixed LCG), so that the repository holds
/// no literal token.
pub(crate) fn rnd(alphabet: &str, n: usize, seed: u64) -> String {
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
pub(crate) const ALNUM: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
pub(crate) const UPPER32: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
pub(crate) const URLSAFE: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
pub(crate) const B64: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// One fake of every kind the issue names, with the rule id it must be reported as.
pub(crate) fn fakes() -> Vec<(String, &'static str)> {
    let pem_label = ["PRIVATE", "KEY"].join(" ");
    let body: Vec<String> = (0..4).map(|i| rnd(B64, 64, 10 + i)).collect();
    vec![
        (
            format!("-----BEGIN {pem_label}-----\n{}\n", body.join("\n")),
            "private-key-block",
        ),
        (
            format!("{}{}", "AKIA", rnd(UPPER32, 16, 1)),
            "aws-access-key-id",
        ),
        (
            format!("{}{}", "ASIA", rnd(UPPER32, 16, 2)),
            "aws-access-key-id",
        ),
        (format!("{}{}", "ghp_", rnd(ALNUM, 36, 3)), "github-token"),
        (format!("{}{}", "gho_", rnd(ALNUM, 36, 4)), "github-token"),
        (
            format!("{}{}", "github_pat_", rnd(ALNUM, 82, 5)),
            "github-fine-grained-token",
        ),
        (
            format!(
                "{}-{}-{}-{}",
                "xoxb",
                rnd("0123456789", 12, 6),
                rnd("0123456789", 13, 7),
                rnd(ALNUM, 24, 8)
            ),
            "slack-token",
        ),
        (
            format!(
                "{}{}{}{}",
                "sk-proj-",
                rnd(ALNUM, 20, 9),
                "T3Blbk",
                ["FJ", &rnd(ALNUM, 20, 11)].concat()
            ),
            "openai-api-key",
        ),
        (
            format!("{}{}", "sk-ant-api03-", rnd(URLSAFE, 95, 12)),
            "anthropic-api-key",
        ),
        (
            format!("{}{}", "AIza", rnd(URLSAFE, 35, 13)),
            "google-api-key",
        ),
        (
            format!("{}{}", "sk_live_", rnd(ALNUM, 32, 14)),
            "stripe-secret-key",
        ),
        (
            format!(
                "Authorization: Bearer {}{}.{}{}.{}",
                "eyJ",
                rnd(URLSAFE, 30, 15),
                "eyJ",
                rnd(URLSAFE, 40, 16),
                rnd(URLSAFE, 43, 17)
            ),
            "jwt",
        ),
    ]
}
