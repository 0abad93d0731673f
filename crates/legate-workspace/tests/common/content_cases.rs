//! Cases for `secret_rules.rs`: the content rules' cases.

use super::fake::*;
use super::name_cases::{Case, case, src, txt};

pub fn content_cases() -> Vec<Case> {
    let jwt = |seed| {
        format!(
            "{}.{}{}.{}",
            "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9",
            "eyJ",
            rnd(URLSAFE, 60, seed),
            rnd(URLSAFE, 43, seed + 1)
        )
    };
    vec![
        case(
            "private-key-block",
            vec![
                src(pem("RSA PRIVATE KEY", 12, 10)),
                src(pem("OPENSSH PRIVATE KEY", 6, 11)),
                src(format!(
                    "{{\"key\": \"-----BEGIN {}-----\\n{}\\n{}\\n-----END PRIVATE KEY-----\\n\"}}",
                    "PRIVATE KEY",
                    rnd(B64, 64, 12),
                    rnd(B64, 64, 13)
                )),
                src(format!(
                    "-----BEGIN {}-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,{}\n\n{}\n",
                    "RSA PRIVATE KEY",
                    rnd(UPPER_HEX, 32, 14),
                    rnd(B64, 64, 15)
                )),
            ],
            vec![
                // A PEM parser's source: the header as a string constant, no key material.
                src(format!(
                    "const HEADER: &str = \"-----BEGIN {}-----\";\nconst FOOTER: &str = \"-----END RSA PRIVATE KEY-----\";\n\nfn parse(s: &str) -> Option<&str> {{\n    s.strip_prefix(HEADER)?.strip_suffix(FOOTER)\n}}\n",
                    "RSA PRIVATE KEY"
                )),
                src(format!(
                    "if line == '-----BEGIN {}-----':\n    in_key = True\n",
                    "OPENSSH PRIVATE KEY"
                )),
                src(format!(
                    "Paste your key:\n\n    -----BEGIN {}-----\n    ...\n    -----END PRIVATE KEY-----\n",
                    "PRIVATE KEY"
                )),
                src(pem("CERTIFICATE", 8, 16)),
                src(pem("PUBLIC KEY", 4, 17)),
            ],
        ),
        case(
            "pgp-private-key-block",
            vec![src(format!(
                "-----BEGIN {}-----\nVersion: GnuPG v2\n\n{}\n{}\n=AbCd\n",
                "PGP PRIVATE KEY BLOCK",
                rnd(B64, 64, 20),
                rnd(B64, 64, 21)
            ))],
            vec![src(format!(
                "ARMOR_HEADER = \"-----BEGIN {}-----\"\n",
                "PGP PRIVATE KEY BLOCK"
            ))],
        ),
        case(
            "putty-private-key",
            vec![txt(
                "keys/deploy.txt",
                format!(
                    "{}-User-Key-File-3: ssh-ed25519\nEncryption: none\nComment: deploy\nPublic-Lines: 2\n{}\n{}\nPrivate-Lines: 1\n{}\nPrivate-MAC: {}\n",
                    "PuTTY",
                    rnd(B64, 64, 30),
                    rnd(B64, 20, 31),
                    rnd(B64, 64, 32),
                    rnd(HEX, 64, 33)
                ),
            )],
            vec![],
        ),
        case(
            "age-secret-key",
            vec![src(format!(
                "# created: 2026-01-01\n{}{}\n",
                "AGE-SECRET-KEY-1",
                rnd(BECH32_UPPER, 58, 40)
            ))],
            vec![src("identity = AGE-SECRET-KEY-1...\n".into())],
        ),
        case(
            "aws-access-key-id",
            vec![src(format!("id = {}{}\n", "AKIA", rnd(BASE32, 16, 50)))],
            vec![
                // AWS's documented example key id.
                src(format!("aws_access_key_id = {}{}\n", "AKIAIOSFODNN7", "EXAMPLE")),
                src(format!("key = {}{}\n", "AKIA", "Q".repeat(16))),
            ],
        ),
        case(
            "aws-secret-access-key",
            vec![
                src(format!("aws_secret_access_key = {}\n", rnd(B64, 40, 60))),
                src(format!("\"SecretAccessKey\": \"{}\",\n", rnd(B64, 40, 61))),
            ],
            vec![
                src(format!(
                    "aws_secret_access_key = {}{}\n",
                    "wJalrXUtnFEMI/K7MDENG/bPxRfiCY", "EXAMPLEKEY"
                )),
                src("aws_secret_access_key = ${AWS_SECRET_ACCESS_KEY}\n".into()),
                src(format!("AWS_SECRET_ACCESS_KEY={}\n", "x".repeat(40))),
            ],
        ),
        case(
            "gcp-service-account",
            vec![txt(
                "deploy/sa.json",
                format!(
                    "{{\n  \"type\": \"{}\",\n  \"project_id\": \"demo-1\",\n  \"private_key_id\": \"{}\",\n  \"client_email\": \"x@demo-1.iam.gserviceaccount.com\"\n}}\n",
                    "service_account",
                    rnd(HEX, 40, 70)
                ),
            )],
            vec![src(
                "if creds[\"type\"] == \"service_account\": load(creds[\"private_key_id\"])\n"
                    .into(),
            )],
        ),
        case(
            "google-api-key",
            vec![src(format!("key={}{}\n", "AIza", rnd(URLSAFE, 35, 80)))],
            vec![
                // An integrity hash in a lockfile that happens to hold the prefix.
                txt(
                    "package-lock.json",
                    format!(
                        "    \"integrity\": \"sha512-{}+{}{}==\"\n",
                        rnd(B64, 20, 81),
                        "AIza",
                        rnd(B64, 61, 82)
                    ),
                ),
            ],
        ),
        case(
            "google-oauth-client-secret",
            vec![src(format!(
                "GOOGLE_CLIENT_SECRET={}{}\n",
                "GOCSPX-",
                rnd(URLSAFE, 28, 90)
            ))],
            vec![],
        ),
        case(
            "oauth-client-secret-json",
            vec![txt(
                "client_secret_123.json",
                format!(
                    "{{\"installed\":{{\"client_id\":\"1-x.apps.googleusercontent.com\",\"client_secret\":\"{}\"}}}}\n",
                    rnd(URLSAFE, 24, 100)
                ),
            )],
            vec![src(
                "{\"web\": {\"client_secret\": \"${GOOGLE_CLIENT_SECRET}\"}}\n".into(),
            )],
        ),
        case(
            "azure-storage-account-key",
            vec![src(format!(
                "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={}==;EndpointSuffix=core.windows.net\n",
                rnd(B64, 86, 110)
            ))],
            vec![
                // Azurite's documented development key.
                src(format!(
                    "AccountKey={}{}\n",
                    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/",
                    "K1SZFPTOtr/KBHBeksoGMGw=="
                )),
            ],
        ),
        case(
            "azure-shared-access-key",
            vec![src(format!(
                "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=Root;SharedAccessKey={}=\n",
                rnd(B64, 43, 120)
            ))],
            vec![src("SharedAccessKey=<key>\n".into())],
        ),
        case(
            "azure-sas-token",
            vec![src(format!(
                "url = \"https://acct.blob.core.windows.net/c?sv=2022-11-02&ss=b&srt=sco&sp=rl&se=2027-01-01&sig={}%3D\"\n",
                rnd(ALNUM, 44, 130)
            ))],
            vec![],
        ),
        case(
            "azure-ad-client-secret",
            vec![src(format!(
                "client_secret = \"{}{}Q~{}\"\n",
                rnd(ALNUM, 3, 140),
                "8",
                rnd(ALNUM, 34, 141)
            ))],
            vec![],
        ),
        case(
            "digitalocean-token",
            vec![src(format!("DO_TOKEN={}{}\n", "dop_v1_", rnd(HEX, 64, 150)))],
            vec![src(format!("DO_TOKEN={}{}\n", "dop_v1_", "0".repeat(64)))],
        ),
        case(
            "alibaba-access-key-id",
            vec![src(format!("{}{}\n", "LTAI", rnd(ALNUM, 20, 160)))],
            vec![],
        ),
        case(
            "heroku-api-key",
            vec![src(format!("{}{}\n", "HRKU-AA", rnd(URLSAFE, 58, 170)))],
            vec![],
        ),
        case(
            "github-token",
            vec![
                src(format!("token: {}_{}\n", "ghp", rnd(ALNUM, 36, 180))),
                src(format!("{}_{}\n", "ghs", rnd(ALNUM, 36, 181))),
            ],
            vec![
                src(format!("token: {}_{}\n", "ghp", "x".repeat(36))),
                src("if 'ghp_' in s: warn()\n".into()),
            ],
        ),
        case(
            "github-fine-grained-token",
            vec![src(format!(
                "{}_{}_{}\n",
                "github_pat",
                rnd(ALNUM, 22, 190),
                rnd(ALNUM, 59, 191)
            ))],
            vec![],
        ),
        case(
            "gitlab-token",
            vec![
                src(format!("{}-{}\n", "glpat", rnd(URLSAFE, 20, 200))),
                src(format!("{}-{}\n", "glrt", rnd(URLSAFE, 20, 201))),
            ],
            vec![src("GITLAB_TOKEN=glpat-<token>\n".into())],
        ),
        case(
            "bitbucket-app-password",
            vec![src(format!(
                "{}{}{}\n",
                "ATBB",
                rnd(ALNUM, 28, 210),
                rnd(UPPER_HEX, 8, 211)
            ))],
            vec![],
        ),
        case(
            "bitbucket-client-secret",
            vec![src(format!(
                "BITBUCKET_CLIENT_SECRET={}\n",
                rnd(ALNUM, 32, 220)
            ))],
            vec![src("BITBUCKET_CLIENT_SECRET=${{ secrets.BB }}\n".into())],
        ),
        case(
            "npm-token",
            vec![src(format!("{}_{}\n", "npm", rnd(ALNUM, 36, 230)))],
            vec![],
        ),
        case(
            "npmrc-auth",
            vec![txt(
                ".npmrc",
                format!("//registry.npmjs.org/:_authToken={}\n", rnd(B64, 36, 240)),
            )],
            vec![
                txt(
                    ".npmrc",
                    "//registry.npmjs.org/:_authToken=${NPM_TOKEN}\n".into(),
                ),
                // Code that names a private `_auth` member is not an .npmrc.
                txt(
                    "src/client.py",
                    format!("        self._auth = {}\n", rnd(ALNUM, 30, 241)),
                ),
            ],
        ),
        case(
            "pypi-token",
            vec![txt(
                "ci/publish.sh",
                format!(
                    "TWINE_PASSWORD={}{}\n",
                    "pypi-AgEIcHlwaS5vcmc",
                    rnd(URLSAFE, 60, 250)
                ),
            )],
            vec![],
        ),
        case(
            "rubygems-token",
            vec![src(format!("{}_{}\n", "rubygems", rnd(HEX, 48, 260)))],
            vec![],
        ),
        case(
            "crates-io-token",
            vec![src(format!(
                "CARGO_REGISTRY_TOKEN={}{}\n",
                "cio",
                rnd(ALNUM, 32, 270)
            ))],
            vec![],
        ),
        case(
            "docker-hub-pat",
            vec![src(format!("{}_{}\n", "dckr_pat", rnd(URLSAFE, 27, 280)))],
            vec![],
        ),
        case(
            "docker-config-auth",
            vec![txt(
                "ci/docker.json",
                format!(
                    "{{\n  \"auths\": {{\n    \"registry.internal:5000\": {{ \"auth\": \"{}\" }}\n  }}\n}}\n",
                    rnd(B64, 32, 290)
                ),
            )],
            vec![txt(
                "ci/docker.json",
                "{\"auths\": {\"ghcr.io\": {\"auth\": \"\"}}}\n".into(),
            )],
        ),
        case(
            "nuget-api-key",
            vec![src(format!("{}{}\n", "oy2", rnd(LOWER_ALNUM, 43, 300)))],
            vec![],
        ),
        case(
            "artifactory-token",
            vec![src(format!("{}{}\n", "AKCp", rnd(ALNUM, 69, 310)))],
            vec![],
        ),
        case(
            "huggingface-token",
            vec![src(format!("{}_{}\n", "hf", rnd(LETTERS, 34, 320)))],
            vec![],
        ),
        case(
            "slack-token",
            vec![src(format!(
                "{}-{}-{}-{}\n",
                "xoxb",
                rnd(DIGITS, 12, 330),
                rnd(DIGITS, 13, 331),
                rnd(ALNUM, 24, 332)
            ))],
            vec![src(format!("{}-xxxxxxxxxxxx-xxxxxxxxxxxxx\n", "xoxb"))],
        ),
        case(
            "slack-config-token",
            vec![src(format!(
                "{}-1-{}\n",
                "xoxe.xoxp",
                rnd(ALNUM, 164, 340)
            ))],
            vec![],
        ),
        case(
            "slack-app-token",
            vec![src(format!(
                "SLACK_APP_TOKEN={}-1-A{}-{}-{}\n",
                "xapp",
                rnd(UPPER_ALNUM, 10, 350),
                rnd(DIGITS, 13, 351),
                rnd(HEX, 64, 352)
            ))],
            vec![],
        ),
        case(
            "slack-webhook",
            vec![src(format!(
                "https://hooks.slack.com/services/T{}/B{}/{}\n",
                rnd(UPPER_ALNUM, 8, 360),
                rnd(UPPER_ALNUM, 8, 361),
                rnd(ALNUM, 24, 362)
            ))],
            vec![src(
                "https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX\n"
                    .into(),
            )],
        ),
        case(
            "discord-bot-token",
            vec![src(format!(
                "DISCORD_TOKEN=MT{}.{}.{}\n",
                rnd(ALNUM, 24, 370),
                rnd(URLSAFE, 6, 371),
                rnd(URLSAFE, 38, 372)
            ))],
            vec![],
        ),
        case(
            "discord-webhook",
            vec![src(format!(
                "https://discord.com/api/webhooks/{}/{}\n",
                rnd(DIGITS, 18, 380),
                rnd(URLSAFE, 68, 381)
            ))],
            vec![],
        ),
        case(
            "telegram-bot-token",
            vec![src(format!(
                "TELEGRAM_BOT_TOKEN={}:AA{}\n",
                rnd(DIGITS, 10, 390),
                rnd(URLSAFE, 33, 391)
            ))],
            vec![src("TELEGRAM_BOT_TOKEN=123456789:AA-your-token-here\n".into())],
        ),
        case(
            "teams-webhook",
            vec![src(format!(
                "https://contoso.webhook.office.com/webhookb2/{}@{}/IncomingWebhook/{}/{}\n",
                uuid(400),
                uuid(405),
                rnd(HEX, 32, 410),
                uuid(415)
            ))],
            vec![],
        ),
        case(
            "stripe-secret-key",
            vec![
                src(format!("{}_live_{}\n", "sk", rnd(ALNUM, 24, 420))),
                src(format!("{}_test_{}\n", "sk", rnd(ALNUM, 24, 421))),
                src(format!("{}_live_{}\n", "rk", rnd(ALNUM, 99, 422))),
            ],
            vec![
                // Stripe's documented test key.
                src(format!("Stripe.api_key = '{}_test_{}'\n", "sk", "4eC39HqLyjWDarjtT1zdp7dc")),
            ],
        ),
        case(
            "stripe-webhook-secret",
            vec![src(format!("{}_{}\n", "whsec", rnd(ALNUM, 32, 430)))],
            vec![],
        ),
        case(
            "twilio-api-key",
            vec![src(format!("TWILIO_API_KEY={}{}\n", "SK", rnd(HEX, 32, 440)))],
            vec![],
        ),
        case(
            "twilio-auth-token",
            vec![src(format!("TWILIO_AUTH_TOKEN={}\n", rnd(HEX, 32, 450)))],
            vec![],
        ),
        case(
            "sendgrid-api-key",
            vec![src(format!(
                "{}.{}.{}\n",
                "SG",
                rnd(URLSAFE, 22, 460),
                rnd(URLSAFE, 43, 461)
            ))],
            vec![],
        ),
        case(
            "mailgun-api-key",
            vec![src(format!("MAILGUN_API_KEY={}-{}\n", "key", rnd(HEX, 32, 470)))],
            vec![],
        ),
        case(
            "mailchimp-api-key",
            vec![src(format!("{}-us21\n", rnd(HEX, 32, 480)))],
            vec![],
        ),
        case(
            "shopify-token",
            vec![src(format!("{}_{}\n", "shpat", rnd(HEX, 32, 490)))],
            vec![],
        ),
        case(
            "square-token",
            vec![src(format!("{}-{}\n", "sq0atp", rnd(URLSAFE, 22, 500)))],
            vec![],
        ),
        case(
            "braintree-access-token",
            vec![src(format!(
                "{}${}${}\n",
                "access_token$production",
                rnd(LOWER_ALNUM, 16, 510),
                rnd(HEX, 32, 511)
            ))],
            vec![],
        ),
        case(
            "openai-api-key",
            vec![src(format!(
                "sk-proj-{}{}{}\n",
                rnd(URLSAFE, 40, 520),
                "T3BlbkFJ",
                rnd(URLSAFE, 40, 521)
            ))],
            vec![],
        ),
        case(
            "anthropic-api-key",
            vec![src(format!("{}-{}\n", "sk-ant-api03", rnd(URLSAFE, 95, 530)))],
            vec![],
        ),
        case(
            "groq-api-key",
            vec![src(format!("{}_{}\n", "gsk", rnd(ALNUM, 52, 540)))],
            vec![],
        ),
        case(
            "perplexity-api-key",
            vec![src(format!("{}-{}\n", "pplx", rnd(ALNUM, 48, 550)))],
            vec![],
        ),
        case(
            "vault-token",
            vec![
                src(format!("VAULT_TOKEN={}.{}\n", "hvs", rnd(URLSAFE, 95, 560))),
                src(format!("{}.{}\n", "hvb", rnd(URLSAFE, 150, 561))),
            ],
            vec![],
        ),
        case(
            "vault-legacy-token",
            vec![src(format!("VAULT_TOKEN=s.{}\n", rnd(ALNUM, 24, 570)))],
            vec![],
        ),
        case(
            "terraform-cloud-token",
            vec![src(format!(
                "token = \"{}.{}.{}\"\n",
                rnd(ALNUM, 14, 580),
                "atlasv1",
                rnd(URLSAFE, 67, 581)
            ))],
            vec![],
        ),
        case(
            "pulumi-token",
            vec![src(format!("{}-{}\n", "pul", rnd(HEX, 40, 590)))],
            vec![],
        ),
        case(
            "kubeconfig",
            vec![txt(
                "deploy/prod-cluster.yaml",
                format!(
                    "apiVersion: v1\nclusters:\n- cluster:\n    server: https://10.0.0.1:6443\n  name: prod\ncontexts:\n- context: {{cluster: prod, user: admin}}\n  name: prod\ncurrent-context: prod\nkind: Config\nusers:\n- name: admin\n  user:\n    token: {}\n",
                    rnd(URLSAFE, 40, 600)
                ),
            )],
            vec![txt(
                "deploy/template.yaml",
                "apiVersion: v1\nkind: Config\nusers:\n- name: admin\n  user:\n    token: ${KUBE_TOKEN}\n"
                    .into(),
            )],
        ),
        case(
            "kubernetes-secret",
            vec![txt(
                "k8s/db-secret.yaml",
                format!(
                    "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\ntype: Opaque\ndata:\n  password: {}\n",
                    rnd(B64, 24, 610)
                ),
            )],
            vec![txt(
                "chart/templates/secret.yaml",
                "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\ndata:\n  password: {{ .Values.password | b64enc }}\n"
                    .into(),
            )],
        ),
        case(
            "netrc-entry",
            vec![txt(
                "config/netrc.txt",
                format!(
                    "machine api.internal\n  login bob\n  password {}\n",
                    rnd(ALNUM, 20, 620)
                ),
            )],
            vec![txt(
                "docs/netrc.md",
                "machine api.internal login bob password <your-password>\n".into(),
            )],
        ),
        case(
            "wordpress-secret",
            vec![txt(
                "site/config.php",
                format!(
                    "define( 'DB_PASSWORD', '{}' );\n",
                    rnd(ALNUM, 20, 630)
                ),
            )],
            vec![txt(
                "wp-config-sample.php",
                "define( 'DB_PASSWORD', 'password_here' );\ndefine( 'AUTH_KEY',         'put your unique phrase here' );\n"
                    .into(),
            )],
        ),
        case(
            "jwt",
            vec![src(format!("Authorization: Bearer {}\n", jwt(640)))],
            vec![
                // jwt.io's example token.
                src(format!(
                    "{}.{}.{}\n",
                    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9",
                    "eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ",
                    "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
                )),
            ],
        ),
    ]
}
