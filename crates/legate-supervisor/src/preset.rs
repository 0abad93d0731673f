//! What Legate knows about one adapter's options and modes.
//!
//! The facts here are read off the adapters themselves (`/work/shared/ACP-ADAPTERS.md`,
//! seed `000`): the mode in which each one asks before acting, where each way out of plan
//! mode lands, and which refusals end the whole turn. The tables are explicit rather than
//! pattern-matched, so an option whose effect was never verified is not in them, and the
//! rules refuse it. Each preset also names the adapter versions it was verified against
//! ([`Preset::verified`], checked by [`Preset::check_version`]).

use crate::version::{self, Verified, Version, VersionCheck};

/// Where choosing a plan-exit option leaves the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PlanExit {
    /// The agent stays in (or returns to) the mode in which it asks before acting.
    KeepsSupervision,
    /// The agent lands in a mode that acts without asking.
    Elevates,
}

/// How a plan-exit entry matches an option id.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum IdMatch {
    /// The id is exactly this.
    Exact(String),
    /// The id starts with this (Claude's `exit-plan-clear-*`).
    Prefix(String),
}

impl IdMatch {
    /// Whether `id` matches.
    pub fn matches(&self, id: &str) -> bool {
        match self {
            Self::Exact(exact) => id == exact,
            Self::Prefix(prefix) => id.starts_with(prefix.as_str()),
        }
    }
}

/// One row of a plan-exit table.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PlanExitRule {
    /// Which option ids this row is about.
    pub id: IdMatch,
    /// Where they land.
    pub effect: PlanExit,
}

/// What Legate knows about one adapter.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Preset {
    /// The preset's name (`claude`, `codex`, …).
    pub name: String,
    /// The session mode in which the agent asks before acting; `None` when unknown, and
    /// then no mode switch is ever allowed.
    pub supervised_mode: Option<String>,
    /// Where each known plan-exit option lands. An id in no row has an unknown effect.
    pub plan_exits: Vec<PlanExitRule>,
    /// Refusal option ids that end the whole turn rather than refusing one tool call.
    pub turn_ending_refusals: Vec<String>,
    /// The packages and versions this preset was verified against (the `agentInfo` name and
    /// version each announces). Empty: no version is tracked.
    pub verified: Vec<Verified>,
}

/// The date of the last verification of the current adapters (`docs/backends/acp.md`).
pub const VERIFIED_ON: &str = "2026-12-05";

fn range(package: &str, from: (u64, u64, u64), below: (u64, u64, u64)) -> Verified {
    Verified::new(
        package,
        Version::new(from.0, from.1, from.2),
        Version::new(below.0, below.1, below.2),
        VERIFIED_ON,
    )
}

fn exact(id: &str, effect: PlanExit) -> PlanExitRule {
    PlanExitRule {
        id: IdMatch::Exact(id.to_string()),
        effect,
    }
}

fn prefix(id: &str, effect: PlanExit) -> PlanExitRule {
    PlanExitRule {
        id: IdMatch::Prefix(id.to_string()),
        effect,
    }
}

fn strings(ids: &[&str]) -> Vec<String> {
    ids.iter().map(|s| s.to_string()).collect()
}

impl Preset {
    /// The names [`Preset::by_name`] knows.
    pub const NAMES: &'static [&'static str] = &["claude", "codex", "gemini", "revisor", "generic"];

    /// `claude-agent-acp`: supervised in `default`. At a plan exit the adapter
    /// (`@zed-industries/claude-agent-acp` 0.23, `@agentclientprotocol/claude-agent-acp` 0.49,
    /// `canUseTool("ExitPlanMode")`) offers the destination mode as the option id: `default`
    /// ("Yes, and manually approve edits") keeps supervision; `acceptEdits`, `auto` and
    /// `bypassPermissions` elevate; `plan` ("No, keep planning", `reject_once`) refuses and
    /// lets the turn go on. The seed's `exit-plan-*` ids (a bridge whose effect table is
    /// `dist/permissions/effects.js`) are kept beside them, and
    /// `@agentclientprotocol/claude-agent-acp` 0.101 offers exactly those again
    /// (`exit-plan-default`, `exit-plan-auto`, `exit-plan-bypass`, and `reject`; observed
    /// 2026-12-01). Its `reject` lets the turn go on.
    pub fn claude() -> Self {
        use PlanExit::*;
        Self {
            name: "claude".into(),
            supervised_mode: Some("default".into()),
            plan_exits: vec![
                exact("default", KeepsSupervision),
                exact("acceptEdits", Elevates),
                exact("auto", Elevates),
                exact("bypassPermissions", Elevates),
                exact("exit-plan-default", KeepsSupervision),
                exact("exit-plan-accept-edits", Elevates),
                exact("exit-plan-auto", Elevates),
                exact("exit-plan-bypass", Elevates),
                prefix("exit-plan-clear-", Elevates),
            ],
            turn_ending_refusals: Vec::new(),
            verified: vec![
                range(
                    "@agentclientprotocol/claude-agent-acp",
                    (0, 101, 0),
                    (0, 102, 0),
                ),
                range("@zed-industries/claude-agent-acp", (0, 23, 1), (0, 24, 0)),
            ],
        }
    }

    /// `codex-acp`: supervised in `read-only`; `implement_plan` changes no mode. Its
    /// `abort` (and the older `cancel`) end the turn; the older `decline` does not.
    pub fn codex() -> Self {
        Self {
            name: "codex".into(),
            supervised_mode: Some("read-only".into()),
            plan_exits: vec![exact("implement_plan", PlanExit::KeepsSupervision)],
            turn_ending_refusals: strings(&["abort", "cancel"]),
            verified: vec![
                range("@agentclientprotocol/codex-acp", (2, 6, 0), (2, 7, 0)),
                range("codex-acp", (0, 16, 0), (0, 17, 0)),
            ],
        }
    }

    /// `gemini --acp`: supervised in `default`; no plan exit is verified. Its `cancel`
    /// ends the turn.
    pub fn gemini() -> Self {
        Self {
            name: "gemini".into(),
            supervised_mode: Some("default".into()),
            plan_exits: Vec::new(),
            turn_ending_refusals: strings(&["cancel"]),
            verified: vec![range("gemini-cli", (0, 61, 0), (0, 62, 0))],
        }
    }

    /// Legate's built-in test agent, with Claude-like ids: `allow`, `allow_always`,
    /// `reject`, and `exit-plan-default` / `exit-plan-accept-edits` at plan exit.
    pub fn revisor() -> Self {
        use PlanExit::*;
        Self {
            name: "revisor".into(),
            supervised_mode: Some("default".into()),
            plan_exits: vec![
                exact("exit-plan-default", KeepsSupervision),
                exact("exit-plan-accept-edits", Elevates),
            ],
            turn_ending_refusals: Vec::new(),
            verified: Vec::new(),
        }
    }

    /// Any other ACP agent: no mode is known to be supervised and no plan exit is verified,
    /// so every mode switch is refused. `cancel` and `abort` are assumed to end the turn.
    pub fn generic() -> Self {
        Self {
            name: "generic".into(),
            supervised_mode: None,
            plan_exits: Vec::new(),
            turn_ending_refusals: strings(&["abort", "cancel"]),
            verified: Vec::new(),
        }
    }

    /// The preset with this name (ASCII case ignored), or `None`.
    pub fn by_name(name: &str) -> Option<Self> {
        match name.to_ascii_lowercase().as_str() {
            "claude" => Some(Self::claude()),
            "codex" => Some(Self::codex()),
            "gemini" => Some(Self::gemini()),
            "revisor" => Some(Self::revisor()),
            "generic" => Some(Self::generic()),
            _ => None,
        }
    }

    /// Where choosing the plan-exit option `id` lands; `None` when its effect is unknown.
    /// An exact row wins over a prefix row.
    pub fn plan_exit(&self, id: &str) -> Option<PlanExit> {
        let exact = self
            .plan_exits
            .iter()
            .find(|r| matches!(&r.id, IdMatch::Exact(e) if e == id));
        exact
            .or_else(|| self.plan_exits.iter().find(|r| r.id.matches(id)))
            .map(|r| r.effect)
    }

    /// Whether refusing with option `id` ends the whole turn.
    pub fn ends_turn(&self, id: &str) -> bool {
        self.turn_ending_refusals.iter().any(|t| t == id)
    }

    /// Whether the agent's announced `agentInfo` name and version lie in a verified range.
    pub fn check_version(&self, name: Option<&str>, version: Option<&str>) -> VersionCheck {
        version::check(&self.verified, name, version)
    }

    /// Whether `mode` is the mode in which this agent asks before acting.
    pub fn is_supervised_mode(&self, mode: &str) -> bool {
        self.supervised_mode.as_deref() == Some(mode)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn by_name_knows_every_name() {
        for name in Preset::NAMES {
            assert_eq!(Preset::by_name(name).unwrap().name, *name);
        }
        assert_eq!(Preset::by_name("Claude"), Some(Preset::claude()));
        assert_eq!(Preset::by_name("nope"), None);
    }

    #[test]
    fn supervised_modes() {
        assert!(Preset::claude().is_supervised_mode("default"));
        assert!(Preset::codex().is_supervised_mode("read-only"));
        assert!(Preset::gemini().is_supervised_mode("default"));
        assert!(Preset::revisor().is_supervised_mode("default"));
        assert!(!Preset::generic().is_supervised_mode("default"));
        assert!(!Preset::claude().is_supervised_mode("acceptEdits"));
    }

    #[test]
    fn plan_exit_tables() {
        use PlanExit::*;
        let claude = Preset::claude();
        assert_eq!(
            claude.plan_exit("exit-plan-default"),
            Some(KeepsSupervision)
        );
        for id in [
            "exit-plan-accept-edits",
            "exit-plan-auto",
            "exit-plan-bypass",
            "exit-plan-clear-default",
            "exit-plan-clear-accept-edits",
        ] {
            assert_eq!(claude.plan_exit(id), Some(Elevates), "{id}");
        }
        assert_eq!(claude.plan_exit("exit-plan-something-new"), None);
        assert_eq!(claude.plan_exit("implement_plan"), None);
        assert_eq!(
            Preset::codex().plan_exit("implement_plan"),
            Some(KeepsSupervision)
        );
        assert_eq!(Preset::codex().plan_exit("exit-plan-default"), None);
        assert_eq!(
            Preset::revisor().plan_exit("exit-plan-default"),
            Some(KeepsSupervision)
        );
        assert_eq!(
            Preset::revisor().plan_exit("exit-plan-accept-edits"),
            Some(Elevates)
        );
        assert_eq!(Preset::gemini().plan_exit("exit-plan-default"), None);
        assert_eq!(Preset::generic().plan_exit("exit-plan-default"), None);
    }

    #[test]
    fn exact_rows_win_over_prefix_rows() {
        let mut p = Preset::claude();
        p.plan_exits
            .push(exact("exit-plan-clear-default", PlanExit::KeepsSupervision));
        assert_eq!(
            p.plan_exit("exit-plan-clear-default"),
            Some(PlanExit::KeepsSupervision)
        );
    }

    #[test]
    fn each_adapter_preset_names_what_it_was_verified_against() {
        let ok = |p: Preset, n: &str, v: &str| {
            assert_eq!(
                p.check_version(Some(n), Some(v)),
                VersionCheck::Verified,
                "{n} {v}"
            )
        };
        ok(
            Preset::claude(),
            "@agentclientprotocol/claude-agent-acp",
            "0.101.0",
        );
        ok(
            Preset::claude(),
            "@zed-industries/claude-agent-acp",
            "0.23.1",
        );
        ok(Preset::codex(), "@agentclientprotocol/codex-acp", "2.6.0");
        ok(Preset::codex(), "codex-acp", "0.16.0");
        ok(Preset::gemini(), "gemini-cli", "0.61.0");
        let too_new =
            Preset::codex().check_version(Some("@agentclientprotocol/codex-acp"), Some("2.7.0"));
        assert!(
            matches!(too_new, VersionCheck::Outside { .. }),
            "{too_new:?}"
        );
        assert_eq!(
            Preset::generic().check_version(Some("x"), Some("1.0.0")),
            VersionCheck::NotTracked
        );
        assert_eq!(
            Preset::revisor().check_version(None, None),
            VersionCheck::NotTracked
        );
    }

    #[test]
    fn turn_ending_refusals() {
        assert!(Preset::codex().ends_turn("abort"));
        assert!(!Preset::codex().ends_turn("decline"));
        assert!(Preset::gemini().ends_turn("cancel"));
        assert!(!Preset::claude().ends_turn("reject"));
        assert!(!Preset::revisor().ends_turn("reject"));
        assert!(Preset::generic().ends_turn("cancel"));
    }
}
