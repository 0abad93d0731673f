//! The configuration at the binary's edge: `legate_config` reads and validates `legate.toml`;
//! this module only hands it `$LEGATE_HOME` and the secrets `crate::harden` took out of the
//! environment. It never checks a value itself.

pub use legate_config::{Config, load_in};

/// Loads and validates the configuration (secrets given in the environment come from
/// `crate::harden`, which took them out of it).
pub fn load() -> Result<Config, legate_config::Error> {
    load_in(&legate_config::home_dir()?, &crate::harden::var)
}
