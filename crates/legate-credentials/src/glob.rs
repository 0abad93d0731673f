//! Globs: the pattern language of the name rules and of the copy's secret exclusions and
//! exceptions.
//!
//! This module owns the pattern language the configuration uses: `*` (within one component),
//! `?` (one character), `**` (any number of directories), compared ignoring case. A pattern
//! with no `/` matches a base name in any directory; `**/` and `/**/` match zero or more
//! directories. A pattern also matches everything under a directory it matches. It refuses
//! `..`, NUL and absolute patterns; it never touches the file system.

use legate_core::{Error, ErrorCode};
use regex::Regex;

/// One compiled pattern.
#[derive(Debug, Clone)]
pub struct Glob {
    source: String,
    basename: bool,
    regex: Regex,
}

impl Glob {
    /// Compiles `pattern`; `CONFIG_INVALID` naming it when it is empty, absolute, holds a
    /// `..` component or a NUL.
    pub fn new(pattern: &str) -> Result<Glob, Error> {
        let bad = |why: &str| {
            Error::new(
                ErrorCode::ConfigInvalid,
                format!("the secret pattern {pattern:?} {why}"),
            )
        };
        if pattern.is_empty() {
            return Err(bad("is empty"));
        }
        if pattern.contains('\0') {
            return Err(bad("contains a NUL"));
        }
        if pattern.starts_with('/') || pattern.contains('\\') {
            return Err(bad("must be a relative path with `/` separators"));
        }
        if pattern.split('/').any(|c| c == "..") {
            return Err(bad("must not contain `..`"));
        }
        let trimmed = pattern.trim_end_matches('/');
        let basename = !trimmed.contains('/');
        let mut re = String::from("(?is)^");
        let chars: Vec<char> = trimmed.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            if c == '*' && chars.get(i + 1) == Some(&'*') {
                let at_start = i == 0 || chars[i - 1] == '/';
                let slash_after = chars.get(i + 2) == Some(&'/');
                if at_start && slash_after {
                    re.push_str("(?:[^/]*/)*");
                    i += 3;
                    continue;
                }
                re.push_str(".*");
                i += 2;
                continue;
            }
            match c {
                '*' => re.push_str("[^/]*"),
                '?' => re.push_str("[^/]"),
                c => re.push_str(&regex::escape(&c.to_string())),
            }
            i += 1;
        }
        re.push('$');
        let regex = Regex::new(&re).map_err(|e| {
            let sentence = format!("the secret pattern {pattern:?} cannot be compiled");
            Error::quoting(ErrorCode::ConfigInvalid, sentence, e)
        })?;
        Ok(Glob {
            source: pattern.to_string(),
            basename,
            regex,
        })
    }

    /// The pattern as configured.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Whether the pattern is a base-name pattern, and its compiled expression, for callers
    /// that match many patterns at once in a `RegexSet` (the secret name rules match a
    /// base-name pattern against the file's own name only, so that a directory named
    /// `slides.key` does not make its files `*.key`).
    pub(crate) fn parts(&self) -> (bool, &str) {
        (self.basename, self.regex.as_str())
    }

    /// Whether the relative path `path` (or a directory above it) matches.
    pub fn matches(&self, path: &str) -> bool {
        if self.basename {
            return path.split('/').any(|c| self.regex.is_match(c));
        }
        if self.regex.is_match(path) {
            return true;
        }
        let mut end = 0;
        while let Some(pos) = path[end..].find('/') {
            let dir = &path[..end + pos];
            if self.regex.is_match(dir) {
                return true;
            }
            end += pos + 1;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(p: &str, path: &str) -> bool {
        Glob::new(p).unwrap().matches(path)
    }

    #[test]
    fn the_documented_forms_match() {
        assert!(m("*.pem", "a/b/server.PEM"));
        assert!(m("secrets.txt", "deep/dir/Secrets.txt"));
        assert!(!m("secrets.txt", "deep/dir/secrets.txt.bak"));
        assert!(m("config/*.json", "config/prod.json"));
        assert!(!m("config/*.json", "config/x/prod.json"));
        assert!(m("config/**/*.json", "config/prod.json"));
        assert!(m("config/**/*.json", "config/x/y/prod.json"));
        assert!(m("**/fixtures/.env.local", "fixtures/.env.local"));
        assert!(m("**/fixtures/.env.local", "a/b/fixtures/.env.local"));
        assert!(m("fixtures/.env.?ocal", "fixtures/.env.local"));
        assert!(m("private", "private/key.txt"));
        assert!(m("build/private", "build/private/deep/key.txt"));
        assert!(!m("build/private", "build/privateer"));
    }

    #[test]
    fn bad_patterns_are_refused() {
        for p in ["", "/abs", "a/../b", "..", "a\0b", "a\\b"] {
            assert_eq!(
                Glob::new(p).unwrap_err().code,
                ErrorCode::ConfigInvalid,
                "{p:?}"
            );
        }
    }
}
