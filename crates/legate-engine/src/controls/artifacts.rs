//! The artifact paths a task names (`artifactPaths`): at most
//! [`MAX_ARTIFACT_PATHS`](legate_core::delivery::MAX_ARTIFACT_PATHS), each a safe relative
//! path (the syntax of include paths: no `..`, no absolute path, no `.git`, no control
//! character or backslash), none twice (ignoring case), and none the secret policy refuses by
//! name. Collection and reading are `crate::artifacts`; this module only checks the request.

use crate::core::Core;
use crate::core::request::SubmitRequest;
use legate_core::delivery::MAX_ARTIFACT_PATHS;
use legate_core::{Error, ErrorCode, Result};
use std::collections::HashSet;

/// The artifact paths `request` names, checked: `BLOCKED_ARTIFACT_PATH` for a path that is
/// not a safe relative path or that the secret policy refuses by name, `INVALID_INPUT` for
/// too many or a repeated one.
pub(super) fn check(engine: &Core, request: &SubmitRequest) -> Result<Vec<String>> {
    check_paths(&request.artifact_paths, &engine.config().review.secrets)
}

pub(crate) fn check_paths(
    paths: &[String],
    secrets: &legate_workspace::SecretPatterns,
) -> Result<Vec<String>> {
    if paths.len() > MAX_ARTIFACT_PATHS {
        return Err(Error::invalid_input(format!(
            "{} artifact paths were given; the limit is {MAX_ARTIFACT_PATHS}",
            paths.len()
        )));
    }
    let mut seen = HashSet::new();
    for path in paths {
        if let Some(why) = legate_workspace::path_problem(path) {
            return Err(Error::new(
                ErrorCode::BlockedArtifactPath,
                format!("the artifact path {:?} {why}", shorten(path)),
            ));
        }
        if let Some((reason, rule)) = secrets.check_name(path) {
            return Err(Error::new(
                ErrorCode::BlockedArtifactPath,
                format!(
                    "the artifact path {:?} is refused by the secret policy ({}, {rule})",
                    shorten(path),
                    reason.as_str()
                ),
            ));
        }
        if !seen.insert(path.to_lowercase()) {
            return Err(Error::invalid_input(format!(
                "the artifact path {:?} is given twice (ignoring case)",
                shorten(path)
            )));
        }
    }
    Ok(paths.to_vec())
}

/// A caller's path, cut for an error sentence.
fn shorten(path: &str) -> String {
    match path.char_indices().nth(120) {
        Some((i, _)) => format!("{}…", &path[..i]),
        None => path.to_string(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use legate_workspace::SecretPatterns;
    use proptest::prelude::*;

    fn check(paths: &[&str]) -> Result<Vec<String>> {
        let paths: Vec<String> = paths.iter().map(|s| s.to_string()).collect();
        check_paths(&paths, &SecretPatterns::default())
    }

    #[test]
    fn paths_leaving_the_workspace_are_blocked() {
        for bad in [
            "../etc/passwd",
            "/etc/passwd",
            "a/../../b",
            "",
            "a\\b",
            ".git/config",
            "a//b",
        ] {
            let err = check(&[bad]).unwrap_err();
            assert_eq!(err.code, ErrorCode::BlockedArtifactPath, "{bad}");
        }
    }

    #[test]
    fn credential_names_are_blocked_before_the_task_runs() {
        let err = check(&["config/.env"]).unwrap_err();
        assert_eq!(err.code, ErrorCode::BlockedArtifactPath);
        assert!(err.message.contains("SECRET_FILE"), "{}", err.message);
    }

    #[test]
    fn limits_and_duplicates() {
        assert_eq!(check(&["out/report.md", "notes.txt"]).unwrap().len(), 2);
        let many: Vec<String> = (0..=MAX_ARTIFACT_PATHS).map(|i| format!("f{i}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert_eq!(check(&many).unwrap_err().code, ErrorCode::InvalidInput);
        assert_eq!(
            check(&["a.txt", "A.TXT"]).unwrap_err().code,
            ErrorCode::InvalidInput
        );
    }

    proptest! {
        #[test]
        fn an_accepted_path_never_climbs_or_is_absolute(s in "[a-z./\\\\\\x00-\\x1f]{0,30}") {
            if let Ok(ok) = check(&[s.as_str()]) {
                let p = &ok[0];
                prop_assert!(!p.starts_with('/'));
                prop_assert!(!p.split('/').any(|c| c == ".." || c == "." || c.is_empty()));
                prop_assert!(!p.chars().any(char::is_control));
            }
        }
    }
}
