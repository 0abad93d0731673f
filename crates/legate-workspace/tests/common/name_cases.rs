//! Cases for `secret_rules.rs`: the types and the name rules' cases.

#![allow(dead_code)]

use super::fake::*;

/// A file: relative path and bytes.
pub type Sample = (String, Vec<u8>);

pub fn txt(path: &str, content: String) -> Sample {
    (path.to_string(), content.into_bytes())
}

/// In an ordinary source file.
pub fn src(content: String) -> Sample {
    txt("src/settings.txt", content)
}

pub fn name(path: &str) -> Sample {
    txt(path, "x = 1\n".to_string())
}

pub struct Case {
    pub rule: &'static str,
    pub positives: Vec<Sample>,
    pub negatives: Vec<Sample>,
}

pub fn case(rule: &'static str, positives: Vec<Sample>, negatives: Vec<Sample>) -> Case {
    Case {
        rule,
        positives,
        negatives,
    }
}

pub fn name_cases() -> Vec<Case> {
    vec![
        case(
            "dotenv",
            vec![
                name(".env"),
                name("app/.env.production"),
                name(".env.local"),
            ],
            vec![
                name(".env.example"),
                name("x/.env.sample"),
                name("environment.rs"),
            ],
        ),
        case("envrc", vec![name(".envrc")], vec![name("envrc.md")]),
        case(
            "ssh-private-key-file",
            vec![
                name("id_rsa"),
                name("backup/id_rsa.bak"),
                name("id_ed25519~"),
                name("id_ecdsa.old"),
                name("identity"),
            ],
            vec![name("id_rsa.pub"), name("keys/id_ed25519.pub")],
        ),
        case(
            "ssh-directory",
            vec![name("home/.ssh/config"), name(".ssh/deploy")],
            vec![name(".ssh/known_hosts"), name(".ssh/deploy.pub")],
        ),
        case(
            "private-key-file",
            vec![
                txt("certs/server.key", pem("PRIVATE KEY", 10, 1)),
                txt("config/master.key", rnd(HEX, 32, 2)),
                (
                    "raw.key".into(),
                    vec![0x30, 0x82, 0x04, 0xa4, 0x02, 0x01, 0x00],
                ),
            ],
            vec![
                ("talks/slides.key".into(), zip_bytes()),
                name("slides.key/Data/image.png"),
            ],
        ),
        case("putty-private-key-file", vec![name("me.ppk")], vec![]),
        case(
            "pkcs12-keystore",
            vec![name("certs/store.p12"), name("cert.pfx")],
            vec![],
        ),
        case(
            "java-keystore",
            vec![name("release.jks"), name("android.keystore"), name("x.bks")],
            vec![],
        ),
        case("keepass-database", vec![name("vault.kdbx")], vec![]),
        case(
            "gpg-secret-keyring",
            vec![
                name("secring.gpg"),
                name(".gnupg/private-keys-v1.d/AB12.key"),
            ],
            vec![name("pubring.gpg")],
        ),
        case("netrc", vec![name(".netrc"), name("_netrc")], vec![]),
        case("pgpass", vec![name(".pgpass")], vec![]),
        case("git-credentials", vec![name(".git-credentials")], vec![]),
        case("pypirc", vec![name(".pypirc")], vec![]),
        case("htpasswd", vec![name(".htpasswd")], vec![]),
        case(
            "docker-config",
            vec![name("x/.docker/config.json"), name(".dockercfg")],
            vec![name("docker/config.json")],
        ),
        case(
            "aws-credentials-file",
            vec![name(".aws/credentials")],
            vec![name("config/credentials.md")],
        ),
        case(
            "gcloud-credentials-file",
            vec![name(
                "home/.config/gcloud/application_default_credentials.json",
            )],
            vec![],
        ),
        case(
            "azure-credentials-file",
            vec![name(".azure/msal_token_cache.json")],
            vec![],
        ),
        case("kubeconfig-file", vec![name(".kube/config")], vec![]),
        case("gh-hosts", vec![name(".config/gh/hosts.yml")], vec![]),
        case(
            "terraform-state",
            vec![
                name("infra/terraform.tfstate"),
                name("terraform.tfstate.backup"),
            ],
            vec![name("infra/main.tf"), name("docs/tfstate.md")],
        ),
        case(
            "terraform-credentials",
            vec![
                name(".terraform.d/credentials.tfrc.json"),
                name(".terraformrc"),
            ],
            vec![],
        ),
        case("s3cfg", vec![name(".s3cfg")], vec![]),
        case("vault-token-file", vec![name(".vault-token")], vec![]),
        case(
            "wp-config",
            vec![name("public/wp-config.php")],
            vec![name("wp-config-sample.php")],
        ),
    ]
}
