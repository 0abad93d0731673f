#![allow(clippy::unwrap_used)]
use super::*;
use proptest::prelude::*;

fn stdio(id: &str, env: &[(&str, &str)]) -> McpServerSpec {
    McpServerSpec {
        id: id.into(),
        transport: McpTransport::Stdio {
            command: "/usr/bin/docs-mcp".into(),
            args: vec!["--serve".into()],
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        },
        tools: vec![McpToolSpec {
            name: "search".into(),
            read_only: true,
        }],
    }
}

#[test]
fn loopback_urls_pass_and_others_are_refused() {
    for ok in [
        "http://127.0.0.1:8080/mcp",
        "http://localhost/mcp",
        "http://[::1]:9/x?y#z",
        "http://127.0.0.1",
    ] {
        assert_eq!(loopback_http(ok), Ok(()), "{ok}");
    }
    for bad in [
        "https://127.0.0.1/mcp",
        "http://127.0.0.2/mcp",
        "http://127.0.0.1.evil.example/",
        "http://user:pw@127.0.0.1/",
        "http://localhost:0/",
        "http://localhost:99999/",
        "http://localhost:80x/",
        "http://[::1/",
        "http://127.0.0.1/ a",
        "ftp://127.0.0.1/",
        "http://evil.example#@127.0.0.1",
    ] {
        assert!(loopback_http(bad).is_err(), "{bad}");
    }
}

#[test]
fn the_catalogue_is_bounded_and_its_ids_unique() {
    let many = ControlsConfig {
        allowed_tools: None,
        mcp_servers: (0..=MAX_MCP_SERVERS)
            .map(|i| stdio(&format!("s{i}"), &[]))
            .collect(),
    };
    assert_eq!(many.validate().unwrap_err().code, ErrorCode::ConfigInvalid);
    let twice = ControlsConfig {
        allowed_tools: None,
        mcp_servers: vec![stdio("a", &[]), stdio("a", &[])],
    };
    assert!(twice.validate().is_err());
    let relative = McpServerSpec {
        transport: McpTransport::Stdio {
            command: "docs-mcp".into(),
            args: vec![],
            env: BTreeMap::new(),
        },
        ..stdio("a", &[])
    };
    let c = ControlsConfig {
        allowed_tools: None,
        mcp_servers: vec![relative],
    };
    assert!(c.validate().unwrap_err().message.contains("absolute"));
}

#[test]
fn neither_debug_nor_errors_nor_the_public_view_show_a_credential() {
    let secret = "sk-live-0123456789abcdef";
    let server = stdio("docs", &[("API_KEY", secret)]);
    assert!(!format!("{server:?}").contains(secret));
    let public = serde_json::to_string(&server.public()).unwrap();
    assert!(!public.contains(secret) && !public.contains("/usr/bin"));
    let http = McpServerSpec {
        transport: McpTransport::Http {
            url: format!("http://{secret}@127.0.0.1/"),
        },
        ..stdio("web", &[])
    };
    let err = ControlsConfig {
        allowed_tools: None,
        mcp_servers: vec![http.clone()],
    }
    .validate()
    .unwrap_err();
    assert!(!err.message.contains(secret), "{}", err.message);
    assert!(!format!("{http:?}").contains(secret));
    let bad_env = stdio("docs", &[("1BAD", secret)]);
    let err = ControlsConfig {
        allowed_tools: None,
        mcp_servers: vec![bad_env],
    }
    .validate()
    .unwrap_err();
    assert!(!err.message.contains(secret));
}

proptest! {
    #[test]
    fn any_accepted_url_has_a_loopback_host(url in "http://[a-z0-9.:@\\[\\]/#?-]{0,40}") {
        if loopback_http(&url).is_ok() {
            let rest = &url["http://".len()..];
            prop_assert!(
                rest.starts_with("127.0.0.1") || rest.starts_with("localhost") || rest.starts_with("[::1]"),
                "{}", url
            );
            let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
            prop_assert!(!rest[..end].contains('@'));
            let after = &rest[..end];
            prop_assert!(matches!(after.trim_start_matches("127.0.0.1").trim_start_matches("localhost").trim_start_matches("[::1]").chars().next(), None | Some(':')));
        }
    }

    #[test]
    fn names_never_hold_the_separator_or_odd_bytes(name in "\\PC{0,70}") {
        if valid_name(&name) {
            prop_assert!(!name.contains("__"));
            prop_assert!(name.len() <= MAX_MCP_NAME);
            prop_assert!(name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b)));
        }
    }
}
