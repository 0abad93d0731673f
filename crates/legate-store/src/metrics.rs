//! The aggregates a metrics scrape reads: tasks by agent and state, permission decisions by
//! decider and outcome (counted from a row number on, so a caller can keep a running tally
//! without reading the audit twice), the pending approvals and the oldest one, and token sums
//! by agent and model.
//!
//! Every query is one `GROUP BY` over an indexed or bounded table, with a `LIMIT` on the rows it
//! returns: a scrape never reads the store unbounded. This module only counts what is stored;
//! it never decides what a number means or how a label is shown (the engine's `metrics` does).

use crate::Store;
use crate::sql::{SqlContext, clamp_i64, to_u64};
use legate_core::{Result, Timestamp};

/// How many tasks one agent has in one state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskCount {
    /// The agent's name.
    pub agent: String,
    /// The state, as stored (`completed`, `working`, …).
    pub state: String,
    /// How many tasks.
    pub count: u64,
}

/// How many decisions one decider took with one outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecisionCount {
    /// Who decided (`table`, `policy`, `human`, `agent`, `deadline`, `controls`).
    pub decider: String,
    /// `allow`, `deny` or `ask`.
    pub decision: String,
    /// How many decisions.
    pub count: u64,
}

/// The decisions recorded after a row number, and the last row they reach.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DecisionTally {
    /// The highest row number counted (the `after` given when there was none).
    pub through: i64,
    /// The new decisions, by decider and outcome.
    pub counts: Vec<DecisionCount>,
}

/// The approvals waiting for an answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PendingApprovals {
    /// How many.
    pub count: u64,
    /// When the oldest was asked; `None` when none waits.
    pub oldest: Option<Timestamp>,
}

/// The tokens counted on the retained tasks of one agent and one model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenSums {
    /// The agent's name.
    pub agent: String,
    /// The model the tokens were counted for (the task's asked-for model when the agent named
    /// none); `None` when neither is known.
    pub model: Option<String>,
    /// Prompt tokens.
    pub input: u64,
    /// Completion tokens.
    pub output: u64,
    /// Reasoning tokens.
    pub thinking: u64,
    /// Tokens read from a prompt cache.
    pub cache_read: u64,
    /// Everything counted, as the agents reported it.
    pub total: u64,
}

/// A sum SQLite gives as a float (`TOTAL` never overflows) made a count: negative or not a
/// number is 0, beyond `u64::MAX` is `u64::MAX` (Rust's float-to-int cast saturates).
fn count_of(sum: f64) -> u64 {
    if sum.is_finite() && sum > 0.0 {
        sum as u64
    } else {
        0
    }
}

impl Store {
    /// Tasks by agent and state, the largest groups first, at most `limit` groups.
    pub fn task_counts(&self, limit: usize) -> Result<Vec<TaskCount>> {
        self.read(|conn| {
            let rows = conn
                .prepare_cached(
                    "SELECT agent, state, COUNT(*) FROM tasks GROUP BY agent, state \
                     ORDER BY COUNT(*) DESC, agent, state LIMIT ?1",
                )
                .and_then(|mut st| {
                    st.query_map([clamp_i64(limit)], |r| {
                        Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get(2)?))
                    })?
                    .collect::<rusqlite::Result<Vec<(String, String, i64)>>>()
                })
                .ctx("count tasks")?;
            rows.into_iter()
                .map(|(agent, state, n)| {
                    Ok(TaskCount {
                        agent,
                        state,
                        count: to_u64(n, "task count")?,
                    })
                })
                .collect()
        })
    }

    /// The decisions recorded after row `after` (0: all of them), by decider and outcome.
    /// The audit is append-only and its rows are numbered in the order they were written, so
    /// adding each tally to the last one counts every decision exactly once.
    pub fn decision_counts_after(&self, after: i64) -> Result<DecisionTally> {
        self.read(|conn| {
            let rows = conn
                .prepare_cached(
                    "SELECT decider, decision, COUNT(*), MAX(id) FROM decisions WHERE id > ?1 \
                     GROUP BY decider, decision ORDER BY decider, decision",
                )
                .and_then(|mut st| {
                    st.query_map([after], |r| {
                        Ok((
                            r.get::<_, String>(0)?,
                            r.get::<_, String>(1)?,
                            r.get::<_, i64>(2)?,
                            r.get::<_, i64>(3)?,
                        ))
                    })?
                    .collect::<rusqlite::Result<Vec<_>>>()
                })
                .ctx("count decisions")?;
            let mut tally = DecisionTally {
                through: after,
                counts: Vec::with_capacity(rows.len()),
            };
            for (decider, decision, n, last) in rows {
                tally.through = tally.through.max(last);
                tally.counts.push(DecisionCount {
                    decider,
                    decision,
                    count: to_u64(n, "decision count")?,
                });
            }
            Ok(tally)
        })
    }

    /// How many approvals wait for an answer, and when the oldest was asked.
    pub fn pending_approvals(&self) -> Result<PendingApprovals> {
        self.read(|conn| {
            let (n, oldest) = conn
                .prepare_cached(
                    "SELECT COUNT(*), MIN(created_at) FROM approvals WHERE state = 'pending'",
                )
                .and_then(|mut st| {
                    st.query_row([], |r| {
                        Ok((r.get::<_, i64>(0)?, r.get::<_, Option<i64>>(1)?))
                    })
                })
                .ctx("count pending approvals")?;
            Ok(PendingApprovals {
                count: to_u64(n, "approval count")?,
                oldest: oldest.map(Timestamp),
            })
        })
    }

    /// Token sums of the retained tasks by agent and model, the largest totals first, at most
    /// `limit` groups. A task whose agent reported no usage adds nothing.
    pub fn token_sums(&self, limit: usize) -> Result<Vec<TokenSums>> {
        // The older names of two counters (`thoughtTokens`, `cachedReadTokens`) still count.
        const SQL: &str = "SELECT agent, COALESCE(json_extract(usage, '$.model'), model) AS m, \
             TOTAL(json_extract(usage, '$.inputTokens')), \
             TOTAL(json_extract(usage, '$.outputTokens')), \
             TOTAL(COALESCE(json_extract(usage, '$.thinkingTokens'), \
                            json_extract(usage, '$.thoughtTokens'))), \
             TOTAL(COALESCE(json_extract(usage, '$.cacheReadTokens'), \
                            json_extract(usage, '$.cachedReadTokens'))), \
             TOTAL(json_extract(usage, '$.totalTokens')) \
             FROM tasks WHERE usage IS NOT NULL AND json_valid(usage) \
             GROUP BY agent, m ORDER BY 7 DESC, agent, m LIMIT ?1";
        self.read(|conn| {
            conn.prepare_cached(SQL)
                .and_then(|mut st| {
                    st.query_map([clamp_i64(limit)], |r| {
                        // A model stored as something other than text is no model name.
                        let model = match r.get_ref(1)? {
                            rusqlite::types::ValueRef::Text(t) => {
                                Some(String::from_utf8_lossy(t).into_owned())
                            }
                            _ => None,
                        };
                        Ok(TokenSums {
                            agent: r.get(0)?,
                            model,
                            input: count_of(r.get(2)?),
                            output: count_of(r.get(3)?),
                            thinking: count_of(r.get(4)?),
                            cache_read: count_of(r.get(5)?),
                            total: count_of(r.get(6)?),
                        })
                    })?
                    .collect::<rusqlite::Result<Vec<_>>>()
                })
                .ctx("sum tokens")
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::approvals::tests::approval;
    use crate::tasks::tests::{submitted, task};
    use crate::{Answer, ApprovalAnswer, AuditEntry};
    use legate_core::{Decider, Decision, TaskId, TaskState, Usage};

    fn stored(store: &Store, id: &str, agent: &str, state: TaskState, usage: Option<Usage>) {
        let mut t = task(id, 1);
        t.agent = agent.into();
        store.insert_task(&t, &submitted()).unwrap();
        t.state = state;
        t.usage = usage;
        store.update_task(&t, &[]).unwrap();
    }

    #[test]
    fn tasks_are_counted_by_agent_and_state_largest_first_and_bounded() {
        let store = Store::open_in_memory().unwrap();
        stored(&store, "0190-a", "revisor", TaskState::Completed, None);
        stored(&store, "0190-b", "revisor", TaskState::Completed, None);
        stored(&store, "0190-c", "revisor", TaskState::Failed, None);
        stored(&store, "0190-d", "claude", TaskState::Completed, None);
        let counts = store.task_counts(10).unwrap();
        assert_eq!(
            counts[0],
            TaskCount {
                agent: "revisor".into(),
                state: "completed".into(),
                count: 2
            }
        );
        assert_eq!(counts.len(), 3);
        assert_eq!(store.task_counts(1).unwrap().len(), 1);
    }

    #[test]
    fn tokens_are_summed_by_agent_and_model_without_overflow() {
        let store = Store::open_in_memory().unwrap();
        let usage = |total: u64, model: Option<&str>| {
            Some(Usage {
                input_tokens: Some(total / 2),
                total_tokens: Some(total),
                model: model.map(str::to_owned),
                ..Usage::default()
            })
        };
        let done = TaskState::Completed;
        stored(&store, "0190-a", "agy", done, usage(100, Some("m1")));
        stored(&store, "0190-b", "agy", done, usage(50, Some("m1")));
        stored(&store, "0190-c", "agy", done, usage(7, None));
        stored(&store, "0190-d", "agy", done, usage(u64::MAX, Some("big")));
        stored(&store, "0190-e", "agy", done, usage(u64::MAX, Some("big")));
        stored(&store, "0190-f", "agy", done, None);
        let sums = store.token_sums(10).unwrap();
        assert_eq!(sums.len(), 3, "{sums:?}");
        assert_eq!(sums[0].model.as_deref(), Some("big"));
        assert_eq!(sums[0].total, u64::MAX, "saturates, never wraps");
        let m1 = sums.iter().find(|s| s.model.as_deref() == Some("m1"));
        assert_eq!(m1.map(|s| (s.total, s.input, s.output)), Some((150, 75, 0)));
        assert!(sums.iter().any(|s| s.model.is_none() && s.total == 7));
        assert_eq!(store.token_sums(1).unwrap().len(), 1);
    }

    #[test]
    fn pending_approvals_are_counted_with_the_oldest() {
        let store = Store::open_in_memory().unwrap();
        assert_eq!(
            store.pending_approvals().unwrap(),
            PendingApprovals::default()
        );
        let t = task("t1", 1);
        store.insert_task(&t, &submitted()).unwrap();
        for (id, at) in [("a1", 10), ("a2", 20)] {
            store
                .insert_approval(&approval(id, &t.id, at), "s")
                .unwrap();
        }
        let pending = store.pending_approvals().unwrap();
        assert_eq!((pending.count, pending.oldest), (2, Some(Timestamp(10))));
        let answer = ApprovalAnswer {
            answer: Answer::Deny,
            reason: None,
            channel: "cli".into(),
        };
        store.answer_approval("a1", &answer).unwrap();
        let pending = store.pending_approvals().unwrap();
        assert_eq!((pending.count, pending.oldest), (1, Some(Timestamp(20))));
    }

    #[test]
    fn decisions_are_counted_once_each_from_a_row_on() {
        let store = Store::open_in_memory().unwrap();
        assert_eq!(
            store.decision_counts_after(0).unwrap(),
            DecisionTally::default()
        );
        let record = |decider: Decider, decision: Decision| {
            let entry = AuditEntry {
                id: 0,
                task_id: TaskId("t1".into()),
                agent: "revisor".into(),
                tool: approval("x", &TaskId("t1".into()), 1).tool,
                decider,
                rule_id: None,
                channel: None,
                decision,
                option_id: None,
                reason: "why".into(),
                approval_id: None,
                at: Timestamp(1),
            };
            store.record_decision(&entry).unwrap()
        };
        record(Decider::Table, Decision::Allow);
        record(Decider::Table, Decision::Allow);
        let last = record(Decider::Human, Decision::Deny);
        let first = store.decision_counts_after(0).unwrap();
        assert_eq!(first.through, last);
        let count = |t: &DecisionTally, decider: &str, decision: &str| {
            t.counts
                .iter()
                .find(|c| c.decider == decider && c.decision == decision)
                .map_or(0, |c| c.count)
        };
        assert_eq!(count(&first, "table", "allow"), 2);
        assert_eq!(count(&first, "human", "deny"), 1);
        // Only what came after is counted again.
        let none = store.decision_counts_after(first.through).unwrap();
        assert_eq!((none.through, none.counts.len()), (last, 0));
        record(Decider::Policy, Decision::Ask);
        let next = store.decision_counts_after(first.through).unwrap();
        assert_eq!(next.counts.len(), 1);
        assert_eq!(count(&next, "policy", "ask"), 1);
    }
}
