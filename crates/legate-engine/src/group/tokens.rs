//! The group's token budget (`budget: {maxTotalTokens}`): the observed figures over every
//! task of the group (continuations and peer turns included, since each carries the group
//! in its controls), and the gate a new turn passes before it is admitted.
//!
//! Counting is from the tokens the agents reported, never estimated: a task's
//! `totalTokens`, or its input and output counters added when it reported both and no
//! total. A finished task with neither has no counters: the group pauses with
//! `GROUP_USAGE_UNAVAILABLE`. Reaching the ceiling pauses it with `GROUP_BUDGET_EXCEEDED`. A
//! turn already admitted may pass the ceiling; none is admitted while another runs, so that
//! each admission sees final counters. This is not `crate::core::budget` (descriptors and
//! processes).

use super::definition::Budget;
use super::status::{BudgetState, BudgetStatus};
use legate_core::{Error, ErrorCode, Task, TaskState};

/// The tokens `task` was observed to use, when it reported them.
fn observed(task: &Task) -> Option<u64> {
    let usage = task.usage.as_ref()?;
    usage.total_tokens.or_else(|| {
        usage
            .input_tokens
            .zip(usage.output_tokens)
            .map(|(i, o)| i.saturating_add(o))
    })
}

/// Whether `task`'s turn is over (its counters final).
fn turn_over(task: &Task) -> bool {
    task.is_terminal() || task.state == TaskState::InputRequired
}

/// The budget's figures over the group's `tasks`.
pub(crate) fn figures(budget: Budget, tasks: &[Task]) -> BudgetStatus {
    let mut known: u64 = 0;
    let mut without = Vec::new();
    let mut running = Vec::new();
    for t in tasks {
        if !turn_over(t) {
            running.push(t.id.clone());
            continue;
        }
        match observed(t) {
            Some(n) => known = known.saturating_add(n),
            None => without.push(t.id.clone()),
        }
    }
    let max = budget.max_total_tokens;
    let state = if !without.is_empty() {
        BudgetState::Unavailable
    } else if known >= max {
        BudgetState::Exceeded
    } else {
        BudgetState::Within
    };
    let margin = i64::try_from(max)
        .unwrap_or(i64::MAX)
        .saturating_sub(i64::try_from(known).unwrap_or(i64::MAX));
    BudgetStatus {
        max_total_tokens: max,
        observed_total_tokens: (without.is_empty() && running.is_empty()).then_some(known),
        known_subtotal_tokens: known,
        tasks_without_counters: without,
        tasks_running: running,
        margin_tokens: margin,
        state,
    }
}

/// What the gate says about admitting one more turn.
#[derive(Debug)]
pub(crate) enum Gate {
    /// Admit it.
    Open,
    /// A turn runs: wait for its counters.
    Wait,
    /// Pause the group with this reason.
    Pause(Error),
}

/// The gate for one more turn under `budget`, given the group's `tasks`.
pub(crate) fn gate(budget: Option<Budget>, tasks: &[Task]) -> Gate {
    let Some(budget) = budget else {
        return Gate::Open;
    };
    let f = figures(budget, tasks);
    if !f.tasks_running.is_empty() {
        return Gate::Wait;
    }
    match f.state {
        BudgetState::Within => Gate::Open,
        BudgetState::Unavailable => Gate::Pause(Error::new(
            ErrorCode::GroupUsageUnavailable,
            format!(
                "{} finished task(s) of the group reported no token counters (first: {}); nothing more is admitted, nothing is estimated",
                f.tasks_without_counters.len(),
                f.tasks_without_counters.first().map_or("", |t| t.as_str())
            ),
        )),
        BudgetState::Exceeded => Gate::Pause(Error::new(
            ErrorCode::GroupBudgetExceeded,
            format!(
                "the group's tasks used {} tokens; its budget is {}",
                f.known_subtotal_tokens, f.max_total_tokens
            ),
        )),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use legate_core::Usage;
    use proptest::prelude::*;

    fn task(i: usize, state: TaskState, total: Option<u64>) -> Task {
        let mut t = Task::new(format!("t{i}"), "c", "a", "p");
        t.state = state;
        t.usage = total.map(|n| Usage {
            total_tokens: Some(n),
            ..Usage::default()
        });
        t
    }

    proptest! {
        /// The subtotal is the sum of what finished tasks reported, nothing is guessed for
        /// the others, and the gate opens exactly when every turn is over, counted and under
        /// the ceiling.
        #[test]
        fn figures_add_only_what_was_reported(
            max in 1u64..1000,
            tasks in proptest::collection::vec((0u8..3, proptest::option::of(0u64..400)), 0..8)
        ) {
            let tasks: Vec<Task> = tasks.iter().enumerate().map(|(i, (s, n))| {
                let state = [TaskState::Completed, TaskState::Failed, TaskState::Working][*s as usize];
                task(i, state, *n)
            }).collect();
            let f = figures(Budget { max_total_tokens: max }, &tasks);
            let known: u64 = tasks.iter().filter(|t| t.is_terminal()).filter_map(|t| t.usage.as_ref()?.total_tokens).sum();
            prop_assert_eq!(f.known_subtotal_tokens, known);
            let missing = tasks.iter().filter(|t| t.is_terminal() && t.usage.is_none()).count();
            prop_assert_eq!(f.tasks_without_counters.len(), missing);
            let running = tasks.iter().any(|t| !t.is_terminal());
            let open = matches!(gate(Some(Budget { max_total_tokens: max }), &tasks), Gate::Open);
            prop_assert_eq!(open, !running && missing == 0 && known < max);
            prop_assert_eq!(f.margin_tokens, max as i64 - known as i64);
        }
    }

    #[test]
    fn no_budget_always_admits_and_a_missing_counter_pauses() {
        let t = [task(0, TaskState::Completed, None)];
        assert!(matches!(gate(None, &t), Gate::Open));
        match gate(
            Some(Budget {
                max_total_tokens: 10,
            }),
            &t,
        ) {
            Gate::Pause(e) => assert_eq!(e.code, ErrorCode::GroupUsageUnavailable),
            other => panic!("{other:?}"),
        }
        let t = [task(0, TaskState::Completed, Some(10))];
        match gate(
            Some(Budget {
                max_total_tokens: 10,
            }),
            &t,
        ) {
            Gate::Pause(e) => assert_eq!(e.code, ErrorCode::GroupBudgetExceeded),
            other => panic!("{other:?}"),
        }
    }
}
