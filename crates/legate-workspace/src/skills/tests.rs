#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use legate_core::SkillResource;
use proptest::prelude::*;

fn package(name: &str, content: &str, resources: &[(&str, &str)]) -> SkillPackage {
    SkillPackage {
        name: name.into(),
        content: content.into(),
        resources: resources
            .iter()
            .map(|(p, c)| SkillResource {
                path: (*p).into(),
                content: (*c).into(),
            })
            .collect(),
    }
}

fn client(name: &str, content: &str) -> StagedSkill {
    check_package(&package(name, content, &[]), SkillSource::Client).unwrap()
}

#[test]
fn a_package_keeps_its_declared_name_and_stages_under_its_lowercase_form() {
    let s = check_package(
        &package(
            "Presentations",
            "# P\n",
            &[("references/b.md", "b"), ("a.md", "a")],
        ),
        SkillSource::Client,
    )
    .unwrap();
    assert_eq!(s.name, "Presentations");
    assert_eq!(s.dir(), ".agents/skills/presentations");
    let paths: Vec<&str> = s.files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(paths, ["SKILL.md", "a.md", "references/b.md"]);
    let r = s.record();
    assert_eq!((r.files, r.bytes), (3, 6));
    assert_eq!(r.sha256.len(), 64);
    // The record carries no text.
    let json = serde_json::to_string(&r).unwrap();
    assert!(!json.contains("# P"), "{json}");
}

#[test]
fn the_hash_covers_paths_and_contents_and_not_the_order_given() {
    let a = check_package(
        &package("s", "x", &[("a", "1"), ("b", "2")]),
        SkillSource::Client,
    )
    .unwrap();
    let b = check_package(
        &package("s", "x", &[("b", "2"), ("a", "1")]),
        SkillSource::Client,
    )
    .unwrap();
    let c = check_package(
        &package("s", "x", &[("a", "2"), ("b", "1")]),
        SkillSource::Client,
    )
    .unwrap();
    // Moving a byte between path and content changes the hash too.
    let d = check_package(
        &package("s", "x", &[("ab", ""), ("b", "2")]),
        SkillSource::Client,
    )
    .unwrap();
    assert_eq!(a.sha256(), b.sha256());
    assert_ne!(a.sha256(), c.sha256());
    assert_ne!(a.sha256(), d.sha256());
}

#[test]
fn the_same_skill_twice_is_staged_once_and_other_files_under_its_name_conflict() {
    let set = skill_set(
        Vec::new(),
        vec![client("Review", "r"), client("review", "r")],
    )
    .unwrap();
    assert_eq!(set.len(), 1);
    assert_eq!(set[0].name, "Review");
    let err = skill_set(
        Vec::new(),
        vec![client("review", "r"), client("REVIEW", "zqxj-text")],
    )
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::SkillConflict);
    assert!(
        !err.message.contains("zqxj"),
        "no text in errors: {}",
        err.message
    );
}

#[test]
fn a_client_skill_meets_the_bundled_packs_by_name() {
    let bundled = bundled_packs().unwrap();
    let same = StagedSkill {
        source: SkillSource::Client,
        ..bundled[0].clone()
    };
    let set = skill_set(bundled.clone(), vec![same]).unwrap();
    assert_eq!(set.len(), bundled.len());
    assert!(set.iter().all(|s| s.source == SkillSource::Bundled));
    let err = skill_set(bundled, vec![client("legate-code-care", "mine")]).unwrap_err();
    assert_eq!(err.code, ErrorCode::SkillConflict);
}

#[test]
fn the_limits_count_bundled_packs_too() {
    let bundled = bundled_packs().unwrap();
    let room = MAX_SKILLS - bundled.len();
    let many: Vec<StagedSkill> = (0..room).map(|i| client(&format!("s{i}"), "x")).collect();
    assert!(skill_set(bundled.clone(), many.clone()).is_ok());
    let mut more = many;
    more.push(client("one-more", "x"));
    let err = skill_set(bundled.clone(), more).unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidInput);
    let big = "x".repeat(MAX_TOTAL_BYTES as usize);
    let err = skill_set(bundled, vec![client("big", &big)]).unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidInput);
    let resources: Vec<(String, String)> = (0..=MAX_RESOURCES)
        .map(|i| (format!("r{i}.md"), String::new()))
        .collect();
    let refs: Vec<(&str, &str)> = resources
        .iter()
        .map(|(p, c)| (p.as_str(), c.as_str()))
        .collect();
    let err = check_package(&package("s", "x", &refs), SkillSource::Client).unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidInput);
}

#[test]
fn hostile_resource_paths_are_refused() {
    for path in [
        "/etc/passwd",
        "../up.md",
        "a/../../b",
        "./a",
        "a//b",
        "",
        "a\\b",
        ".git/config",
        "x/.GIT/hooks",
        "CON",
        "docs/nul.txt",
        "com1.md",
        "LPT9",
        "a:b",
        "trailing.",
        "space ",
        "a\u{0}b",
        "line\nbreak",
    ] {
        let err =
            check_package(&package("s", "x", &[(path, "y")]), SkillSource::Client).expect_err(path);
        assert_eq!(err.code, ErrorCode::UnsafePath, "{path}: {}", err.message);
    }
    for (a, b) in [
        ("skill.md", "z"),
        ("Ref.md", "ref.md"),
        ("a", "a/b"),
        ("A", "a/b"),
    ] {
        let pkg = if b == "z" {
            package("s", "x", &[(a, "y")])
        } else {
            package("s", "x", &[(a, "y"), (b, "z")])
        };
        let err = check_package(&pkg, SkillSource::Client).expect_err(a);
        assert_eq!(err.code, ErrorCode::UnsafePath, "{a} {b}: {}", err.message);
    }
}

#[test]
fn hostile_names_are_refused() {
    for name in [
        "",
        "../x",
        "a/b",
        ".hidden",
        "-dash",
        "con",
        "Aux.md",
        "x.",
        "é",
        "a b",
        &"n".repeat(65),
    ] {
        let err = check_package(&package(name, "x", &[]), SkillSource::Client).expect_err(name);
        assert_eq!(err.code, ErrorCode::InvalidInput, "{name:?}");
    }
}

#[test]
fn a_credential_in_a_skill_is_refused_without_echoing_it() {
    let key = format!("{}{}", "AKIA", "Q3ZL7RTX2WNVD6KM");
    let err = check_package(
        &package("s", "x", &[("r.md", &format!("key = {key}\n"))]),
        SkillSource::Client,
    )
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::InputSecretDetected);
    assert!(!err.message.contains(&key));
    let err = check_package(&package("s", "a\0b", &[]), SkillSource::Client).unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidInput);
}

#[test]
fn staging_paths_are_recognised_in_every_letter_case() {
    assert!(is_staging_path(".agents/skills/x/SKILL.md"));
    assert!(is_staging_path(".Agents/SKILLS"));
    assert!(!is_staging_path(".agents/skill/x"));
    assert!(!is_staging_path(".agents"));
    assert!(!is_staging_path("src/.agents/skills/x"));
    // The files staged for agy's tool controls are Legate's too; nothing else beside them.
    assert!(is_staging_path(".agents/hooks.json"));
    assert!(is_staging_path(".AGENTS/MCP_config.json"));
    assert!(!is_staging_path(".agents/hooks.json/x"));
    assert!(!is_staging_path(".agents/other.json"));
}

proptest! {
    #[test]
    fn a_resource_path_is_accepted_only_when_it_is_a_plain_relative_path(
        path in "[a-zA-Z0-9./\\\\:_ -]{0,24}|\\PC{0,12}|(\\.\\./)+[a-z]{1,4}|/[a-z/]{0,10}"
    ) {
        let result = check_package(&package("s", "x", &[(&path, "y")]), SkillSource::Client);
        let parts: Vec<&str> = path.split('/').collect();
        let plain = !path.is_empty()
            && !path.starts_with('/')
            && !path.contains('\\')
            && !path.chars().any(char::is_control)
            && parts.iter().all(|p| !p.is_empty() && *p != "." && *p != ".." && !p.eq_ignore_ascii_case(".git"));
        if result.is_ok() {
            // Whatever passes is plain and stays inside the skill's directory.
            prop_assert!(plain, "{path:?} passed");
            prop_assert!(!path.to_lowercase().eq("skill.md"));
            prop_assert!(parts.iter().all(|p| !is_device_name(p)));
        } else {
            let code = result.unwrap_err().code;
            prop_assert!(matches!(code, ErrorCode::UnsafePath | ErrorCode::InputSecretDetected), "{code:?}");
        }
    }

    #[test]
    fn a_name_is_accepted_only_when_it_is_one_safe_component(name in "\\PC{0,70}|[a-zA-Z0-9._-]{0,70}") {
        match check_name(&name) {
            Ok(()) => {
                prop_assert!(!name.is_empty() && name.len() <= MAX_NAME_LEN);
                prop_assert!(!name.contains('/') && !name.contains('\\') && !name.starts_with('.'));
                prop_assert!(name != ".." && !is_device_name(&name));
                prop_assert!(name.is_ascii());
            }
            Err(e) => prop_assert_eq!(e.code, ErrorCode::InvalidInput),
        }
    }
}
