//! Finding 9 of issue 11, as found: the credential formats the preflight let through, and
//! the ordinary files it blocked, through the real selection and copy of a git project.
//! Uses only the scanner's long-standing API, so it runs unchanged against the old scanner
//! (where it fails).

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "common/fake.rs"]
mod fake;

use fake::*;
use legate_workspace::{SecretPatterns, make_copy, select};
use std::path::Path;

/// Every format that passed before: (label, path, content).
fn leaked() -> Vec<(&'static str, String, Vec<u8>)> {
    let t = |label, path: &str, s: String| (label, path.to_string(), s.into_bytes());
    vec![
        t(
            "jwt",
            "src/client.ts",
            format!(
                "const t = '{}.{}{}.{}';\n",
                "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9",
                "eyJ",
                rnd(URLSAFE, 60, 1),
                rnd(URLSAFE, 43, 2)
            ),
        ),
        t(
            "kubeconfig outside .kube/config",
            "ops/admin.conf",
            format!(
                "apiVersion: v1\nclusters:\n- cluster:\n    server: https://10.1.1.1:6443\n  name: k\nkind: Config\nusers:\n- name: admin\n  user:\n    client-key-data: {}\n",
                rnd(B64, 120, 3)
            ),
        ),
        t(
            "slack xapp-",
            "bot/settings.py",
            format!(
                "APP_TOKEN = '{}-1-A{}-{}-{}'\n",
                "xapp",
                rnd(UPPER_ALNUM, 10, 4),
                rnd(DIGITS, 13, 5),
                rnd(HEX, 64, 6)
            ),
        ),
        t(
            "stripe sk_test_",
            "pay/config.rb",
            format!("Stripe.api_key = '{}_test_{}'\n", "sk", rnd(ALNUM, 24, 7)),
        ),
        t(
            "twilio",
            "sms/keys.txt",
            format!("{}{}\n", "SK", rnd(HEX, 32, 8)),
        ),
        t(
            "sendgrid",
            "mail/send.js",
            format!(
                "sg.setApiKey('{}.{}.{}');\n",
                "SG",
                rnd(URLSAFE, 22, 9),
                rnd(URLSAFE, 43, 10)
            ),
        ),
        t(
            "azure storage key",
            "app/appsettings.json",
            format!(
                "{{\"Storage\": \"DefaultEndpointsProtocol=https;AccountName=a;AccountKey={}==\"}}\n",
                rnd(B64, 86, 11)
            ),
        ),
        t(
            "digitalocean",
            "infra/do.sh",
            format!(
                "export DIGITALOCEAN_TOKEN={}{}\n",
                "dop_v1_",
                rnd(HEX, 64, 12)
            ),
        ),
        t(
            "vault hvs.",
            "infra/vault.hcl",
            format!("token = \"{}.{}\"\n", "hvs", rnd(URLSAFE, 95, 13)),
        ),
        t(
            "pypi token outside .pypirc",
            ".github/publish.env.txt",
            format!(
                "TWINE_PASSWORD={}{}\n",
                "pypi-AgEIcHlwaS5vcmc",
                rnd(URLSAFE, 70, 14)
            ),
        ),
        t(
            "docker pat",
            "ci/login.sh",
            format!(
                "echo {}_{} | docker login -u me --password-stdin\n",
                "dckr_pat",
                rnd(URLSAFE, 27, 15)
            ),
        ),
        t(
            "shopify",
            "shop/app.py",
            format!("TOKEN = '{}_{}'\n", "shpat", rnd(HEX, 32, 16)),
        ),
        t(
            "google oauth client secret",
            "auth/google.json",
            format!(
                "{{\"client_secret\": \"{}{}\"}}\n",
                "GOCSPX-",
                rnd(URLSAFE, 28, 17)
            ),
        ),
        t(
            "terraform.tfstate",
            "infra/terraform.tfstate",
            "{\"version\": 4}\n".into(),
        ),
        t("wp-config.php", "site/wp-config.php", "<?php\n".into()),
        t(".s3cfg", ".s3cfg", "[default]\n".into()),
        t("id_rsa.bak", "backup/id_rsa.bak", "opaque\n".into()),
        t(
            "discord",
            "bot/index.js",
            format!(
                "client.login('MT{}.{}.{}');\n",
                rnd(ALNUM, 24, 18),
                rnd(URLSAFE, 6, 19),
                rnd(URLSAFE, 38, 20)
            ),
        ),
        t(
            "telegram",
            "bot/tg.py",
            format!(
                "TOKEN = '{}:AA{}'\n",
                rnd(DIGITS, 10, 21),
                rnd(URLSAFE, 33, 22)
            ),
        ),
        t(
            "gcp service account",
            "keys/sa.json",
            format!(
                "{{\"type\": \"{}\", \"project_id\": \"p\", \"private_key_id\": \"{}\"}}\n",
                "service_account",
                rnd(HEX, 40, 23)
            ),
        ),
        t(
            "gitlab runner token",
            "ci/runner.toml",
            format!("token = \"{}-{}\"\n", "glrt", rnd(URLSAFE, 20, 24)),
        ),
        t(
            "docker config.json auths elsewhere",
            "ci/docker-config.json",
            format!(
                "{{\"auths\": {{\"r.internal\": {{\"auth\": \"{}\"}}}}}}\n",
                rnd(B64, 32, 25)
            ),
        ),
        t(
            "pgp private block",
            "keys/signing.asc",
            format!(
                "-----BEGIN {}-----\n\n{}\n",
                "PGP PRIVATE KEY BLOCK",
                rnd(B64, 64, 26)
            ),
        ),
    ]
}

/// Ordinary files the old scanner blocked: (path, content).
fn ordinary() -> Vec<(String, Vec<u8>)> {
    vec![
        (
            "src/pem.rs".into(),
            format!(
                "pub const HEADER: &str = \"-----BEGIN {}-----\";\npub fn is_pem(s: &str) -> bool {{ s.starts_with(HEADER) }}\n",
                "RSA PRIVATE KEY"
            )
            .into_bytes(),
        ),
        (
            "docs/aws.md".into(),
            format!("aws_access_key_id = {}{}\n", "AKIAIOSFODNN7", "EXAMPLE").into_bytes(),
        ),
        ("talks/slides.key".into(), zip_bytes()),
    ]
}

fn git(dir: &Path, args: &[&str]) {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

#[test]
fn the_formats_that_leaked_are_blocked_and_the_ordinary_files_are_copied() {
    let secrets = SecretPatterns::default();
    let tmp = tempfile::tempdir().unwrap();
    let project = std::fs::canonicalize(tmp.path()).unwrap().join("project");
    std::fs::create_dir_all(&project).unwrap();
    let leaked = leaked();
    let ordinary = ordinary();
    for (path, bytes) in leaked
        .iter()
        .map(|(_, p, b)| (p, b))
        .chain(ordinary.iter().map(|(p, b)| (p, b)))
    {
        let full = project.join(path);
        std::fs::create_dir_all(full.parent().unwrap()).unwrap();
        std::fs::write(full, bytes).unwrap();
    }
    git(&project, &["init", "-q"]);
    let sel = select(&project, &[], &secrets, &Default::default()).unwrap();
    let report = make_copy(
        &sel,
        &project.parent().unwrap().join("copies/t"),
        &Default::default(),
    )
    .unwrap();
    let blocked: Vec<&str> = report
        .blocked_files
        .iter()
        .map(|b| b.path.as_str())
        .collect();
    let passed: Vec<&str> = leaked
        .iter()
        .filter(|(_, p, _)| !blocked.contains(&p.as_str()))
        .map(|(label, _, _)| *label)
        .collect();
    let wrongly: Vec<&str> = ordinary
        .iter()
        .map(|(p, _)| p.as_str())
        .filter(|p| blocked.contains(p))
        .collect();
    assert!(
        passed.is_empty() && wrongly.is_empty(),
        "let through: {passed:?}; blocked ordinary files: {wrongly:?}"
    );
    assert_eq!(report.included_files, ordinary.len());
    // What is reported names paths and rules, never content.
    let json = serde_json::to_string(&report).unwrap();
    for (_, _, bytes) in &leaked {
        let text = String::from_utf8_lossy(bytes);
        let tail: String = text.trim_end().chars().rev().take(12).collect();
        assert!(
            !json.contains(&tail.chars().rev().collect::<String>()),
            "{json}"
        );
    }
}

/// `list_project_files` lists as eligible exactly what a copy would hold: the files the
/// content scan blocks at copy time are listed as blocked, with the same rule.
#[test]
fn listing_agrees_with_the_copy_on_every_file() {
    let secrets = SecretPatterns::default();
    let tmp = tempfile::tempdir().unwrap();
    let project = std::fs::canonicalize(tmp.path()).unwrap().join("project");
    std::fs::create_dir_all(&project).unwrap();
    for (path, bytes) in leaked()
        .into_iter()
        .map(|(_, p, b)| (p, b))
        .chain(ordinary())
    {
        let full = project.join(&path);
        std::fs::create_dir_all(full.parent().unwrap()).unwrap();
        std::fs::write(full, bytes).unwrap();
    }
    git(&project, &["init", "-q"]);
    let listed =
        legate_workspace::list_project_files(&project, &[], &secrets, &Default::default()).unwrap();
    let sel = select(&project, &[], &secrets, &Default::default()).unwrap();
    let report = make_copy(
        &sel,
        &project.parent().unwrap().join("copies/t"),
        &Default::default(),
    )
    .unwrap();
    let mut eligible: Vec<&str> = listed.files.iter().map(|f| f.path.as_str()).collect();
    eligible.sort_unstable();
    let mut ordinary_paths: Vec<String> = ordinary().into_iter().map(|(p, _)| p).collect();
    ordinary_paths.sort_unstable();
    assert_eq!(eligible, ordinary_paths, "{listed:?}");
    let rules = |v: &[legate_workspace::BlockedFile]| {
        let mut r: Vec<(String, String)> =
            v.iter().map(|b| (b.path.clone(), b.rule.clone())).collect();
        r.sort_unstable();
        r
    };
    assert_eq!(rules(&listed.blocked_files), rules(&report.blocked_files));
}
