//! The policy's TOML shape (`[[policy.rules]]`, `[policy] file = "PATH"`) and its validation
//! into a [`Policy`].
//!
//! Unknown keys are refused. Every error is `POLICY_INVALID` and names the rule (its `id`, or
//! its place in the list when it has none) and the field. The widening limits are enforced
//! here: `allow` only on the `execute` kind with a `program`, and never on a program that runs
//! other programs (a shell, `env`, `sudo`, …). This module reads no file itself; the binary
//! reads the text and hands it over.

use super::paths::Globs;
use super::{Policy, Rule};
use legate_core::{Decision, ErrorCode, ToolKind, WorkspaceKind};
use serde::Deserialize;
use std::collections::BTreeSet;
use std::path::PathBuf;

/// Programs an `allow` may not name: each runs whatever program its arguments name.
pub const LAUNCHERS: &[&str] = &[
    "sh", "bash", "dash", "zsh", "ksh", "fish", "env", "sudo", "doas", "su", "xargs", "exec",
    "eval", "command", "builtin", "nohup", "nice", "timeout", "busybox", "time", "watch", "strace",
    "setsid", "chroot", "unshare", "nsenter",
];

/// Longest rule id.
const MAX_ID: usize = 64;

/// `[policy]` in `legate.toml`. Unknown keys are errors.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyTable {
    /// A policy file (the same `[[policy.rules]]` shape); relative paths are relative to
    /// `$LEGATE_HOME`. Its rules come after the inline ones.
    pub file: Option<PathBuf>,
    /// The inline rules, in order.
    #[serde(default)]
    pub rules: Vec<RuleTable>,
}

/// A policy file: `[[policy.rules]]` only (it may not name another file).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    #[serde(default)]
    policy: FileTable,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileTable {
    #[serde(default)]
    rules: Vec<RuleTable>,
}

/// One or several names.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    /// One.
    One(String),
    /// A list.
    Many(Vec<String>),
}

impl OneOrMany {
    fn into_vec(self) -> Vec<String> {
        match self {
            OneOrMany::One(s) => vec![s],
            OneOrMany::Many(v) => v,
        }
    }
}

/// One `[[policy.rules]]` table as written. Unknown keys are errors.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleTable {
    id: Option<String>,
    kind: Option<OneOrMany>,
    program: Option<String>,
    args_prefix: Option<Vec<String>>,
    paths: Option<Vec<String>>,
    workspace: Option<OneOrMany>,
    owned: Option<bool>,
    agent: Option<OneOrMany>,
    role: Option<OneOrMany>,
    decision: Option<String>,
    reason: Option<String>,
}

/// A malformed policy: `POLICY_INVALID`, naming the rule and the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("POLICY_INVALID: {}", self.sentence())]
pub struct PolicyError {
    /// The rule: `"ID"` quoted, or `#N` (1-based, in its list) when it has no id.
    pub rule: Option<String>,
    /// The field (`kind`, `program`, …).
    pub field: Option<String>,
    /// What is wrong.
    pub message: String,
}

impl PolicyError {
    fn new(rule: &str, field: &str, message: impl Into<String>) -> Self {
        Self {
            rule: Some(rule.to_string()),
            field: Some(field.to_string()),
            message: message.into(),
        }
    }

    /// A policy error not about one rule (TOML that does not parse).
    pub fn whole(message: impl Into<String>) -> Self {
        Self {
            rule: None,
            field: None,
            message: message.into(),
        }
    }

    /// `rule "ID", field F: MESSAGE` (or just the message when it is about no rule).
    pub fn sentence(&self) -> String {
        match (&self.rule, &self.field) {
            (Some(rule), Some(field)) => format!("rule {rule}, field {field}: {}", self.message),
            (Some(rule), None) => format!("rule {rule}: {}", self.message),
            _ => self.message.clone(),
        }
    }

    /// The stable code.
    pub fn code(&self) -> ErrorCode {
        ErrorCode::PolicyInvalid
    }
}

impl From<PolicyError> for legate_core::Error {
    fn from(e: PolicyError) -> Self {
        legate_core::Error::new(ErrorCode::PolicyInvalid, e.sentence())
    }
}

/// Parses the text of a policy file (`[[policy.rules]]` tables).
pub fn parse_file(text: &str) -> Result<Vec<RuleTable>, PolicyError> {
    // Kept as text: a `PolicyError` is a list of sentences a person fixes line by line
    // (`legate policy check` prints them all), and the parser's own sentence holds the line.
    let file: PolicyFile = toml::from_str(text).map_err(|e| PolicyError::whole(e.to_string()))?;
    Ok(file.policy.rules)
}

impl Policy {
    /// Validates `inline` rules followed by `from_file` ones into a policy. Ids are unique
    /// across both.
    pub fn from_tables(
        inline: Vec<RuleTable>,
        from_file: Vec<RuleTable>,
    ) -> Result<Policy, PolicyError> {
        let mut ids = BTreeSet::new();
        let mut rules = Vec::with_capacity(inline.len() + from_file.len());
        for (origin, list) in [("inline", inline), ("file", from_file)] {
            for (i, table) in list.into_iter().enumerate() {
                let rule = validate(table, origin, i + 1)?;
                if !ids.insert(rule.id.clone()) {
                    return Err(PolicyError::new(
                        &format!("{:?}", rule.id),
                        "id",
                        "is used by an earlier rule; ids are unique",
                    ));
                }
                rules.push(rule);
            }
        }
        Ok(Policy { rules })
    }
}

fn names(
    rule: &str,
    field: &str,
    value: Option<OneOrMany>,
    check: impl Fn(&str) -> bool,
    expected: &str,
) -> Result<Vec<String>, PolicyError> {
    let list = value.map(OneOrMany::into_vec);
    if list.as_ref().is_some_and(Vec::is_empty) {
        return Err(PolicyError::new(
            rule,
            field,
            "is empty; leave it out to match any",
        ));
    }
    let list = list.unwrap_or_default();
    for v in &list {
        if !check(v) {
            return Err(PolicyError::new(
                rule,
                field,
                format!("{} is not {expected}", excerpt(v)),
            ));
        }
    }
    Ok(list)
}

/// A bounded, quoted excerpt of hostile text for an error.
fn excerpt(v: &str) -> String {
    let short: String = v.chars().take(40).collect();
    if short.len() < v.len() {
        format!("{short:?}…")
    } else {
        format!("{short:?}")
    }
}

fn is_slug(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_ID
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
        && s.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
}

fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn validate(t: RuleTable, origin: &str, index: usize) -> Result<Rule, PolicyError> {
    let place = format!("#{index} ({origin})");
    let id =
        t.id.ok_or_else(|| PolicyError::new(&place, "id", "is required"))?;
    if !is_slug(&id) {
        return Err(PolicyError::new(
            &place,
            "id",
            format!(
                "{} is not a short slug (lowercase letters, digits, `-`, `_`; at most {MAX_ID})",
                excerpt(&id)
            ),
        ));
    }
    let r = format!("{id:?}");
    let r = r.as_str();
    let decision = match t.decision.as_deref() {
        None => return Err(PolicyError::new(r, "decision", "is required")),
        Some("allow") => Decision::Allow,
        Some("deny") => Decision::Deny,
        Some("ask") => Decision::Ask,
        Some(other) => {
            return Err(PolicyError::new(
                r,
                "decision",
                format!("must be allow, deny or ask (got {})", excerpt(other)),
            ));
        }
    };
    let reason = t
        .reason
        .filter(|s| !s.trim().is_empty())
        .ok_or_else(|| PolicyError::new(r, "reason", "is required"))?;
    if reason.len() > 500 {
        return Err(PolicyError::new(r, "reason", "is longer than 500 bytes"));
    }
    let kind_names = names(
        r,
        "kind",
        t.kind,
        |k| ToolKind::parse(k).is_some(),
        "a tool kind",
    )?;
    let mut kinds: Vec<ToolKind> = kind_names
        .iter()
        .filter_map(|k| ToolKind::parse(k))
        .collect();
    if let Some(program) = &t.program {
        if program.is_empty() || program.contains('/') || program.contains(char::is_whitespace) {
            return Err(PolicyError::new(
                r,
                "program",
                format!(
                    "{} must be a bare program name (no `/`, no spaces): it matches that word or the same name in a standard bin directory",
                    excerpt(program)
                ),
            ));
        }
        match kinds.as_slice() {
            [] => kinds.push(ToolKind::Execute),
            [ToolKind::Execute] => {}
            _ => {
                return Err(PolicyError::new(
                    r,
                    "kind",
                    "a rule with a program applies to the execute kind only",
                ));
            }
        }
        if t.args_prefix.as_ref().is_some_and(|a| a.len() > 32) {
            return Err(PolicyError::new(r, "args_prefix", "has more than 32 words"));
        }
    } else if t.args_prefix.is_some() {
        return Err(PolicyError::new(
            r,
            "args_prefix",
            "needs a program to follow",
        ));
    }
    let workspace = names(
        r,
        "workspace",
        t.workspace,
        |w| WorkspaceKind::parse(w).is_some(),
        "sandbox, copy or shared",
    )?
    .iter()
    .filter_map(|w| WorkspaceKind::parse(w))
    .collect();
    let agents = names(r, "agent", t.agent, is_name, "an agent name")?;
    let roles = names(r, "role", t.role, is_name, "a role name")?;
    let paths = match t.paths {
        None => None,
        Some(list) if list.is_empty() => {
            return Err(PolicyError::new(
                r,
                "paths",
                "is empty; leave it out to match any",
            ));
        }
        Some(list) => Some(Globs::new(&list).map_err(|b| {
            PolicyError::new(r, "paths", format!("{} {}", excerpt(&b.glob), b.why))
        })?),
    };
    if decision == Decision::Allow {
        let program = t.program.as_deref().ok_or_else(|| {
            PolicyError::new(
                r,
                "decision",
                "allow is accepted only on the execute kind with a program; a policy may narrow anything else, never widen it",
            )
        })?;
        if LAUNCHERS.contains(&program) {
            return Err(PolicyError::new(
                r,
                "program",
                format!("{program} runs whatever its arguments name, so it cannot be allowed"),
            ));
        }
    }
    Ok(Rule {
        id,
        kinds,
        program: t.program,
        args_prefix: t.args_prefix.unwrap_or_default(),
        paths,
        workspace,
        owned: t.owned,
        agents,
        roles,
        decision,
        reason,
    })
}
