//! Legate's configuration: `$LEGATE_HOME/legate.toml` and its environment overrides, read and
//! validated into the engine's [`EngineConfig`](legate_engine::EngineConfig) and the fronts'
//! settings ([`Config`]).
//!
//! Owns the file's shape (unknown keys are errors), every rule a value must meet before
//! Legate starts, and which files agents must never read (the configuration and every token
//! file are added to the engine's hidden paths). Every refusal is a typed [`Error`] with a
//! stable code (`CONFIG_INVALID`, `POLICY_INVALID`) naming its key, its cause kept as a source.
//! It never starts an engine, binds a port, creates a token file or prints anything: the
//! binary does, and the engine enforces what this crate checked.
//!
//! ```
//! let home = std::path::Path::new("/tmp/legate-home");
//! let config = legate_config::from_toml("max_running = 3\n[mcp]\nport = 9000\n", home, &|_| None)
//!     .expect("a valid configuration");
//! assert_eq!(config.engine.max_running, 3);
//! assert_eq!(config.mcp.port, 9000);
//!
//! let refused = legate_config::from_toml("max_running = 0\n", home, &|_| None).unwrap_err();
//! assert_eq!(refused.code(), legate_core::ErrorCode::ConfigInvalid);
//! assert_eq!(
//!     refused.to_string(),
//!     "CONFIG_INVALID: max_running must be between 1 and 64 (got 0)"
//! );
//! ```

pub mod a2a;
mod agents;
mod config;
mod controls;
mod error;
pub mod fronts;
mod kubernetes;
mod limits;
pub mod logs;
pub mod mcp;
mod memory;
mod network;
mod output;
mod policy;
mod review;
mod roles;
mod skills;
mod supervision;
mod tap;

pub use agents::install_hint;
pub use config::{Config, from_toml, home_dir, load_in};
pub use error::{Error, Result};
pub(crate) use error::{invalid, refuse};
pub use policy::read_file as read_policy_file;

/// The backends this build has (`legate_backend::registry::BUILTIN`, each refusing to
/// start an agent the kernel cannot confine when `confinement` is required), and the remote
/// A2A backend (`a2a`, `legate-remote`), which starts no process. The configuration accepts
/// an agent `kind` only if one of them serves it.
pub fn backends(confinement: legate_confine::Requirement) -> legate_backend::Registry {
    legate_backend::Registry::builtin(confinement).register(
        legate_remote::kind(),
        std::sync::Arc::new(legate_remote::A2aBackend::default()),
    )
}
