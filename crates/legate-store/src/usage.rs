//! Token usage, aggregated by task, by session and by model, from the stored tasks.
//!
//! This module only adds up what agents reported and the engine stored on each task
//! (`tasks.usage`). It never estimates: a task without usage counts as `unreported`, and a
//! counter no task reported stays `None`, never 0. Cache and reasoning tokens are their own
//! dimensions and are never added into `totalTokens` again.

use crate::Store;
use crate::sql::{SqlContext, clamp_i64};
use crate::tasks::{RawTask, TASK_COLUMNS};
use legate_core::{Result, TaskId, Usage};
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
        sum(&mut self.thinking_tokens, u.thought_tokens);
        sum(&mut self.cache_read_tokens, u.cached_read_tokens);
    }
}

fn has_counters(u: &Usage) -> bool {
    u.input_tokens.is_some()
        || u.output_tokens.is_some()
        || u.total_tokens.is_some()
        || u.thought_tokens.is_some()
        || u.cached_read_tokens.is_some()
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
            report
                .by_session
                .entry(task.session_id.clone().unwrap_or_default())
                .or_default()
                .add(task.usage.as_ref());
            report
                .by_model
                .entry(model.clone().unwrap_or_default())
                .or_default()
                .add(task.usage.as_ref());
            report.by_task.push(TaskUsage {
                task_id: task.id,
                agent: task.agent,
                session_id: task.session_id,
                model,
                created_at: task.created_at,
                totals,
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
