//! Which model a turn uses, the same for every backend: the task's, else the saved
//! preference, else the configured default, else the agent's own choice ("Auto": no
//! `--model` for `agy`, no `session/set_config_option` for an ACP agent).
//!
//! The saved preference is `$LEGATE_HOME/models/<name>.json`: `{"model": "<id>"}`, or
//! `{"model": null}` for a saved Auto; `legate model NAME ID|auto` writes it. It is kept
//! out of the agent's private state directory (its `HOME`, which the agent may write), so
//! that an agent can neither choose its own model for later tasks nor break them with an
//! invalid file. A `model-selection.json` left in a state directory by an older Legate is
//! ignored.
//! [`legate_core::AUTO_MODEL`] (`"auto"`) asks for Auto wherever a model is named. Checking an
//! id against what the agent offers ([`Model`]s: `agy models`, an ACP session's model config
//! option) is each backend's job, not this module's.

use legate_core::{AUTO_MODEL, Error, ErrorCode, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// One model an agent offers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Model {
    /// What selects it (`--model`, the config option's value).
    pub id: String,
    /// Its display name (the id again when none was given).
    pub name: String,
}

/// The models an agent offers, for `legate models`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelList {
    /// What it offers; empty when it offers no model selection.
    pub models: Vec<Model>,
    /// The model selected now, when the agent says (an ACP session's current value).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current: Option<String>,
}

/// The directory of saved preferences, inside `$LEGATE_HOME`: one `<agent>.json` each.
pub const PREFERENCE_DIR: &str = "models";

/// A resolved choice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Choice {
    /// The CLI chooses (no `--model`).
    Auto,
    /// This id.
    Model(String),
}

impl Choice {
    /// `auto` (any case) is [`Choice::Auto`]; anything else an id.
    pub fn parse(s: &str) -> Self {
        if s.trim().eq_ignore_ascii_case(AUTO_MODEL) {
            Self::Auto
        } else {
            Self::Model(s.trim().to_string())
        }
    }

    /// The id, or `None` for Auto.
    pub fn id(&self) -> Option<&str> {
        match self {
            Self::Auto => None,
            Self::Model(id) => Some(id),
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct Saved {
    model: Option<String>,
}

/// The file holding agent `agent`'s saved preference, `home` being `$LEGATE_HOME`.
pub fn preference_file(home: &Path, agent: &str) -> PathBuf {
    home.join(PREFERENCE_DIR).join(format!("{agent}.json"))
}

/// Agent `agent`'s saved preference, if any (`home` is `$LEGATE_HOME`). An unreadable
/// file is `CONFIG_INVALID`.
pub fn load_preference(home: &Path, agent: &str) -> Result<Option<Choice>> {
    let path = preference_file(home, agent);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(Error::new(
                ErrorCode::ConfigInvalid,
                format!("could not read {}: {e}", path.display()),
            ));
        }
    };
    let saved: Saved = serde_json::from_str(&text).map_err(|_| {
        Error::new(
            ErrorCode::ConfigInvalid,
            format!(
                "{} is not {{\"model\": \"<id>\" | null}}; remove it to reset",
                path.display()
            ),
        )
    })?;
    Ok(Some(
        saved.model.as_deref().map_or(Choice::Auto, Choice::parse),
    ))
}

/// Saves `choice` as agent `agent`'s preference (`None` removes it), atomically, mode 0600
/// (`home` is `$LEGATE_HOME`).
pub fn save_preference(home: &Path, agent: &str, choice: Option<&Choice>) -> Result<()> {
    let path = preference_file(home, agent);
    let fail = |e: std::io::Error| {
        Error::quoting(
            ErrorCode::ConfigInvalid,
            format!("could not save {}", path.display()),
            e,
        )
    };
    let Some(choice) = choice else {
        return match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(fail(e)),
            _ => Ok(()),
        };
    };
    let body = serde_json::to_string(&Saved {
        model: choice.id().map(str::to_owned),
    })
    .map_err(|e| {
        Error::quoting(
            ErrorCode::Internal,
            "could not encode the model preference",
            e,
        )
    })?;
    crate::agy::usage::write_private(&path, body.as_bytes()).map_err(fail)
}

/// The choice for a turn: `task`, else `saved`, else `configured`, else Auto.
pub fn choose(task: Option<&str>, saved: Option<Choice>, configured: Option<&str>) -> Choice {
    if let Some(t) = task {
        return Choice::parse(t);
    }
    if let Some(s) = saved {
        return s;
    }
    configured.map_or(Choice::Auto, Choice::parse)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn task_then_preference_then_default_then_auto() {
        let m = |s: &str| Choice::Model(s.into());
        assert_eq!(choose(Some("a"), Some(m("b")), Some("c")), m("a"));
        assert_eq!(choose(Some("auto"), Some(m("b")), Some("c")), Choice::Auto);
        assert_eq!(choose(None, Some(m("b")), Some("c")), m("b"));
        assert_eq!(choose(None, Some(Choice::Auto), Some("c")), Choice::Auto);
        assert_eq!(choose(None, None, Some("c")), m("c"));
        assert_eq!(choose(None, None, None), Choice::Auto);
    }

    #[test]
    fn the_preference_round_trips_including_a_saved_auto() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path();
        assert_eq!(load_preference(home, "a").unwrap(), None);
        save_preference(home, "a", Some(&Choice::Model("mock-flash".into()))).unwrap();
        assert_eq!(
            load_preference(home, "a").unwrap(),
            Some(Choice::Model("mock-flash".into()))
        );
        assert_eq!(load_preference(home, "b").unwrap(), None, "per agent");
        save_preference(home, "a", Some(&Choice::Auto)).unwrap();
        assert_eq!(load_preference(home, "a").unwrap(), Some(Choice::Auto));
        save_preference(home, "a", None).unwrap();
        assert_eq!(load_preference(home, "a").unwrap(), None);
    }

    #[test]
    fn the_preference_lives_outside_the_agents_state_directory() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path();
        let state = home.join("agents").join("a");
        assert!(!preference_file(home, "a").starts_with(&state));
        // What an agent (or an older Legate) leaves in its own HOME is not a preference.
        std::fs::create_dir_all(&state).unwrap();
        std::fs::write(state.join("model-selection.json"), "not json").unwrap();
        assert_eq!(load_preference(home, "a").unwrap(), None);
        std::fs::write(state.join("model-selection.json"), r#"{"model":"x"}"#).unwrap();
        assert_eq!(load_preference(home, "a").unwrap(), None);
    }
}
