//! `legate model` and `legate models`: an agent's saved model preference, and the models it
//! offers.
//!
//! The model of a task is chosen the same way for every agent (`legate_backend::selection`):
//! the task's (`legate run --model`), else this saved preference, else the agent's configured
//! `model`, else the agent's own choice. Saving, listing and checking are the engine's
//! (`Engine::set_model_preference`, `Engine::models`); this module only parses and prints.

use anyhow::Result;
use legate_backend::selection::Choice;
use legate_engine::Engine;
use std::process::ExitCode;

/// `legate model NAME [ID|auto] [--unset]`: shows the preference, or saves or removes it.
pub fn preference(
    engine: &Engine,
    name: &str,
    id: Option<String>,
    unset: bool,
) -> Result<ExitCode> {
    let show = |c: Option<&Choice>| match c {
        None => "none".to_string(),
        Some(Choice::Auto) => "auto (the agent's own choice)".to_string(),
        Some(Choice::Model(id)) => id.clone(),
    };
    match (id, unset) {
        (Some(_), true) => crate::fail!(InvalidInput, "give a model or --unset, not both"),
        (Some(id), false) => {
            let choice = Choice::parse(&id);
            engine.agents().set_model_preference(name, Some(&choice))?;
            crate::out!(
                "agent {name}: model preference saved: {}",
                show(Some(&choice))
            )?;
        }
        (None, true) => {
            engine.agents().set_model_preference(name, None)?;
            crate::out!("agent {name}: model preference removed")?;
        }
        (None, false) => {
            // The rule is the engine's (`Engine::model_selection`), shared with MCP's get_model.
            let sel = engine.agents().model_selection(name)?;
            crate::out!("agent {name}")?;
            crate::out!(
                "  saved preference  {}",
                match sel.saved.as_deref() {
                    None => "none".to_string(),
                    Some(s) => show(Some(&Choice::parse(s))),
                }
            )?;
            crate::out!(
                "  configured model  {}",
                sel.configured.as_deref().unwrap_or("none")
            )?;
            let used = match sel.effective {
                Some(id) => show(Some(&Choice::Model(id))),
                None => show(Some(&Choice::Auto)),
            };
            crate::out!("  a task naming no model runs with: {used}")?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `legate models NAME [--json]`: what the agent offers (`agy models`, or an ACP session's
/// model option), the current one marked.
pub async fn list(engine: &Engine, name: &str, json: bool) -> Result<ExitCode> {
    let list = engine
        .agents()
        .models(name, engine.config().fronts.models_timeout)
        .await?;
    if json {
        crate::out!("{}", crate::json_out::pretty(&list)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    if list.models.is_empty() {
        crate::out!(
            "agent {name} offers no model selection; a model named for it is ignored with a notice"
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    for m in &list.models {
        let mark = if list.current.as_deref() == Some(m.id.as_str()) {
            "*"
        } else {
            " "
        };
        crate::out!("{mark} {:<28} {}", m.id, m.name)?;
    }
    Ok(ExitCode::SUCCESS)
}
