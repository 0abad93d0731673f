//! Tests of the network policy's decisions, layers, preset hosts and base URLs.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;

fn rule(s: &str) -> HostRule {
    s.parse().unwrap()
}

fn dest(s: &str) -> Destination {
    Destination::parse_authority(s, None).unwrap()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn deny_wins_over_allow() {
    let p = NetworkRules::default()
        .with_allow(rule("*.example.com"), "network.allow[0]")
        .with_deny(rule("evil.example.com"), "network.deny[0]");
    let r = p.decide(&dest("evil.example.com:443"));
    assert_eq!(r.decision, Decision::Deny);
    assert_eq!(r.rule_id.as_deref(), Some("network.deny[0]"));
    let r = p.decide(&dest("api.example.com:443"));
    assert_eq!(r.decision, Decision::Allow);
    assert_eq!(r.rule_id.as_deref(), Some("network.allow[0]"));
}

#[test]
fn no_rule_is_otherwise() {
    let p = NetworkRules::default();
    let r = p.decide(&dest("example.com:443"));
    assert_eq!((r.decision, r.rule_id), (Decision::Deny, None));
    let p = p.with_otherwise(Otherwise::Ask);
    assert_eq!(p.decide(&dest("example.com:443")).decision, Decision::Ask);
}

#[test]
fn special_literals_need_an_exact_rule() {
    let p = NetworkRules::new(Otherwise::Ask).with_allow(rule("*"), "network.allow[0]");
    for literal in [
        "127.0.0.1:80",
        "[::1]:80",
        "169.254.169.254:80",
        "[::ffff:169.254.169.254]:80",
        "[64:ff9b::a00:1]:80",
        "10.0.0.1:22",
    ] {
        let r = p.decide(&dest(literal));
        assert_eq!(r.decision, Decision::Deny, "{literal}");
        assert!(r.reason.contains("names exactly"), "{}", r.reason);
    }
    assert_eq!(p.decide(&dest("8.8.8.8:53")).decision, Decision::Allow);

    let p = p.with_allow(rule("127.0.0.1:8080"), "network.allow[1]");
    let r = p.decide(&dest("[::ffff:127.0.0.1]:8080"));
    assert_eq!(r.decision, Decision::Allow);
    assert_eq!(r.rule_id.as_deref(), Some("network.allow[1]"));
    assert_eq!(p.decide(&dest("127.0.0.1:8081")).decision, Decision::Deny);
    assert!(p.names_exactly(ip("127.0.0.1"), 8080));
    assert!(p.names_exactly(ip("::ffff:127.0.0.1"), 8080));
    assert!(!p.names_exactly(ip("127.0.0.1"), 8081));
    assert!(!p.names_exactly(ip("127.0.0.2"), 8080));

    // A deny rule still wins over the exact allow.
    let p = p.with_deny(rule("127.0.0.1"), "network.deny[0]");
    assert_eq!(p.decide(&dest("127.0.0.1:8080")).decision, Decision::Deny);
}

#[test]
fn deny_rules_never_count_as_exact() {
    let p = NetworkRules::default().with_deny(rule("10.0.0.1"), "d");
    assert!(!p.names_exactly(ip("10.0.0.1"), 1));
}

#[test]
fn layers_stack() {
    let global: NetworkConfig = toml::from_str(
        r#"
        allow = ["github.com:443", "*.crates.io"]
        deny = ["*.evil.test"]
        unknown = "ask"
        "#,
    )
    .unwrap();
    let role: NetworkConfig = toml::from_str(r#"deny = ["github.com"]"#).unwrap();
    let p = global.apply(NetworkRules::default(), "network");
    let p = p.with_preset("claude");
    let p = role.apply(p, "roles.reviewer.network");
    assert_eq!(p.otherwise, Otherwise::Ask);
    assert_eq!(p.allow[1].id, "network.allow[1]");
    assert_eq!(p.allow[2].id, "preset:claude");
    let r = p.decide(&dest("github.com:443"));
    assert_eq!(r.rule_id.as_deref(), Some("roles.reviewer.network.deny[0]"));
    assert_eq!(
        p.decide(&dest("api.anthropic.com:443")).decision,
        Decision::Allow
    );
    assert_eq!(
        p.decide(&dest("api.anthropic.com:80")).decision,
        Decision::Ask
    );

    let merged = NetworkRules::new(Otherwise::Deny).merge(p.clone());
    assert_eq!(merged.otherwise, Otherwise::Deny);
    assert_eq!(merged.allow, p.allow);

    assert!(toml::from_str::<NetworkConfig>(r#"alow = ["x"]"#).is_err());
    assert!(toml::from_str::<NetworkConfig>(r#"unknown = "maybe""#).is_err());
    assert!(toml::from_str::<NetworkConfig>(r#"allow = ["a..b"]"#).is_err());
}

#[test]
fn preset_hosts_parse() {
    for preset in ["claude", "codex", "gemini", "agy"] {
        assert!(!model_hosts(preset).is_empty(), "{preset}");
        for host in model_hosts(preset) {
            let r = host.parse::<HostRule>().unwrap();
            assert_eq!(r.port, Some(443));
            assert!(matches!(r.pattern, HostPattern::Exact(_)));
        }
        let p = NetworkRules::default().with_preset(preset);
        assert_eq!(p.allow.len(), model_hosts(preset).len());
    }
    assert!(model_hosts("generic").is_empty());
    assert!(model_hosts("revisor").is_empty());
}

#[test]
fn base_urls() {
    assert_eq!(
        base_url_rule("https://api.anthropic.com"),
        Some(rule("api.anthropic.com:443"))
    );
    assert_eq!(
        base_url_rule("HTTP://Proxy.Corp.example:8080/v1?x=1"),
        Some(rule("proxy.corp.example:8080"))
    );
    assert_eq!(
        base_url_rule("http://127.0.0.1:4000/v1"),
        Some(rule("127.0.0.1:4000"))
    );
    assert_eq!(base_url_rule("http://[::1]:4000"), Some(rule("[::1]:4000")));
    assert_eq!(
        base_url_rule("http://localhost"),
        Some(rule("localhost:80"))
    );
    for bad in [
        "",
        "api.anthropic.com",
        "ftp://example.com",
        "https://",
        "https:///v1",
        "https://user:pw@example.com",
        "https://example.com:0",
        "https://example.com:99999",
        "https://*.example.com",
        "https://exa mple.com",
    ] {
        assert_eq!(base_url_rule(bad), None, "{bad:?}");
    }
}

proptest::proptest! {
    #[test]
    fn base_url_never_panics(s in "\\PC{0,60}") {
        let _ = base_url_rule(&s);
    }
}
