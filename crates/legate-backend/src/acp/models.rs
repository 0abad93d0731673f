//! Model selection for ACP agents.
//!
//! ACP v1 (schema 1.17) has one stable way for an agent to offer models: a session config
//! option of category `model` (a select) in the `configOptions` of `session/new` or
//! `session/load`, set with `session/set_config_option`. (The older unstable
//! `models`/`session/set_model` pair is no longer in the schema.) This module reads that
//! option and decides what a turn's model means for it; `session` sends the request. Which
//! model a turn wants is chosen as for every backend (`crate::selection`).

use crate::selection::{Model, ModelList};
use agent_client_protocol::v1::schema as acp;
use legate_core::{AUTO_MODEL, Error, ErrorCode};

/// The model option a session offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ModelOption {
    /// The config option's id (`model` for revisor and Claude's adapter).
    pub(crate) config_id: String,
    /// The value currently selected.
    pub(crate) current: String,
    /// The value the agent selected itself when the session opened: what "the agent's own
    /// choice" means once an earlier turn of the session set another.
    pub(crate) initial: String,
    /// Every value offered (id and name), groups flattened.
    pub(crate) values: Vec<Model>,
}

impl ModelOption {
    /// What `legate models` shows.
    pub(crate) fn list(&self) -> ModelList {
        ModelList {
            models: self.values.clone(),
            current: Some(self.current.clone()),
        }
    }

    fn offers(&self, id: &str) -> bool {
        self.values.iter().any(|m| m.id == id)
    }
}

fn model(v: &acp::SessionConfigSelectOption) -> Model {
    Model {
        id: v.value.0.to_string(),
        name: v.name.clone(),
    }
}

/// The first select option of category `model` among `options`.
pub(crate) fn model_option(options: &[acp::SessionConfigOption]) -> Option<ModelOption> {
    options.iter().find_map(|o| {
        if o.category != Some(acp::SessionConfigOptionCategory::Model) {
            return None;
        }
        let acp::SessionConfigKind::Select(select) = &o.kind else {
            return None;
        };
        let values = match &select.options {
            acp::SessionConfigSelectOptions::Ungrouped(list) => list.iter().map(model).collect(),
            acp::SessionConfigSelectOptions::Grouped(groups) => groups
                .iter()
                .flat_map(|g| g.options.iter().map(model))
                .collect(),
            _ => Vec::new(),
        };
        Some(ModelOption {
            config_id: o.id.0.to_string(),
            current: select.current_value.0.to_string(),
            initial: select.current_value.0.to_string(),
            values,
        })
    })
}

/// What to do about a turn's model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Selection {
    /// Already selected (or nothing to select).
    Keep,
    /// Set this value through the option.
    Set { config_id: String, value: String },
    /// A model was asked of an agent that offers none: ignored, with a notice.
    Ignored(String),
}

/// Decides what `wanted` (the model `crate::selection::choose` picked; `None` or `auto` for
/// the agent's own) means for a session offering `option`. The agent's own is the value it
/// chose when the session opened, set back if an earlier turn chose another. An id the agent
/// does not offer is `MODEL_NOT_AVAILABLE`.
pub(crate) fn select(
    agent: &str,
    wanted: Option<&str>,
    option: Option<&ModelOption>,
) -> Result<Selection, Error> {
    let Some(wanted) = wanted.filter(|w| !w.eq_ignore_ascii_case(AUTO_MODEL)) else {
        return Ok(match option {
            Some(o) if o.current != o.initial => Selection::Set {
                config_id: o.config_id.clone(),
                value: o.initial.clone(),
            },
            _ => Selection::Keep,
        });
    };
    let Some(option) = option else {
        return Ok(Selection::Ignored(wanted.to_string()));
    };
    if option.current == wanted {
        return Ok(Selection::Keep);
    }
    if !option.offers(wanted) {
        let ids: Vec<&str> = option.values.iter().map(|m| m.id.as_str()).collect();
        return Err(Error::new(
            ErrorCode::ModelNotAvailable,
            format!(
                "agent `{agent}` does not offer model {wanted}; it offers: {}",
                ids.join(", ")
            ),
        ));
    }
    Ok(Selection::Set {
        config_id: option.config_id.clone(),
        value: wanted.to_string(),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn options() -> Vec<acp::SessionConfigOption> {
        vec![
            acp::SessionConfigOption::select(
                "mode",
                "Mode",
                "default",
                vec![acp::SessionConfigSelectOption::new("default", "Default")],
            )
            .category(acp::SessionConfigOptionCategory::Mode),
            acp::SessionConfigOption::select(
                "model",
                "Model",
                "a",
                vec![
                    acp::SessionConfigSelectGroup::new(
                        "g1",
                        "One",
                        vec![acp::SessionConfigSelectOption::new("a", "A")],
                    ),
                    acp::SessionConfigSelectGroup::new(
                        "g2",
                        "Two",
                        vec![acp::SessionConfigSelectOption::new("b", "B")],
                    ),
                ],
            )
            .category(acp::SessionConfigOptionCategory::Model),
        ]
    }

    #[test]
    fn the_model_option_is_found_by_category_and_groups_are_flattened() {
        let o = model_option(&options()).unwrap();
        assert_eq!(o.config_id, "model");
        assert_eq!(o.current, "a");
        let ids: Vec<&str> = o.values.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(ids, ["a", "b"]);
        assert_eq!(o.values[1].name, "B");
        assert_eq!(model_option(&options()[..1]), None);
    }

    #[test]
    fn selection_keeps_sets_refuses_or_ignores() {
        let o = model_option(&options()).unwrap();
        let s = |w: Option<&str>, o: Option<&ModelOption>| select("x", w, o);
        assert_eq!(s(None, Some(&o)).unwrap(), Selection::Keep);
        assert_eq!(s(Some("auto"), Some(&o)).unwrap(), Selection::Keep);
        assert_eq!(s(Some("a"), Some(&o)).unwrap(), Selection::Keep);
        assert_eq!(
            s(Some("b"), Some(&o)).unwrap(),
            Selection::Set {
                config_id: "model".into(),
                value: "b".into()
            }
        );
        let e = s(Some("c"), Some(&o)).unwrap_err();
        assert_eq!(e.code, ErrorCode::ModelNotAvailable);
        assert!(e.message.contains("a, b"), "{e}");
        assert_eq!(s(Some("c"), None).unwrap(), Selection::Ignored("c".into()));
    }

    #[test]
    fn the_agents_own_choice_is_set_back_after_a_turn_chose_another() {
        // A turn of this session chose b; the next names none (or auto): back to a.
        let mut o = model_option(&options()).unwrap();
        o.current = "b".into();
        let back = Selection::Set {
            config_id: "model".into(),
            value: "a".into(),
        };
        assert_eq!(select("x", None, Some(&o)).unwrap(), back);
        assert_eq!(select("x", Some("AUTO"), Some(&o)).unwrap(), back);
        assert_eq!(select("x", Some("b"), Some(&o)).unwrap(), Selection::Keep);
    }
}
