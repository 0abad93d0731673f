//! The words of the network policy: a [`Host`] and [`Destination`] as the egress proxy reads
//! them from a request, and a [`HostRule`] as an operator writes it (`host[:port]`,
//! `*.domain`, `*`, an IP literal), with their strict parsers.
//!
//! Parsing only: this module never resolves a name, never touches a socket, and never
//! accepts a host it cannot print back exactly as it read it (`Display` round-trips).

use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// Longest DNS name accepted, without its trailing dot.
const MAX_NAME: usize = 253;
/// Longest DNS label.
const MAX_LABEL: usize = 63;

/// Why a host, destination or rule did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostRuleError {
    /// Nothing was given.
    #[error("the host is empty")]
    Empty,
    /// The name is not a DNS name Legate accepts.
    #[error("`{name}` is not a DNS name: {why}")]
    Name {
        /// The name as given.
        name: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// The port is not a number from 1 to 65535.
    #[error("`{0}` is not a port (a number from 1 to 65535)")]
    Port(String),
    /// A port was required (`CONNECT host:port`) and none was given.
    #[error("`{0}` has no port")]
    MissingPort(String),
    /// A bracketed address is not an IPv6 literal, or the brackets are unbalanced.
    #[error("`{0}` is not a bracketed IPv6 literal (`[::1]` or `[::1]:443`)")]
    Ipv6(String),
    /// An IPv6 literal followed by something other than `:port`.
    #[error("`{0}`: an IPv6 literal with a port must be bracketed (`[::1]:443`)")]
    Unbracketed(String),
    /// A `*` where a wildcard is not accepted (only `*` alone or a leading `*.`).
    #[error("`{0}`: a wildcard is only `*` or a leading `*.` before a domain")]
    Wildcard(String),
}

/// The host of a destination: a lower-case DNS name without its trailing dot, or an IP
/// literal (an IPv4-mapped IPv6 literal is kept as its IPv4 address).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Host {
    /// A DNS name: lower-case, no trailing dot.
    Name(String),
    /// An IP literal.
    Ip(IpAddr),
}

impl Host {
    /// Parses a host as a request names it: a DNS name, an IPv4 literal, or an IPv6 literal
    /// (bracketed or not). Wildcards are refused.
    pub fn parse(s: &str) -> Result<Self, HostRuleError> {
        if s.is_empty() {
            return Err(HostRuleError::Empty);
        }
        if let Some(inner) = s.strip_prefix('[') {
            let inner = inner
                .strip_suffix(']')
                .ok_or_else(|| HostRuleError::Ipv6(s.to_string()))?;
            return parse_v6(inner, s).map(Host::Ip);
        }
        if s.contains('*') {
            return Err(HostRuleError::Wildcard(s.to_string()));
        }
        if let Ok(v4) = s.parse::<Ipv4Addr>() {
            return Ok(Host::Ip(IpAddr::V4(v4)));
        }
        if s.contains(':') {
            return s
                .parse::<Ipv6Addr>()
                .map(|v6| Host::Ip(super::special::canonical(IpAddr::V6(v6))))
                .map_err(|_| HostRuleError::Unbracketed(s.to_string()));
        }
        normalize_name(s).map(Host::Name)
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(name) => f.write_str(name),
            Host::Ip(IpAddr::V4(v4)) => write!(f, "{v4}"),
            Host::Ip(IpAddr::V6(v6)) => write!(f, "[{v6}]"),
        }
    }
}

/// Where a connection goes: a host and a port.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Destination {
    /// The host, as asked.
    pub host: Host,
    /// The port.
    pub port: u16,
}

impl Destination {
    /// A destination.
    pub fn new(host: Host, port: u16) -> Self {
        Self { host, port }
    }

    /// Parses an authority, `host:port` or `[v6]:port`; without a port, `default_port`
    /// (none means a port is required, as in `CONNECT`). No user info, no path.
    pub fn parse_authority(s: &str, default_port: Option<u16>) -> Result<Self, HostRuleError> {
        let (host, port) = split_port(s)?;
        let port = match (port, default_port) {
            (Some(p), _) => parse_port(p)?,
            (None, Some(d)) => d,
            (None, None) => return Err(HostRuleError::MissingPort(s.to_string())),
        };
        Ok(Self::new(Host::parse(host)?, port))
    }
}

impl fmt::Display for Destination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// The hosts a [`HostRule`] names.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum HostPattern {
    /// `*`: every host, names and public addresses alike. It never reaches a special address
    /// ([`super::special`]): only a rule naming that exact address does.
    Any,
    /// One DNS name, exactly (lower-case, no trailing dot).
    Exact(String),
    /// `*.domain`: every name below `domain` at any depth, not `domain` itself (held without
    /// the `*.`).
    Subdomains(String),
    /// One IP literal (an IPv4-mapped IPv6 literal is held as its IPv4 address).
    Ip(IpAddr),
}

/// One rule of `[network]`: a host pattern and, optionally, the one port it applies to.
///
/// Written `host[:port]`: `api.example.com`, `api.example.com:443`, `*.example.com`, `*`,
/// `*:443`, `192.0.2.7:8080`, `[2001:db8::1]:443`, or `2001:db8::1` (an unbracketed IPv6
/// literal takes no port). Names are case-insensitive and a trailing dot is ignored.
/// `*` is accepted in allow and deny rules alike; in an allow rule it still never allows a
/// special address (loopback, private, link-local, …).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct HostRule {
    /// The hosts it names.
    pub pattern: HostPattern,
    /// The port it applies to; `None` for every port.
    pub port: Option<u16>,
}

impl HostRule {
    /// A rule for one host, on one port or every port.
    pub fn new(pattern: HostPattern, port: Option<u16>) -> Self {
        Self { pattern, port }
    }

    /// Whether this rule names `dest` (its host, and its port when the rule has one).
    pub fn matches(&self, dest: &Destination) -> bool {
        if self.port.is_some_and(|p| p != dest.port) {
            return false;
        }
        match (&self.pattern, &dest.host) {
            (HostPattern::Any, _) => true,
            (HostPattern::Exact(rule), Host::Name(name)) => rule == name,
            (HostPattern::Subdomains(domain), Host::Name(name)) => name
                .strip_suffix(domain.as_str())
                .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
            (HostPattern::Ip(rule), Host::Ip(ip)) => *rule == super::special::canonical(*ip),
            _ => false,
        }
    }

    /// Whether this rule names exactly the address `addr` (an IPv6 form that embeds an IPv4
    /// address, mapped, NAT64, 6to4 or compatible, counts as that IPv4 address) on `port`.
    pub fn names_exactly(&self, addr: IpAddr, port: u16) -> bool {
        matches!(self.pattern, HostPattern::Ip(ip) if ip == super::special::canonical(addr))
            && self.port.is_none_or(|p| p == port)
    }
}

impl FromStr for HostRule {
    type Err = HostRuleError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.is_empty() {
            return Err(HostRuleError::Empty);
        }
        // An unbracketed IPv6 literal carries no port.
        if !s.starts_with('[')
            && s.matches(':').count() > 1
            && let Ok(v6) = s.parse::<Ipv6Addr>()
        {
            return Ok(Self::new(
                HostPattern::Ip(super::special::canonical(IpAddr::V6(v6))),
                None,
            ));
        }
        let (host, port) = split_port(s)?;
        let port = port.map(parse_port).transpose()?;
        let pattern = if host == "*" {
            HostPattern::Any
        } else if let Some(domain) = host.strip_prefix("*.") {
            if domain.contains('*') {
                return Err(HostRuleError::Wildcard(s.to_string()));
            }
            HostPattern::Subdomains(normalize_name(domain)?)
        } else {
            match Host::parse(host)? {
                Host::Name(name) => HostPattern::Exact(name),
                Host::Ip(ip) => HostPattern::Ip(ip),
            }
        };
        Ok(Self::new(pattern, port))
    }
}

impl fmt::Display for HostRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.pattern {
            HostPattern::Any => f.write_str("*")?,
            HostPattern::Exact(name) => f.write_str(name)?,
            HostPattern::Subdomains(domain) => write!(f, "*.{domain}")?,
            HostPattern::Ip(ip) => write!(f, "{}", Host::Ip(*ip))?,
        }
        match self.port {
            Some(port) => write!(f, ":{port}"),
            None => Ok(()),
        }
    }
}

impl TryFrom<String> for HostRule {
    type Error = HostRuleError;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<HostRule> for String {
    fn from(rule: HostRule) -> Self {
        rule.to_string()
    }
}

/// Splits `host[:port]` (the host may be a bracketed IPv6 literal); the port text is not yet
/// checked. A second `:` outside brackets is an unbracketed IPv6 literal with a port.
fn split_port(s: &str) -> Result<(&str, Option<&str>), HostRuleError> {
    if s.is_empty() {
        return Err(HostRuleError::Empty);
    }
    if s.starts_with('[') {
        let close = s
            .find(']')
            .ok_or_else(|| HostRuleError::Ipv6(s.to_string()))?;
        let (host, rest) = s.split_at(close + 1);
        return match rest {
            "" => Ok((host, None)),
            _ => match rest.strip_prefix(':') {
                Some(port) => Ok((host, Some(port))),
                None => Err(HostRuleError::Ipv6(s.to_string())),
            },
        };
    }
    match s.split_once(':') {
        None => Ok((s, None)),
        Some((host, port)) if !port.contains(':') => Ok((host, Some(port))),
        Some(_) => Err(HostRuleError::Unbracketed(s.to_string())),
    }
}

/// A port: decimal digits only, 1..=65535.
fn parse_port(s: &str) -> Result<u16, HostRuleError> {
    if s.is_empty() || s.len() > 5 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(HostRuleError::Port(s.to_string()));
    }
    match s.parse::<u16>() {
        Ok(port) if port > 0 => Ok(port),
        _ => Err(HostRuleError::Port(s.to_string())),
    }
}

/// The inside of `[...]`: an IPv6 literal, no zone.
fn parse_v6(inner: &str, whole: &str) -> Result<IpAddr, HostRuleError> {
    inner
        .parse::<Ipv6Addr>()
        .map(|v6| super::special::canonical(IpAddr::V6(v6)))
        .map_err(|_| HostRuleError::Ipv6(whole.to_string()))
}

/// A DNS name, lower-cased and without its trailing dot: ASCII letters, digits, `-` and `_`
/// in labels of 1 to 63, at most 253 in all, no label starting or ending with `-`, and a last
/// label that is not all digits (that would be an address written some other way).
pub(crate) fn normalize_name(s: &str) -> Result<String, HostRuleError> {
    let bad = |why| HostRuleError::Name {
        name: s.chars().take(MAX_NAME + 2).collect(),
        why,
    };
    let name = s.strip_suffix('.').unwrap_or(s);
    if name.is_empty() {
        return Err(bad("it is empty"));
    }
    if name.len() > MAX_NAME {
        return Err(bad("it is longer than 253 characters"));
    }
    let name = name.to_ascii_lowercase();
    let mut last = "";
    for label in name.split('.') {
        if label.is_empty() {
            return Err(bad("it has an empty label"));
        }
        if label.len() > MAX_LABEL {
            return Err(bad("a label is longer than 63 characters"));
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(bad(
                "only letters, digits, `-` and `_` are accepted (write an international name in its xn-- form)",
            ));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(bad("a label starts or ends with `-`"));
        }
        last = label;
    }
    if last.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad(
            "its last label is a number (write an IP address in dotted form)",
        ));
    }
    Ok(name)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn rule(s: &str) -> HostRule {
        s.parse().unwrap()
    }

    fn dest(s: &str) -> Destination {
        Destination::parse_authority(s, None).unwrap()
    }

    #[test]
    fn parses_each_form() {
        assert_eq!(
            rule("API.Example.COM."),
            HostRule::new(HostPattern::Exact("api.example.com".into()), None)
        );
        assert_eq!(
            rule("api.example.com:443"),
            HostRule::new(HostPattern::Exact("api.example.com".into()), Some(443))
        );
        assert_eq!(
            rule("*.example.com"),
            HostRule::new(HostPattern::Subdomains("example.com".into()), None)
        );
        assert_eq!(rule("*:443"), HostRule::new(HostPattern::Any, Some(443)));
        assert_eq!(
            rule("192.0.2.7:8080"),
            HostRule::new(HostPattern::Ip("192.0.2.7".parse().unwrap()), Some(8080))
        );
        assert_eq!(
            rule("[::1]:443"),
            HostRule::new(HostPattern::Ip("::1".parse().unwrap()), Some(443))
        );
        assert_eq!(
            rule("2001:db8::1"),
            HostRule::new(HostPattern::Ip("2001:db8::1".parse().unwrap()), None)
        );
        assert_eq!(
            rule("[::ffff:127.0.0.1]"),
            HostRule::new(HostPattern::Ip("127.0.0.1".parse().unwrap()), None)
        );
    }

    #[test]
    fn refuses_what_is_not_a_rule() {
        for bad in [
            "",
            ":443",
            "a.com:",
            "a.com:0",
            "a.com:65536",
            "a.com:+1",
            "a.com:44a",
            "a..com",
            ".a.com",
            "-a.com",
            "a-.com",
            "a b.com",
            "a.*.com",
            "*a.com",
            "**",
            "*.",
            "*.*",
            "[::1",
            "[::1]x",
            "[1.2.3.4]",
            "[fe80::1%eth0]",
            "fe80::1%eth0",
            "1.2.3",
            "example.123",
            "ünï.com",
            "1::2::3",
        ] {
            assert!(bad.parse::<HostRule>().is_err(), "{bad:?} parsed");
        }
        let long = format!("{}.com", "a".repeat(64));
        assert!(long.parse::<HostRule>().is_err());
    }

    #[test]
    fn matching() {
        assert!(rule("api.example.com").matches(&dest("API.example.com.:443")));
        assert!(!rule("api.example.com:443").matches(&dest("api.example.com:80")));
        assert!(rule("*.example.com").matches(&dest("a.b.example.com:1")));
        assert!(!rule("*.example.com").matches(&dest("example.com:1")));
        assert!(!rule("*.example.com").matches(&dest("badexample.com:1")));
        assert!(rule("*").matches(&dest("8.8.8.8:53")));
        assert!(rule("*").matches(&dest("anything:1")));
        assert!(!rule("example.com").matches(&dest("93.184.215.14:80")));
        assert!(rule("127.0.0.1").matches(&dest("[::ffff:127.0.0.1]:80")));
        assert!(rule("[::ffff:127.0.0.1]:80").names_exactly("127.0.0.1".parse().unwrap(), 80));
        assert!(!rule("127.0.0.1:80").names_exactly("127.0.0.1".parse().unwrap(), 81));
        assert!(!rule("*").names_exactly("127.0.0.1".parse().unwrap(), 81));
    }

    #[test]
    fn authorities() {
        assert_eq!(
            Destination::parse_authority("Example.com", Some(80)).unwrap(),
            Destination::new(Host::Name("example.com".into()), 80)
        );
        assert!(Destination::parse_authority("example.com", None).is_err());
        assert!(Destination::parse_authority("*.example.com:443", None).is_err());
        assert!(Destination::parse_authority("user@example.com:443", None).is_err());
        assert_eq!(dest("[::1]:8443").to_string(), "[::1]:8443");
        assert_eq!(
            dest("[::ffff:10.0.0.1]:1").host,
            Host::Ip("10.0.0.1".parse().unwrap())
        );
    }

    #[test]
    fn serde_is_a_string() {
        let r: HostRule = serde_json::from_str("\"*.Example.com:443\"").unwrap();
        assert_eq!(serde_json::to_string(&r).unwrap(), "\"*.example.com:443\"");
        assert!(serde_json::from_str::<HostRule>("\"a..b\"").is_err());
    }

    fn label() -> impl Strategy<Value = String> {
        "[a-z_][a-z0-9_-]{0,8}[a-z0-9]".prop_map(|s| s)
    }

    fn name() -> impl Strategy<Value = String> {
        prop::collection::vec(label(), 1..4).prop_map(|l| l.join("."))
    }

    fn any_rule() -> impl Strategy<Value = HostRule> {
        let pattern = prop_oneof![
            Just(HostPattern::Any),
            name().prop_map(HostPattern::Exact),
            name().prop_map(HostPattern::Subdomains),
            any::<IpAddr>().prop_map(|ip| HostPattern::Ip(crate::network::canonical(ip))),
        ];
        (pattern, prop::option::of(1u16..=65535)).prop_map(|(p, port)| HostRule::new(p, port))
    }

    proptest! {
        #[test]
        fn display_round_trips(r in any_rule()) {
            prop_assert_eq!(r.to_string().parse::<HostRule>(), Ok(r));
        }

        #[test]
        fn arbitrary_strings_never_panic(s in "\\PC{0,40}") {
            let _ = s.parse::<HostRule>();
            let _ = Destination::parse_authority(&s, Some(80));
        }

        #[test]
        fn rule_like_strings_never_panic(s in "[\\[\\]*.:a-f0-9%-]{0,30}") {
            if let Ok(r) = s.parse::<HostRule>() {
                prop_assert_eq!(r.to_string().parse::<HostRule>(), Ok(r));
            }
        }
    }
}
