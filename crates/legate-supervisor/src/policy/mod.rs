//! The declarative policy: rules in order above the built-in table.
//!
//! A [`Policy`] is a list of [`Rule`]s read from `[[policy.rules]]` (and a policy file,
//! [`load`]). [`Policed`] answers a request with the first rule that matches it, and with the
//! table ([`crate::Rules`]) when none does. A rule matches on the tool kind, the workspace kind
//! and whether Legate owns it, the agent and role, path globs relative to the root
//! ([`paths`]), and for commands the program and argument prefix, read as parsed words
//! ([`command`]).
//!
//! What a rule can never do (the widening limits):
//! * `allow` is accepted only on the `execute` kind with a program (checked at load), matches
//!   only a plain command, and grants only an offered allow option ([`crate::options`]);
//! * a read-only task refuses every change whatever a rule says: the table answers it;
//! * an `ask` on anything but an execute rule naming a program only puts to a supervisor
//!   what the table would allow; what the table refuses stays refused, so an edit outside the
//!   root can never be allowed by a person either;
//! * kernel confinement of the agent process applies regardless; nothing here touches it.
//!
//! This module must never perform I/O beyond resolving the paths a request names.

pub mod command;
pub mod load;
pub mod paths;

pub use command::Command;
pub use load::{PolicyError, PolicyTable, RuleTable, parse_file};

use crate::options::{pick_allow, pick_reject};
use crate::{Rules, Supervision, Supervisor};
use legate_core::{
    Decider, Decision, PermissionRequest, Ruling, TaskMode, ToolKind, WorkspaceKind,
};
use paths::{Globs, Place};
use std::fmt;

/// The rules, in order.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    rules: Vec<Rule>,
}

/// One validated rule.
#[derive(Debug, Clone)]
pub struct Rule {
    /// A short slug, unique in the policy.
    pub id: String,
    /// The tool kinds it applies to; empty for every kind.
    pub kinds: Vec<ToolKind>,
    /// The program (a bare name) of an execute rule.
    pub program: Option<String>,
    /// The words that must follow the program, in order.
    pub args_prefix: Vec<String>,
    /// Globs the request's locations must match.
    pub paths: Option<Globs>,
    /// The workspace kinds it applies to; empty for every kind.
    pub workspace: Vec<WorkspaceKind>,
    /// Whether Legate must own the root (`true`) or must not (`false`).
    pub owned: Option<bool>,
    /// The agents it applies to; empty for every agent.
    pub agents: Vec<String>,
    /// The roles it applies to; empty for every role.
    pub roles: Vec<String>,
    /// What it decides.
    pub decision: Decision,
    /// Why, in one sentence.
    pub reason: String,
}

/// Why a rule does not match a request (for `legate policy explain`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Miss {
    /// The tool kind is not one of the rule's.
    Kind,
    /// The workspace kind is not one of the rule's.
    Workspace,
    /// Ownership differs.
    Owned,
    /// The agent is not one of the rule's.
    Agent,
    /// The role is not one of the rule's.
    Role,
    /// The call carries no command to read.
    NoCommand,
    /// The command chains, expands or redirects, so it never matches an `allow`.
    NotPlain,
    /// The program (or, for deny/ask, every segment's) differs.
    Program,
    /// The arguments do not start with the rule's prefix.
    Args,
    /// The call names no path.
    NoPaths,
    /// A path is outside the root or matches no glob.
    Paths,
}

impl fmt::Display for Miss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Miss::Kind => "the tool kind is not one it names",
            Miss::Workspace => "the workspace kind is not one it names",
            Miss::Owned => "whether Legate owns the root differs",
            Miss::Agent => "the agent is not one it names",
            Miss::Role => "the role is not one it names",
            Miss::NoCommand => "the call carries no command in rawInput",
            Miss::NotPlain => {
                "the command is not one plain simple command (it chains, expands, redirects or does not parse), so no allow rule matches it"
            }
            Miss::Program => "the program is not the one it names",
            Miss::Args => "the arguments do not start with its args_prefix",
            Miss::NoPaths => "the call names no path",
            Miss::Paths => {
                "a path it names is outside the root or matches none of its globs"
            }
        })
    }
}

/// What one request looks like to the rules: parsed once, however many rules read it.
struct Call<'a> {
    supervision: &'a Supervision,
    request: &'a PermissionRequest,
    command: std::cell::OnceCell<Option<Command>>,
    places: std::cell::OnceCell<Vec<Place>>,
}

impl<'a> Call<'a> {
    fn new(supervision: &'a Supervision, request: &'a PermissionRequest) -> Self {
        Self {
            supervision,
            request,
            command: std::cell::OnceCell::new(),
            places: std::cell::OnceCell::new(),
        }
    }

    /// The command from `rawInput`; without one, the title read as a command, which can only
    /// ever match a deny or ask rule (it is never plain).
    fn command(&self) -> Option<&Command> {
        self.command
            .get_or_init(|| {
                Command::from_raw_input(self.request.raw_input.as_ref()).or_else(|| {
                    (self.request.tool_kind == ToolKind::Execute
                        && !self.request.title.trim().is_empty())
                    .then(|| {
                        let mut from_title = Command::from_script(&self.request.title);
                        from_title.plain = None;
                        from_title
                    })
                })
            })
            .as_ref()
    }

    fn places(&self) -> &[Place] {
        self.places
            .get_or_init(|| paths::places(&self.supervision.boundary.root, &self.request.locations))
    }
}

impl Rule {
    /// Whether this rule matches the call; the first reason it does not, otherwise.
    fn check(&self, call: &Call<'_>) -> Result<(), Miss> {
        let s = call.supervision;
        let r = call.request;
        if !self.kinds.is_empty() && !self.kinds.contains(&r.tool_kind) {
            return Err(Miss::Kind);
        }
        if !self.workspace.is_empty() && !self.workspace.contains(&s.workspace) {
            return Err(Miss::Workspace);
        }
        if self.owned.is_some_and(|o| o != s.boundary.owned) {
            return Err(Miss::Owned);
        }
        if !self.agents.is_empty() && !self.agents.contains(&s.agent) {
            return Err(Miss::Agent);
        }
        if !self.roles.is_empty() && !self.roles.contains(&s.role) {
            return Err(Miss::Role);
        }
        if let Some(program) = &self.program {
            self.check_command(program, call.command())?;
        }
        if let Some(globs) = &self.paths {
            let places = call.places();
            if places.is_empty() {
                // Deny and ask fail closed for a file call that names no path: its path is
                // unknown, so it may be one of the rule's (the table allows a path-less edit
                // in a root Legate owns). Other kinds name no paths by nature.
                let file_kind = matches!(
                    r.tool_kind,
                    ToolKind::Read | ToolKind::Edit | ToolKind::Delete | ToolKind::Move
                );
                if self.decision != Decision::Allow && file_kind {
                    return Ok(());
                }
                return Err(Miss::NoPaths);
            }
            let hit = if self.decision == Decision::Allow {
                paths::all_match(globs, places)
            } else {
                paths::any_match(globs, places)
            };
            if !hit {
                return Err(Miss::Paths);
            }
        }
        Ok(())
    }

    fn check_command(&self, program: &str, command: Option<&Command>) -> Result<(), Miss> {
        let Some(command) = command else {
            return Err(Miss::NoCommand);
        };
        let fits = |words: &[String]| -> Result<(), Miss> {
            let first = words.first().and_then(|w| command::program_name(w));
            if first != Some(program) {
                return Err(Miss::Program);
            }
            if !words[1..].starts_with(&self.args_prefix) {
                return Err(Miss::Args);
            }
            Ok(())
        };
        if self.decision == Decision::Allow {
            return match &command.plain {
                Some(words) => fits(words),
                None => Err(Miss::NotPlain),
            };
        }
        // Deny and ask: fail closed. A command that cannot be read matches; otherwise any of
        // its simple commands may.
        if command.unreadable {
            return Ok(());
        }
        let mut miss = Miss::Program;
        for segment in &command.segments {
            // Behind a launcher (`exec`, `command`, `sudo`, `env X=1`, `timeout 5`, …) the
            // program is a later word: every later word is tried as the program (fail closed).
            let launched = segment
                .first()
                .and_then(|w| command::program_name(w))
                .is_some_and(|p| load::LAUNCHERS.contains(&p));
            let starts = if launched { segment.len() } else { 1 };
            for start in 0..starts {
                match fits(&segment[start..]) {
                    Ok(()) => return Ok(()),
                    Err(Miss::Args) => miss = Miss::Args,
                    Err(_) => {}
                }
            }
        }
        Err(miss)
    }

    /// Whether this rule may take a request past the table: an execute rule naming a program.
    fn may_widen(&self) -> bool {
        self.program.is_some()
    }
}

impl Policy {
    /// A policy of no rules: the table decides everything.
    pub fn empty() -> Self {
        Self::default()
    }

    /// Whether it has no rules.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The rules, in order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    fn first_match(&self, call: &Call<'_>) -> Option<&Rule> {
        self.rules.iter().find(|rule| rule.check(call).is_ok())
    }
}

/// The supervisor with a policy: the first matching rule decides, else the table.
#[derive(Debug, Clone, Default)]
pub struct Policed<T = Rules> {
    /// The rules.
    pub policy: Policy,
    /// What decides when no rule matches, and what every limit is checked against.
    pub table: T,
}

/// Which rule decided a request, and why every rule before it did not match.
#[derive(Debug, Clone)]
pub struct Explanation {
    /// The ruling, as an agent would get it.
    pub ruling: Ruling,
    /// The rule that matched, if any (`None`: the built-in table decided).
    pub matched: Option<String>,
    /// Each rule tried before it (or every rule), with the reason it did not match.
    pub skipped: Vec<(String, Miss)>,
    /// When a rule matched but a limit handed the request to the table, why.
    pub overruled: Option<String>,
}

impl<T: Supervisor> Policed<T> {
    /// The policy above `table`.
    pub fn new(policy: Policy, table: T) -> Self {
        Self { policy, table }
    }

    /// Decides `request` and says which rule decided and why the others did not match.
    pub fn explain(&self, supervision: &Supervision, request: &PermissionRequest) -> Explanation {
        let call = Call::new(supervision, request);
        let mut skipped = Vec::new();
        for rule in self.policy.rules() {
            match rule.check(&call) {
                Ok(()) => {
                    let (ruling, overruled) = self.apply(rule, &call);
                    return Explanation {
                        ruling,
                        matched: Some(rule.id.clone()),
                        skipped,
                        overruled,
                    };
                }
                Err(miss) => skipped.push((rule.id.clone(), miss)),
            }
        }
        Explanation {
            ruling: self.table.decide(supervision, request),
            matched: None,
            skipped,
            overruled: None,
        }
    }

    /// The ruling of `rule` on `call`, and why the table answered instead, when it did.
    fn apply(&self, rule: &Rule, call: &Call<'_>) -> (Ruling, Option<String>) {
        let s = call.supervision;
        let request = call.request;
        let ruled = |decision, option_id: Option<String>, reason: String| Ruling {
            decision,
            option_id,
            reason,
            decider: Decider::Policy,
            rule_id: Some(rule.id.clone()),
        };
        let refuse = |reason: String| {
            ruled(
                Decision::Deny,
                pick_reject(&request.options, &s.preset).map(|o| o.id.clone()),
                reason,
            )
        };
        if rule.decision == Decision::Deny {
            return (refuse(rule.reason.clone()), None);
        }
        if s.mode == TaskMode::ReadOnly && rule.may_widen() {
            return (
                self.table.decide(s, request),
                Some("the task is read-only, which no rule can widen".into()),
            );
        }
        if !rule.may_widen() {
            // An ask that names no program only narrows: it asks about what the table allows.
            let table = self.table.decide(s, request);
            if table.decision != Decision::Allow {
                return (
                    table,
                    Some(
                        "an ask naming no program only narrows, and the table refuses this".into(),
                    ),
                );
            }
        }
        let Some(allow) = pick_allow(&request.options, &s.preset) else {
            return (
                refuse(format!(
                    "{}, but the agent offered no option that allows it",
                    rule.reason
                )),
                None,
            );
        };
        let ruling = match rule.decision {
            Decision::Allow => ruled(Decision::Allow, Some(allow.id.clone()), rule.reason.clone()),
            _ => ruled(Decision::Ask, None, rule.reason.clone()),
        };
        (ruling, None)
    }
}

impl<T: Supervisor> Supervisor for Policed<T> {
    fn decide(&self, supervision: &Supervision, request: &PermissionRequest) -> Ruling {
        if self.policy.is_empty() {
            return self.table.decide(supervision, request);
        }
        let call = Call::new(supervision, request);
        match self.policy.first_match(&call) {
            Some(rule) => {
                let (ruling, overruled) = self.apply(rule, &call);
                tracing::debug!(
                    rule = %rule.id,
                    decision = ?ruling.decision,
                    overruled = overruled.as_deref(),
                    "policy rule matched"
                );
                ruling
            }
            None => self.table.decide(supervision, request),
        }
    }
}

#[cfg(test)]
mod tests;
