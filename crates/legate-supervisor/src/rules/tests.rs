#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use legate_core::{Boundary, OptionKind, OptionKind::*};
use proptest::prelude::*;
use serde_json::json;
use std::path::{Path, PathBuf};

// ---- the adapters' real option sets (ACP-ADAPTERS.md) ----

fn opts(list: &[(&str, OptionKind)]) -> Vec<PermissionOption> {
    list.iter()
        .map(|(id, kind)| PermissionOption {
            id: id.to_string(),
            name: id.to_string(),
            kind: *kind,
        })
        .collect()
}

fn claude_opts() -> Vec<PermissionOption> {
    opts(&[
        ("allow_always", AllowAlways),
        ("allow", AllowOnce),
        ("reject", RejectOnce),
    ])
}
fn codex_shell_opts() -> Vec<PermissionOption> {
    opts(&[
        ("approved", AllowOnce),
        ("approved-execpolicy-amendment", AllowAlways),
        ("abort", RejectOnce),
    ])
}
fn codex_patch_opts() -> Vec<PermissionOption> {
    opts(&[("approved", AllowOnce), ("abort", RejectOnce)])
}
fn gemini_opts() -> Vec<PermissionOption> {
    opts(&[
        ("proceed_always", AllowAlways),
        ("proceed_once", AllowOnce),
        ("cancel", RejectOnce),
    ])
}
/// Claude's plan exit: every way out, and "keep planning".
fn claude_plan_opts() -> Vec<PermissionOption> {
    opts(&[
        ("exit-plan-bypass", AllowAlways),
        ("exit-plan-auto", AllowAlways),
        ("exit-plan-accept-edits", AllowAlways),
        ("exit-plan-clear-accept-edits", AllowAlways),
        ("exit-plan-default", AllowOnce),
        ("plan", RejectOnce),
    ])
}
fn claude_elevating_plan_opts() -> Vec<PermissionOption> {
    opts(&[
        ("exit-plan-accept-edits", AllowAlways),
        ("exit-plan-clear-auto", AllowOnce),
        ("plan", RejectOnce),
    ])
}
/// claude-agent-acp 0.23.1's ExitPlanMode, as root with `IS_SANDBOX` (bypass offered first).
fn claude_real_plan_opts() -> Vec<PermissionOption> {
    opts(&[
        ("bypassPermissions", AllowAlways),
        ("acceptEdits", AllowAlways),
        ("default", AllowOnce),
        ("plan", RejectOnce),
    ])
}
/// @agentclientprotocol/claude-agent-acp 0.49's ExitPlanMode, without `default` (filtered by
/// the session's available modes).
fn claude_real_elevating_plan_opts() -> Vec<PermissionOption> {
    opts(&[
        ("auto", AllowAlways),
        ("acceptEdits", AllowAlways),
        ("plan", RejectOnce),
    ])
}
fn codex_plan_opts() -> Vec<PermissionOption> {
    opts(&[("implement_plan", AllowOnce), ("abort", RejectOnce)])
}
fn revisor_opts() -> Vec<PermissionOption> {
    opts(&[
        ("allow", AllowOnce),
        ("allow_always", AllowAlways),
        ("reject", RejectOnce),
    ])
}
fn revisor_plan_opts() -> Vec<PermissionOption> {
    opts(&[
        ("exit-plan-accept-edits", AllowAlways),
        ("exit-plan-default", AllowOnce),
        ("reject", RejectOnce),
    ])
}

fn request(
    kind: ToolKind,
    locations: &[&str],
    raw_input: Option<serde_json::Value>,
    options: Vec<PermissionOption>,
) -> PermissionRequest {
    PermissionRequest {
        tool_call_id: "call-1".into(),
        title: "a tool call".into(),
        tool_kind: kind,
        locations: locations.iter().map(PathBuf::from).collect(),
        raw_input,
        options,
    }
}

// ---- boundaries ----

/// A real directory, so that containment can resolve paths inside it.
struct Root {
    _tmp: tempfile::TempDir,
    path: PathBuf,
}

fn root() -> Root {
    let tmp = tempfile::tempdir().unwrap();
    let path = std::fs::canonicalize(tmp.path()).unwrap();
    std::os::unix::fs::symlink("/etc", path.join("etc-link")).unwrap();
    Root { _tmp: tmp, path }
}

#[derive(Clone, Copy, Debug)]
enum Dir {
    /// A sandbox or copy Legate made.
    Owned,
    /// A directory the user named.
    Shared,
    /// A directory the user named, with `allow_execute`.
    SharedExec,
}

fn supervision(root: &Path, dir: Dir, mode: TaskMode, preset: Preset) -> Supervision {
    Supervision::new(
        Boundary {
            root: root.to_path_buf(),
            owned: matches!(dir, Dir::Owned),
            allow_execute: matches!(dir, Dir::SharedExec),
        },
        mode,
        preset,
    )
}

// ---- the table ----

struct Case {
    name: &'static str,
    dir: Dir,
    mode: TaskMode,
    preset: Preset,
    kind: ToolKind,
    /// `{root}` is replaced by the root.
    locations: &'static [&'static str],
    raw_input: Option<serde_json::Value>,
    options: Vec<PermissionOption>,
    allow: bool,
    option: Option<&'static str>,
    /// `{root}` is replaced by the root.
    reason: &'static str,
}

fn case(name: &'static str, dir: Dir, kind: ToolKind, options: Vec<PermissionOption>) -> Case {
    Case {
        name,
        dir,
        mode: TaskMode::Write,
        preset: Preset::claude(),
        kind,
        locations: &[],
        raw_input: None,
        options,
        allow: false,
        option: None,
        reason: "",
    }
}

impl Case {
    fn preset(mut self, preset: Preset) -> Self {
        self.preset = preset;
        self
    }
    fn read_only(mut self) -> Self {
        self.mode = TaskMode::ReadOnly;
        self
    }
    fn at(mut self, locations: &'static [&'static str]) -> Self {
        self.locations = locations;
        self
    }
    fn raw(mut self, raw: serde_json::Value) -> Self {
        self.raw_input = Some(raw);
        self
    }
    fn allows(mut self, option: &'static str, reason: &'static str) -> Self {
        self.allow = true;
        self.option = Some(option);
        self.reason = reason;
        self
    }
    fn denies(mut self, option: Option<&'static str>, reason: &'static str) -> Self {
        self.allow = false;
        self.option = option;
        self.reason = reason;
        self
    }

    fn check(self, root: &Path) {
        let fill = |s: &str| s.replace("{root}", &root.display().to_string());
        let locations: Vec<String> = self.locations.iter().map(|l| fill(l)).collect();
        let locations: Vec<&str> = locations.iter().map(String::as_str).collect();
        let req = request(self.kind, &locations, self.raw_input, self.options);
        let sup = supervision(root, self.dir, self.mode, self.preset);
        let verdict = Rules.decide(&sup, &req);
        assert_eq!(verdict.is_allow(), self.allow, "{}: {verdict:?}", self.name);
        assert_eq!(
            verdict.option_id.as_deref(),
            self.option,
            "{}: {verdict:?}",
            self.name
        );
        assert_eq!(verdict.reason, fill(self.reason), "{}", self.name);
    }
}

/// A Codex plan review: `implement_plan` is chosen.
fn codex_plan_review(name: &'static str, dir: Dir, options: Vec<PermissionOption>) -> Case {
    case(name, dir, ToolKind::SwitchMode, options)
        .preset(Preset::codex())
        .raw(json!({"plan": "..."}))
        .allows(
            "implement_plan",
            "implement_plan leaves planning for a mode in which the agent still asks before acting",
        )
}

fn table() -> Vec<Case> {
    use Dir::*;
    use ToolKind::*;
    vec![
        // read, search, think: allow, whatever the directory and mode.
        case("read in a shared dir", Shared, Read, claude_opts())
            .at(&["/etc/passwd"])
            .allows("allow", "a read call changes nothing"),
        case("search, read-only task", Shared, Search, gemini_opts())
            .preset(Preset::gemini())
            .read_only()
            .allows("proceed_once", "a search call changes nothing"),
        case("think", Owned, Think, codex_patch_opts())
            .preset(Preset::codex())
            .allows("approved", "a think call changes nothing"),
        // edit, delete, move with locations: every path inside the root.
        case("claude Write inside a shared root", Shared, Edit, claude_opts())
            .at(&["{root}/src/main.rs"])
            .allows("allow", "every path it names is inside the root {root}"),
        case("relative path inside", Shared, Edit, claude_opts())
            .at(&["src/lib.rs"])
            .allows("allow", "every path it names is inside the root {root}"),
        case("claude Write outside", Owned, Edit, claude_opts())
            .at(&["/etc/passwd"])
            .denies(Some("reject"), "/etc/passwd is outside the root {root}"),
        case("one of two paths outside", Owned, Move, claude_opts())
            .at(&["{root}/a", "{root}/../b"])
            .denies(Some("reject"), "{root}/../b is outside the root {root}"),
        case("escape through a planted symlink", Owned, Delete, gemini_opts())
            .preset(Preset::gemini())
            .at(&["etc-link/passwd"])
            .denies(Some("cancel"), "etc-link/passwd is outside the root {root}"),
        case("codex patch inside", Shared, Edit, codex_patch_opts())
            .preset(Preset::codex())
            .at(&["{root}/new.txt"])
            .allows("approved", "every path it names is inside the root {root}"),
        case("codex patch outside: abort is the only refusal", Owned, Edit, codex_patch_opts())
            .preset(Preset::codex())
            .at(&["/tmp/x"])
            .denies(Some("abort"), "/tmp/x is outside the root {root}"),
        case("gemini write inside", Shared, Edit, gemini_opts())
            .preset(Preset::gemini())
            .at(&["{root}/a.txt"])
            .allows("proceed_once", "every path it names is inside the root {root}"),
        // edit, delete, move without locations: only in a root Legate owns.
        case("edit without locations, owned", Owned, Edit, claude_opts()).allows(
            "allow",
            "it names no paths, and the root {root} is a directory Legate owns",
        ),
        case("delete without locations, shared", Shared, Delete, claude_opts()).denies(
            Some("reject"),
            "a delete that names no paths is allowed only in a directory Legate owns",
        ),
        case("move without locations, shared with execute", SharedExec, Move, gemini_opts())
            .preset(Preset::gemini())
            .denies(
                Some("cancel"),
                "a move that names no paths is allowed only in a directory Legate owns",
            ),
        // execute, fetch, other: owned root, or allow_execute.
        case("claude Bash, owned", Owned, Execute, claude_opts())
            .allows("allow", "the root {root} is a directory Legate owns"),
        case("claude Bash, shared", Shared, Execute, claude_opts())
            .denies(Some("reject"), "shell commands run only in a directory Legate owns"),
        case("codex shell, owned", Owned, Execute, codex_shell_opts())
            .preset(Preset::codex())
            .allows("approved", "the root {root} is a directory Legate owns"),
        case("codex shell, shared", Shared, Execute, codex_shell_opts())
            .preset(Preset::codex())
            .denies(Some("abort"), "shell commands run only in a directory Legate owns"),
        case("gemini shell, shared with execute", SharedExec, Execute, gemini_opts())
            .preset(Preset::gemini())
            .allows(
                "proceed_once",
                "opaque tools are allowed in the shared root {root} by configuration",
            ),
        case("gemini shell, shared", Shared, Execute, gemini_opts())
            .preset(Preset::gemini())
            .denies(Some("cancel"), "shell commands run only in a directory Legate owns"),
        case("fetch, shared", Shared, Fetch, claude_opts())
            .denies(Some("reject"), "fetches run only in a directory Legate owns"),
        case("fetch, owned", Owned, Fetch, claude_opts())
            .allows("allow", "the root {root} is a directory Legate owns"),
        case("other, shared", Shared, Other, claude_opts()).denies(
            Some("reject"),
            "tools whose effect cannot be checked run only in a directory Legate owns",
        ),
        case("other, shared with execute", SharedExec, Other, revisor_opts())
            .preset(Preset::revisor())
            .allows(
                "allow",
                "opaque tools are allowed in the shared root {root} by configuration",
            ),
        // A read-only task refuses every change, even where the table would allow it.
        case("read-only: edit inside", Owned, Edit, claude_opts())
            .read_only()
            .at(&["{root}/a"])
            .denies(Some("reject"), "the task is read-only"),
        case("read-only: delete", Owned, Delete, claude_opts())
            .read_only()
            .denies(Some("reject"), "the task is read-only"),
        case("read-only: move", Owned, Move, claude_opts())
            .read_only()
            .at(&["{root}/a"])
            .denies(Some("reject"), "the task is read-only"),
        case("read-only: execute, owned", Owned, Execute, codex_shell_opts())
            .preset(Preset::codex())
            .read_only()
            .denies(Some("abort"), "the task is read-only"),
        case("read-only: fetch", SharedExec, Fetch, gemini_opts())
            .preset(Preset::gemini())
            .read_only()
            .denies(Some("cancel"), "the task is read-only"),
        case("read-only: other", Owned, Other, claude_opts())
            .read_only()
            .denies(Some("reject"), "the task is read-only"),
        // switch_mode naming a mode: only the supervised one, owned or not.
        case("claude switch to default, generic options", Shared, SwitchMode, claude_opts())
            .raw(json!({"modeId": "default"}))
            .denies(
                Some("reject"),
                "the call names default, but the option chosen decides where the agent goes: the claude preset does not know where allow_always, allow would lead, so it is not chosen",
            ),
        case("claude switch to default, the option named default", Shared, SwitchMode, opts(&[
            ("default", AllowOnce),
            ("reject", RejectOnce),
        ]))
            .raw(json!({"modeId": "default"}))
            .allows("default", "default is the mode in which the agent still asks before acting"),
        // A mode key the model wrote (Claude's ExitPlanMode passes its input through) names
        // the supervised mode while the options lead elsewhere: the options decide.
        case("claude ExitPlanMode naming default, only dontAsk offered", Owned, SwitchMode, opts(&[
            ("dontAsk", AllowOnce),
            ("plan", RejectOnce),
        ]))
            .raw(json!({"plan": "1. write the code", "mode": "default"}))
            .denies(
                Some("plan"),
                "the call names default, but the option chosen decides where the agent goes: the claude preset does not know where dontAsk would lead, so it is not chosen",
            ),
        case("claude ExitPlanMode naming default, only elevating ids", Shared, SwitchMode, claude_real_elevating_plan_opts())
            .raw(json!({"plan": "1. write the code", "mode": "default"}))
            .denies(
                Some("plan"),
                "the call names default, but the option chosen decides where the agent goes: every way out of planning offered (auto, acceptEdits) would leave the supervised mode",
            ),
        case("claude ExitPlanMode naming default, elevating and unknown, no refusal", Owned, SwitchMode, opts(&[
            ("bypassPermissions", AllowOnce),
            ("dontAsk", AllowAlways),
        ]))
            .raw(json!({"plan": "1. write the code", "currentModeId": "default"}))
            .denies(
                None,
                "the call names default, but the option chosen decides where the agent goes: every way out of planning offered would leave the supervised mode (bypassPermissions) or lead somewhere the claude preset does not know (dontAsk)",
            ),
        case("claude ExitPlanMode naming default, the real ids", Owned, SwitchMode, claude_real_plan_opts())
            .raw(json!({"plan": "1. write the code", "mode": "default"}))
            .allows("default", "default is the mode in which the agent still asks before acting"),
        case("claude switch to acceptEdits, owned", Owned, SwitchMode, claude_opts())
            .raw(json!({"mode": "acceptEdits"}))
            .denies(Some("reject"), "switching to acceptEdits would leave the supervised mode default"),
        case("claude switch to bypassPermissions", Owned, SwitchMode, claude_opts())
            .raw(json!({"currentModeId": "bypassPermissions"}))
            .denies(
                Some("reject"),
                "switching to bypassPermissions would leave the supervised mode default",
            ),
        case("codex switch to full-access", Owned, SwitchMode, codex_shell_opts())
            .preset(Preset::codex())
            .raw(json!({"modeId": "full-access"}))
            .denies(Some("abort"), "switching to full-access would leave the supervised mode read-only"),
        case("codex switch to read-only, generic options", Owned, SwitchMode, codex_shell_opts())
            .preset(Preset::codex())
            .raw(json!({"modeId": "read-only"}))
            .denies(
                Some("abort"),
                "the call names read-only, but the option chosen decides where the agent goes: the codex preset does not know where approved, approved-execpolicy-amendment would lead, so it is not chosen",
            ),
        case("codex switch to read-only, the option named read-only", Owned, SwitchMode, opts(&[
            ("full-access", AllowOnce),
            ("read-only", AllowAlways),
            ("abort", RejectOnce),
        ]))
            .preset(Preset::codex())
            .raw(json!({"modeId": "read-only"}))
            .allows("read-only", "read-only is the mode in which the agent still asks before acting"),
        case("gemini switch to yolo", SharedExec, SwitchMode, gemini_opts())
            .preset(Preset::gemini())
            .raw(json!({"modeId": "yolo"}))
            .denies(Some("cancel"), "switching to yolo would leave the supervised mode default"),
        case("generic: no supervised mode known", Owned, SwitchMode, claude_opts())
            .preset(Preset::generic())
            .raw(json!({"modeId": "default"}))
            .denies(
                Some("reject"),
                "switching to default is refused because the generic preset knows no supervised mode",
            ),
        case("mode that is not text", Owned, SwitchMode, claude_opts())
            .raw(json!({"modeId": 3}))
            .denies(
                Some("reject"),
                "the mode named by rawInput.modeId is not text, so where it leads cannot be checked",
            ),
        case("supervised mode named beside plan options", Owned, SwitchMode, claude_plan_opts())
            .raw(json!({"modeId": "default"}))
            .allows(
                "exit-plan-default",
                "default is the mode in which the agent still asks before acting",
            ),
        // Plan exits naming no mode: answered from the option table.
        case("claude plan exit: every option offered", Owned, SwitchMode, claude_plan_opts())
            .raw(json!({"plan": "1. write the code"}))
            .allows(
                "exit-plan-default",
                "exit-plan-default leaves planning for a mode in which the agent still asks before acting",
            ),
        case("claude plan exit: only elevating", Owned, SwitchMode, claude_elevating_plan_opts())
            .raw(json!({"plan": "1. write the code"}))
            .denies(
                Some("plan"),
                "every way out of planning offered (exit-plan-accept-edits, exit-plan-clear-auto) would leave the supervised mode",
            ),
        case("claude plan exit: unknown option", Owned, SwitchMode, opts(&[
            ("exit-plan-something-new", AllowOnce),
            ("plan", RejectOnce),
        ]))
            .denies(
                Some("plan"),
                "the claude preset does not know where exit-plan-something-new would lead, so it is not chosen",
            ),
        case("claude plan exit: elevating and unknown", Owned, SwitchMode, opts(&[
            ("exit-plan-auto", AllowOnce),
            ("yes", AllowAlways),
        ]))
            .denies(
                None,
                "every way out of planning offered would leave the supervised mode (exit-plan-auto) or lead somewhere the claude preset does not know (yes)",
            ),
        case("claude-agent-acp plan exit: the real ids", Owned, SwitchMode, claude_real_plan_opts())
            .raw(json!({"plan": "1. write the code"}))
            .allows(
                "default",
                "default leaves planning for a mode in which the agent still asks before acting",
            ),
        case("claude-agent-acp plan exit: only elevating real ids", Shared, SwitchMode, claude_real_elevating_plan_opts())
            .raw(json!({"plan": "1. write the code"}))
            .denies(
                Some("plan"),
                "every way out of planning offered (auto, acceptEdits) would leave the supervised mode",
            ),
        codex_plan_review("codex plan review", Owned, codex_plan_opts()),
        // `implement_plan` keeps supervision, so it is chosen even beside other allows, and
        // even when another allow has the preferred kind.
        codex_plan_review("codex plan review beside other allows", Shared, opts(&[
            ("approved", AllowOnce),
            ("implement_plan", AllowOnce),
            ("abort", RejectOnce),
        ])),
        codex_plan_review("codex plan review beside a preferred allow kind", Owned, opts(&[
            ("approved", AllowOnce),
            ("implement_plan", AllowAlways),
            ("abort", RejectOnce),
        ])),
        case("codex plan review, read-only task", Shared, SwitchMode, codex_plan_opts())
            .preset(Preset::codex())
            .read_only()
            .allows(
                "implement_plan",
                "implement_plan leaves planning for a mode in which the agent still asks before acting",
            ),
        case("codex preset does not know claude ids", Owned, SwitchMode, claude_plan_opts())
            .preset(Preset::codex())
            .denies(
                Some("plan"),
                "the codex preset does not know where exit-plan-bypass, exit-plan-auto, exit-plan-accept-edits, exit-plan-clear-accept-edits, exit-plan-default would lead, so it is not chosen",
            ),
        case("revisor plan exit", Owned, SwitchMode, revisor_plan_opts())
            .preset(Preset::revisor())
            .allows(
                "exit-plan-default",
                "exit-plan-default leaves planning for a mode in which the agent still asks before acting",
            ),
        case("gemini plan exit: nothing verified", Owned, SwitchMode, gemini_opts())
            .preset(Preset::gemini())
            .denies(
                Some("cancel"),
                "the gemini preset does not know where proceed_always, proceed_once would lead, so it is not chosen",
            ),
        case("plan exit with only refusals", Owned, SwitchMode, opts(&[("plan", RejectOnce)]))
            .denies(Some("plan"), "no option offered leaves planning for a supervised mode"),
        // Nothing offered that fits.
        case("allowed, but no allow option offered", Owned, Read, opts(&[("reject", RejectOnce)]))
            .denies(Some("reject"), "a read call changes nothing, but the agent offered no option that allows it"),
        case("denied, and no option offered", Shared, Execute, vec![])
            .denies(None, "shell commands run only in a directory Legate owns"),
        case("denied, only allow options offered", Shared, Execute, opts(&[("ok", AllowOnce)]))
            .denies(None, "shell commands run only in a directory Legate owns"),
        case("refusal that carries on beats one that ends the turn", Shared, Execute, opts(&[
            ("approved", AllowOnce),
            ("cancel", RejectOnce),
            ("decline", RejectOnce),
        ]))
            .preset(Preset::codex())
            .denies(Some("decline"), "shell commands run only in a directory Legate owns"),
    ]
}

#[test]
fn every_row_of_the_table() {
    let root = root();
    let cases = table();
    assert!(cases.len() >= 40);
    for case in cases {
        case.check(&root.path);
    }
}

#[test]
fn the_supervisor_is_usable_as_a_trait_object() {
    let root = root();
    let supervisor: Box<dyn Supervisor> = Box::new(Rules);
    let sup = supervision(&root.path, Dir::Owned, TaskMode::Write, Preset::claude());
    let verdict = supervisor.decide(&sup, &request(ToolKind::Execute, &[], None, claude_opts()));
    assert_eq!(verdict.option_id.as_deref(), Some("allow"));
}

// ---- invariants for arbitrary requests ----

fn any_kind() -> impl Strategy<Value = ToolKind> {
    use ToolKind::*;
    prop::sample::select(vec![
        Read, Edit, Delete, Move, Search, Execute, Think, Fetch, SwitchMode, Other,
    ])
}

fn any_option_kind() -> impl Strategy<Value = OptionKind> {
    prop::sample::select(vec![AllowOnce, AllowAlways, RejectOnce, RejectAlways])
}

fn any_id() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "allow",
            "allow_always",
            "reject",
            "approved",
            "approved-execpolicy-amendment",
            "abort",
            "cancel",
            "decline",
            "proceed_once",
            "proceed_always",
            "exit-plan-default",
            "exit-plan-accept-edits",
            "exit-plan-auto",
            "exit-plan-bypass",
            "exit-plan-clear-default",
            "implement_plan",
            "default",
            "acceptEdits",
            "auto",
            "bypassPermissions",
            "plan",
            "dontAsk",
            "read-only",
        ])
        .prop_map(String::from),
        "[a-z_-]{0,12}",
    ]
}

fn any_options() -> impl Strategy<Value = Vec<PermissionOption>> {
    prop::collection::vec((any_id(), any_option_kind()), 0..6).prop_map(|list| {
        list.into_iter()
            .map(|(id, kind)| PermissionOption {
                name: id.clone(),
                id,
                kind,
            })
            .collect()
    })
}

fn any_location() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("/etc/passwd".to_string()),
        Just("..".to_string()),
        Just("etc-link/x".to_string()),
        Just("{root}/a".to_string()),
        "[a-z./]{0,12}",
    ]
}

fn any_raw_input() -> impl Strategy<Value = Option<serde_json::Value>> {
    let mode = prop_oneof![
        Just(json!("default")),
        Just(json!("read-only")),
        Just(json!("acceptEdits")),
        Just(json!(null)),
        Just(json!(7)),
        "[a-zA-Z-]{0,10}".prop_map(|s| json!(s)),
    ];
    let key = prop::sample::select(vec!["modeId", "mode", "currentModeId", "plan"]);
    prop_oneof![
        Just(None),
        Just(Some(json!("not an object"))),
        (key, mode.clone()).prop_map(|(k, v)| Some(json!({ k: v }))),
        // Claude's ExitPlanMode input with a mode key the model added.
        mode.prop_map(|v| Some(json!({"plan": "1. write the code", "mode": v}))),
    ]
}

fn any_preset() -> impl Strategy<Value = Preset> {
    prop::sample::select(Preset::NAMES.to_vec()).prop_map(|n| Preset::by_name(n).unwrap())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn answers_only_with_offered_ids_and_allows_only_with_allow_options(
        kind in any_kind(),
        locations in prop::collection::vec(any_location(), 0..3),
        raw_input in any_raw_input(),
        options in any_options(),
        preset in any_preset(),
        owned in any::<bool>(),
        allow_execute in any::<bool>(),
        read_only in any::<bool>(),
    ) {
        let root = root();
        let sup = Supervision::new(Boundary { root: root.path.clone(), owned, allow_execute }, if read_only { TaskMode::ReadOnly } else { TaskMode::Write }, preset.clone());
        let locations: Vec<String> = locations
            .iter()
            .map(|l| l.replace("{root}", &root.path.display().to_string()))
            .collect();
        let locations: Vec<&str> = locations.iter().map(String::as_str).collect();
        let req = request(kind, &locations, raw_input, options.clone());
        let verdict = Rules.decide(&sup, &req);

        prop_assert!(!verdict.reason.is_empty());
        if let Some(id) = &verdict.option_id {
            prop_assert!(options.iter().any(|o| &o.id == id), "{id} was not offered");
            if verdict.is_allow() {
                prop_assert!(options.iter().any(|o| &o.id == id && o.kind.is_allow()));
                prop_assert!(preset.plan_exit(id) != Some(PlanExit::Elevates));
                // Leaving a mode takes an option known to keep supervision, or one named
                // after the supervised mode; never a generic allow.
                if kind == ToolKind::SwitchMode {
                    prop_assert!(
                        preset.plan_exit(id) == Some(PlanExit::KeepsSupervision)
                            || preset.is_supervised_mode(id),
                        "switch_mode allowed with {id}"
                    );
                }
            }
        }
        if verdict.is_allow() {
            prop_assert!(verdict.option_id.is_some(), "allow without an option");
        } else if let Some(id) = &verdict.option_id {
            prop_assert!(
                options.iter().any(|o| &o.id == id && !o.kind.is_allow()),
                "deny answered with a non-refusal {id}"
            );
        }
        // Read-only tasks never allow a change; shared roots never run opaque tools unless
        // configured to; a mode switch never depends on owning the directory.
        if read_only && changes_things(kind) {
            prop_assert!(!verdict.is_allow());
        }
        if matches!(kind, ToolKind::Execute | ToolKind::Fetch | ToolKind::Other) && !owned && !allow_execute {
            prop_assert!(!verdict.is_allow());
        }
        if kind == ToolKind::SwitchMode {
            let mut flipped = sup.clone();
            flipped.boundary.owned = !owned;
            flipped.boundary.allow_execute = !allow_execute;
            prop_assert_eq!(Rules.decide(&flipped, &req), verdict);
        }
    }
}
