//! Token usage, aggregated by task, by session and by model, from the stored tasks.
//!
//! This module only adds up what agents reported and the engine stored on each task
//! (`tasks.usage`). It never estimates: a task without usage counts as `unreported`, and a
//! counter no task reported stays `None`, never 0. Cache and reasoning tokens are their own
//! dimensions and are never added into `totalTokens` again.

use crate::Store;
use crate::sql::{SqlContext, clamp_i64};
use crate::tasks::{RawTask, TASK_COLUMNS};
use legate_core::{Result, TaskId, Usage, UsageCounters, UsageSource};
use rusqlite::types::Value;
use serde::Serialize;
use std::collections::BTreeMap;

/// Which tasks [`Store::usage`] adds up. Every `Some` narrows them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UsageFilter {
    /// Only this task (exact id).
    pub task_id: Option<String>,
    /// Only tasks of this agent session (ACP session id or agy conversation id).
    pub session_id: Option<String>,
    /// Only usage counted for this model.
    pub model: Option<String>,
    /// Only tasks of this agent.
    pub agent: Option<String>,
}

/// Summed counters. A counter is `None` when no task in the group reported it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct UsageTotals {
    /// Tasks in the group.
    pub tasks: u64,
    /// Tasks in the group whose agent reported no usage.
    pub unreported: u64,
    /// Prompt tokens.
    pub input_tokens: Option<u64>,
    /// Completion tokens.
    pub output_tokens: Option<u64>,
    /// Everything counted, as the agents reported it.
    pub total_tokens: Option<u64>,
    /// Reasoning tokens.
    pub thinking_tokens: Option<u64>,
    /// Tokens read from a prompt cache.
    pub cache_read_tokens: Option<u64>,
    /// In `bySession`, for an agy conversation: its cumulative counters as the CLI last
    /// reported them (the newest task's), separate from the retained tasks' sum above.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_cumulative: Option<UsageCounters>,
}

impl UsageTotals {
    fn add(&mut self, usage: Option<&Usage>) {
        fn sum(dst: &mut Option<u64>, src: Option<u64>) {
            if let Some(v) = src {
                *dst = Some(dst.unwrap_or(0).saturating_add(v));
            }
        }
        self.tasks += 1;
        let Some(u) = usage.filter(|u| has_counters(u)) else {
            self.unreported += 1;
            return;
        };
        sum(&mut self.input_tokens, u.input_tokens);
        sum(&mut self.output_tokens, u.output_tokens);
        sum(&mut self.total_tokens, u.total_tokens);
        sum(&mut self.thinking_tokens, u.thinking_tokens);
        sum(&mut self.cache_read_tokens, u.cache_read_tokens);
    }
}

fn has_counters(u: &Usage) -> bool {
    u.input_tokens.is_some()
        || u.output_tokens.is_some()
        || u.total_tokens.is_some()
        || u.thinking_tokens.is_some()
        || u.cache_read_tokens.is_some()
}

/// One task's line of the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TaskUsage {
    /// The task.
    pub task_id: TaskId,
    /// Its agent.
    pub agent: String,
    /// Its agent session, once known.
    pub session_id: Option<String>,
    /// The model its tokens were counted for, when known.
    pub model: Option<String>,
    /// When the task was created (ms since the Unix epoch), to group usage by day.
    pub created_at: legate_core::Timestamp,
    /// Its counters (`tasks` is 1).
    #[serde(flatten)]
    pub totals: UsageTotals,
    /// Whether the agent reported any counter for it.
    pub available: bool,
    /// Whether a counter is missing (it stays null: nothing is estimated or set to 0).
    pub partial: bool,
    /// Where its counters come from: `turn`, `session-total`, `session-delta`, or
    /// `unavailable` (no counter; also for usage stored before sources were recorded,
    /// `reported`).
    pub source: String,
    /// What a reader should know about these numbers, one sentence each.
    pub warnings: Vec<String>,
}

/// The quality flags of one task's usage: `available`, `partial`, `source`, `warnings`.
fn quality(usage: Option<&Usage>) -> (bool, bool, String, Vec<String>) {
    let counters = usage.map(Usage::counters).unwrap_or_default();
    let all = [
        counters.input_tokens,
        counters.output_tokens,
        counters.total_tokens,
        counters.thinking_tokens,
        counters.cache_read_tokens,
    ];
    let available = all.iter().any(Option::is_some);
    let partial = all.iter().any(Option::is_none);
    let mut warnings = Vec::new();
    let source = match (available, usage.and_then(|u| u.source)) {
        (false, _) => {
            warnings.push(
                "the agent reported no token counts for this task; none are estimated".to_string(),
            );
            "unavailable".to_string()
        }
        (true, Some(UsageSource::Turn)) => "turn".to_string(),
        (true, Some(UsageSource::SessionTotal)) => "session-total".to_string(),
        (true, Some(UsageSource::SessionDelta)) => "session-delta".to_string(),
        (true, None) => "reported".to_string(),
    };
    if available && partial {
        warnings.push("missing counters stay null; nothing is estimated or set to 0".to_string());
    }
    (available, partial, source, warnings)
}

/// The aggregation [`Store::usage`] returns.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct UsageReport {
    /// Every matching task, newest first.
    pub by_task: Vec<TaskUsage>,
    /// By agent session id; tasks with no session yet are under `""`.
    pub by_session: BTreeMap<String, UsageTotals>,
    /// By model; tasks whose model is unknown are under `""`.
    pub by_model: BTreeMap<String, UsageTotals>,
    /// Everything that matched.
    pub total: UsageTotals,
}

/// The most tasks one report reads.
const MAX_TASKS: usize = 100_000;

impl Store {
    /// Adds up the usage of the stored tasks matching `filter`, by task, session and model.
    ///
    /// A task's model is the one its usage was counted for (as the agent reported it), else
    /// the one the task asked for; `None` when neither is known (no default is presumed).
    pub fn usage(&self, filter: &UsageFilter) -> Result<UsageReport> {
        let mut sql = format!("SELECT {TASK_COLUMNS} FROM tasks WHERE 1 = 1");
        let mut args: Vec<Value> = Vec::new();
        if let Some(id) = &filter.task_id {
            args.push(Value::Text(id.clone()));
            sql.push_str(&format!(" AND id = ?{}", args.len()));
        }
        if let Some(session) = &filter.session_id {
            args.push(Value::Text(session.clone()));
            sql.push_str(&format!(" AND session_id = ?{}", args.len()));
        }
        if let Some(agent) = &filter.agent {
            args.push(Value::Text(agent.clone()));
            sql.push_str(&format!(" AND agent = ?{}", args.len()));
        }
        args.push(Value::Integer(clamp_i64(MAX_TASKS)));
        sql.push_str(&format!(
            " ORDER BY created_at DESC, id DESC LIMIT ?{}",
            args.len()
        ));
        let tasks = self.read(|conn| {
            conn.prepare_cached(&sql)
                .and_then(|mut st| {
                    st.query_map(rusqlite::params_from_iter(args), RawTask::from_row)?
                        .collect::<rusqlite::Result<Vec<_>>>()
                })
                .ctx("read usage")?
                .into_iter()
                .map(RawTask::decode)
                .collect::<Result<Vec<_>>>()
        })?;
        let mut report = UsageReport::default();
        for task in tasks {
            let model = task
                .usage
                .as_ref()
                .and_then(|u| u.model.clone())
                .or_else(|| task.model.clone());
            if filter.model.is_some() && model != filter.model {
                continue;
            }
            let mut totals = UsageTotals::default();
            totals.add(task.usage.as_ref());
            report.total.add(task.usage.as_ref());
            let session = report
                .by_session
                .entry(task.session_id.clone().unwrap_or_default())
                .or_default();
            session.add(task.usage.as_ref());
            // Tasks come newest first: the first cumulative seen is the latest.
            if session.observed_cumulative.is_none() {
                session.observed_cumulative = task
                    .usage
                    .as_ref()
                    .and_then(|u| u.observed_cumulative.clone());
            }
            report
                .by_model
                .entry(model.clone().unwrap_or_default())
                .or_default()
                .add(task.usage.as_ref());
            let (available, partial, source, warnings) = quality(task.usage.as_ref());
            report.by_task.push(TaskUsage {
                task_id: task.id,
                agent: task.agent,
                session_id: task.session_id,
                model,
                created_at: task.created_at,
                totals,
                available,
                partial,
                source,
                warnings,
            });
        }
        Ok(report)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::tasks::tests::{submitted, task};

    fn stored(store: &Store, id: &str, at: i64, session: &str, usage: Option<Usage>) {
        let mut t = task(id, at);
        t.session_id = Some(session.into());
        store.insert_task(&t, &submitted()).unwrap();
        t.usage = usage;
        store.update_task(&t, &[]).unwrap();
    }

    fn tokens(total: u64, model: Option<&str>) -> Option<Usage> {
        Some(Usage {
            input_tokens: Some(total - 1),
            total_tokens: Some(total),
            model: model.map(str::to_owned),
            ..Usage::default()
        })
    }

    #[test]
    fn each_task_says_how_good_its_counts_are_and_a_session_its_observed_cumulative() {
        let store = Store::open_in_memory().unwrap();
        let cumulative = |total| UsageCounters {
            total_tokens: Some(total),
            ..UsageCounters::default()
        };
        let first = Usage {
            source: Some(UsageSource::SessionTotal),
            observed_cumulative: Some(cumulative(120)),
            ..tokens(120, None).unwrap()
        };
        let second = Usage {
            source: Some(UsageSource::SessionDelta),
            observed_cumulative: Some(cumulative(170)),
            ..tokens(50, None).unwrap()
        };
        stored(&store, "0190-a", 1, "conv", Some(first));
        stored(&store, "0190-b", 2, "conv", Some(second));
        stored(&store, "0190-c", 3, "conv", None);
        let r = store.usage(&UsageFilter::default()).unwrap();
        let [c, b, a] = &r.by_task[..] else {
            panic!("{r:?}")
        };
        assert_eq!(
            (a.source.as_str(), a.available, a.partial),
            ("session-total", true, true)
        );
        assert_eq!(b.source, "session-delta");
        assert!(b.warnings.iter().any(|w| w.contains("null")), "{b:?}");
        assert_eq!((c.source.as_str(), c.available), ("unavailable", false));
        assert_eq!(c.warnings.len(), 1);
        let session = &r.by_session["conv"];
        assert_eq!(session.total_tokens, Some(170));
        assert_eq!(session.observed_cumulative, Some(cumulative(170)));
        assert_eq!(r.total.observed_cumulative, None);
    }

    #[test]
    fn sums_by_task_session_and_model_without_inventing_zeros() {
        let store = Store::open_in_memory().unwrap();
        stored(&store, "0190-a", 1, "s1", tokens(120, Some("mock-pro")));
        stored(&store, "0190-b", 2, "s1", tokens(50, Some("mock-flash")));
        stored(&store, "0190-c", 3, "s2", None);
        let r = store.usage(&UsageFilter::default()).unwrap();
        assert_eq!(r.by_task.len(), 3);
        assert_eq!(r.by_task[0].task_id.as_str(), "0190-c");
        assert_eq!(r.by_task[0].totals.total_tokens, None);
        assert_eq!(r.total.tasks, 3);
        assert_eq!(r.total.unreported, 1);
        assert_eq!(r.total.total_tokens, Some(170));
        assert_eq!(
            r.total.output_tokens, None,
            "no task reported output tokens"
        );
        assert_eq!(r.by_session["s1"].total_tokens, Some(170));
        assert_eq!(r.by_session["s2"].total_tokens, None);
        assert_eq!(r.by_model["mock-flash"].total_tokens, Some(50));
        assert_eq!(r.by_model[""].tasks, 1);

        let only = store
            .usage(&UsageFilter {
                model: Some("mock-pro".into()),
                ..UsageFilter::default()
            })
            .unwrap();
        assert_eq!(only.total.total_tokens, Some(120));
        let only = store
            .usage(&UsageFilter {
                session_id: Some("s2".into()),
                ..UsageFilter::default()
            })
            .unwrap();
        assert_eq!(only.total.tasks, 1);
    }
}
