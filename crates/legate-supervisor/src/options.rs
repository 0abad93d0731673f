//! Picking the option to answer with from those the agent offered.
//!
//! The reply is never the word "allow": it is an option id from the list the agent just sent,
//! chosen by its kind. Inventing an id is the one thing that must not happen (Claude kills the
//! turn, Codex silently cancels), so every function here returns one of the offered options
//! or `None`, which the backend answers as `cancelled`.

use crate::Preset;
use crate::preset::PlanExit;
use legate_core::{OptionKind, PermissionOption};

/// The option that lets the tool run: `allow_once` first, then `allow_always`. An option
/// the preset knows to leave the supervised mode (a plan exit that elevates) is never chosen.
pub fn pick_allow<'a>(
    options: &'a [PermissionOption],
    preset: &Preset,
) -> Option<&'a PermissionOption> {
    let usable = |o: &&PermissionOption| preset.plan_exit(&o.id) != Some(PlanExit::Elevates);
    let of_kind = |kind| options.iter().filter(usable).find(|o| o.kind == kind);
    of_kind(OptionKind::AllowOnce).or_else(|| of_kind(OptionKind::AllowAlways))
}

/// The option that refuses the tool: `reject_once` first, then `reject_always`; and among
/// refusals, one that lets the agent carry on before one that ends the whole turn (as the
/// preset knows them, e.g. Codex's `abort`). A denied command should not kill the task.
pub fn pick_reject<'a>(
    options: &'a [PermissionOption],
    preset: &Preset,
) -> Option<&'a PermissionOption> {
    let rank = |o: &PermissionOption| {
        let kind = match o.kind {
            OptionKind::RejectOnce => 0,
            _ => 1,
        };
        (preset.ends_turn(&o.id), kind)
    };
    options
        .iter()
        .filter(|o| matches!(o.kind, OptionKind::RejectOnce | OptionKind::RejectAlways))
        .min_by_key(|o| rank(o))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use OptionKind::*;

    fn opts(list: &[(&str, OptionKind)]) -> Vec<PermissionOption> {
        list.iter()
            .map(|(id, kind)| PermissionOption {
                id: id.to_string(),
                name: id.to_string(),
                kind: *kind,
            })
            .collect()
    }

    fn allow_id(list: &[(&str, OptionKind)]) -> Option<String> {
        pick_allow(&opts(list), &Preset::claude()).map(|o| o.id.clone())
    }

    fn reject_id(list: &[(&str, OptionKind)], preset: &Preset) -> Option<String> {
        pick_reject(&opts(list), preset).map(|o| o.id.clone())
    }

    #[test]
    fn allow_prefers_once_over_always() {
        let claude = [
            ("allow_always", AllowAlways),
            ("allow", AllowOnce),
            ("reject", RejectOnce),
        ];
        assert_eq!(allow_id(&claude).as_deref(), Some("allow"));
        let gemini = [
            ("proceed_always", AllowAlways),
            ("proceed_once", AllowOnce),
            ("cancel", RejectOnce),
        ];
        assert_eq!(allow_id(&gemini).as_deref(), Some("proceed_once"));
        assert_eq!(
            allow_id(&[("always", AllowAlways), ("no", RejectOnce)]).as_deref(),
            Some("always")
        );
        assert_eq!(allow_id(&[("no", RejectOnce)]), None);
        assert_eq!(allow_id(&[]), None);
    }

    #[test]
    fn allow_never_picks_an_option_known_to_elevate() {
        assert_eq!(
            allow_id(&[
                ("exit-plan-bypass", AllowOnce),
                ("exit-plan-default", AllowAlways)
            ])
            .as_deref(),
            Some("exit-plan-default")
        );
        assert_eq!(allow_id(&[("exit-plan-clear-auto", AllowOnce)]), None);
    }

    #[test]
    fn reject_prefers_once_over_always() {
        let p = Preset::generic();
        assert_eq!(
            reject_id(&[("never", RejectAlways), ("no", RejectOnce)], &p).as_deref(),
            Some("no")
        );
        assert_eq!(
            reject_id(&[("never", RejectAlways), ("yes", AllowOnce)], &p).as_deref(),
            Some("never")
        );
        assert_eq!(reject_id(&[("yes", AllowOnce)], &p), None);
        assert_eq!(reject_id(&[], &p), None);
    }

    #[test]
    fn reject_prefers_a_decline_over_ending_the_turn() {
        let codex = Preset::codex();
        // Older codex-acp: `cancel` beside `decline`, both reject_once.
        assert_eq!(
            reject_id(
                &[
                    ("approved", AllowOnce),
                    ("cancel", RejectOnce),
                    ("decline", RejectOnce)
                ],
                &codex
            )
            .as_deref(),
            Some("decline")
        );
        // A decline that refuses similar calls later still beats ending the turn.
        assert_eq!(
            reject_id(
                &[("abort", RejectOnce), ("decline_always", RejectAlways)],
                &codex
            )
            .as_deref(),
            Some("decline_always")
        );
        // When ending the turn is the only refusal, it is the refusal.
        assert_eq!(
            reject_id(&[("approved", AllowOnce), ("abort", RejectOnce)], &codex).as_deref(),
            Some("abort")
        );
    }
}
