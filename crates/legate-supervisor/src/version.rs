//! The adapter versions a preset was verified against, and the check of the version an agent
//! announces (ACP `initialize`'s `agentInfo`) against them.
//!
//! This module owns parsing a version string and deciding whether it lies in a verified
//! range. It never refuses an agent: a version outside every range is reported (a notice,
//! `legate agents`, MCP `health`), and the rules decide as they always do. The agent's name
//! and version are the agent's own words: they are parsed, bounded when quoted, and never
//! trusted to widen anything.

use std::fmt;

/// A version `major.minor.patch`; a pre-release or build suffix is ignored for ordering.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    /// The major number.
    pub major: u64,
    /// The minor number.
    pub minor: u64,
    /// The patch number.
    pub patch: u64,
}

impl Version {
    /// A version from its three numbers.
    pub const fn new(major: u64, minor: u64, patch: u64) -> Self {
        Self {
            major,
            minor,
            patch,
        }
    }

    /// Parses `1.2.3`, `v1.2.3`, `1.2` (patch 0) and `1.2.3-beta.1+sha` (the suffix ignored).
    /// Anything else, including an empty string, a fourth number, a sign or a number that
    /// does not fit a `u64`, is `None`.
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.trim();
        let text = text.strip_prefix('v').unwrap_or(text);
        let core = text.split(['-', '+']).next().unwrap_or_default();
        let mut parts = core.split('.');
        let number = |p: Option<&str>| -> Option<u64> {
            let p = p?;
            if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            p.parse().ok()
        };
        let major = number(parts.next())?;
        let minor = number(parts.next())?;
        let patch = match parts.next() {
            Some(p) => number(Some(p))?,
            None => 0,
        };
        if parts.next().is_some() {
            return None;
        }
        Some(Self::new(major, minor, patch))
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// One package a preset was verified against, and the versions: `from` up to, not
/// including, `below`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Verified {
    /// The package's name as its `agentInfo.name` says it (`@agentclientprotocol/codex-acp`).
    pub package: String,
    /// The lowest verified version.
    pub from: Version,
    /// The first version above the range.
    pub below: Version,
    /// When it was verified (`2026-12-01`).
    pub on: String,
}

impl Verified {
    /// A row: `package` from `from` below `below`, verified `on`.
    pub fn new(package: &str, from: Version, below: Version, on: &str) -> Self {
        Self {
            package: package.to_string(),
            from,
            below,
            on: on.to_string(),
        }
    }

    /// Whether `v` lies in the range.
    pub fn contains(&self, v: Version) -> bool {
        self.from <= v && v < self.below
    }
}

impl fmt::Display for Verified {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} >={}, <{}", self.package, self.from, self.below)
    }
}

/// What the check of an announced version found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VersionCheck {
    /// The preset names no verified versions (`generic`, `revisor`): nothing to say.
    NotTracked,
    /// The package and version lie in a verified range.
    Verified,
    /// Outside every verified range, or not announced, or not readable.
    Outside {
        /// What the agent announced, bounded: `name version`, or why there is nothing.
        announced: String,
        /// The verified ranges, for a person.
        verified: String,
    },
}

/// The longest piece of an agent's own name or version quoted back.
const QUOTE_MAX: usize = 80;

fn quote(text: &str) -> String {
    let clean: String = text
        .chars()
        .filter(|c| !c.is_control())
        .take(QUOTE_MAX)
        .collect();
    if text.chars().count() > QUOTE_MAX {
        format!("{clean}…")
    } else {
        clean
    }
}

/// Checks an announced `name` and `version` against `rows`.
pub fn check(rows: &[Verified], name: Option<&str>, version: Option<&str>) -> VersionCheck {
    if rows.is_empty() {
        return VersionCheck::NotTracked;
    }
    let verified = rows
        .iter()
        .map(|r| r.to_string())
        .collect::<Vec<_>>()
        .join("; ");
    let announced = match (name, version) {
        (Some(n), Some(v)) => format!("{} {}", quote(n), quote(v)),
        (Some(n), None) => format!("{} (no version announced)", quote(n)),
        (None, Some(v)) => format!("an unnamed agent {}", quote(v)),
        (None, None) => "no agentInfo".to_string(),
    };
    let parsed = version.and_then(Version::parse);
    let inside = name
        .zip(parsed)
        .is_some_and(|(n, v)| rows.iter().any(|r| r.package == n.trim() && r.contains(v)));
    if inside {
        VersionCheck::Verified
    } else {
        VersionCheck::Outside {
            announced,
            verified,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_the_shapes_adapters_announce() {
        assert_eq!(Version::parse("2.6.0"), Some(Version::new(2, 6, 0)));
        assert_eq!(Version::parse("v0.101.3"), Some(Version::new(0, 101, 3)));
        assert_eq!(Version::parse("0.61"), Some(Version::new(0, 61, 0)));
        assert_eq!(
            Version::parse("0.62.0-nightly.20261130+abc"),
            Some(Version::new(0, 62, 0))
        );
        for bad in [
            "",
            "v",
            "1",
            "1.",
            ".1",
            "1.2.3.4",
            "-1.2.3",
            "1.x.0",
            "+1.2",
            "1 .2",
            "١.٢.٣",
            "99999999999999999999.0.0",
        ] {
            assert_eq!(Version::parse(bad), None, "{bad:?}");
        }
    }

    fn rows() -> Vec<Verified> {
        vec![
            Verified::new(
                "@agentclientprotocol/codex-acp",
                Version::new(2, 6, 0),
                Version::new(2, 7, 0),
                "2026-12-01",
            ),
            Verified::new(
                "codex-acp",
                Version::new(0, 16, 0),
                Version::new(0, 17, 0),
                "2026-12-01",
            ),
        ]
    }

    #[test]
    fn inside_and_outside_the_range() {
        let r = rows();
        let c = |n, v| check(&r, n, v);
        assert_eq!(
            c(Some("@agentclientprotocol/codex-acp"), Some("2.6.0")),
            VersionCheck::Verified
        );
        assert_eq!(
            c(Some("@agentclientprotocol/codex-acp"), Some("2.6.9")),
            VersionCheck::Verified
        );
        assert_eq!(c(Some("codex-acp"), Some("0.16.0")), VersionCheck::Verified);
        // Too new, too old, the other package's range, no version, no name, no info.
        for (n, v) in [
            (Some("@agentclientprotocol/codex-acp"), Some("2.7.0")),
            (Some("@agentclientprotocol/codex-acp"), Some("2.5.9")),
            (Some("@agentclientprotocol/codex-acp"), Some("0.16.0")),
            (Some("codex-acp"), Some("2.6.0")),
            (Some("@agentclientprotocol/codex-acp"), None),
            (Some("@agentclientprotocol/codex-acp"), Some("latest")),
            (None, Some("2.6.0")),
            (None, None),
            (Some("someone-else"), Some("2.6.0")),
        ] {
            assert!(
                matches!(c(n, v), VersionCheck::Outside { .. }),
                "{n:?} {v:?}"
            );
        }
        assert_eq!(
            check(&[], Some("x"), Some("1.0.0")),
            VersionCheck::NotTracked
        );
    }

    #[test]
    fn the_notice_quotes_the_agent_bounded_and_without_control_characters() {
        let long = format!("evil\n\u{1b}[31m{}", "x".repeat(500));
        let VersionCheck::Outside {
            announced,
            verified,
        } = check(&rows(), Some(&long), Some("9.9.9\r\n"))
        else {
            panic!("outside expected");
        };
        assert!(!announced.chars().any(char::is_control), "{announced:?}");
        assert!(announced.chars().count() < 2 * QUOTE_MAX + 4, "{announced}");
        assert!(verified.contains("@agentclientprotocol/codex-acp >=2.6.0, <2.7.0"));
    }

    proptest! {
        #[test]
        fn parse_never_panics_and_round_trips(s in ".{0,40}") {
            if let Some(v) = Version::parse(&s) {
                prop_assert_eq!(Version::parse(&v.to_string()), Some(v));
            }
        }

        #[test]
        fn three_numbers_parse_to_themselves(a in 0u64..100_000, b in 0u64..100_000, c in 0u64..100_000) {
            prop_assert_eq!(Version::parse(&format!("{a}.{b}.{c}")), Some(Version::new(a, b, c)));
        }

        #[test]
        fn the_range_is_half_open(a in 0u64..5, b in 0u64..12, c in 0u64..5) {
            let r = &rows()[0];
            let v = Version::new(a, b, c);
            prop_assert_eq!(r.contains(v), (2, 6, 0) <= (a, b, c) && (a, b, c) < (2, 7, 0));
        }
    }
}
