//! The secret corpus: name rules and their look-alikes, and a generated tree of ordinary
//! source files (with the false-positive shapes of finding 9: PEM parsers, lockfiles,
//! documented example keys, Keynote files) that has no false positive through the real
//! selection and copy. Each rule's own cases are in `secret_rules.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "common/fake.rs"]
mod fake;

use legate_workspace::{BlockReason, SecretPatterns};

#[test]
fn every_name_rule_blocks_and_look_alikes_pass() {
    let secrets = SecretPatterns::default();
    for blocked in [
        ".env",
        ".env.local",
        ".env.production",
        "app/.env.development.local",
        ".envrc",
        "id_rsa",
        "home/.ssh/id_ed25519",
        ".ssh/config",
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
        let (reason, _) = secrets
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
        // Only the content decides: a Keynote file is a zip, a key file is not.
        "talks/slides.key",
    ] {
        assert_eq!(secrets.check_name(ok), None, "{ok}");
    }
}

/// A deterministic generator of ordinary source files in several languages.
fn ordinary_file(i: usize) -> (String, String) {
    let ident = |k: usize| format!("item_{}_{}", i, k);
    match i % 9 {
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
        6 => (
            format!("pem/p{i}/parse.rs"),
            format!(
                "//! A PEM reader.\nconst RSA_HEADER: &str = \"-----BEGIN {k}-----\";\nconst PKCS8_HEADER: &str = \"-----BEGIN PRIVATE KEY-----\";\nconst FOOTER_{i}: &str = \"-----END RSA PRIVATE KEY-----\";\n\npub fn is_key(s: &str) -> bool {{ s.starts_with(RSA_HEADER) || s.starts_with(PKCS8_HEADER) }}\n",
                k = "RSA PRIVATE KEY"
            ),
        ),
        7 => {
            let h = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            let t = fake::rnd(fake::URLSAFE, 35, i as u64);
            (
                format!("js/pkg{i}/package-lock.json"),
                format!(
                    "{{\n  \"packages\": {{\n    \"node_modules/a{i}\": {{\n      \"version\": \"1.0.{i}\",\n      \"integrity\": \"sha512-{h:016x}+{g}{t}==\"\n    }}\n  }}\n}}\n",
                    g = "AIza",
                ),
            )
        }
        8 => (
            format!("docs/aws-{i}.md"),
            format!(
                "# Credentials\n\n```ini\n[default]\naws_access_key_id = {}{}\naws_secret_access_key = {}{}\n```\n",
                "AKIAIOSFODNN7", "EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCY", "EXAMPLEKEY"
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
    let secrets = SecretPatterns::default();
    let tmp = tempfile::tempdir().unwrap();
    let project = std::fs::canonicalize(tmp.path()).unwrap().join("project");
    for i in 0..1500 {
        let (path, content) = ordinary_file(i);
        if let Some(b) = secrets.check(&path, content.as_bytes()) {
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
    // A Keynote presentation: a zip archive named `*.key`.
    let keynote = project.join("talks/slides.key");
    std::fs::create_dir_all(keynote.parent().unwrap()).unwrap();
    std::fs::write(&keynote, fake::zip_bytes()).unwrap();
    assert!(
        secrets
            .check("talks/slides.key", &fake::zip_bytes())
            .is_none()
    );
    let out = std::process::Command::new("git")
        .args(["init", "-q"])
        .arg(&project)
        .output()
        .unwrap();
    assert!(out.status.success());
    // The whole tree through the real selection and copy.
    let sel = legate_workspace::select(&project, &[], &secrets, &Default::default()).unwrap();
    assert_eq!(sel.files.len(), 1501);
    let home = project.parent().unwrap().join("home");
    let report =
        legate_workspace::make_copy(&sel, &home.join("copies/t"), &Default::default()).unwrap();
    assert!(
        report.blocked_files.is_empty(),
        "{:?}",
        report.blocked_files
    );
    assert_eq!(report.included_files, 1501);
}
