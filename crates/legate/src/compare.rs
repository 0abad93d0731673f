//! `legate compare` and `legate comparison`: a comparison started and followed until every
//! review ends, then printed; and a stored comparison printed.
//!
//! This module parses `agent[:model]` targets into the engine's `CompareRequest` (the one
//! declaration of a comparison, which the MCP `compare` tool takes as it is) and prints; the engine checks the targets, the
//! context hash and the queue, makes the copies and groups the findings. Every text an agent
//! wrote is printed on one line with control characters escaped.

use crate::{config, front};
use anyhow::Result;
use legate_engine::{CompareRequest, CompareTarget, Comparison, Engine};
use std::process::ExitCode;

/// `legate compare`.
// The command line's syntax for a `CompareRequest` (the source task positional, the context
// hash optional, `agent[:model]` targets) and how to print the result; not a second
// declaration of the request.
#[derive(Debug, clap::Args)]
pub struct CompareFlags {
    /// The finished copy task whose copy's current files every target reviews (id or prefix).
    pub id: String,
    /// The contextSha256 read with `legate context` (default: the context now, which is
    /// printed; pass it to be sure nothing changed since you read it).
    #[arg(long = "context-sha")]
    pub context_sha: Option<String>,
    /// What every target is asked.
    #[arg(long)]
    pub prompt: String,
    /// A target, `agent` or `agent:model` (2 to 4, distinct; repeat the flag).
    #[arg(long = "target", required = true, value_parser = parse_target)]
    pub targets: Vec<CompareTarget>,
    /// Print the comparison as JSON once every review has ended.
    #[arg(long)]
    pub json: bool,
}

/// `agent` or `agent:model`: the first `:` splits (a model may hold more); neither side blank.
pub(crate) fn parse_target(s: &str) -> std::result::Result<CompareTarget, String> {
    let (agent, model) = match s.split_once(':') {
        Some((a, m)) => (a, Some(m)),
        None => (s, None),
    };
    if agent.trim().is_empty() || model.is_some_and(|m| m.trim().is_empty()) {
        return Err(format!(
            "a target is `agent` or `agent:model`, not {:?}",
            crate::one_line(s, 60)
        ));
    }
    Ok(CompareTarget {
        agent: agent.to_string(),
        model: model.map(str::to_string),
    })
}

/// Starts the comparison, waits for every review to end, and prints it.
pub async fn compare(config: config::Config, flags: CompareFlags) -> Result<ExitCode> {
    let engine = front::start_engine(&config.engine)?;
    let result = run(&engine, flags).await;
    engine.shutdown().await;
    result
}

async fn run(engine: &Engine, flags: CompareFlags) -> Result<ExitCode> {
    // Taken apart whole and the request built whole, so a flag added to `CompareFlags`, or a
    // field to `CompareRequest`, does not compile until it is mapped here.
    let CompareFlags {
        id,
        context_sha,
        prompt,
        targets,
        json,
    } = flags;
    let expected = match context_sha {
        Some(sha) => sha,
        None => {
            let sha = engine.handoffs().context(&id).await?.context_sha256;
            eprintln!("comparing context {sha} (read now; pass --context-sha to pin it)");
            sha
        }
    };
    let started = engine
        .comparisons()
        .compare(CompareRequest {
            source_task_id: id,
            expected_context_sha256: expected,
            prompt,
            targets,
        })
        .await?;
    eprintln!(
        "comparison {} · {} reviews started",
        started.comparison_id,
        started.task_ids.len()
    );
    for id in &started.task_ids {
        let task = engine.wait(id).await?;
        eprintln!("  {} {} ended {}", task.id, task.agent, task.state);
    }
    let c = engine
        .comparisons()
        .comparison(&started.comparison_id)
        .await?;
    print(&c, json)?;
    Ok(exit(&c))
}

/// Prints the stored comparison `id`.
pub async fn show(engine: &Engine, id: &str, json: bool) -> Result<ExitCode> {
    let c = engine.comparisons().comparison(id).await?;
    print(&c, json)?;
    Ok(ExitCode::SUCCESS)
}

/// 0 when complete, 1 otherwise (a review failed or did not start, or something is stale).
fn exit(c: &Comparison) -> ExitCode {
    if c.complete {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn print(c: &Comparison, json: bool) -> std::io::Result<()> {
    if json {
        let text = crate::json_out::pretty(c).map_err(std::io::Error::other)?;
        return out!("{text}");
    }
    out!(
        "comparison {} of task {} · complete {} · contextStale {} (source matches {})",
        c.comparison_id,
        c.source_task_id,
        c.complete,
        c.context_stale,
        c.source_matches
    )?;
    out!(
        "contextSha256 {} · treeSha256 {}",
        c.context_sha256,
        c.tree_sha256
    )?;
    for r in &c.reviews {
        let state = r.state.map_or("gone", |s| s.as_str());
        let tokens = r
            .usage
            .as_ref()
            .and_then(|u| u.total_tokens)
            .map_or_else(|| "-".to_string(), |t| t.to_string());
        out!(
            "  {} {}{} · {state} · contextMatches {} · {} findings · tokens {tokens}{}",
            r.task_id,
            crate::one_line(&r.agent, 40),
            r.model
                .as_deref()
                .map(|m| format!(":{}", crate::one_line(m, 40)))
                .unwrap_or_default(),
            r.context_matches,
            r.findings,
            r.error
                .as_ref()
                .map(|e| format!(" · {}", e.code))
                .unwrap_or_default()
        )?;
        if let Some(s) = &r.summary {
            out!("      {}", crate::one_line(s, 100))?;
        }
    }
    for e in &c.start_errors {
        out!(
            "  not started: {} · {}: {}",
            crate::one_line(&e.agent, 40),
            e.error.code,
            crate::one_line(&e.error.message, 100)
        )?;
    }
    out!(
        "findings of {} completed reviews, grouped literally (no voting; none authorizes integration):",
        c.reviews_grouped
    )?;
    for f in &c.findings {
        out!(
            "  {}:{} · {} · reported by {}",
            crate::one_line(&f.path, 80),
            f.line,
            f.agreement,
            f.reported_by.len()
        )?;
        for v in &f.variants {
            out!(
                "      {} ×{} {:?}: {}",
                v.severity,
                v.reported_by.len(),
                crate::one_line(&v.quote, 40),
                crate::one_line(&v.message, 80)
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_target_is_an_agent_and_maybe_a_model() {
        let t = parse_target("claude").unwrap();
        assert_eq!((t.agent.as_str(), t.model), ("claude", None));
        let t = parse_target("agy:gemini-3:pro").unwrap();
        assert_eq!(
            (t.agent.as_str(), t.model.as_deref()),
            ("agy", Some("gemini-3:pro"))
        );
        for bad in ["", ":m", "a:", " :m", "a: "] {
            assert!(parse_target(bad).is_err(), "{bad:?}");
        }
    }

    proptest! {
        #[test]
        fn parsing_round_trips_or_refuses(agent in "[^:]{0,8}", model in proptest::option::of("\\PC{0,8}")) {
            let text = match &model { Some(m) => format!("{agent}:{m}"), None => agent.clone() };
            let ok = !agent.trim().is_empty() && model.as_ref().is_none_or(|m| !m.trim().is_empty());
            match parse_target(&text) {
                Ok(t) => {
                    prop_assert!(ok);
                    prop_assert_eq!(t.agent, agent);
                    prop_assert_eq!(t.model, model);
                }
                Err(e) => {
                    prop_assert!(!ok);
                    prop_assert!(!e.contains(char::from(0x1b)), "{}", e);
                }
            }
        }
    }
}
