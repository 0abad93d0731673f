//! The engine's numbers for a metrics scrape (`engine.metrics().snapshot()`): tasks by agent
//! and state, permission decisions by decider and outcome, the approvals waiting and the age
//! of the oldest, the queue (its depth and how long started tasks waited), the events relayed
//! and their relay lag (from the backend reporting an agent's event to its announcement), the
//! copies and the disk they take, and the tokens of the retained tasks by agent and model.
//!
//! Gauges are read from the store on each call (bounded aggregates, `legate_store::metrics`);
//! the decisions are a running tally over the append-only audit, so each row is read once;
//! what the store keeps no history of (queue waits, events relayed, relay lag) is counted in
//! the process. The disk walk is bounded and its result kept for [`DISK_TTL`].
//!
//! Every label value is shaped here (`labels`: redacted, one line, bounded in length, at most
//! [`MAX_AGENT_LABELS`] agents and [`MAX_MODEL_LABELS`] models, the rest `other`). This module
//! never renders a wire format (a front does) and changes nothing it counts.

pub(crate) mod histogram;
pub mod labels;

use crate::core::Core;
use legate_core::{Error, ErrorCode, Result, Timestamp};
use legate_store::{TaskCount, TokenSums};
use legate_workspace::disk::{self, DiskUsage};
use std::collections::BTreeMap;
#[cfg(test)]
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use histogram::{HistogramSnapshot, RELAY_LAG_BOUNDS_SECS, WAIT_BOUNDS_SECS};

/// The most distinct agent labels; the rest are counted as `other`.
pub const MAX_AGENT_LABELS: usize = 32;
/// The most distinct model labels; the rest are counted as `other`.
pub const MAX_MODEL_LABELS: usize = 16;
/// The most (agent, state) groups read from the store on one scrape.
const MAX_TASK_GROUPS: usize = 2048;
/// The most (agent, model) groups of token sums read from the store on one scrape.
const MAX_TOKEN_GROUPS: usize = 4096;
/// The most entries one disk walk looks at (per directory).
pub const MAX_DISK_ENTRIES: u64 = 200_000;
/// How long a disk walk's result is used before the next scrape walks again.
pub const DISK_TTL: Duration = Duration::from_secs(30);

/// How many tasks of one agent are in one state (retained tasks).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskGauge {
    /// The agent (label-shaped).
    pub agent: String,
    /// The A2A state.
    pub state: String,
    /// How many.
    pub count: u64,
}

/// How many permission decisions one decider took with one outcome, since the store began.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecisionCounter {
    /// `table`, `policy`, `human`, `agent`, `deadline` or `controls`.
    pub decider: String,
    /// `allow`, `deny` or `ask`.
    pub outcome: String,
    /// How many.
    pub count: u64,
}

/// Tokens of one kind counted on the retained tasks of one agent and model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenGauge {
    /// The agent (label-shaped).
    pub agent: String,
    /// The model (label-shaped; `unknown` when none is known, `other` beyond the bound).
    pub model: String,
    /// `input`, `output`, `thinking`, `cache_read` or `total`.
    pub kind: &'static str,
    /// How many.
    pub tokens: u64,
}

/// One agent's warm sessions (`[agents.NAME] warm`) in this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WarmGauge {
    /// The agent (label-shaped).
    pub agent: String,
    /// How many it is to keep ready.
    pub wanted: u64,
    /// How many are ready now.
    pub ready: u64,
    /// How many were handed to tasks since the process started (a counter).
    pub handed: u64,
    /// How many failed to open, or were found dead while ready, since the process started
    /// (a counter).
    pub failed: u64,
}

/// What a disk walk of one of Legate's workspace directories found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskFigures {
    /// The copies (directories under `$LEGATE_HOME/copies`).
    pub copies: DiskUsage,
    /// Their private baselines (`$LEGATE_HOME/baselines`).
    pub baselines: DiskUsage,
}

/// Everything one scrape shows, read at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricsSnapshot {
    /// Retained tasks by agent and state.
    pub tasks: Vec<TaskGauge>,
    /// Permission decisions by decider and outcome (a counter).
    pub decisions: Vec<DecisionCounter>,
    /// Approvals waiting for an answer.
    pub approvals_pending: u64,
    /// How long the oldest of them has waited, in seconds (0 when none waits).
    pub oldest_approval_age_secs: f64,
    /// Tasks waiting for a running place.
    pub queued: u64,
    /// Tasks running a turn.
    pub running: u64,
    /// How long the tasks that started waited for their running place (since this process
    /// started).
    pub queue_wait: HistogramSnapshot,
    /// Stored events this process announced to its subscribers (since it started).
    pub events_relayed: u64,
    /// For each batch of an agent's events stored and announced, how long since the backend
    /// reported its oldest (since this process started).
    pub relay_lag: HistogramSnapshot,
    /// The copies and baselines on disk.
    pub disk: DiskFigures,
    /// Tokens of the retained tasks by agent, model and kind.
    pub tokens: Vec<TokenGauge>,
    /// The warm sessions of each agent that keeps any, by agent.
    pub warm: Vec<WarmGauge>,
}

/// The metrics service (`engine.metrics()`).
#[derive(Debug, Clone)]
pub struct Metrics {
    pub(crate) core: Core,
    pub(crate) state: Arc<State>,
}

/// The audit row counted through, and the decisions so far by (decider, outcome).
type DecisionTotals = (i64, BTreeMap<(String, String), u64>);

/// What the service keeps between scrapes.
#[derive(Debug, Default)]
pub(crate) struct State {
    /// The audit row counted through, and the counts so far.
    decisions: Mutex<DecisionTotals>,
    /// The last disk walk and when it was made.
    disk: Mutex<Option<(Instant, DiskFigures)>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding it leaves counts that are still counts.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Metrics {
    /// The numbers now. The store is read off the async runtime (a blocking task).
    pub async fn snapshot(&self) -> Result<MetricsSnapshot> {
        let this = self.clone();
        tokio::task::spawn_blocking(move || this.read())
            .await
            .map_err(|e| Error::caused_by(ErrorCode::Internal, "the metrics read failed", e))?
    }

    fn read(&self) -> Result<MetricsSnapshot> {
        let store = self.core.store();
        let pending = store.pending_approvals()?;
        let oldest_approval_age_secs = pending.oldest.map_or(0.0, |at| {
            (Timestamp::now().0.saturating_sub(at.0)).max(0) as f64 / 1000.0
        });
        let counts = self.core.slots().counts();
        Ok(MetricsSnapshot {
            tasks: self.tasks()?,
            decisions: self.decisions()?,
            approvals_pending: pending.count,
            oldest_approval_age_secs,
            queued: counts.queued as u64,
            running: counts.running as u64,
            queue_wait: self.core.slots().waits(),
            events_relayed: self.core.inner.fanout.relayed(),
            relay_lag: self.core.inner.fanout.relay_lag(),
            disk: self.disk(),
            tokens: self.tokens()?,
            warm: self.warm(),
        })
    }

    /// Every agent configured to keep warm sessions (a configuration's own, so few), with
    /// what this process holds of them.
    fn warm(&self) -> Vec<WarmGauge> {
        self.core
            .config()
            .warm
            .iter()
            .filter(|(_, wanted)| **wanted > 0)
            .map(|(agent, wanted)| {
                let tally = self.core.warm().tally(agent);
                WarmGauge {
                    agent: labels::clean(agent),
                    wanted: *wanted as u64,
                    ready: tally.ready,
                    handed: tally.handed,
                    failed: tally.failed,
                }
            })
            .collect()
    }

    fn tasks(&self) -> Result<Vec<TaskGauge>> {
        Ok(fold_tasks(self.core.store().task_counts(MAX_TASK_GROUPS)?))
    }

    fn decisions(&self) -> Result<Vec<DecisionCounter>> {
        let mut tally = lock(&self.state.decisions);
        let new = self.core.store().decision_counts_after(tally.0)?;
        tally.0 = new.through;
        for c in new.counts {
            let slot = tally
                .1
                .entry((labels::clean(&c.decider), labels::clean(&c.decision)))
                .or_default();
            *slot = slot.saturating_add(c.count);
        }
        Ok(tally
            .1
            .iter()
            .map(|((decider, outcome), count)| DecisionCounter {
                decider: decider.clone(),
                outcome: outcome.clone(),
                count: *count,
            })
            .collect())
    }

    fn disk(&self) -> DiskFigures {
        let mut cached = lock(&self.state.disk);
        if let Some((at, figures)) = *cached
            && at.elapsed() < DISK_TTL
        {
            return figures;
        }
        let paths = &self.core.config().paths;
        let figures = DiskFigures {
            copies: disk::usage(&paths.copies(), MAX_DISK_ENTRIES),
            baselines: disk::usage(&paths.baselines(), MAX_DISK_ENTRIES),
        };
        *cached = Some((Instant::now(), figures));
        figures
    }

    fn tokens(&self) -> Result<Vec<TokenGauge>> {
        Ok(fold_tokens(self.core.store().token_sums(MAX_TOKEN_GROUPS)?))
    }
}

/// Task counts with their labels shaped and at most [`MAX_AGENT_LABELS`] agents (the ones
/// with the most tasks), the rest added up under `other`.
fn fold_tasks(rows: Vec<TaskCount>) -> Vec<TaskGauge> {
    let rows: Vec<_> = rows
        .into_iter()
        .map(|r| (labels::clean(&r.agent), labels::clean(&r.state), r.count))
        .collect();
    let kept = labels::keep_largest(
        rows.iter().map(|(a, _, n)| (a.as_str(), *n)),
        MAX_AGENT_LABELS,
    );
    let mut merged: BTreeMap<(String, String), u64> = BTreeMap::new();
    for (agent, state, n) in rows {
        let slot = merged
            .entry((labels::or_other(agent, &kept), state))
            .or_default();
        *slot = slot.saturating_add(n);
    }
    merged
        .into_iter()
        .map(|((agent, state), count)| TaskGauge {
            agent,
            state,
            count,
        })
        .collect()
}

/// The kinds of token a [`TokenGauge`] counts, in the order [`fold_tokens`] adds them.
const TOKEN_KINDS: [&str; 5] = ["input", "output", "thinking", "cache_read", "total"];

/// Token sums with their labels shaped, at most [`MAX_AGENT_LABELS`] agents and
/// [`MAX_MODEL_LABELS`] models (those with the most tokens), the rest under `other`.
fn fold_tokens(rows: Vec<TokenSums>) -> Vec<TokenGauge> {
    let rows: Vec<_> = rows
        .into_iter()
        .map(|r| {
            let model = r
                .model
                .as_deref()
                .map_or_else(|| labels::UNKNOWN.to_string(), labels::clean);
            (labels::clean(&r.agent), model, r)
        })
        .collect();
    let agents = labels::keep_largest(
        rows.iter().map(|(a, _, r)| (a.as_str(), r.total)),
        MAX_AGENT_LABELS,
    );
    let models = labels::keep_largest(
        rows.iter().map(|(_, m, r)| (m.as_str(), r.total)),
        MAX_MODEL_LABELS,
    );
    let mut merged: BTreeMap<(String, String), [u64; 5]> = BTreeMap::new();
    for (agent, model, r) in rows {
        let key = (
            labels::or_other(agent, &agents),
            labels::or_other(model, &models),
        );
        let sums = merged.entry(key).or_default();
        let values = [r.input, r.output, r.thinking, r.cache_read, r.total];
        for (sum, v) in sums.iter_mut().zip(values) {
            *sum = sum.saturating_add(v);
        }
    }
    merged
        .into_iter()
        .flat_map(|((agent, model), sums)| {
            TOKEN_KINDS
                .into_iter()
                .zip(sums)
                .map(move |(kind, tokens)| TokenGauge {
                    agent: agent.clone(),
                    model: model.clone(),
                    kind,
                    tokens,
                })
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn sums(agent: &str, model: Option<&str>, total: u64) -> TokenSums {
        TokenSums {
            agent: agent.into(),
            model: model.map(str::to_owned),
            input: total / 2,
            output: 0,
            thinking: 0,
            cache_read: 0,
            total,
        }
    }

    #[test]
    fn models_beyond_the_bound_are_added_up_as_other() {
        let mut rows: Vec<TokenSums> = (0..40)
            .map(|i| sums("agy", Some(&format!("model-{i:02}")), 100 + i))
            .collect();
        rows.push(sums("agy", None, 1000));
        rows.push(sums("agy", Some("evil\n\"model\"\u{1b}[31m"), 1));
        let gauges = fold_tokens(rows);
        let models: BTreeSet<&str> = gauges.iter().map(|g| g.model.as_str()).collect();
        assert_eq!(models.len(), MAX_MODEL_LABELS + 1, "{models:?}");
        assert!(models.contains(labels::OTHER) && models.contains(labels::UNKNOWN));
        assert!(models.contains("model-39") && !models.contains("model-00"));
        let total = |model: &str| {
            gauges
                .iter()
                .find(|g| g.model == model && g.kind == "total")
                .map(|g| g.tokens)
        };
        // model-00 … model-24 (25 of them) and the hostile one fold into `other`.
        let folded: u64 = (0..25).map(|i| 100 + i).sum::<u64>() + 1;
        assert_eq!(total(labels::OTHER), Some(folded));
        assert_eq!(total(labels::UNKNOWN), Some(1000));
        assert!(gauges.iter().all(|g| !g.model.contains('\n')));
    }

    #[test]
    fn agents_beyond_the_bound_are_added_up_as_other() {
        let rows = (0..50u64)
            .flat_map(|i| {
                ["completed", "failed"].map(|state| TaskCount {
                    agent: format!("agent-{i:02}"),
                    state: state.into(),
                    count: i + 1,
                })
            })
            .collect();
        let gauges = fold_tasks(rows);
        let agents: BTreeSet<&str> = gauges.iter().map(|g| g.agent.as_str()).collect();
        assert_eq!(agents.len(), MAX_AGENT_LABELS + 1);
        let other: u64 = gauges
            .iter()
            .filter(|g| g.agent == labels::OTHER && g.state == "completed")
            .map(|g| g.count)
            .sum();
        assert_eq!(other, (1..=18).sum::<u64>());
    }
}
