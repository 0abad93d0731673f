//! Taking groups over: at start and about once a second, an engine that takes groups over
//! (`EngineConfig::take_over_groups`: not a one-shot command's) claims every group that
//! still has work (running, or paused or canceled with nodes whose ends are not recorded)
//! and whose driving runner is gone (none, or dead), with a compare-and-set on the runner
//! column (of two engines, one wins), and drives it. Any engine takes over the one group it
//! is asked to wait on (`continue_group`). The recovery that ran before has
//! marked the dead runner's tasks `SERVER_RESTARTED`; the driver then pauses the group on
//! such a node. Nothing is re-run: resuming is the caller's `group_start`.
//!
//! This module never claims a group a live runner drives.

use super::status::GroupState;
use crate::core::Core;
use crate::core::runner;

impl Core {
    /// Claims `group` from `runner` (its current driver, if any) unless a live engine drives
    /// it, and drives it here.
    pub(crate) fn take_over(&self, group: &str, current: Option<&str>) {
        if self.claim(group, current) {
            self.ensure_driver(group);
        }
    }

    /// Claims `group` from `current` (its driver, if any) for this engine unless a live engine
    /// drives it; whether this engine now drives it. Claiming does not start a driver: a
    /// caller that is about to change the group's state claims first, so that no other engine
    /// takes over a group between the change and the claim.
    pub(crate) fn claim(&self, group: &str, current: Option<&str>) -> bool {
        let own = self.runner_id().to_string();
        let run_dir = self.config().paths.run();
        match current {
            Some(r) if r == own => true,
            Some(r) if runner::is_alive(&run_dir, r) => false,
            _ => match self.store().claim_group(group, current, Some(&own)) {
                Ok(true) => {
                    tracing::info!(group, from = ?current, "group taken over");
                    true
                }
                Ok(false) => false,
                Err(e) => {
                    tracing::warn!(group, error = %e, "could not claim a group");
                    false
                }
            },
        }
    }

    /// Takes over every group with work left whose driver is gone (see the module docs), when
    /// this engine takes groups over.
    pub(crate) fn continue_groups(&self) {
        if *self.shutdown_signal().borrow() || !self.config().take_over_groups {
            return;
        }
        for state in [
            GroupState::Running,
            GroupState::Paused,
            GroupState::Canceled,
        ] {
            let groups = match self.store().groups_in(state.as_str()) {
                Ok(g) => g,
                Err(e) => {
                    tracing::warn!(error = %e, "could not list groups to continue");
                    return;
                }
            };
            for (id, runner) in groups {
                self.continue_in(state, &id, runner.as_deref());
            }
        }
    }

    /// Takes over `group` if it has work left and its driver is gone, whether or not this
    /// engine takes groups over on its own: a caller waits on it.
    pub(crate) fn continue_group(&self, group: &str) {
        if *self.shutdown_signal().borrow() {
            return;
        }
        match self.store().group(group) {
            Ok(Some(g)) => match GroupState::parse(&g.state) {
                Some(state) => self.continue_in(state, group, g.runner.as_deref()),
                None => {
                    tracing::warn!(group, state = %g.state, "a group's stored state is unknown")
                }
            },
            Ok(None) => {}
            Err(e) => tracing::warn!(group, error = %e, "could not read a group to continue"),
        }
    }

    /// Takes over `group`, stored in `state` and driven by `runner`, if it has work left.
    fn continue_in(&self, state: GroupState, group: &str, runner: Option<&str>) {
        let has_work = match state {
            GroupState::Running => true,
            GroupState::Paused | GroupState::Canceled => self.has_unsettled_nodes(group),
            _ => false,
        };
        if !has_work || (runner == Some(self.runner_id()) && super::scheduler_driving(self, group))
        {
            return;
        }
        self.take_over(group, runner);
    }

    fn has_unsettled_nodes(&self, id: &str) -> bool {
        self.store().group_nodes(id).is_ok_and(|nodes| {
            nodes.iter().any(|n| {
                n.state == super::NodeState::Running.as_str()
                    || n.state == super::NodeState::Admitting.as_str()
            })
        })
    }
}
