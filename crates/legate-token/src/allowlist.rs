//! The `Host` and `Origin` allowlist of an HTTP front: DNS-rebinding protection.
//!
//! A page in a browser can be made to send requests to a server on 127.0.0.1 under a name the
//! attacker controls; the `Host` header then carries that name. Checking it against a list of
//! names the server really answers to (loopback by default) stops that, and checking `Origin`
//! (when a browser sends one) stops cross-site requests. Both run before the bearer token, so
//! a refused page learns nothing, not even whether a token is needed.
//!
//! This module only parses and compares header values. It never sees a token or a body.

use legate_core::{Error, ErrorCode, Result};

/// Hosts allowed by default: loopback names, any port.
pub const LOOPBACK_HOSTS: &[&str] = &["localhost", "127.0.0.1", "::1"];
/// Origins allowed by default: loopback, any port, http or https.
pub const LOOPBACK_ORIGINS: &[&str] = &[
    "http://localhost:*",
    "http://127.0.0.1:*",
    "http://[::1]:*",
    "https://localhost:*",
    "https://127.0.0.1:*",
    "https://[::1]:*",
];

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejection {
    /// `Host` is missing or not in the list.
    Host,
    /// `Origin` was sent and is not in the list.
    Origin,
}

/// The values a front answers to. Built only through [`Allowlist::new`], so every entry parses.
#[derive(Debug, Clone)]
pub struct Allowlist {
    /// The configuration key prefix (`mcp`, `a2a`) named in refusals.
    front: &'static str,
    hosts: Vec<String>,
    origins: Vec<String>,
    parsed_hosts: Vec<HostPort>,
    parsed_origins: Vec<OriginSpec>,
}

impl Allowlist {
    /// A list for the front whose keys start with `front` (`mcp.allowed_hosts`, …). An entry
    /// that does not parse is `CONFIG_INVALID`, so a typo stops the server instead of locking
    /// everyone out.
    ///
    /// Hosts are `host` or `host:port` (without a port, any port matches); origins are
    /// `scheme://host[:port]`, where the port may be `*`.
    pub fn new(front: &'static str, hosts: Vec<String>, origins: Vec<String>) -> Result<Self> {
        let mut parsed_hosts = Vec::with_capacity(hosts.len());
        for h in &hosts {
            parsed_hosts.push(parse_host(h).ok_or_else(|| {
                Error::new(
                    ErrorCode::ConfigInvalid,
                    format!("{front}.allowed_hosts has an entry that is not a host[:port]: {h:?}"),
                )
            })?);
        }
        let mut parsed_origins = Vec::with_capacity(origins.len());
        for o in &origins {
            parsed_origins.push(parse_origin(o).ok_or_else(|| {
                Error::new(
                    ErrorCode::ConfigInvalid,
                    format!(
                        "{front}.allowed_origins has an entry that is not scheme://host[:port|:*]: {o:?}"
                    ),
                )
            })?);
        }
        Ok(Self {
            front,
            hosts,
            origins,
            parsed_hosts,
            parsed_origins,
        })
    }

    /// Loopback names and origins only.
    pub fn loopback(front: &'static str) -> Self {
        let hosts = LOOPBACK_HOSTS.iter().map(|s| s.to_string()).collect();
        let origins = LOOPBACK_ORIGINS.iter().map(|s| s.to_string()).collect();
        // The built-in lists parse (a unit test proves it); an empty list would only refuse
        // more, never less.
        Self::new(front, hosts, origins).unwrap_or(Self {
            front,
            hosts: Vec::new(),
            origins: Vec::new(),
            parsed_hosts: Vec::new(),
            parsed_origins: Vec::new(),
        })
    }

    /// This list for a server that answers on `port` only: every origin allowed on any port
    /// (`scheme://host:*`, the loopback default) is allowed on `port` alone, so a page served
    /// from another port of the same machine is another origin and is refused. Origins with a
    /// port of their own stay as configured. (The dashboard's own forms and streams come from
    /// its own origin; a page on another local port must not pass for it.)
    pub fn pinned_to(mut self, port: u16) -> Self {
        for origin in &mut self.parsed_origins {
            origin.port = origin.port.or(Some(port));
        }
        for origin in &mut self.origins {
            if let Some(base) = origin.trim().strip_suffix(":*") {
                *origin = format!("{base}:{port}");
            }
        }
        self
    }

    /// The configuration key prefix this list belongs to.
    pub fn front(&self) -> &'static str {
        self.front
    }

    /// The allowed `Host` values, as configured.
    pub fn hosts(&self) -> &[String] {
        &self.hosts
    }

    /// The allowed `Origin` values, as configured.
    pub fn origins(&self) -> &[String] {
        &self.origins
    }

    /// Checks a request's `Host` (required) and `Origin` (checked only when sent).
    pub fn check(
        &self,
        host: Option<&str>,
        origin: Option<&str>,
    ) -> std::result::Result<(), Rejection> {
        let host_ok = host.and_then(parse_host).is_some_and(|h| {
            self.parsed_hosts
                .iter()
                .any(|a| a.host == h.host && (a.port.is_none() || a.port == h.port))
        });
        if !host_ok {
            return Err(Rejection::Host);
        }
        let Some(origin) = origin else {
            return Ok(());
        };
        let origin_ok = parse_origin(origin).is_some_and(|o| {
            self.parsed_origins.iter().any(|a| {
                a.scheme == o.scheme && a.host == o.host && (a.port.is_none() || a.port == o.port)
            })
        });
        if origin_ok {
            Ok(())
        } else {
            Err(Rejection::Origin)
        }
    }
}

/// A host and an optional port, normalized (lowercase, IPv6 without brackets).
#[derive(Debug, Clone, PartialEq, Eq)]
struct HostPort {
    host: String,
    port: Option<u16>,
}

fn parse_host(value: &str) -> Option<HostPort> {
    let value = value.trim();
    if value.is_empty() {
        return None;
    }
    let authority: axum::http::uri::Authority = value.parse().ok().or_else(|| {
        // A bare IPv6 address ("::1") is not an authority; bracket it.
        value
            .contains(':')
            .then(|| format!("[{value}]").parse().ok())?
    })?;
    if authority.as_str().contains('@') {
        return None;
    }
    Some(HostPort {
        host: authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase(),
        port: authority.port_u16(),
    })
}

/// An origin: scheme, host, and a port (`None` for `*`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct OriginSpec {
    scheme: String,
    host: String,
    port: Option<u16>,
}

fn default_port(scheme: &str) -> Option<u16> {
    match scheme {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    }
}

fn parse_origin(value: &str) -> Option<OriginSpec> {
    let (scheme, rest) = value.trim().split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    if let Some(host) = rest.strip_suffix(":*") {
        let h = parse_host(host)?;
        return Some(OriginSpec {
            scheme,
            host: h.host,
            port: None,
        });
    }
    let h = parse_host(rest.trim_end_matches('/'))?;
    let port = h.port.or_else(|| default_port(&scheme))?;
    Some(OriginSpec {
        scheme,
        host: h.host,
        port: Some(port),
    })
}

/// The host part of an `http(s)://` URL (`https://legate.example:8443/x` → `legate.example:8443`),
/// for adding a front's advertised public URL to its allowlist.
pub fn url_authority(url: &str) -> Option<String> {
    let (_, rest) = url.split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next()?;
    parse_host(authority).map(|_| authority.to_string())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_builtin_lists_parse() {
        let l = Allowlist::loopback("mcp");
        assert_eq!(l.hosts().len(), LOOPBACK_HOSTS.len());
        assert_eq!(l.origins().len(), LOOPBACK_ORIGINS.len());
    }

    /// A list pinned to the port a server answers on admits its own origin only: another
    /// local port is another origin (issue 29, finding 8).
    #[test]
    fn a_pinned_list_admits_only_the_servers_own_port() {
        let l = Allowlist::loopback("ui").pinned_to(8733);
        for ok in [
            "http://127.0.0.1:8733",
            "http://localhost:8733",
            "http://[::1]:8733",
        ] {
            assert_eq!(l.check(Some("127.0.0.1:8733"), Some(ok)), Ok(()), "{ok}");
        }
        for bad in [
            "http://127.0.0.1:8734",
            "http://localhost:1",
            "http://127.0.0.1",
            "http://evil.example:8733",
        ] {
            assert_eq!(
                l.check(Some("127.0.0.1:8733"), Some(bad)),
                Err(Rejection::Origin),
                "{bad}"
            );
        }
        assert!(l.origins().contains(&"http://127.0.0.1:8733".to_string()));
        let fixed = Allowlist::new("ui", vec![], vec!["https://legate.example".into()])
            .unwrap()
            .pinned_to(8733);
        assert_eq!(
            fixed.check(Some("x"), Some("https://legate.example")),
            Err(Rejection::Host)
        );
        let fixed = Allowlist::new(
            "ui",
            vec!["x".into()],
            vec!["https://legate.example".into()],
        )
        .unwrap()
        .pinned_to(8733);
        assert_eq!(
            fixed.check(Some("x"), Some("https://legate.example")),
            Ok(())
        );
    }

    #[test]
    fn loopback_hosts_pass_with_any_port_and_others_do_not() {
        let l = Allowlist::loopback("mcp");
        for ok in [
            "localhost",
            "localhost:8731",
            "127.0.0.1:1",
            "[::1]:8731",
            "LOCALHOST",
        ] {
            assert_eq!(l.check(Some(ok), None), Ok(()), "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:8731",
            "127.0.0.2",
            "localhost.evil.example",
            "user@localhost",
            "",
        ] {
            assert_eq!(l.check(Some(bad), None), Err(Rejection::Host), "{bad}");
        }
        assert_eq!(l.check(None, None), Err(Rejection::Host));
        let pinned = Allowlist::new("a2a", vec!["example.com:8080".into()], vec![]).unwrap();
        assert_eq!(pinned.check(Some("example.com:8080"), None), Ok(()));
        assert_eq!(
            pinned.check(Some("example.com:8081"), None),
            Err(Rejection::Host)
        );
    }

    #[test]
    fn origins_are_checked_only_when_sent() {
        let l = Allowlist::loopback("mcp");
        for ok in [
            "http://localhost:6274",
            "http://127.0.0.1",
            "https://[::1]:9",
        ] {
            assert_eq!(l.check(Some("localhost"), Some(ok)), Ok(()), "{ok}");
        }
        for bad in [
            "http://evil.example",
            "null",
            "http://evil.example:6274",
            "ftp://localhost:1",
        ] {
            assert_eq!(
                l.check(Some("localhost"), Some(bad)),
                Err(Rejection::Origin),
                "{bad}"
            );
        }
    }

    #[test]
    fn bad_entries_are_config_errors_naming_the_key() {
        let e = Allowlist::new("a2a", vec![], vec!["localhost".into()]).unwrap_err();
        assert_eq!(e.code, ErrorCode::ConfigInvalid);
        assert!(e.message.contains("a2a.allowed_origins"), "{}", e.message);
        let e = Allowlist::new("mcp", vec![String::new()], vec![]).unwrap_err();
        assert!(e.message.contains("mcp.allowed_hosts"), "{}", e.message);
    }

    #[test]
    fn public_urls_give_their_authority() {
        assert_eq!(
            url_authority("https://legate.example:8443/a2a").as_deref(),
            Some("legate.example:8443")
        );
        assert_eq!(
            url_authority("http://legate.example").as_deref(),
            Some("legate.example")
        );
        assert_eq!(url_authority("legate.example"), None);
    }

    proptest! {
        /// Whatever a client sends, checking never panics, and a host outside loopback names
        /// is never let through by the default list.
        #[test]
        fn arbitrary_headers_never_panic(host in "\\PC{0,40}", origin in "\\PC{0,40}") {
            let l = Allowlist::loopback("a2a");
            let r = l.check(Some(&host), Some(&origin));
            if r.is_ok() {
                let h = parse_host(&host).unwrap();
                prop_assert!(["localhost", "127.0.0.1", "::1"].contains(&h.host.as_str()));
            }
        }
    }
}
