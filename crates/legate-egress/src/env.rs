//! The variables that point a confined process at the proxy in its namespace, as the
//! rules it runs under want them: the one place they are built, for agents and test
//! commands alike; and reading one variable of an environment list ([`env_value`]).
//!
//! This module only builds variables; it never decides a connection and never reads the
//! process's own environment.

use legate_supervisor::network::{HostPattern, NetworkRules};
use std::ffi::OsString;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The proxy's address inside every namespace: `http://127.0.0.1:`[`crate::PROXY_PORT`].
pub fn proxy_url() -> String {
    format!("http://127.0.0.1:{}", crate::PROXY_PORT)
}

/// The variables that point a process at the proxy: `HTTPS_PROXY`, `HTTP_PROXY`,
/// `ALL_PROXY` and `NO_PROXY`, in both cases, and `NODE_USE_ENV_PROXY=1`. `NO_PROXY` keeps
/// the namespace's own loopback direct (a server the process starts itself), except a
/// loopback name or address an allow rule of `rules` names: that rule means the host's
/// service (a local model server, a test's origin), which only the proxy reaches.
pub fn proxy_env(rules: &NetworkRules) -> Vec<(OsString, OsString)> {
    let url = proxy_url();
    let named_localhost = rules
        .allow
        .iter()
        .any(|r| matches!(&r.rule.pattern, HostPattern::Exact(name) if name == "localhost"));
    let direct: Vec<&str> = [
        ("localhost", !named_localhost),
        (
            "127.0.0.1",
            !rules.names_address(IpAddr::from(Ipv4Addr::LOCALHOST)),
        ),
        (
            "::1",
            !rules.names_address(IpAddr::from(Ipv6Addr::LOCALHOST)),
        ),
    ]
    .into_iter()
    .filter(|(_, direct)| *direct)
    .map(|(name, _)| name)
    .collect();
    let no_proxy = direct.join(",");
    let mut env = Vec::new();
    for name in ["HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY"] {
        env.push((OsString::from(name), OsString::from(&url)));
        env.push((
            OsString::from(name.to_ascii_lowercase()),
            OsString::from(&url),
        ));
    }
    env.push((OsString::from("NO_PROXY"), OsString::from(&no_proxy)));
    env.push((OsString::from("no_proxy"), OsString::from(&no_proxy)));
    // Node's own `fetch` and `http` honour the variables only when asked (Node 24 and newer).
    env.push((OsString::from("NODE_USE_ENV_PROXY"), OsString::from("1")));
    env
}

/// Replaces every variable of `env` that [`proxy_env`] sets with its value: inside the
/// namespace no other proxy is reachable, so the process's own settings would only fail.
pub fn point_at_proxy(env: &mut Vec<(OsString, OsString)>, rules: &NetworkRules) {
    let ours = proxy_env(rules);
    env.retain(|(k, _)| !ours.iter().any(|(o, _)| o == k));
    env.extend(ours);
}

/// The value of the variable `name` in `env`, when it is there and UTF-8.
pub fn env_value<'a>(env: &'a [(OsString, OsString)], name: &str) -> Option<&'a str> {
    env.iter()
        .find(|(k, _)| k == name)
        .and_then(|(_, v)| v.to_str())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use env_value as value;

    #[test]
    fn every_proxy_variable_points_at_the_namespace_proxy() {
        let env = proxy_env(&NetworkRules::default());
        for name in [
            "HTTPS_PROXY",
            "https_proxy",
            "HTTP_PROXY",
            "http_proxy",
            "ALL_PROXY",
            "all_proxy",
        ] {
            assert_eq!(value(&env, name), Some("http://127.0.0.1:3128"), "{name}");
        }
        assert_eq!(value(&env, "NO_PROXY"), Some("localhost,127.0.0.1,::1"));
        assert_eq!(value(&env, "NODE_USE_ENV_PROXY"), Some("1"));
    }

    #[test]
    fn a_named_loopback_address_or_localhost_goes_through_the_proxy() {
        let rules = NetworkRules::default().with_allow("127.0.0.1:11434".parse().unwrap(), "test");
        let env = proxy_env(&rules);
        assert_eq!(value(&env, "no_proxy"), Some("localhost,::1"));
        let rules = NetworkRules::default().with_allow("localhost:8080".parse().unwrap(), "t");
        assert_eq!(value(&proxy_env(&rules), "NO_PROXY"), Some("127.0.0.1,::1"));
        let mut env = vec![
            (
                OsString::from("HTTPS_PROXY"),
                OsString::from("http://corp:8080"),
            ),
            (OsString::from("KEEP"), OsString::from("1")),
        ];
        point_at_proxy(&mut env, &rules);
        assert_eq!(value(&env, "HTTPS_PROXY"), Some("http://127.0.0.1:3128"));
        assert_eq!(value(&env, "KEEP"), Some("1"));
        assert_eq!(env.iter().filter(|(k, _)| k == "HTTPS_PROXY").count(), 1);
    }
}
