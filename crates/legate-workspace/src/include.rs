//! Include paths: the caller's narrowing of a copy's selection, and relative project paths in
//! general (criteria checks, review citations, patch paths).
//!
//! This module owns the syntax of a relative project path and whether a selected file falls
//! under an include path. It is pure: it never touches the file system and never panics,
//! whatever text it is given. An include path can only narrow the selection; it can never
//! name an ignored file into it.

use legate_core::{Error, ErrorCode};
use std::collections::HashSet;

/// The longest relative path accepted, in bytes.
pub const MAX_PATH_BYTES: usize = 4096;
/// The most include paths one request may carry.
pub const MAX_INCLUDE_PATHS: usize = 1000;

/// Why `path` is not a safe relative project path, or `None` when it is.
///
/// Safe: non-empty, at most `MAX_PATH_BYTES`, relative, `/`-separated, with no empty, `.`
/// or `..` component, no `.git` component (in any case), and no NUL, control character,
/// backslash or other character a reader does not see as itself
/// ([`legate_core::text::is_unseen`]: a bidirectional control, a zero-width or other
/// invisible format character) anywhere: such a name can look like another in a preview, a
/// terminal or a review, so no such path is copied, changed or integrated.
pub fn path_problem(path: &str) -> Option<&'static str> {
    if path.is_empty() {
        return Some("is empty");
    }
    if path.len() > MAX_PATH_BYTES {
        return Some("is too long");
    }
    if path.starts_with('/') {
        return Some("is absolute");
    }
    if path.chars().any(char::is_control) {
        return Some("contains a NUL or control character");
    }
    if path.contains('\\') {
        return Some("contains a backslash");
    }
    if path.chars().any(legate_core::text::is_unseen) {
        return Some("contains an invisible or text-direction character");
    }
    for part in path.split('/') {
        match part {
            "" => return Some("has an empty component"),
            "." => return Some("has a `.` component"),
            ".." => return Some("has a `..` component"),
            p if p.eq_ignore_ascii_case(".git") => return Some("names a .git directory"),
            _ => {}
        }
    }
    None
}

/// Checks a relative project path; `UNSAFE_PATH` naming the problem otherwise.
pub fn check_path(path: &str) -> Result<(), Error> {
    match path_problem(path) {
        None => Ok(()),
        Some(why) => Err(Error::new(
            ErrorCode::UnsafePath,
            format!("the path {path:?} {why}"),
        )),
    }
}

/// Validates include paths and returns them normalized (one trailing `/` removed).
///
/// Each must be a safe relative path ([`path_problem`]); two that are equal ignoring case
/// are duplicates. Any problem is `INVALID_INCLUDE_PATH` naming the path.
pub fn validate_include_paths(paths: &[String]) -> Result<Vec<String>, Error> {
    if paths.len() > MAX_INCLUDE_PATHS {
        return Err(Error::new(
            ErrorCode::InvalidIncludePath,
            format!(
                "{} include paths were given; the limit is {MAX_INCLUDE_PATHS}",
                paths.len()
            ),
        ));
    }
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(paths.len());
    for raw in paths {
        let trimmed = raw.strip_suffix('/').unwrap_or(raw);
        if let Some(why) = path_problem(trimmed) {
            return Err(Error::new(
                ErrorCode::InvalidIncludePath,
                format!("the include path {raw:?} {why}"),
            ));
        }
        if !seen.insert(trimmed.to_lowercase()) {
            return Err(Error::new(
                ErrorCode::InvalidIncludePath,
                format!("the include path {raw:?} is given twice (ignoring case)"),
            ));
        }
        out.push(trimmed.to_string());
    }
    Ok(out)
}

/// Whether the file `path` is `include` itself or lies under the directory `include`.
pub fn covers(include: &str, path: &str) -> bool {
    path == include
        || (path.len() > include.len()
            && path.starts_with(include)
            && path.as_bytes().get(include.len()) == Some(&b'/'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn bad_paths_are_refused_with_their_reason() {
        for (p, why) in [
            ("", "is empty"),
            ("/etc/passwd", "is absolute"),
            ("a/../b", "has a `..` component"),
            ("..", "has a `..` component"),
            ("./a", "has a `.` component"),
            ("a//b", "has an empty component"),
            (".git/config", "names a .git directory"),
            ("sub/.GIT/hooks", "names a .git directory"),
            ("a\0b", "contains a NUL or control character"),
            ("a\nb", "contains a NUL or control character"),
            ("a\\b", "contains a backslash"),
            (
                "src/main\u{202E}sr.rs",
                "contains an invisible or text-direction character",
            ),
            (
                "src/ma\u{200B}in.rs",
                "contains an invisible or text-direction character",
            ),
            (
                "\u{FEFF}README.md",
                "contains an invisible or text-direction character",
            ),
            (
                "a\u{E0041}",
                "contains an invisible or text-direction character",
            ),
            (
                "\u{3164}/x",
                "contains an invisible or text-direction character",
            ),
        ] {
            assert_eq!(path_problem(p), Some(why), "{p:?}");
        }
        for ok in [
            "a",
            "src/lib.rs",
            ".github/x.yml",
            "a b/c",
            "…/é",
            ".gitignore",
            "docs/مرحبا.md",
            "docs/שלום/דף.md",
            "日本語/ファイル.txt",
        ] {
            assert_eq!(path_problem(ok), None, "{ok:?}");
        }
    }

    #[test]
    fn include_paths_are_normalized_and_deduplicated_ignoring_case() {
        let v = validate_include_paths(&["src/".into(), "README.md".into()]).unwrap();
        assert_eq!(v, ["src", "README.md"]);
        let err = validate_include_paths(&["Src".into(), "src/".into()]).unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidIncludePath);
        assert!(err.message.contains("twice"));
        let err = validate_include_paths(&["../x".into()]).unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidIncludePath);
    }

    #[test]
    fn covers_whole_components_only() {
        assert!(covers("src", "src"));
        assert!(covers("src", "src/a.rs"));
        assert!(!covers("src", "srcx/a.rs"));
        assert!(!covers("src/a", "src"));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn validation_never_panics_and_accepted_paths_are_safe(
            paths in prop::collection::vec(any::<String>(), 0..6),
        ) {
            if let Ok(v) = validate_include_paths(&paths) {
                let mut lower = HashSet::new();
                for p in &v {
                    prop_assert!(!p.is_empty());
                    prop_assert!(!p.starts_with('/'));
                    prop_assert!(!p.contains('\0'));
                    prop_assert!(!p.chars().any(char::is_control));
                    prop_assert!(!p.chars().any(legate_core::text::is_unseen));
                    for part in p.split('/') {
                        prop_assert!(part != ".." && part != "." && !part.is_empty());
                        prop_assert!(!part.eq_ignore_ascii_case(".git"));
                    }
                    prop_assert!(lower.insert(p.to_lowercase()));
                }
            }
        }

        #[test]
        fn generated_traversals_are_always_refused(
            prefix in "[a-z]{0,3}(/[a-z]{1,3}){0,2}",
            bad in prop_oneof![
                Just(".."), Just("."), Just(".git"), Just(".Git"), Just("a\u{0}b"),
                Just("x\u{1b}y"),
            ],
            suffix in "(/[a-z]{1,3}){0,2}",
            absolute in any::<bool>(),
        ) {
            let mut p = String::new();
            if absolute { p.push('/'); }
            if !prefix.is_empty() { p.push_str(&prefix); p.push('/'); }
            p.push_str(bad);
            p.push_str(&suffix);
            prop_assert!(validate_include_paths(&[p.clone()]).is_err(), "{:?}", p);
        }

        #[test]
        fn covers_agrees_with_component_prefixes(
            a in prop::collection::vec("[ab]{1,2}", 1..4),
            b in prop::collection::vec("[ab]{1,2}", 1..5),
        ) {
            let inc = a.join("/");
            let path = b.join("/");
            let expected = b.len() >= a.len() && b[..a.len()] == a[..];
            prop_assert_eq!(covers(&inc, &path), expected);
        }
    }
}
