//! The detector's rule table: `rules.toml`, embedded, parsed and validated once.
//!
//! This module owns the data model of a rule (an id, a family, a description, and what it
//! matches: path globs, or content keywords and a pattern with its filters), the validation
//! that refuses a bad rule (duplicate id, empty keywords, a keyword not lower-case ASCII, a
//! pattern that does not compile, an entropy out of range), and the compiled form the scanner
//! (`scan.rs`) runs. A validation failure is a test failure at build time
//! (`every_rule_in_the_data_file_is_valid`); at run time the preflight then fails closed.
//!
//! It must never read a file, and never put a matched byte anywhere: it only describes.

use crate::glob::Glob;
use aho_corasick::{AhoCorasick, AhoCorasickKind, MatchKind};
use regex::RegexSet;
use regex::bytes::{Regex, RegexBuilder};
use serde::Deserialize;
use std::collections::HashSet;
use std::sync::OnceLock;

/// The rule table, as shipped.
pub(crate) const RULES_TOML: &str = include_str!("rules.toml");

/// The most bytes a compiled pattern may take (each one; the whole table stays well under).
const REGEX_SIZE_LIMIT: usize = 8 << 20;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RulesFile {
    version: u32,
    allow: AllowFile,
    #[serde(default)]
    names: Vec<NameRuleFile>,
    #[serde(default)]
    contents: Vec<ContentRuleFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AllowFile {
    placeholders: Vec<String>,
    hash_labels: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NameRuleFile {
    id: String,
    family: String,
    description: String,
    paths: Vec<String>,
    #[serde(default)]
    except: Vec<String>,
    #[serde(default)]
    unless_content: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ContentRuleFile {
    id: String,
    family: String,
    description: String,
    keywords: Vec<String>,
    #[serde(default)]
    always: bool,
    #[serde(default)]
    alone: bool,
    regex: String,
    #[serde(default)]
    entropy: Option<f64>,
    #[serde(default)]
    min_len: Option<usize>,
    #[serde(default)]
    allow: Vec<String>,
    #[serde(default)]
    requires: Vec<String>,
    #[serde(default)]
    before: Option<String>,
    #[serde(default)]
    block: bool,
}

/// What kind of rule, for listings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleKind {
    /// Matches the relative path.
    Name,
    /// Matches the relative path, confirmed by the content at copy time.
    NameConfirmedByContent,
    /// Matches the bytes.
    Content,
}

/// One rule, described (never compiled state): what `secret_rules` lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleInfo {
    /// The id that blocked files name (`rule`).
    pub id: &'static str,
    /// The family (`cloud`, `code-host`, `private-key`, …).
    pub family: &'static str,
    /// What it matches, in a sentence.
    pub description: &'static str,
    /// Name or content.
    pub kind: RuleKind,
}

/// The condition that confirms a name rule from the content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UnlessContent {
    /// Not blocked when the content is a zip archive.
    Zip,
}

pub(crate) struct NameRule {
    pub(crate) id: String,
    pub(crate) family: String,
    pub(crate) description: String,
    pub(crate) unless_content: Option<UnlessContent>,
}

pub(crate) struct ContentRule {
    pub(crate) id: String,
    pub(crate) family: String,
    pub(crate) description: String,
    pub(crate) regex: Regex,
    /// The index of the `secret` group, if the pattern names one.
    pub(crate) secret_group: Option<usize>,
    pub(crate) entropy: f64,
    pub(crate) min_len: usize,
    pub(crate) allow: Vec<Regex>,
    pub(crate) requires: Vec<Regex>,
    /// Runs on every file (no keyword wakes it).
    pub(crate) always: bool,
    /// The match must start a line (after blanks) or follow a `:`.
    pub(crate) line_or_colon: bool,
    /// The secret is a key block's first body line: what is hidden runs on to the block's
    /// end (`scan::block_end`).
    pub(crate) block: bool,
}

/// Every name rule's globs in two sets, so that a path costs a few set matches, not one
/// match per glob: base-name patterns (matched on the file's name) and path patterns
/// (matched on the path and each directory above it).
pub(crate) struct NameIndex {
    pub(crate) base: RegexSet,
    /// For each pattern of `base`: its rule, and whether it is an exception.
    pub(crate) base_owner: Vec<(usize, bool)>,
    pub(crate) full: RegexSet,
    pub(crate) full_owner: Vec<(usize, bool)>,
}

/// The compiled table.
pub(crate) struct Ruleset {
    pub(crate) names: Vec<NameRule>,
    pub(crate) name_index: NameIndex,
    pub(crate) contents: Vec<ContentRule>,
    /// One automaton over every content rule's keywords.
    pub(crate) prefilter: AhoCorasick,
    /// For each prefilter pattern, the content rules it wakes: its own, and those of every
    /// keyword it contains (the prefilter reports the longest keyword at a position, so a
    /// keyword inside a longer one is woken through it).
    pub(crate) keyword_rules: Vec<Vec<usize>>,
    pub(crate) placeholders: Vec<Vec<u8>>,
    pub(crate) hash_labels: Vec<Vec<u8>>,
    /// Every content pattern not run `alone`, at once: a file none of them matches, and no
    /// `alone` rule's pattern either, needs no further look.
    pub(crate) set: regex::bytes::RegexSet,
    /// The content rules whose pattern runs in a pass of its own instead of in `set`.
    pub(crate) alone: Vec<usize>,
}

fn compile(pattern: &str) -> Result<Regex, regex::Error> {
    RegexBuilder::new(pattern)
        .unicode(false)
        .size_limit(REGEX_SIZE_LIMIT)
        .build()
}

/// Why the table is refused: what is wrong, naming the rule, with the parser's or the
/// pattern compiler's error kept as the source (and quoted, as the message always read).
#[derive(Debug, thiserror::Error)]
pub(crate) enum RulesError {
    #[error("{0}")]
    Invalid(String),
    #[error("rules.toml: {0}")]
    Toml(#[source] toml::de::Error),
    #[error("rule {id:?}: {source}")]
    Pattern { id: String, source: regex::Error },
    #[error("rule {id:?}: {}", source.message)]
    Glob {
        id: String,
        source: legate_core::Error,
    },
    #[error("the {which} patterns cannot be combined: {source}")]
    Combined {
        which: &'static str,
        source: regex::Error,
    },
    #[error("the keyword prefilter cannot be built: {0}")]
    Prefilter(#[source] aho_corasick::BuildError),
}

/// A [`RulesError::Invalid`] from `format!`'s arguments.
macro_rules! invalid {
    ($($arg:tt)*) => {
        RulesError::Invalid(format!($($arg)*))
    };
}

/// Parses and validates `text`; an error names the rule and what is wrong with it.
pub(crate) fn parse(text: &str) -> Result<Ruleset, RulesError> {
    let file: RulesFile = toml::from_str(text).map_err(RulesError::Toml)?;
    if file.version != 1 {
        return Err(invalid!(
            "rules.toml has version {}; 1 is understood",
            file.version
        ));
    }
    let mut ids = HashSet::new();
    let mut check_common = |id: &str, family: &str, description: &str| -> Result<(), RulesError> {
        let ok_id = !id.is_empty()
            && id
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !ok_id {
            return Err(invalid!("rule id {id:?} must be lower-case kebab-case"));
        }
        if !ids.insert(id.to_string()) {
            return Err(invalid!("rule id {id:?} is defined twice"));
        }
        if family.is_empty() || description.trim().is_empty() {
            return Err(invalid!("rule {id:?} needs a family and a description"));
        }
        Ok(())
    };
    let mut names = Vec::new();
    let (mut base, mut base_owner, mut full, mut full_owner) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for r in file.names {
        check_common(&r.id, &r.family, &r.description)?;
        if r.paths.is_empty() {
            return Err(invalid!("name rule {:?} has no paths", r.id));
        }
        let globs = |list: &[String]| -> Result<Vec<Glob>, RulesError> {
            list.iter()
                .map(|p| {
                    Glob::new(p).map_err(|source| RulesError::Glob {
                        id: r.id.clone(),
                        source,
                    })
                })
                .collect()
        };
        let unless_content = match r.unless_content.as_deref() {
            None => None,
            Some("zip") => Some(UnlessContent::Zip),
            Some(other) => {
                return Err(invalid!(
                    "rule {:?}: unless_content {other:?} is not understood (\"zip\" is)",
                    r.id
                ));
            }
        };
        let index = names.len();
        for (list, except) in [(globs(&r.paths)?, false), (globs(&r.except)?, true)] {
            for g in list {
                let (basename, re) = g.parts();
                if basename {
                    base.push(re.to_string());
                    base_owner.push((index, except));
                } else {
                    full.push(re.to_string());
                    full_owner.push((index, except));
                }
            }
        }
        names.push(NameRule {
            id: r.id,
            family: r.family,
            description: r.description,
            unless_content,
        });
    }
    let mut contents = Vec::new();
    let mut keywords: Vec<String> = Vec::new();
    let mut keyword_rules: Vec<Vec<usize>> = Vec::new();
    let mut alone: Vec<bool> = Vec::new();
    for r in file.contents {
        check_common(&r.id, &r.family, &r.description)?;
        if r.keywords.is_empty() != r.always {
            return Err(invalid!(
                "content rule {:?} needs keywords, or `always = true` with none",
                r.id
            ));
        }
        let pattern = |p: &str| {
            compile(p).map_err(|source| RulesError::Pattern {
                id: r.id.clone(),
                source,
            })
        };
        let regex = pattern(&r.regex)?;
        let secret_group = regex.capture_names().position(|n| n == Some("secret"));
        let entropy = r.entropy.unwrap_or(0.0);
        if !(0.0..=8.0).contains(&entropy) {
            return Err(invalid!("rule {:?}: entropy must be within 0..=8", r.id));
        }
        let list = |l: &[String]| -> Result<Vec<Regex>, RulesError> {
            l.iter().map(|p| pattern(p)).collect()
        };
        let line_or_colon = match r.before.as_deref() {
            None => false,
            Some("line-or-colon") => true,
            Some(other) => {
                return Err(invalid!(
                    "rule {:?}: before {other:?} is not understood (\"line-or-colon\" is)",
                    r.id
                ));
            }
        };
        let index = contents.len();
        for k in &r.keywords {
            let ok = !k.is_empty()
                && k.is_ascii()
                && !k
                    .bytes()
                    .any(|b| b.is_ascii_uppercase() || b.is_ascii_control());
            if !ok {
                return Err(invalid!(
                    "rule {:?}: keyword {k:?} must be non-empty lower-case ASCII",
                    r.id
                ));
            }
            match keywords.iter().position(|x| x == k) {
                Some(i) => keyword_rules[i].push(index),
                None => {
                    keywords.push(k.clone());
                    keyword_rules.push(vec![index]);
                }
            }
        }
        alone.push(r.alone);
        contents.push(ContentRule {
            allow: list(&r.allow)?,
            requires: list(&r.requires)?,
            id: r.id,
            family: r.family,
            description: r.description,
            regex,
            secret_group,
            entropy,
            min_len: r.min_len.unwrap_or(1),
            always: r.always,
            line_or_colon,
            block: r.block,
        });
    }
    let set = |patterns: Vec<String>| {
        RegexSet::new(patterns).map_err(|source| RulesError::Combined {
            which: "name",
            source,
        })
    };
    let name_index = NameIndex {
        base: set(base)?,
        base_owner,
        full: set(full)?,
        full_owner,
    };
    let keyword_rules: Vec<Vec<usize>> = keywords
        .iter()
        .map(|k| {
            let mut rules: Vec<usize> = keywords
                .iter()
                .zip(&keyword_rules)
                .filter(|(inner, _)| k.contains(inner.as_str()))
                .flat_map(|(_, r)| r.iter().copied())
                .collect();
            rules.sort_unstable();
            rules.dedup();
            rules
        })
        .collect();
    let prefilter = AhoCorasick::builder()
        .ascii_case_insensitive(true)
        .match_kind(MatchKind::LeftmostLongest)
        .kind(Some(AhoCorasickKind::DFA))
        .build(&keywords)
        .map_err(RulesError::Prefilter)?;
    if file.allow.placeholders.iter().any(String::is_empty)
        || file.allow.hash_labels.iter().any(String::is_empty)
    {
        return Err(invalid!("allow lists must not hold empty strings"));
    }
    let set = regex::bytes::RegexSetBuilder::new(
        contents
            .iter()
            .zip(&alone)
            .filter(|(_, alone)| !**alone)
            .map(|(c, _)| c.regex.as_str()),
    )
    .unicode(false)
    .size_limit(8 * REGEX_SIZE_LIMIT)
    .dfa_size_limit(8 * REGEX_SIZE_LIMIT)
    .build()
    .map_err(|source| RulesError::Combined {
        which: "content",
        source,
    })?;
    Ok(Ruleset {
        set,
        alone: (0..contents.len()).filter(|&i| alone[i]).collect(),
        names,
        name_index,
        contents,
        prefilter,
        keyword_rules,
        placeholders: file
            .allow
            .placeholders
            .into_iter()
            .map(String::into_bytes)
            .collect(),
        hash_labels: file
            .allow
            .hash_labels
            .into_iter()
            .map(|s| s.to_ascii_lowercase().into_bytes())
            .collect(),
    })
}

/// The shipped table, or why it could not be built.
pub(crate) fn ruleset() -> Result<&'static Ruleset, &'static RulesError> {
    static SET: OnceLock<Result<Ruleset, RulesError>> = OnceLock::new();
    SET.get_or_init(|| {
        let built = parse(RULES_TOML);
        if let Err(e) = &built {
            tracing::error!(error = %e, "the secret preflight rules are invalid");
        }
        built
    })
    .as_ref()
}

/// Every rule of the shipped table, in the order they are tried.
pub fn secret_rules() -> Vec<RuleInfo> {
    let Ok(set) = ruleset() else {
        return Vec::new();
    };
    let names = set.names.iter().map(|r| RuleInfo {
        id: r.id.as_str(),
        family: r.family.as_str(),
        description: r.description.as_str(),
        kind: if r.unless_content.is_some() {
            RuleKind::NameConfirmedByContent
        } else {
            RuleKind::Name
        },
    });
    let contents = set.contents.iter().map(|r| RuleInfo {
        id: r.id.as_str(),
        family: r.family.as_str(),
        description: r.description.as_str(),
        kind: RuleKind::Content,
    });
    names.chain(contents).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_in_the_data_file_is_valid() {
        let set = parse(RULES_TOML).unwrap();
        assert!(set.names.len() >= 20, "{}", set.names.len());
        assert!(set.contents.len() >= 50, "{}", set.contents.len());
        // Every content rule that names a secret group has exactly one.
        for r in &set.contents {
            assert!(r.secret_group.is_some(), "{} names no secret group", r.id);
        }
        assert!(ruleset().is_ok());
    }

    #[test]
    fn bad_rules_are_refused_with_their_id() {
        let head = "version = 1\n[allow]\nplaceholders = []\nhash_labels = []\n";
        let cases = [
            (
                "[[contents]]\nid = \"x\"\nfamily = \"f\"\ndescription = \"d\"\nkeywords = [\"a\"]\nregex = '''(unclosed'''\n",
                "\"x\"",
            ),
            (
                "[[contents]]\nid = \"y\"\nfamily = \"f\"\ndescription = \"d\"\nkeywords = []\nregex = 'a'\n",
                "needs keywords",
            ),
            (
                "[[contents]]\nid = \"z\"\nfamily = \"f\"\ndescription = \"d\"\nkeywords = [\"Up\"]\nregex = 'a'\n",
                "lower-case",
            ),
            (
                "[[names]]\nid = \"n\"\nfamily = \"f\"\ndescription = \"d\"\npaths = [\"../x\"]\n",
                "\"n\"",
            ),
            (
                "[[names]]\nid = \"n\"\nfamily = \"f\"\ndescription = \"d\"\npaths = [\"a\"]\n[[names]]\nid = \"n\"\nfamily = \"f\"\ndescription = \"d\"\npaths = [\"b\"]\n",
                "twice",
            ),
            (
                "[[names]]\nid = \"n\"\nfamily = \"f\"\ndescription = \"d\"\npaths = [\"a\"]\nunless_content = \"pdf\"\n",
                "unless_content",
            ),
            (
                "[[names]]\nid = \"n\"\nfamily = \"f\"\ndescription = \"d\"\npaths = [\"a\"]\nextra = 1\n",
                "unknown field",
            ),
            (
                "[[contents]]\nid = \"e\"\nfamily = \"f\"\ndescription = \"d\"\nkeywords = [\"a\"]\nregex = 'a'\nentropy = 9.0\n",
                "entropy",
            ),
        ];
        for (body, want) in cases {
            let err = parse(&format!("{head}{body}")).err().unwrap().to_string();
            assert!(err.contains(want), "{want}: {err}");
        }
        assert!(parse("version = 2\n[allow]\nplaceholders = []\nhash_labels = []\n").is_err());
    }
}
