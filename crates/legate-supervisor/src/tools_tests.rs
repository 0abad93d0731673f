#![allow(clippy::unwrap_used)]
use super::*;
use legate_core::{OptionKind, PermissionOption};
use proptest::prelude::*;

fn request(kind: ToolKind, title: &str, raw: Option<serde_json::Value>) -> PermissionRequest {
    let opt = |id: &str, kind| PermissionOption {
        id: id.into(),
        name: id.into(),
        kind,
    };
    PermissionRequest {
        tool_call_id: "t1".into(),
        title: title.into(),
        tool_kind: kind,
        locations: vec![],
        raw_input: raw,
        options: vec![
            opt("allow", OptionKind::AllowOnce),
            opt("reject", OptionKind::RejectOnce),
        ],
    }
}

fn controls(kinds: Option<&[ToolKind]>, mcp: &[(&str, &[&str])]) -> ToolControls {
    ToolControls {
        allowed: kinds.map(<[ToolKind]>::to_vec),
        mcp: mcp
            .iter()
            .map(|(s, t)| McpSelection {
                server_id: s.to_string(),
                tools: t.iter().map(|t| t.to_string()).collect(),
            })
            .collect(),
    }
}

#[test]
fn a_kind_outside_the_list_is_refused_with_the_code_and_a_reject_option() {
    let c = controls(Some(&[ToolKind::Read, ToolKind::Search]), &[]);
    let r = c
        .refusal(
            &request(ToolKind::Edit, "Write a.txt", None),
            &Preset::claude(),
        )
        .unwrap();
    assert_eq!(r.decision, Decision::Deny);
    assert_eq!(r.decider, Decider::Controls);
    assert_eq!(r.rule_id.as_deref(), Some("TOOL_NOT_ALLOWED"));
    assert_eq!(r.option_id.as_deref(), Some("reject"));
    assert!(
        r.reason.starts_with("TOOL_NOT_ALLOWED: edit calls"),
        "{}",
        r.reason
    );
    assert!(
        c.refusal(&request(ToolKind::Read, "Read a", None), &Preset::claude())
            .is_none()
    );
}

#[test]
fn an_empty_list_leaves_only_thinking_and_the_mode_rule() {
    let c = controls(Some(&[]), &[]);
    for kind in ToolKind::ALL {
        let refused = c
            .refusal(&request(*kind, "x", None), &Preset::claude())
            .is_some();
        let exempt = matches!(kind, ToolKind::Think | ToolKind::SwitchMode);
        assert_eq!(refused, !exempt, "{kind:?}");
    }
}

#[test]
fn no_controls_leave_every_request_to_the_rules() {
    let c = ToolControls::default();
    for kind in ToolKind::ALL {
        assert!(
            c.refusal(&request(*kind, "mcp__x__y", None), &Preset::claude())
                .is_none()
        );
    }
}

#[test]
fn only_selected_mcp_tools_pass() {
    let c = controls(None, &[("docs", &["search"])]);
    let p = Preset::claude();
    assert!(
        c.refusal(&request(ToolKind::Other, "mcp__docs__search", None), &p)
            .is_none()
    );
    let other_tool = c.refusal(&request(ToolKind::Other, "mcp__docs__delete_all", None), &p);
    assert!(
        other_tool
            .unwrap()
            .reason
            .contains("delete_all of server docs")
    );
    assert!(
        c.refusal(&request(ToolKind::Other, "mcp__shell__run", None), &p)
            .is_some()
    );
    let raw = serde_json::json!({"tool": "docs/delete_all"});
    assert!(
        c.refusal(&request(ToolKind::Other, "Tool", Some(raw)), &p)
            .is_some()
    );
    let raw = serde_json::json!({"tool": "docs__search"});
    assert!(
        c.refusal(&request(ToolKind::Other, "Tool", Some(raw)), &p)
            .is_none()
    );
}

#[test]
fn a_selected_mcp_name_does_not_smuggle_a_kind_the_list_lacks() {
    let c = controls(Some(&[ToolKind::Read]), &[("docs", &["search"])]);
    let edit = request(ToolKind::Edit, "mcp__docs__search", None);
    assert!(c.refusal(&edit, &Preset::claude()).is_some());
}

proptest! {
    #[test]
    fn a_kind_the_list_lacks_is_refused_whatever_the_title(
        title in "\\PC{0,60}",
        tool in proptest::option::of("\\PC{0,30}"),
    ) {
        let c = controls(Some(&[ToolKind::Read]), &[("docs", &["search"])]);
        let raw = tool.map(|t| serde_json::json!({ "tool": t }));
        for kind in [ToolKind::Edit, ToolKind::Delete, ToolKind::Move, ToolKind::Execute, ToolKind::Fetch] {
            let r = c.refusal(&request(kind, &title, raw.clone()), &Preset::claude());
            prop_assert!(r.is_some(), "{kind:?} {title:?}");
        }
    }
}
