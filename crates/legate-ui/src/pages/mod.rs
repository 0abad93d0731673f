//! The pages: each module renders one page from the engine's answers, and nothing else.
//!
//! Pages never decide (an action's checks are the engine's, its errors shown as they come)
//! and never mark agent data as pre-escaped: every string from a task, an event, a patch or
//! an approval goes through maud's escaping.

pub mod actions;
pub mod approvals;
pub mod diff;
pub mod events;
pub mod layout;
pub mod task;
pub mod tasks;
pub mod usage;
