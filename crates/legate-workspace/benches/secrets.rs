//! The secret preflight's cost on a realistic tree: 5,000 generated source files (Rust,
//! TypeScript, Python, Go, YAML, Markdown, lockfiles; 1 to 16 KiB, about 40 MiB), once with
//! ordinary identifiers and once keyword-dense (the worst case of the keyword pass), every file
//! checked by name and content as a copy does, by today's rule table (`rules.toml`: one
//! keyword pass, then the woken rules) against the scanner it replaced (one alternation of
//! 15 patterns and the name tables, kept below as the baseline), in the same run.
//!
//! `cargo bench -p legate-workspace --bench secrets` (`LEGATE_BENCH_SECRET_FILES` scales it;
//! `LEGATE_BENCH_SECRET_PARTS=1` also times names and content apart).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use legate_workspace::SecretPatterns;
use regex::bytes::Regex;
use std::hint::black_box;
use std::sync::OnceLock;

// ---- The baseline: the scanner before the rule table, verbatim but for visibility. ----

const DOTENV_EXAMPLES: &[&str] = &["example", "sample", "template", "dist"];

/// Private key file names (exact, lower case).
const KEY_NAMES: &[&str] = &[
    "id_rsa",
    "id_dsa",
    "id_ecdsa",
    "id_ed25519",
    "id_ecdsa_sk",
    "id_ed25519_sk",
    "identity",
];

/// Private key and keystore extensions (lower case, without the dot), with their rule.
const EXTENSIONS: &[(&str, &str)] = &[
    ("key", "private-key"),
    ("ppk", "private-key"),
    ("p12", "keystore"),
    ("pfx", "keystore"),
    ("jks", "keystore"),
    ("keystore", "keystore"),
    ("bks", "keystore"),
    ("kdbx", "keystore"),
];

/// Known credential files by base name (lower case).
const CREDENTIAL_NAMES: &[&str] = &[
    ".netrc",
    "_netrc",
    ".pgpass",
    ".git-credentials",
    ".pypirc",
    ".htpasswd",
    ".dockercfg",
    "secring.gpg",
];

/// Known credential files by their last two components (lower case).
const CREDENTIAL_PATHS: &[&str] = &[
    ".aws/credentials",
    ".docker/config.json",
    ".kube/config",
    ".gnupg/secring.gpg",
    ".config/gh/hosts.yml",
];

/// The name rule `path` trips, if any.
fn credential_name(path: &str) -> Option<&'static str> {
    let lower = path.to_ascii_lowercase();
    let name = lower.rsplit('/').next().unwrap_or(&lower);
    if name == ".env" {
        return Some("dotenv");
    }
    if let Some(variant) = name.strip_prefix(".env.") {
        return (!DOTENV_EXAMPLES.contains(&variant)).then_some("dotenv");
    }
    if name == ".envrc" {
        return Some("envrc");
    }
    if KEY_NAMES.contains(&name) {
        return Some("private-key");
    }
    if CREDENTIAL_NAMES.contains(&name) {
        return Some("credential-file");
    }
    let tail2: Vec<&str> = lower.rsplitn(3, '/').take(2).collect();
    if tail2.len() == 2 {
        let joined = format!("{}/{}", tail2[1], tail2[0]);
        if CREDENTIAL_PATHS.contains(&joined.as_str()) {
            return Some("credential-file");
        }
        if tail2[1] == ".ssh" && !name.ends_with(".pub") && name != "known_hosts" {
            return Some("private-key");
        }
    }
    if let Some((_, ext)) = name.rsplit_once('.')
        && let Some((_, rule)) = EXTENSIONS.iter().find(|(e, _)| *e == ext)
    {
        return Some(rule);
    }
    None
}

/// The content rules: a name and a pattern each. High confidence only: a prefix or a block
/// header that ordinary code does not contain.
const CONTENT_RULES: &[(&str, &str)] = &[
    (
        "private-key-block",
        r"-----BEGIN (?:RSA |DSA |EC |OPENSSH |ENCRYPTED |PGP )?PRIVATE KEY(?: BLOCK)?-----",
    ),
    (
        "aws-access-key-id",
        r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA)[0-9A-Z]{16}\b",
    ),
    (
        "aws-secret-access-key",
        r#"(?i:aws_?secret_?access_?key)["']?\s*[:=]\s*["']?[A-Za-z0-9/+=]{40}\b"#,
    ),
    (
        "github-token",
        r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36}\b",
    ),
    (
        "github-fine-grained-token",
        r"\bgithub_pat_[A-Za-z0-9_]{60,}",
    ),
    ("gitlab-token", r"\bglpat-[A-Za-z0-9_\-]{20}\b"),
    (
        "slack-token",
        r"\bxox[abposr]-[A-Za-z0-9]{6,}-[A-Za-z0-9\-]{6,}",
    ),
    (
        "slack-webhook",
        r"https://hooks\.slack\.com/services/T[A-Z0-9]{6,}/B[A-Z0-9]{6,}/[A-Za-z0-9]{16,}",
    ),
    ("google-api-key", r"\bAIza[0-9A-Za-z_\-]{35}"),
    ("stripe-secret-key", r"\b(?:sk|rk)_live_[0-9A-Za-z]{24,}"),
    (
        "openai-api-key",
        r"\bsk-[A-Za-z0-9_\-]{16,}T3BlbkFJ[A-Za-z0-9_\-]{16,}",
    ),
    (
        "anthropic-api-key",
        r"\bsk-ant-[a-z]{3,6}[0-9]{2}-[A-Za-z0-9_\-]{80,}",
    ),
    ("npm-token", r"\bnpm_[A-Za-z0-9]{36}\b"),
];

fn content_regex() -> Option<&'static Regex> {
    static RE: OnceLock<Option<Regex>> = OnceLock::new();
    RE.get_or_init(|| {
        let alternation: Vec<String> = CONTENT_RULES
            .iter()
            .map(|(_, p)| format!("({p})"))
            .collect();
        let built = Regex::new(&format!("(?-u){}", alternation.join("|")));
        if let Err(e) = &built {
            tracing::error!(error = %e, "the secret content patterns do not compile");
        }
        built.ok()
    })
    .as_ref()
}

/// The content rule `bytes` trips, if any. Binary files are scanned too.
fn scan_content(bytes: &[u8]) -> Option<&'static str> {
    let Some(re) = content_regex() else {
        // Fail closed: a scanner that cannot run blocks everything it is asked about.
        return Some("scanner-unavailable");
    };
    let caps = re.captures(bytes)?;
    CONTENT_RULES
        .iter()
        .enumerate()
        .find(|(i, _)| caps.get(i + 1).is_some())
        .map(|(_, (name, _))| *name)
}

fn old_check(path: &str, content: &[u8]) -> Option<&'static str> {
    credential_name(path).or_else(|| scan_content(content))
}

// ---- The tree. ----

fn rnd(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

/// Identifiers as ordinary code has them: mostly plain words, a few that credential rules
/// key on (token, key, secret, password, auth, data).
const ORDINARY: &[&str] = &[
    "value",
    "index",
    "buffer",
    "stream",
    "parse",
    "format",
    "error",
    "result",
    "option",
    "string",
    "number",
    "items",
    "cache",
    "count",
    "total",
    "name",
    "path",
    "file",
    "line",
    "column",
    "offset",
    "length",
    "size",
    "width",
    "height",
    "color",
    "style",
    "layout",
    "render",
    "update",
    "create",
    "delete",
    "insert",
    "remove",
    "select",
    "filter",
    "map",
    "reduce",
    "sort",
    "order",
    "group",
    "table",
    "row",
    "record",
    "field",
    "schema",
    "model",
    "view",
    "controller",
    "service",
    "client",
    "server",
    "request",
    "response",
    "handler",
    "route",
    "query",
    "param",
    "header",
    "body",
    "status",
    "code",
    "message",
    "event",
    "listener",
    "queue",
    "worker",
    "job",
    "task",
    "thread",
    "lock",
    "mutex",
    "channel",
    "sender",
    "receiver",
    "timer",
    "timeout",
    "retry",
    "delay",
    "start",
    "stop",
    "state",
    "config",
    "settings",
    "user",
    "account",
    "profile",
    "session",
    "token",
    "key",
    "secret",
    "password",
    "auth",
    "data",
    "input",
    "output",
    "source",
    "target",
    "node",
    "tree",
    "graph",
];

/// A keyword-dense vocabulary: every other identifier holds a word some rule keys on.
const DENSE: &[&str] = &[
    "token", "key", "secret", "password", "config", "data", "user", "client", "request",
    "response", "handler", "bot", "session", "auth", "value", "index", "buffer", "stream", "parse",
    "format", "error", "result", "option", "string", "number", "items", "cache", "skip", "task",
    "desk", "ask", "smtp", "mtime", "admin", "node", "ready", "jwt", "cio",
];

fn ident(words: &[&str], seed: &mut u64) -> String {
    let a = words[(rnd(seed) % words.len() as u64) as usize];
    let b = words[(rnd(seed) % words.len() as u64) as usize];
    format!("{a}_{b}")
}

fn line(words: &[&str], kind: u64, seed: &mut u64) -> String {
    let (a, b, n) = (ident(words, seed), ident(words, seed), rnd(seed) % 10_000);
    match kind {
        0 => format!("    let {a} = {b}.get(\"{a}\").map(|v| v + {n})?;\n"),
        1 => format!("  const {a} = await fetch(`${{API_URL}}/{b}/${{id}}`, {{ headers }});\n"),
        2 => format!("    {a} = os.environ.get('{b}', {n})  # see docs\n"),
        3 => format!("\t{a} := {b}(ctx, {n}) // handle the error\n"),
        4 => format!("  {a}:\n    {b}: \"{n}\"\n"),
        5 => format!("The `{a}` option sets {b} ({n} by default). See the token docs.\n"),
        _ => format!(
            "    \"node_modules/{a}\": {{ \"version\": \"1.{n}.0\", \"integrity\": \"sha512-{:016x}{:016x}{:016x}==\" }},\n",
            rnd(seed),
            rnd(seed),
            rnd(seed)
        ),
    }
}

fn tree(words: &[&str], files: usize) -> Vec<(String, Vec<u8>)> {
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let ext = ["rs", "ts", "py", "go", "yaml", "md", "json"];
    (0..files)
        .map(|i| {
            let kind = (i % ext.len()) as u64;
            let size = 1024 + (rnd(&mut seed) % (15 * 1024)) as usize;
            let mut text = String::with_capacity(size + 128);
            while text.len() < size {
                text.push_str(&line(words, kind, &mut seed));
            }
            let path = if kind == 6 {
                format!("pkg{}/package-lock.json", i % 500)
            } else {
                format!("src/m{}/f{i}.{}", i % 97, ext[kind as usize])
            };
            (path, text.into_bytes())
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let files: usize = std::env::var("LEGATE_BENCH_SECRET_FILES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5000);
    let secrets = SecretPatterns::default();
    let mut g = c.benchmark_group("secret-preflight");
    g.sample_size(10);
    for (label, words) in [("ordinary", ORDINARY), ("keyword-dense", DENSE)] {
        let tree = tree(words, files);
        let bytes: u64 = tree.iter().map(|(_, b)| b.len() as u64).sum();
        // Both scanners agree that the tree is clean (and are warmed up).
        assert!(tree.iter().all(|(p, b)| old_check(p, b).is_none()));
        assert!(tree.iter().all(|(p, b)| secrets.check(p, b).is_none()));
        eprintln!("secrets bench: {label} tree, {files} files, {bytes} bytes");
        g.throughput(Throughput::Bytes(bytes));
        g.bench_function(format!("{label}: baseline, the old scanner"), |b| {
            b.iter(|| {
                tree.iter()
                    .filter(|(p, c)| old_check(black_box(p), black_box(c)).is_some())
                    .count()
            })
        });
        g.bench_function(format!("{label}: rules.toml"), |b| {
            b.iter(|| {
                tree.iter()
                    .filter(|(p, c)| secrets.check(black_box(p), black_box(c)).is_some())
                    .count()
            })
        });
        if std::env::var("LEGATE_BENCH_SECRET_PARTS").is_ok() {
            g.bench_function(format!("{label}: names only"), |b| {
                b.iter(|| {
                    tree.iter()
                        .filter(|(p, _)| secrets.check_name(black_box(p)).is_some())
                        .count()
                })
            });
            g.bench_function(format!("{label}: content only"), |b| {
                b.iter(|| {
                    tree.iter()
                        .filter(|(_, c)| legate_credentials::scan_content(black_box(c)).is_some())
                        .count()
                })
            });
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
