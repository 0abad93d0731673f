//! The decision of agy's PreToolUse hook (`legate agy-hook`): whether one tool call of an
//! agy task under tool controls may run.
//!
//! agy runs the hook staged in the copy's `.agents/hooks.json` (see `staging`) before each
//! tool call, with the call as JSON on stdin. The hook reads the policy Legate wrote outside
//! the copy, checks it against the SHA-256 its command line carries (a policy that changed is
//! refused, whoever changed it), and answers `{"decision": "allow"}` (exit 0) or
//! `{"decision": "deny", "reason": …}` (exit 2, the reason on stderr too). It decides from
//! the policy and the call alone: nothing the agent can write is consulted.
//!
//! It allows `finish`; the file tools the policy names (`view_file`, `write_to_file`,
//! `replace_file_content`, `multi_replace_file_content`, and the current CLI's `read_file`,
//! `write_file` and `edit_file` under them) on one unambiguous path inside the copy, never
//! through `..`, never writing on a read-only task, never writing in `.agents/` and reading
//! there only `.agents/skills/`; and `call_mcp_tool` for a selected server and tool. Anything
//! else is denied. It must never allow a call it cannot read, or write anything.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::{Component, Path, PathBuf};

/// The largest policy file read.
const MAX_POLICY: u64 = 1024 * 1024;
/// The largest tool call read from stdin.
const MAX_CALL: u64 = 16 * 1024 * 1024;

/// agy's file tools that read.
pub const READ_TOOLS: &[&str] = &["view_file"];
/// agy's file tools that write.
pub const WRITE_TOOLS: &[&str] = &[
    "write_to_file",
    "replace_file_content",
    "multi_replace_file_content",
];
/// The tool that ends agy's turn: always allowed.
pub const FINISH: &str = "finish";
/// The tool agy calls an MCP server's tool with.
pub const CALL_MCP: &str = "call_mcp_tool";

/// What one task's hook decides from, staged by Legate outside the copy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Policy {
    /// The copy (canonical): every path must be beneath it.
    pub root: PathBuf,
    /// Whether every write is refused.
    pub read_only: bool,
    /// agy's file tools the task may use (`view_file`, `write_to_file`, …).
    pub tools: Vec<String>,
    /// The selected MCP servers and tools.
    pub mcp: Vec<legate_core::McpSelection>,
}

/// The hook's answer to one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The call may run.
    Allow,
    /// The call is refused, with why.
    Deny(String),
}

fn deny(why: impl Into<String>) -> Verdict {
    Verdict::Deny(why.into())
}

/// The keys agy's file tools name their path with (old and current CLI).
const PATH_KEYS: &[&str] = &[
    "AbsolutePath",
    "TargetFile",
    "Path",
    "path",
    "file_path",
    "filePath",
    "absolute_path",
    "target_file",
];

/// The decision on `tool` called with `input` under `policy`.
pub fn decide(policy: &Policy, tool: &str, input: &Value) -> Verdict {
    if tool == FINISH {
        return Verdict::Allow;
    }
    if tool == CALL_MCP {
        return decide_mcp(policy, input);
    }
    let allowed = |name: &str| policy.tools.iter().any(|t| t == name);
    let (writes, permitted) = match tool {
        "view_file" | "read_file" => (false, allowed("view_file")),
        "write_to_file" | "write_file" => (true, allowed("write_to_file")),
        "replace_file_content" | "multi_replace_file_content" => (true, allowed(tool)),
        "edit_file" => (
            true,
            allowed("replace_file_content") || allowed("multi_replace_file_content"),
        ),
        _ => {
            return deny(format!(
                "TOOL_NOT_ALLOWED: {tool:?} is not among the tools this task may use"
            ));
        }
    };
    if !permitted {
        return deny(format!(
            "TOOL_NOT_ALLOWED: {tool:?} is not among the tools this task may use"
        ));
    }
    if writes && policy.read_only {
        return deny("TOOL_NOT_ALLOWED: the task is read-only");
    }
    let Some(paths) = named(input, PATH_KEYS) else {
        return deny("TOOL_NOT_ALLOWED: a path field of the call is not text");
    };
    match paths.as_slice() {
        [] => deny("TOOL_NOT_ALLOWED: the call names no path"),
        [one] => check_path(policy, one, writes),
        _ => deny("TOOL_NOT_ALLOWED: the call names more than one path"),
    }
}

fn decide_mcp(policy: &Policy, input: &Value) -> Verdict {
    let servers = named(input, &["ServerName", "server"]);
    let tools = named(input, &["ToolName", "tool", "name"]);
    let (Some([server]), Some([tool])) = (servers.as_deref(), tools.as_deref()) else {
        return deny("TOOL_NOT_ALLOWED: the MCP call must name exactly one server and one tool");
    };
    let (server, tool) = (*server, *tool);
    if policy
        .mcp
        .iter()
        .any(|s| s.server_id == server && s.tools.iter().any(|t| t == tool))
    {
        Verdict::Allow
    } else {
        deny(format!(
            "TOOL_NOT_ALLOWED: MCP tool {tool:?} of server {server:?} was not selected for this task"
        ))
    }
}

/// A key as a lenient decoder may read it: lower case, without `_` and `-`.
fn loose(key: &str) -> String {
    key.chars()
        .filter(|c| *c != '_' && *c != '-')
        .flat_map(char::to_lowercase)
        .collect()
}

/// The distinct values of every field of `input` whose key reads, loosely, as one of `keys`
/// (`file_path`, `FilePath` and `filepath` alike): a call cannot name one thing to the hook
/// and another to agy. `None` when such a field is not text.
fn named<'a>(input: &'a Value, keys: &[&str]) -> Option<Vec<&'a str>> {
    let wanted: Vec<String> = keys.iter().map(|k| loose(k)).collect();
    let mut found = Vec::new();
    for (key, value) in input.as_object().into_iter().flatten() {
        if wanted.contains(&loose(key)) {
            found.push(value.as_str()?);
        }
    }
    found.sort_unstable();
    found.dedup();
    Some(found)
}

/// `path` checked against the copy: inside it (lexically and through any link on the way),
/// no `..`, and not Legate's `.agents/` files.
fn check_path(policy: &Policy, path: &str, writes: bool) -> Verdict {
    let p = Path::new(path);
    if path.contains('\0') || p.components().any(|c| c == Component::ParentDir) {
        return deny("TOOL_NOT_ALLOWED: the path goes through `..`");
    }
    // What a tool might expand (a home, a variable, a URL) is never read as a file name here.
    if path.starts_with('~') || path.contains('$') || path.contains("://") {
        return deny("TOOL_NOT_ALLOWED: the path is not a plain file name");
    }
    let full = if p.is_absolute() {
        p.to_path_buf()
    } else {
        policy.root.join(p)
    };
    let Ok(rel) = full.strip_prefix(&policy.root) else {
        return deny("TOOL_NOT_ALLOWED: the path is outside the task's copy");
    };
    // A link on the way must not lead out: the longest part that exists (a dangling link
    // counts, and cannot be resolved), resolved.
    let mut existing = full.clone();
    while std::fs::symlink_metadata(&existing).is_err() {
        if !existing.pop() {
            break;
        }
    }
    let real = match std::fs::canonicalize(&existing) {
        Ok(real) if real.starts_with(&policy.root) => real,
        _ => return deny("TOOL_NOT_ALLOWED: the path leads outside the task's copy"),
    };
    // `.agents/` is checked as named and as resolved (a link to it is the same place).
    let resolved = real.strip_prefix(&policy.root).unwrap_or(Path::new(""));
    for rel in [rel, resolved] {
        if touches_agents(rel, writes) {
            return deny(
                "TOOL_NOT_ALLOWED: .agents/ holds Legate's configuration for this task; only .agents/skills/ may be read",
            );
        }
    }
    Verdict::Allow
}

/// Whether `rel` (relative to the copy) is in `.agents/`, in any letter case, where a write
/// is never allowed and a read only in `.agents/skills/`.
fn touches_agents(rel: &Path, writes: bool) -> bool {
    let mut parts = rel.components().filter_map(|c| match c {
        Component::Normal(n) => Some(n.to_string_lossy().into_owned()),
        _ => None,
    });
    if !parts
        .next()
        .is_some_and(|f| f.eq_ignore_ascii_case(".agents"))
    {
        return false;
    }
    let in_skills = parts
        .next()
        .is_some_and(|s| s.eq_ignore_ascii_case("skills"));
    writes || !in_skills
}

/// The hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `legate agy-hook --policy FILE --sha256 HEX`: reads one tool call on stdin, prints the
/// verdict; returns the exit code (0 allow, 2 deny). Everything it cannot read is denied.
pub fn hook_main(policy_file: &Path, sha256: &str) -> i32 {
    let verdict = (|| {
        let mut bytes = Vec::new();
        let read = std::fs::File::open(policy_file)
            .and_then(|f| f.take(MAX_POLICY).read_to_end(&mut bytes));
        if read.is_err() {
            return deny("TOOL_NOT_ALLOWED: the task's tool policy could not be read");
        }
        if sha256_hex(&bytes) != sha256.to_ascii_lowercase() {
            return deny("TOOL_NOT_ALLOWED: the task's tool policy does not match its hash");
        }
        let Ok(policy) = serde_json::from_slice::<Policy>(&bytes) else {
            return deny("TOOL_NOT_ALLOWED: the task's tool policy is not valid");
        };
        let mut call = Vec::new();
        if std::io::stdin()
            .take(MAX_CALL)
            .read_to_end(&mut call)
            .is_err()
        {
            return deny("TOOL_NOT_ALLOWED: the tool call could not be read");
        }
        let Ok(call) = serde_json::from_slice::<Value>(&call) else {
            return deny("TOOL_NOT_ALLOWED: the tool call is not JSON");
        };
        let Some(tool) = call.get("tool_name").and_then(Value::as_str) else {
            return deny("TOOL_NOT_ALLOWED: the tool call names no tool");
        };
        let input = call.get("tool_input").cloned().unwrap_or(Value::Null);
        decide(&policy, tool, &input)
    })();
    match verdict {
        Verdict::Allow => {
            println!("{}", serde_json::json!({"decision": "allow"}));
            0
        }
        Verdict::Deny(reason) => {
            println!(
                "{}",
                serde_json::json!({"decision": "deny", "reason": reason})
            );
            eprintln!("{reason}");
            2
        }
    }
}

#[cfg(test)]
#[path = "hook_tests.rs"]
mod tests;
