//! Legate's workspaces: the directories agents work in.
//!
//! This crate owns making and checking those directories: a **sandbox** is an empty directory
//! Legate creates itself under `$LEGATE_HOME/sandboxes/` (so it is `owned`), a **shared**
//! directory is one the user named (never `owned`). Each comes back as a
//! [`legate_core::Boundary`] whose root is canonical, ready for the supervisor's containment.
//!
//! It must never infer `owned` from a path, build a directory name from caller text, adopt an
//! existing directory or symlink as one it made, or place a sandbox under the system temp
//! tree or inside a project. It decides no permissions (that is `legate-supervisor`) and keeps
//! no records (the caller persists which context owns which sandbox).

mod sandbox;
mod shared;

pub use sandbox::{label, sandbox};
pub use shared::shared;
