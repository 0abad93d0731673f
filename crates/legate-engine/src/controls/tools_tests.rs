#![allow(clippy::unwrap_used)]
use super::*;
use legate_core::{McpToolSpec, McpTransport};

fn catalogue() -> ControlsConfig {
    ControlsConfig {
        allowed_tools: None,
        mcp_servers: vec![McpServerSpec {
            id: "docs".into(),
            transport: McpTransport::Http {
                url: "http://127.0.0.1:9/mcp".into(),
            },
            tools: vec![
                McpToolSpec {
                    name: "search".into(),
                    read_only: true,
                },
                McpToolSpec {
                    name: "publish".into(),
                    read_only: false,
                },
            ],
        }],
    }
}

fn sel(id: &str, tools: &[&str]) -> McpSelection {
    McpSelection {
        server_id: id.into(),
        tools: tools.iter().map(|t| t.to_string()).collect(),
    }
}

#[test]
fn the_ceiling_applies_when_nothing_is_named_and_bounds_what_is() {
    let ceiling = [ToolKind::Read, ToolKind::Search];
    assert_eq!(
        narrow(Some(&ceiling), None).unwrap(),
        Some(ceiling.to_vec())
    );
    assert_eq!(narrow(None, None).unwrap(), None);
    assert_eq!(
        narrow(Some(&ceiling), Some(&[ToolKind::Read, ToolKind::Read])).unwrap(),
        Some(vec![ToolKind::Read])
    );
    let e = narrow(Some(&ceiling), Some(&[ToolKind::Edit])).unwrap_err();
    assert_eq!(e.code, ErrorCode::ToolNotAllowed);
    assert_eq!(narrow(None, Some(&[])).unwrap(), Some(vec![]));
}

#[test]
fn selections_are_checked_against_the_catalogue() {
    let c = catalogue();
    let ok = select(&c, &[sel("docs", &["search", "search"])], TaskMode::Write).unwrap();
    assert_eq!(ok, vec![sel("docs", &["search"])]);
    let e = select(&c, &[sel("nope", &["search"])], TaskMode::Write).unwrap_err();
    assert_eq!(e.code, ErrorCode::McpServerNotFound);
    let e = select(&c, &[sel("docs", &["rm_rf"])], TaskMode::Write).unwrap_err();
    assert_eq!(e.code, ErrorCode::ToolNotAllowed);
    let e = select(&c, &[sel("docs", &["publish"])], TaskMode::ReadOnly).unwrap_err();
    assert_eq!(e.code, ErrorCode::ToolNotAllowed);
    assert!(select(&c, &[sel("docs", &["publish"])], TaskMode::Write).is_ok());
    assert!(select(&c, &[sel("docs", &[])], TaskMode::Write).is_err());
    assert!(
        select(
            &c,
            &[sel("docs", &["search"]), sel("docs", &["search"])],
            TaskMode::Write
        )
        .is_err()
    );
}

#[test]
fn errors_never_quote_a_transport() {
    let c = catalogue();
    for e in [
        select(&c, &[sel("docs", &["x"])], TaskMode::Write).unwrap_err(),
        select(&c, &[sel("docs", &["publish"])], TaskMode::ReadOnly).unwrap_err(),
    ] {
        assert!(!e.message.contains("127.0.0.1"), "{}", e.message);
    }
}
