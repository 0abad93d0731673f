//! The controls and model tools (issue 17, parts 4 and 6): `get_agent_policy` (the ceiling
//! of tool kinds, the MCP catalogue's ids and tools, which agents enforce them),
//! `list_models`, `get_model` and `set_model` (the engine's one order of precedence, shared
//! with `legate model`), and the `health` additions (approval mode, how an integration is
//! approved, each backend's limitations).
//!
//! Everything here is a view of the engine's answers: no rule is decided in this module, and
//! no catalogued server's transport (command, arguments, environment, URL) is ever shown.

use crate::schema::ModelOut;
use legate_core::{Error, Result};
use legate_engine::{ApprovalMode, ControlsOverview, Engine, Limitation, ModelSelection};
use rmcp::schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `list_models` and `get_model`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AgentArg {
    /// A configured agent (see `agents`).
    pub agent: String,
}

/// `set_model`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SetModelArgs {
    /// A configured agent.
    pub agent: String,
    /// A model id the agent offers (checked when a task runs: MODEL_NOT_AVAILABLE), or null
    /// for the agent's own default, saved even over a configured model.
    pub model: Option<String>,
    /// true removes the saved preference instead (the configured model applies again);
    /// `model` must then be null.
    #[serde(default)]
    pub reset: bool,
}

/// `list_models`.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct ModelsOut {
    /// The agent.
    pub agent: String,
    /// What it offers (empty when it offers no model selection).
    pub models: Vec<ModelOut>,
    /// The model selected now, when the agent says.
    pub current: Option<String>,
    /// How a task naming no model chooses.
    pub selection: ModelSelection,
}

/// `get_model` and `set_model`.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct ModelOutcome {
    /// How a task naming no model chooses, now.
    pub selection: ModelSelection,
}

/// How an integration is approved (`health.integrationApproval`).
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct IntegrationApproval {
    /// `auto` or `ask`.
    pub mode: String,
    /// `automatic` (every check passes, no form) or `mcp-form-elicitation` (a person
    /// confirms through the client's form).
    pub method: String,
}

/// `get_agent_policy`.
pub fn controls_overview(engine: &Engine) -> ControlsOverview {
    engine.agents().controls_overview()
}

/// `list_models`: what the agent offers, and how a task naming none chooses.
pub async fn list_models(engine: &Engine, args: AgentArg) -> Result<ModelsOut> {
    let selection = engine.agents().model_selection(&args.agent)?;
    let list = engine
        .agents()
        .models(&args.agent, engine.config().fronts.models_timeout)
        .await?;
    Ok(ModelsOut {
        agent: args.agent,
        models: list
            .models
            .into_iter()
            .map(|m| ModelOut {
                id: m.id,
                name: m.name,
            })
            .collect(),
        current: list.current,
        selection,
    })
}

/// `get_model`.
pub fn get_model(engine: &Engine, args: AgentArg) -> Result<ModelOutcome> {
    Ok(ModelOutcome {
        selection: engine.agents().model_selection(&args.agent)?,
    })
}

/// `set_model`: saves the preference (`null`: the agent's own default), or removes it.
pub fn set_model(engine: &Engine, args: SetModelArgs) -> Result<ModelOutcome> {
    let choice = match (args.reset, args.model.as_deref()) {
        (true, Some(_)) => {
            return Err(Error::invalid_input(
                "reset: true removes the preference; give model: null with it",
            ));
        }
        (true, None) => None,
        (false, None) => Some(legate_engine::ModelChoice::Auto),
        (false, Some(id)) => Some(legate_engine::ModelChoice::parse(id)),
    };
    engine
        .agents()
        .set_model_preference(&args.agent, choice.as_ref())?;
    get_model(engine, AgentArg { agent: args.agent })
}

/// `health.approvalMode` and `health.integrationApproval`.
pub fn approval(engine: &Engine) -> (String, IntegrationApproval) {
    let mode = engine.config().review.approval;
    let method = match mode {
        ApprovalMode::Ask => "mcp-form-elicitation",
        ApprovalMode::Auto => "automatic",
    };
    (
        mode.as_str().to_string(),
        IntegrationApproval {
            mode: mode.as_str().to_string(),
            method: method.to_string(),
        },
    )
}

/// Agent `name`'s limitations for `health` (an agent whose backend is missing lists none:
/// its entry already says it does not start).
pub fn limitations(engine: &Engine, name: &str) -> Vec<Limitation> {
    engine.agents().limitations(name).unwrap_or_default()
}
