//! The added cost of the policy on the permission path: `Rules.decide` against
//! `Policed.decide` with a realistic 20-rule policy, for the requests agents send most (a
//! Claude `Bash` command, a Codex `bash -lc` argv, an edit with a path), in the same run.
//!
//! `cargo bench -p legate-supervisor --bench policy`

#![allow(clippy::unwrap_used, clippy::expect_used)]

use criterion::{Criterion, criterion_group, criterion_main};
use legate_core::{
    Boundary, OptionKind, PermissionOption, PermissionRequest, TaskMode, ToolKind, WorkspaceKind,
};
use legate_supervisor::policy::parse_file;
use legate_supervisor::{Policed, Policy, Preset, Rules, Supervision, Supervisor};
use serde_json::json;
use std::hint::black_box;
use std::path::PathBuf;

/// Twenty rules of the kind a team writes: the test and lint commands allowed in a shared
/// root, dangerous programs denied, secrets and CI files guarded, a few asks, per agent and role.
const POLICY: &str = r#"
[[policy.rules]]
id = "reviewers-never-fetch"
kind = "fetch"
role = ["reviewer", "planner"]
decision = "deny"
reason = "reviewers read the copy, not the network"
[[policy.rules]]
id = "no-secrets"
kind = ["edit", "delete", "move"]
paths = ["secrets/**", "**/.env", "**/*.pem"]
decision = "deny"
reason = "secrets are not edited by agents"
[[policy.rules]]
id = "ask-ci"
kind = ["edit", "delete"]
paths = [".github/**", "ci/**"]
decision = "ask"
reason = "CI changes are looked at"
[[policy.rules]]
id = "no-rm"
program = "rm"
decision = "deny"
reason = "nothing is removed by a shell"
[[policy.rules]]
id = "no-curl"
program = "curl"
decision = "deny"
reason = "no downloads"
[[policy.rules]]
id = "no-wget"
program = "wget"
decision = "deny"
reason = "no downloads"
[[policy.rules]]
id = "no-git-push"
program = "git"
args_prefix = ["push"]
decision = "deny"
reason = "pushing is the caller's"
[[policy.rules]]
id = "no-dd"
program = "dd"
decision = "deny"
reason = "no raw writes"
[[policy.rules]]
id = "ask-touch"
program = "touch"
workspace = "shared"
decision = "ask"
reason = "touching files in a shared root needs a supervisor"
[[policy.rules]]
id = "ask-npm-install"
program = "npm"
args_prefix = ["install"]
decision = "ask"
reason = "installing packages needs a supervisor"
[[policy.rules]]
id = "codex-no-python"
program = "python3"
agent = "codex"
decision = "deny"
reason = "codex runs no scripts here"
[[policy.rules]]
id = "git-status"
program = "git"
args_prefix = ["status"]
workspace = "shared"
decision = "allow"
reason = "status changes nothing"
[[policy.rules]]
id = "git-diff"
program = "git"
args_prefix = ["diff"]
workspace = "shared"
decision = "allow"
reason = "diff changes nothing"
[[policy.rules]]
id = "cargo-check"
program = "cargo"
args_prefix = ["check"]
workspace = "shared"
decision = "allow"
reason = "checking builds in target/"
[[policy.rules]]
id = "cargo-clippy"
program = "cargo"
args_prefix = ["clippy"]
workspace = "shared"
decision = "allow"
reason = "lints build in target/"
[[policy.rules]]
id = "npm-test"
program = "npm"
args_prefix = ["test"]
workspace = "shared"
decision = "allow"
reason = "the tests may run"
[[policy.rules]]
id = "pytest"
program = "pytest"
workspace = "shared"
decision = "allow"
reason = "the tests may run"
[[policy.rules]]
id = "make-test"
program = "make"
args_prefix = ["test"]
workspace = "shared"
decision = "allow"
reason = "the tests may run"
[[policy.rules]]
id = "go-test"
program = "go"
args_prefix = ["test"]
workspace = "shared"
decision = "allow"
reason = "the tests may run"
[[policy.rules]]
id = "cargo-test"
program = "cargo"
args_prefix = ["test"]
workspace = "shared"
decision = "allow"
reason = "the tests may run in the shared root"
"#;

fn options() -> Vec<PermissionOption> {
    [
        ("allow_always", OptionKind::AllowAlways),
        ("allow", OptionKind::AllowOnce),
        ("reject", OptionKind::RejectOnce),
    ]
    .iter()
    .map(|(id, kind)| PermissionOption {
        id: (*id).into(),
        name: (*id).into(),
        kind: *kind,
    })
    .collect()
}

fn request(kind: ToolKind, raw: Option<serde_json::Value>, paths: &[&str]) -> PermissionRequest {
    PermissionRequest {
        tool_call_id: "t".into(),
        title: "call".into(),
        tool_kind: kind,
        locations: paths.iter().map(PathBuf::from).collect(),
        raw_input: raw,
        options: options(),
    }
}

fn bench(c: &mut Criterion) {
    let tmp = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(tmp.path()).unwrap();
    std::fs::create_dir_all(root.join("src")).unwrap();
    let mut supervision = Supervision::new(
        Boundary {
            root,
            owned: false,
            allow_execute: false,
        },
        TaskMode::Write,
        Preset::claude(),
    );
    supervision.workspace = WorkspaceKind::Shared;
    supervision.agent = "claude".into();
    let policy = Policy::from_tables(Vec::new(), parse_file(POLICY).unwrap()).unwrap();
    assert_eq!(policy.rules().len(), 20);
    let policed = Policed::new(policy, Rules);
    let cases = [
        (
            "execute: Claude `cargo test --all` (last rule)",
            request(
                ToolKind::Execute,
                Some(json!({"command": "cargo test --all", "description": "run the tests"})),
                &[],
            ),
        ),
        (
            "execute: Codex bash -lc chain (no rule)",
            request(
                ToolKind::Execute,
                Some(json!({"command": ["/bin/bash", "-lc", "cargo build && ./target/debug/app"]})),
                &[],
            ),
        ),
        (
            "edit: src/main.rs (no rule)",
            request(ToolKind::Edit, None, &["src/main.rs"]),
        ),
        (
            "read (no rule)",
            request(ToolKind::Read, None, &["src/main.rs"]),
        ),
    ];
    for (name, req) in &cases {
        let mut group = c.benchmark_group(*name);
        group.bench_function("Rules", |b| {
            b.iter(|| black_box(Rules.decide(black_box(&supervision), black_box(req))));
        });
        group.bench_function("Policed (20 rules)", |b| {
            b.iter(|| black_box(policed.decide(black_box(&supervision), black_box(req))));
        });
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
