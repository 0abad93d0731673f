//! Taking groups over: at start and about once a second, an engine claims every group that
//! still has work (running, or paused or canceled with nodes whose ends are not recorded)
//! and whose driving runner is gone (none, or dead), with a compare-and-set on the runner
//! column (of two engines, one wins), and drives it. The recovery that ran before has
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

    /// Takes over every group with work left whose driver is gone (see the module docs).
    pub(crate) fn continue_groups(&self) {
        if *self.shutdown_signal().borrow() {
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
                if state != GroupState::Running && !self.has_unsettled_nodes(&id) {
                    continue;
                }
                if runner.as_deref() == Some(self.runner_id())
                    && super::scheduler_driving(self, &id)
                {
                    continue;
                }
                self.take_over(&id, runner.as_deref());
            }
        }
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
