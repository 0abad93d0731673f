//! The built-in rule table (seed `000`, "The rules").
//!
//! | tool kind | decision |
//! |---|---|
//! | read, search, think | allow: nothing changes |
//! | edit, delete, move with locations | allow if every path resolves inside the root |
//! | edit, delete, move without locations | allow only if the root is Legate's own |
//! | switch_mode | allow only the offered option that keeps supervision; owning the directory grants nothing |
//!
//! A `switch_mode` call whose `rawInput` names the supervised mode is still answered from the
//! options: the key may be the model's own writing (Claude's `ExitPlanMode` input), and the
//! option chosen is what decides where the agent goes. Only an option the preset knows to
//! keep supervision, or one whose id is that mode, is chosen; anything else is refused.
//! | execute, fetch, other | allow only if the root is Legate's own, or `allow_execute` |
//!
//! A read-only task additionally gets every edit, delete, move, execute, fetch and other tool
//! refused. The answer is always an option the agent offered ([`crate::options`]), or none.

use crate::containment::resolve_within;
use crate::options::{pick_allow, pick_reject};
use crate::preset::PlanExit;
use crate::{Preset, Supervision, Supervisor};
use legate_core::{Decision, PermissionOption, PermissionRequest, Ruling, TaskMode, ToolKind};

/// The keys of `rawInput` that can name the mode a `switch_mode` call goes to.
pub const MODE_KEYS: &[&str] = &["modeId", "mode", "currentModeId"];

/// The built-in rules: the table above, nothing else.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rules;

impl Supervisor for Rules {
    fn decide(&self, supervision: &Supervision, request: &PermissionRequest) -> Ruling {
        let answer = Answer {
            request,
            preset: &supervision.preset,
        };
        let kind = request.tool_kind;
        if supervision.mode == TaskMode::ReadOnly && changes_things(kind) {
            return answer.deny("the task is read-only".into());
        }
        match kind {
            ToolKind::Read | ToolKind::Search | ToolKind::Think => {
                answer.allow(format!("a {} call changes nothing", kind.as_str()))
            }
            ToolKind::Edit | ToolKind::Delete | ToolKind::Move => file_change(supervision, &answer),
            ToolKind::Execute | ToolKind::Fetch | ToolKind::Other => opaque(supervision, &answer),
            ToolKind::SwitchMode => switch_mode(&answer),
        }
    }
}

/// Whether a read-only task must refuse this kind.
fn changes_things(kind: ToolKind) -> bool {
    matches!(
        kind,
        ToolKind::Edit
            | ToolKind::Delete
            | ToolKind::Move
            | ToolKind::Execute
            | ToolKind::Fetch
            | ToolKind::Other
    )
}

/// Edit, delete, move.
fn file_change(supervision: &Supervision, answer: &Answer<'_>) -> Ruling {
    let boundary = &supervision.boundary;
    let root = boundary.root.display();
    let locations = &answer.request.locations;
    if locations.is_empty() {
        return if boundary.owned {
            answer.allow(format!(
                "it names no paths, and the root {root} is a directory Legate owns"
            ))
        } else {
            answer.deny(format!(
                "a {} that names no paths is allowed only in a directory Legate owns",
                answer.request.tool_kind.as_str()
            ))
        };
    }
    for location in locations {
        if let Err(outside) = resolve_within(&boundary.root, location) {
            return answer.deny(outside.to_string());
        }
    }
    answer.allow(format!("every path it names is inside the root {root}"))
}

/// Execute, fetch, other: their effects cannot be read off the call, so the containment
/// has to come from the directory.
fn opaque(supervision: &Supervision, answer: &Answer<'_>) -> Ruling {
    let boundary = &supervision.boundary;
    let root = boundary.root.display();
    if boundary.owned {
        return answer.allow(format!("the root {root} is a directory Legate owns"));
    }
    if boundary.allow_execute {
        return answer.allow(format!(
            "opaque tools are allowed in the shared root {root} by configuration"
        ));
    }
    let what = match answer.request.tool_kind {
        ToolKind::Execute => "shell commands",
        ToolKind::Fetch => "fetches",
        _ => "tools whose effect cannot be checked",
    };
    answer.deny(format!("{what} run only in a directory Legate owns"))
}

/// What a `switch_mode` call's `rawInput` says about its destination.
enum Destination<'a> {
    /// It names this mode.
    Mode(&'a str),
    /// It has a mode key whose value is not text.
    Unreadable(&'a str),
    /// It names no mode (a plan exit: the destination is in the option ids).
    Unnamed,
}

fn destination(request: &PermissionRequest) -> Destination<'_> {
    let Some(object) = request.raw_input.as_ref().and_then(|v| v.as_object()) else {
        return Destination::Unnamed;
    };
    for key in MODE_KEYS {
        if let Some(value) = object.get(*key) {
            return match value.as_str() {
                Some(mode) => Destination::Mode(mode),
                None => Destination::Unreadable(key),
            };
        }
    }
    Destination::Unnamed
}

/// Switch mode: owning the directory grants nothing here, because the session mode is what
/// makes the agent ask at all.
fn switch_mode(answer: &Answer<'_>) -> Ruling {
    let preset = answer.preset;
    match destination(answer.request) {
        // The key is in `rawInput`, which the model may have written (Claude's ExitPlanMode
        // passes the tool's input through): where the agent lands is decided by the option
        // chosen, so only an option known to keep supervision, or one that names this very
        // mode, is chosen.
        Destination::Mode(mode) if preset.is_supervised_mode(mode) => {
            match keeping_option(answer, Some(mode)) {
                Some(option) => answer.allow_with(
                    option,
                    format!("{mode} is the mode in which the agent still asks before acting"),
                ),
                None => answer.deny(format!(
                    "the call names {mode}, but the option chosen decides where the agent goes: {}",
                    no_keeping_option(answer)
                )),
            }
        }
        Destination::Mode(mode) => match &preset.supervised_mode {
            Some(supervised) => answer.deny(format!(
                "switching to {mode} would leave the supervised mode {supervised}"
            )),
            None => answer.deny(format!(
                "switching to {mode} is refused because the {} preset knows no supervised mode",
                preset.name
            )),
        },
        Destination::Unreadable(key) => answer.deny(format!(
            "the mode named by rawInput.{key} is not text, so where it leads cannot be checked"
        )),
        Destination::Unnamed => plan_exit(answer),
    }
}

/// The first offered allow option that the preset knows keeps supervision (or whose id is
/// `named`, the supervised mode the call names), `allow_once` before `allow_always`. An
/// option the preset knows to elevate is never one of them.
fn keeping_option<'a>(answer: &Answer<'a>, named: Option<&str>) -> Option<&'a PermissionOption> {
    let keeps = |o: &&PermissionOption| {
        let effect = answer.preset.plan_exit(&o.id);
        o.kind.is_allow()
            && (effect == Some(PlanExit::KeepsSupervision)
                || (effect.is_none() && named == Some(o.id.as_str())))
    };
    let options = &answer.request.options;
    options
        .iter()
        .filter(keeps)
        .find(|o| o.kind == legate_core::OptionKind::AllowOnce)
        .or_else(|| options.iter().find(keeps))
}

/// A plan exit naming no mode: answered from the preset's option table. An option whose
/// effect is unknown is never chosen.
fn plan_exit(answer: &Answer<'_>) -> Ruling {
    match keeping_option(answer, None) {
        Some(option) => answer.allow_with(
            option,
            format!(
                "{} leaves planning for a mode in which the agent still asks before acting",
                option.id
            ),
        ),
        None => answer.deny(no_keeping_option(answer)),
    }
}

/// Why no offered option was chosen to leave planning: which ids would elevate, and which
/// lead somewhere the preset does not know.
fn no_keeping_option(answer: &Answer<'_>) -> String {
    let ids = |effect: Option<PlanExit>| -> Vec<&str> {
        answer
            .request
            .options
            .iter()
            .filter(|o| o.kind.is_allow() && answer.preset.plan_exit(&o.id) == effect)
            .map(|o| o.id.as_str())
            .collect()
    };
    let elevating = ids(Some(PlanExit::Elevates));
    let unknown = ids(None);
    match (elevating.is_empty(), unknown.is_empty()) {
        (true, true) => "no option offered leaves planning for a supervised mode".to_string(),
        (false, true) => format!(
            "every way out of planning offered ({}) would leave the supervised mode",
            elevating.join(", ")
        ),
        (true, false) => format!(
            "the {} preset does not know where {} would lead, so it is not chosen",
            answer.preset.name,
            unknown.join(", ")
        ),
        (false, false) => format!(
            "every way out of planning offered would leave the supervised mode ({}) or lead somewhere the {} preset does not know ({})",
            elevating.join(", "),
            answer.preset.name,
            unknown.join(", ")
        ),
    }
}

/// Turns a ruling into a verdict with an offered option.
struct Answer<'a> {
    request: &'a PermissionRequest,
    preset: &'a Preset,
}

impl<'a> Answer<'a> {
    /// Allows with the preferred allow option; denies when none was offered.
    fn allow(&self, reason: String) -> Ruling {
        match pick_allow(&self.request.options, self.preset) {
            Some(option) => self.allow_with(option, reason),
            None => self.deny(format!(
                "{reason}, but the agent offered no option that allows it"
            )),
        }
    }

    /// Allows with this option, which must be one of the offered allow options.
    fn allow_with(&self, option: &PermissionOption, reason: String) -> Ruling {
        Ruling::new(Decision::Allow, Some(option.id.clone()), reason)
    }

    /// Denies with the preferred refusal, or `None` (answered as `cancelled`).
    fn deny(&self, reason: String) -> Ruling {
        Ruling::new(
            Decision::Deny,
            pick_reject(&self.request.options, self.preset).map(|o| o.id.clone()),
            reason,
        )
    }
}

#[cfg(test)]
mod tests;
