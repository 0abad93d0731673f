//! Files agents load as their own instructions or settings (`CLAUDE.md`, `AGENTS.md`,
//! `GEMINI.md`, `.mcp.json`, `.claude/`, `.codex/`, `.gemini/`, `.cursor/`, …), and the one
//! question asked of them: did an earlier agent add or change one in a copy about to be
//! handed to another agent?
//!
//! The first agent of a copy reads the project's own files, which are the user's. A file an
//! agent wrote there is not: handed on (a handoff, a comparison's reviews, a workflow node
//! that takes another's files), the next agent's adapter would load it as trusted
//! instructions, or run its hooks (`.claude/settings.json`) with no permission asked, before
//! anyone reviewed the patch that holds it. This module owns recognising such paths, by
//! name and in any ASCII letter case (a case-folding file system reads `Claude.md` as
//! `CLAUDE.md`; Unicode case folding, `ſ` for `s`, is not matched). It never reads a file and
//! never decides what to do about one (`handoff` refuses the copy). A file such a file only
//! points at (an `@`-import of `CLAUDE.md`, a script a project's own hook runs) is not one.

/// File names agents load as instructions or settings, wherever they are (compared ignoring
/// ASCII case).
const NAMES: &[&str] = &[
    "claude.md",
    "claude.local.md",
    "agents.md",
    "agents.override.md",
    "agent.md",
    "gemini.md",
    ".mcp.json",
    ".cursorrules",
    ".windsurfrules",
    "copilot-instructions.md",
];

/// Directories whose every file an agent may load as its settings, hooks, commands, skills
/// or instructions, wherever they are (compared ignoring ASCII case).
const DIRECTORIES: &[&str] = &[
    ".claude",
    ".codex",
    ".gemini",
    ".agents",
    ".agent",
    ".cursor",
    ".windsurf",
    ".kiro",
];

/// Whether an agent would load `path` (relative, `/`-separated) as its own instructions or
/// settings.
pub fn is_agent_file(path: &str) -> bool {
    let parts: Vec<&str> = path.split('/').collect();
    let Some((name, dirs)) = parts.split_last() else {
        return false;
    };
    NAMES.iter().any(|n| name.eq_ignore_ascii_case(n))
        || dirs
            .iter()
            .any(|d| DIRECTORIES.iter().any(|n| d.eq_ignore_ascii_case(n)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instructions_and_settings_are_found_in_any_case_and_at_any_depth() {
        for p in [
            "CLAUDE.md",
            "sub/dir/claude.md",
            "AGENTS.md",
            "sub/AGENTS.override.md",
            "GEMINI.md",
            ".mcp.json",
            ".claude/settings.json",
            ".Claude/commands/x.md",
            "pkg/.codex/config.toml",
            ".gemini/settings.json",
            ".github/copilot-instructions.md",
            ".cursor/rules/a.mdc",
        ] {
            assert!(is_agent_file(p), "{p}");
        }
        for p in [
            "README.md",
            "src/claude.rs",
            "docs/agents/guide.md",
            "claude.md.bak",
            ".claudeignore",
        ] {
            assert!(!is_agent_file(p), "{p}");
        }
    }
}
