//! The secret corpus: every rule blocks its sample, and a generated tree of ordinary source
//! files has no false positive.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_workspace::{BlockReason, SecretPolicy, content_rule_names, scan_content};

/// One sample per content rule, built at run time so this file holds no literal secret.
fn content_samples() -> Vec<(&'static str, String)> {
    let a = |n: usize| "a".repeat(n);
    let up = |n: usize| "Q".repeat(n);
    vec![
        (
            "private-key-block",
            format!("-----BEGIN {}PRIVATE KEY-----\nMIIE\n", "RSA "),
        ),
        (
            "private-key-block",
            format!("-----BEGIN {}PRIVATE KEY-----", "OPENSSH "),
        ),
        (
            "private-key-block",
            "-----BEGIN PRIVATE KEY-----".to_string(),
        ),
        ("aws-access-key-id", format!("id = {}{}\n", "AKIA", up(16))),
        (
            "aws-secret-access-key",
            format!("aws_secret_access_key = {}\n", "k".repeat(40)),
        ),
        ("github-token", format!("token: {}_{}", "ghp", a(36))),
        (
            "github-fine-grained-token",
            format!("{}_{}", "github_pat", a(82)),
        ),
        ("gitlab-token", format!("{}-{}", "glpat", a(20))),
        ("slack-token", format!("{}-1234567890-abcdefghij", "xoxb")),
        (
            "slack-webhook",
            format!(
                "https://hooks.slack.com/services/T{}/B{}/{}",
                up(8),
                up(8),
                a(24)
            ),
        ),
        ("google-api-key", format!("key={}{}", "AIza", a(35))),
        ("stripe-secret-key", format!("{}_live_{}", "sk", a(24))),
        (
            "openai-api-key",
            format!("sk-proj-{}{}{}", a(20), "T3BlbkFJ", a(20)),
        ),
        ("anthropic-api-key", format!("sk-ant-api03-{}", a(90))),
        (
            "npm-token",
            format!("//registry/:_authToken={}_{}", "npm", a(36)),
        ),
    ]
}

#[test]
fn every_content_rule_blocks_its_sample_and_names_only_the_rule() {
    let samples = content_samples();
    let mut covered: Vec<&str> = samples.iter().map(|(r, _)| *r).collect();
    covered.sort();
    covered.dedup();
    let mut all = content_rule_names();
    all.sort();
    assert_eq!(covered, all, "every rule has a sample");
    let policy = SecretPolicy::default();
    for (rule, text) in &samples {
        assert_eq!(scan_content(text.as_bytes()), Some(*rule), "{rule}");
        // In the middle of a binary file too.
        let mut bin = vec![0u8, 159, 146, 150];
        bin.extend_from_slice(text.as_bytes());
        bin.extend_from_slice(&[0, 0xff]);
        assert_eq!(scan_content(&bin), Some(*rule), "{rule} in binary");
        let b = policy.check("src/config.rs", text.as_bytes()).unwrap();
        assert_eq!(b.reason, BlockReason::SecretContent);
        assert_eq!(b.rule, *rule);
        let json = serde_json::to_string(&b).unwrap();
        assert!(!json.contains(&text[text.len() - 10..]), "{json}");
    }
}

#[test]
fn every_name_rule_blocks_and_look_alikes_pass() {
    let policy = SecretPolicy::default();
    for blocked in [
        ".env",
        ".env.local",
        ".env.production",
        "app/.env.development.local",
        ".envrc",
        "id_rsa",
        "home/.ssh/id_ed25519",
        ".ssh/config",
        "server.key",
        "certs/store.p12",
        "cert.pfx",
        "release.jks",
        "android.keystore",
        "vault.kdbx",
        ".netrc",
        "_netrc",
        ".pgpass",
        ".git-credentials",
        ".pypirc",
        ".htpasswd",
        ".aws/credentials",
        "x/.docker/config.json",
        ".kube/config",
        "putty.ppk",
    ] {
        let (reason, _) = policy
            .check_name(blocked)
            .unwrap_or_else(|| panic!("{blocked} passed"));
        assert_eq!(reason, BlockReason::SecretFile, "{blocked}");
    }
    for ok in [
        ".env.example",
        ".env.sample",
        ".env.template",
        ".env.dist",
        "environment.rs",
        "id_rsa.pub",
        ".ssh/id_ed25519.pub",
        ".ssh/known_hosts",
        "cert.pem",
        "ca.crt",
        "keyboard.rs",
        "monkey.txt",
        "config/credentials.md",
        "docker/config.json",
        "src/key.rs",
    ] {
        assert_eq!(policy.check_name(ok), None, "{ok}");
    }
}

/// A deterministic generator of ordinary source files in several languages.
fn ordinary_file(i: usize) -> (String, String) {
    let ident = |k: usize| format!("item_{}_{}", i, k);
    match i % 6 {
        0 => (
            format!("src/m{i}/mod_{i}.rs"),
            format!(
                "//! Module {i}.\nuse std::collections::HashMap;\n\n/// Keeps {a}.\npub struct {a} {{\n    key: String,\n    secret_len: usize,\n    map: HashMap<String, u64>,\n}}\n\nimpl {a} {{\n    pub fn api_key(&self) -> &str {{ &self.key }}\n    pub fn token_for(&self, user: &str) -> Option<u64> {{ self.map.get(user).copied() }}\n}}\n\n#[test]\nfn t_{i}() {{ assert_eq!(2 + 2, 4); let aws_region = \"us-east-1\"; let _ = aws_region; }}\n",
                a = format!("Thing{i}")
            ),
        ),
        1 => (
            format!("web/components/C{i}.tsx"),
            format!(
                "import React from 'react';\nconst API_URL = process.env.API_URL ?? 'https://api.example.com/v1';\nexport function C{i}({{ token }}: {{ token: string }}) {{\n  const headers = {{ Authorization: `Bearer ${{token}}` }};\n  return <div data-key=\"{k}\">{{API_URL}}</div>;\n}}\n",
                k = ident(1)
            ),
        ),
        2 => (
            format!("py/pkg{}/mod_{i}.py", i % 17),
            format!(
                "\"\"\"Module {i}.\"\"\"\nimport os\n\nSECRET_KEY = os.environ.get('SECRET_KEY', '')\nPASSWORD_MIN = {i}\n\n\ndef {f}(password: str) -> bool:\n    return len(password) >= PASSWORD_MIN and 'ghp_' not in password\n",
                f = ident(2)
            ),
        ),
        3 => (
            format!("go/svc{}/h{i}.go", i % 13),
            format!(
                "package svc\n\nimport \"crypto/sha256\"\n\n// H{i} hashes.\nfunc H{i}(b []byte) [32]byte {{ return sha256.Sum256(b) }}\n\nconst keyHeader{i} = \"X-Api-Key\"\n// AKIA prefixes identify AWS access keys; see docs.\n"
            ),
        ),
        4 => (
            format!("docs/page-{i}.md"),
            format!(
                "# Page {i}\n\nSet `AWS_SECRET_ACCESS_KEY` in your shell, never in the repo.\nGenerate a token with `gh auth token`. The private key lives in `~/.ssh/id_ed25519`.\n\n```sh\nexport GITHUB_TOKEN=...\n```\n\n-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIU{i:08}\n-----END CERTIFICATE-----\n"
            ),
        ),
        _ => (
            format!("config/app-{i}.yaml"),
            format!(
                "service: app-{i}\nreplicas: {r}\nimage: registry.example.com/app:{i}\nenv:\n  - name: DATABASE_PASSWORD\n    valueFrom: {{ secretKeyRef: {{ name: db, key: password }} }}\nchecksum: {h:064x}\n",
                r = i % 5,
                h = (i as u128).wrapping_mul(0x9e37_79b9_7f4a_7c15)
            ),
        ),
    }
}

#[test]
fn a_generated_tree_of_ordinary_source_files_has_no_false_positive() {
    let policy = SecretPolicy::default();
    let tmp = tempfile::tempdir().unwrap();
    let project = std::fs::canonicalize(tmp.path()).unwrap().join("project");
    for i in 0..1500 {
        let (path, content) = ordinary_file(i);
        if let Some(b) = policy.check(&path, content.as_bytes()) {
            panic!(
                "false positive: {} ({}: {})",
                b.path,
                b.reason.as_str(),
                b.rule
            );
        }
        let full = project.join(&path);
        std::fs::create_dir_all(full.parent().unwrap()).unwrap();
        std::fs::write(full, content).unwrap();
    }
    let out = std::process::Command::new("git")
        .args(["init", "-q"])
        .arg(&project)
        .output()
        .unwrap();
    assert!(out.status.success());
    // The whole tree through the real selection and copy.
    let sel = legate_workspace::select(&project, &[], &policy, &Default::default()).unwrap();
    assert_eq!(sel.files.len(), 1500);
    let home = project.parent().unwrap().join("home");
    let report =
        legate_workspace::make_copy(&sel, &home.join("copies/t"), &Default::default()).unwrap();
    assert!(
        report.blocked_files.is_empty(),
        "{:?}",
        report.blocked_files
    );
    assert_eq!(report.included_files, 1500);
}
