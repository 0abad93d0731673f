//! Legate's integration: a reviewed copy's patch written into the original project, all or
//! nothing, even across a crash.
//!
//! This crate owns the last step of the copy pipeline, one concept per module: `integrate`
//! (the plan from a preview, every result checked in memory before the project is touched,
//! then written through temporary files and renames), `journal` (the crash journal under
//! `$LEGATE_HOME/run/integrations/<task>/`: the intent and every pre-image, synced before the
//! first write) and `rollover` (finishing an integration that stopped: forward when it was
//! decided, back otherwise, and [`recover_integrations`] over every journal left), and
//! `no_links` (every operation in the project made through its parent directory, opened
//! with no symlink followed).
//!
//! It stands on `legate-workspace` (the copy, its baseline, the change model and the line
//! ending rule) and never reviews a patch (`legate-review` does) or records anything: the
//! engine records the integration, then calls [`Pending::finish`], and tells recovery with a
//! [`Standing`] whether an integration was recorded.
//!
//! ```ignore
//! // Needs a copy with its baseline (see `legate_workspace::make_copy`).
//! let preview = legate_review::preview(&baseline, &policy, &limits)?;
//! let changes = legate_integration::plan(&baseline, &preview)?;
//! let pending = legate_integration::integrate(&project, &changes, &journal_dir, meta)?;
//! record(&pending.integrated)?; // the caller's record comes first
//! pending.finish();
//! ```

mod additions;
mod integrate;
mod journal;
mod no_links;
mod rollover;

pub use additions::check_additions;
pub use integrate::{Change, Integrated, Pending, integrate, plan};
pub use rollover::{Outcome, Recovered, Standing, recover_integrations};
