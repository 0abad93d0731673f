//! The tool controls a handoff task starts with when its request names none: the source
//! task's selection, carried on (the seed's "conserving the selection"), narrowed to what the
//! configuration allows now and, for a read-only task, to MCP tools marked read-only.
//!
//! It only narrows: a kind outside today's ceiling, a server or tool no longer catalogued,
//! or a tool that writes on a read-only task is left out, never added. What it returns is a
//! request's selection, checked again at submit like a caller's own (the ceiling, the
//! catalogue, and whether the new agent's backend can enforce it).

use legate_core::{ControlsConfig, McpSelection, TaskControls, ToolKind};

/// The tool kinds handed on from `source`: its kinds within today's ceiling (`None` when the
/// source had no narrowing).
pub(super) fn kinds(config: &ControlsConfig, source: &TaskControls) -> Option<Vec<ToolKind>> {
    let kinds = source.allowed_tools.as_ref()?;
    Some(match &config.allowed_tools {
        Some(ceiling) => kinds
            .iter()
            .filter(|k| ceiling.contains(k))
            .copied()
            .collect(),
        None => kinds.clone(),
    })
}

/// The MCP selections handed on from `source`: each still catalogued, with only its
/// catalogued tools (only those marked read-only when `read_only`); a server left with no
/// tool is dropped. `None` when the source selected none.
pub(super) fn servers(
    config: &ControlsConfig,
    source: &TaskControls,
    read_only: bool,
) -> Option<Vec<McpSelection>> {
    if source.mcp_servers.is_empty() {
        return None;
    }
    let kept = source
        .mcp_servers
        .iter()
        .filter_map(|selection| {
            let server = config.server(&selection.server_id)?;
            let tools: Vec<String> = selection
                .tools
                .iter()
                .filter(|name| {
                    server
                        .tool(name)
                        .is_some_and(|tool| !read_only || tool.read_only)
                })
                .cloned()
                .collect();
            (!tools.is_empty()).then(|| McpSelection {
                server_id: selection.server_id.clone(),
                tools,
            })
        })
        .collect();
    Some(kept)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use legate_core::catalogue::{McpServerSpec, McpToolSpec, McpTransport};

    fn catalogue(ceiling: Option<Vec<ToolKind>>) -> ControlsConfig {
        let tool = |name: &str, read_only| McpToolSpec {
            name: name.into(),
            read_only,
        };
        ControlsConfig {
            allowed_tools: ceiling,
            mcp_servers: vec![McpServerSpec {
                id: "docs".into(),
                transport: McpTransport::Http {
                    url: "http://127.0.0.1:1/mcp".into(),
                },
                tools: vec![tool("search", true), tool("publish", false)],
            }],
        }
    }

    fn source() -> TaskControls {
        TaskControls {
            allowed_tools: Some(vec![ToolKind::Read, ToolKind::Edit, ToolKind::Execute]),
            mcp_servers: vec![
                McpSelection {
                    server_id: "docs".into(),
                    tools: vec!["search".into(), "publish".into()],
                },
                McpSelection {
                    server_id: "gone".into(),
                    tools: vec!["x".into()],
                },
            ],
            ..TaskControls::default()
        }
    }

    #[test]
    fn a_handoff_keeps_the_source_selection_narrowed_to_today() {
        let config = catalogue(Some(vec![ToolKind::Read, ToolKind::Edit]));
        assert_eq!(
            kinds(&config, &source()),
            Some(vec![ToolKind::Read, ToolKind::Edit])
        );
        let write = servers(&config, &source(), false).unwrap();
        assert_eq!(write.len(), 1, "a server no longer catalogued is dropped");
        assert_eq!(write[0].tools, ["search", "publish"]);
        let read = servers(&config, &source(), true).unwrap();
        assert_eq!(
            read[0].tools,
            ["search"],
            "a read-only task keeps only reads"
        );
    }

    #[test]
    fn nothing_selected_hands_nothing_on() {
        let config = catalogue(None);
        let none = TaskControls::default();
        assert_eq!(kinds(&config, &none), None);
        assert_eq!(servers(&config, &none, true), None);
    }
}
