//! Unit tests of the role catalog's limits (`roles/mod.rs`).

use super::*;
use proptest::prelude::*;

fn spec(name: &str) -> RoleSpec {
    RoleSpec {
        name: name.to_string(),
        base: RoleBase::Reviewer,
        description: Some("security review".into()),
        instructions: "Check access control and cite real lines.".into(),
        defaults: RoleDefaults::default(),
    }
}

fn catalog(specs: Vec<RoleSpec>) -> Result<Roles> {
    Roles::new(specs, ["revisor", "claude"])
}

fn refusal(specs: Vec<RoleSpec>) -> String {
    let e = catalog(specs).unwrap_err();
    assert_eq!(e.code, ErrorCode::ConfigInvalid, "{e}");
    e.message
}

#[test]
fn builtins_come_first_and_resolve_without_instructions() {
    let roles = catalog(vec![spec("security-review")]).unwrap();
    assert_eq!(
        roles.names(),
        ["implementer", "planner", "reviewer", "security-review"]
    );
    let (role, defaults) = roles.resolve("planner").unwrap();
    assert_eq!(role, TaskRole::builtin(RoleBase::Planner));
    assert_eq!(defaults, RoleDefaults::default());
    let (role, _) = roles.resolve("security-review").unwrap();
    assert_eq!(role.base, RoleBase::Reviewer);
    assert!(role.instructions.starts_with("Check access"));
    let listed = &roles.list()[3];
    assert_eq!(listed.instructions_chars, 41);
    assert!(listed.read_only && !listed.builtin);
}

#[test]
fn an_unknown_role_is_role_not_found_and_lists_the_names() {
    let e = catalog(vec![]).unwrap().resolve("architect").unwrap_err();
    assert_eq!(e.code, ErrorCode::RoleNotFound);
    assert!(e.message.contains("implementer, planner, reviewer"), "{e}");
    // A hostile name is echoed only in part.
    let e = catalog(vec![])
        .unwrap()
        .resolve(&"x".repeat(100_000))
        .unwrap_err();
    assert!(e.message.len() < 200, "{}", e.message.len());
}

#[test]
fn each_limit_of_a_configured_role_names_it() {
    assert!(refusal(vec![spec("reviewer")]).contains("built-in"));
    assert!(refusal(vec![spec("dup"), spec("dup")]).contains("roles.dup: is declared twice"));
    assert!(refusal(vec![spec("Upper")]).contains("\"Upper\""));
    assert!(refusal(vec![spec(&"a".repeat(33))]).contains("lowercase"));
    let many = (0..21).map(|i| spec(&format!("r{i}"))).collect();
    assert!(refusal(many).contains("at most 20"));
    assert!(catalog((0..20).map(|i| spec(&format!("r{i}"))).collect()).is_ok());

    let mut s = spec("empty");
    s.instructions = " \n".into();
    assert!(refusal(vec![s]).contains("roles.empty: instructions must not be empty"));
    let mut s = spec("long");
    s.instructions = "é".repeat(MAX_ROLE_INSTRUCTIONS_CHARS + 1);
    assert!(refusal(vec![s]).contains("roles.long: instructions are 8001"));
    let mut s = spec("exact");
    s.instructions = "é".repeat(MAX_ROLE_INSTRUCTIONS_CHARS);
    s.description = Some("d".repeat(MAX_ROLE_DESCRIPTION_CHARS));
    assert!(catalog(vec![s.clone()]).is_ok());
    s.description = Some("d".repeat(MAX_ROLE_DESCRIPTION_CHARS + 1));
    assert!(refusal(vec![s]).contains("roles.exact: description"));
}

#[test]
fn defaults_are_checked_against_the_base_and_the_agents() {
    let with = |base: RoleBase, defaults: RoleDefaults| {
        let mut s = spec("r");
        s.base = base;
        s.defaults = defaults;
        catalog(vec![s])
    };
    let write = RoleDefaults {
        mode: Some(TaskMode::Write),
        ..RoleDefaults::default()
    };
    assert!(with(RoleBase::Planner, write.clone()).is_err());
    assert!(with(RoleBase::Implementer, write).is_ok());
    let schema = RoleDefaults {
        output_schema: Some(serde_json::json!({"type": "object"})),
        ..RoleDefaults::default()
    };
    assert!(
        with(RoleBase::Reviewer, schema.clone())
            .unwrap_err()
            .message
            .contains("implementer base")
    );
    assert!(with(RoleBase::Implementer, schema).is_ok());
    let not_object = RoleDefaults {
        output_schema: Some(serde_json::json!([])),
        ..RoleDefaults::default()
    };
    assert!(with(RoleBase::Implementer, not_object).is_err());
    let stranger = RoleDefaults {
        agent: Some("gemini".into()),
        ..RoleDefaults::default()
    };
    assert!(
        with(RoleBase::Reviewer, stranger)
            .unwrap_err()
            .message
            .contains("\"gemini\" is not a configured agent")
    );
    for bad in [
        RoleDefaults {
            timeout_seconds: Some(0),
            ..RoleDefaults::default()
        },
        RoleDefaults {
            model: Some("a b".into()),
            ..RoleDefaults::default()
        },
        RoleDefaults {
            include_paths: Some(vec![]),
            ..RoleDefaults::default()
        },
    ] {
        assert_eq!(
            with(RoleBase::Implementer, bad).unwrap_err().code,
            ErrorCode::ConfigInvalid
        );
    }
}

#[test]
fn an_explicit_argument_replaces_a_whole_default_and_lists_never_merge() {
    let mut request = SubmitRequest::new("p");
    request.workspace = WorkspaceRequest::Copy {
        source: "/p".into(),
        include_paths: vec!["src".into()],
        criteria: vec![],
    };
    request.timeout = Some(Duration::from_secs(5));
    fill(
        &mut request,
        RoleDefaults {
            agent: Some("claude".into()),
            model: Some("m".into()),
            include_paths: Some(vec!["docs".into(), "tests".into()]),
            timeout_seconds: Some(60),
            mode: Some(TaskMode::ReadOnly),
            output_schema: None,
            ..RoleDefaults::default()
        },
    );
    let WorkspaceRequest::Copy { include_paths, .. } = &request.workspace else {
        panic!("still a copy")
    };
    assert_eq!(include_paths, &["src"]);
    assert_eq!(request.timeout, Some(Duration::from_secs(5)));
    assert_eq!(request.agent.as_deref(), Some("claude"));
    assert_eq!(request.model.as_deref(), Some("m"));
    assert_eq!(request.mode, Some(TaskMode::ReadOnly));
}

proptest! {
    #[test]
    fn a_role_name_is_accepted_exactly_when_short_lowercase_digits_or_hyphens(
        name in "\\PC{0,40}|[a-z0-9-]{0,40}|[a-zA-Z_ .]{1,8}"
    ) {
        let ok = !name.is_empty()
            && name.len() <= 32
            && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        prop_assert_eq!(valid_role_name(&name), ok);
        let builtin = ["implementer", "planner", "reviewer"].contains(&name.as_str());
        prop_assert_eq!(catalog(vec![spec(&name)]).is_ok(), ok && !builtin);
    }
}

#[test]
fn control_defaults_fill_only_what_the_request_left_out() {
    let defaults = RoleDefaults {
        effort: Some("high".into()),
        skills: Some(vec![legate_core::SkillPackage {
            name: "style".into(),
            content: "Short sentences.".into(),
            resources: vec![],
        }]),
        artifact_paths: Some(vec!["notes.md".into()]),
        delivery_mode: Some(legate_core::DeliveryMode::Messages),
        allowed_tools: Some(vec![legate_core::ToolKind::Read]),
        mcp_servers: Some(vec![legate_core::McpSelection {
            server_id: "docs".into(),
            tools: vec!["search".into()],
        }]),
        memory: Some(vec![legate_core::MemorySelection {
            specialist: "scribe".into(),
            sha256: "00".into(),
        }]),
        ..RoleDefaults::default()
    };
    let mut elsewhere = SubmitRequest::new("p");
    fill(&mut elsewhere, defaults.clone());
    assert!(
        elsewhere.skills.is_empty(),
        "skills are staged in a copy only"
    );
    let mut bare = SubmitRequest::new("p");
    bare.workspace = WorkspaceRequest::Copy {
        source: "/p".into(),
        include_paths: vec![],
        criteria: vec![],
    };
    fill(&mut bare, defaults.clone());
    assert_eq!(bare.skills[0].name, "style");
    assert_eq!(bare.artifact_paths, ["notes.md"]);
    assert_eq!(
        bare.delivery_mode,
        Some(legate_core::DeliveryMode::Messages)
    );
    assert_eq!(
        bare.allowed_tools.as_deref(),
        Some(&[legate_core::ToolKind::Read][..])
    );
    assert_eq!(bare.mcp_servers.as_ref().unwrap()[0].server_id, "docs");
    assert_eq!(bare.memory.as_ref().unwrap().len(), 1);
    assert_eq!(bare.effort, Some(legate_core::Effort::High));

    // The request's own value wins, whole: an empty memory list replaces the default.
    let mut own = SubmitRequest::new("p");
    own.artifact_paths = vec!["out.txt".into()];
    own.effort = Some(legate_core::Effort::Low);
    own.delivery_mode = Some(legate_core::DeliveryMode::Events);
    own.allowed_tools = Some(vec![legate_core::ToolKind::Edit]);
    own.mcp_servers = Some(vec![]);
    own.memory = Some(vec![]);
    fill(&mut own, defaults);
    assert_eq!(own.artifact_paths, ["out.txt"]);
    assert_eq!(own.delivery_mode, Some(legate_core::DeliveryMode::Events));
    assert_eq!(
        own.allowed_tools.as_deref(),
        Some(&[legate_core::ToolKind::Edit][..])
    );
    assert!(own.mcp_servers.unwrap().is_empty());
    assert!(own.memory.unwrap().is_empty());
    assert_eq!(own.effort, Some(legate_core::Effort::Low));
}

#[test]
fn control_defaults_are_checked_at_start() {
    let mut s = spec("e");
    s.defaults.effort = Some("Very High".into());
    assert!(refusal(vec![s]).contains("roles.e: defaults.effort"));
    let mut s = spec("t");
    s.defaults.allowed_tools = Some(vec![]);
    assert!(refusal(vec![s]).contains("defaults.allowedTools is empty"));
    let mut s = spec("a");
    s.defaults.artifact_paths = Some(vec!["/etc/passwd".into()]);
    assert!(refusal(vec![s]).contains("defaults.artifactPaths"));
    let mut s = spec("ok");
    s.defaults.effort = Some("low".into());
    s.defaults.artifact_paths = Some(vec!["out/report.md".into()]);
    assert!(catalog(vec![s]).is_ok());
}
