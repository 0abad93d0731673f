//! `health` and `agents`: what this Legate and its configured agents can do right now,
//! each agent probed at once (a probe that panicked leaves its entry as configured).
//!
//! This module only reads the engine's configuration and asks its agents; it never starts,
//! changes or ends a task.

use super::*;

pub fn health_static(engine: &Engine, profile: Profile) -> HealthOut {
    let config = engine.config();
    let (approval_mode, integration_approval) = crate::controls::approval(engine);
    HealthOut {
        approval_mode,
        integration_approval,
        version: env!("CARGO_PKG_VERSION").to_string(),
        tool_profile: profile.as_str().to_string(),
        read_only: profile.read_only(),
        default_agent: config.default_agent.clone(),
        agents: Vec::new(),
        confinement: Confinement {
            requirement: config.confinement.as_str().to_string(),
        },
        limits: Limits {
            max_running: config.max_running,
            max_queued: config.max_queued,
            max_pending_per_context: MAX_PENDING_PER_CONTEXT,
            default_timeout_seconds: config.default_timeout.as_secs(),
            wait_max_seconds: WAIT_MAX_SECS,
            max_events: MAX_EVENTS,
            read_limit_max: chunk::MAX_LIMIT,
            message_max_chars: config.fronts.message_max_chars,
        },
    }
}

/// Runs `probe` for every configured agent at once, and `apply` to each answer with the
/// agent's entry in `entries` (one per configured agent, in the configuration's order). A
/// probe that panicked leaves its entry as it was.
async fn probe_agents<A, T, F, Fut>(
    engine: &Engine,
    entries: &mut [A],
    probe: F,
    apply: impl Fn(&mut A, T),
) where
    F: Fn(Engine, String) -> Fut,
    Fut: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let mut probes = tokio::task::JoinSet::new();
    for (index, spec) in engine.config().agents.values().enumerate() {
        let probed = probe(engine.clone(), spec.name.clone());
        probes.spawn(async move { (index, probed.await) });
    }
    while let Some(joined) = probes.join_next().await {
        if let Ok((index, answer)) = joined
            && let Some(entry) = entries.get_mut(index)
        {
            apply(entry, answer);
        }
    }
}

/// `health`: the static part, then each agent probed at once (unless `probe: false`).
pub async fn health(engine: &Engine, profile: Profile, args: HealthArgs) -> Result<HealthOut> {
    let mut out = health_static(engine, profile);
    for spec in engine.config().agents.values() {
        let confinement = match engine.agents().confinement(&spec.name) {
            Ok(e) => e.as_str().to_string(),
            Err(e) => e.code.as_str().to_string(),
        };
        out.agents.push(AgentHealth {
            name: spec.name.clone(),
            kind: spec.kind.as_str().to_string(),
            starts: None,
            detail: "not probed".to_string(),
            confinement,
            capabilities: Vec::new(),
            version_warning: None,
            logged_in: None,
            login_detail: None,
            limitations: crate::controls::limitations(engine, &spec.name),
        });
    }
    if !args.probe.unwrap_or(true) {
        return Ok(out);
    }
    let probe = |engine: Engine, name: String| async move {
        engine
            .agents()
            .probe(&name, engine.config().fronts.probe_timeout)
            .await
    };
    probe_agents(
        engine,
        &mut out.agents,
        probe,
        |agent, probed| match probed {
            Ok(info) => {
                agent.starts = Some(true);
                agent.version_warning = engine.agents().version_warning(&agent.name, &info);
                agent.detail = format!(
                    "starts ({} {}){}",
                    info.name.as_deref().unwrap_or("unnamed"),
                    info.version.as_deref().unwrap_or("?"),
                    agent
                        .version_warning
                        .as_deref()
                        .map(|w| format!("; {w}"))
                        .unwrap_or_default()
                );
                agent.capabilities = info.capabilities;
            }
            Err(e) => {
                agent.starts = Some(false);
                agent.detail = format!("does not start: {e}");
            }
        },
    )
    .await;
    let login = |engine: Engine, name: String| async move {
        engine
            .agents()
            .logged_in(&name, engine.config().fronts.probe_timeout)
            .await
    };
    probe_agents(
        engine,
        &mut out.agents,
        login,
        |agent, checked| match checked {
            Ok(Some(true)) => agent.logged_in = Some(true),
            Ok(Some(false)) => {
                agent.logged_in = Some(false);
                agent.login_detail =
                    Some("not logged in: log in with the agent's own interactive CLI".into());
            }
            Ok(None) => {}
            Err(e) => agent.login_detail = Some(format!("the login check failed: {}", e.detail())),
        },
    )
    .await;
    Ok(out)
}

/// `agents`: the configuration, then the models of each agent whose protocol can list them,
/// asked at once (unless `probe: false`).
pub async fn agents(engine: &Engine, args: AgentsArgs) -> AgentsOut {
    let config = engine.config();
    let mut out = AgentsOut {
        default_agent: config.default_agent.clone(),
        agents: config
            .agents
            .values()
            .map(|a| AgentOut {
                name: a.name.clone(),
                kind: a.kind.as_str().to_string(),
                preset: a.preset.clone(),
                command: a.target().to_string(),
                description: a.description.clone(),
                default: a.name == config.default_agent,
                allow_execute: a.allow_execute,
                model: a.model.clone(),
                models: None,
                models_error: None,
            })
            .collect(),
    };
    if !args.probe.unwrap_or(true) {
        return out;
    }
    let list = |engine: Engine, name: String| async move {
        engine
            .agents()
            .models(&name, engine.config().fronts.models_timeout)
            .await
    };
    probe_agents(
        engine,
        &mut out.agents,
        list,
        |agent, listed| match listed {
            Ok(list) => {
                agent.models = Some(
                    list.models
                        .into_iter()
                        .map(|m| ModelOut {
                            id: m.id,
                            name: m.name,
                        })
                        .collect(),
                );
            }
            Err(e) => agent.models_error = Some(ErrorBody::from(&e)),
        },
    )
    .await;
    out
}
