//! Waiting on several loose tasks at once (`wait_many`): until the first of them, or all of
//! them, is ready for the caller (ended, or waiting for input), or until a timeout.
//!
//! It owns the rules of a joint wait: how many tasks one wait may name, that each is named
//! once and exists, and when the wait is over. It must never change a task: a wait that
//! times out, or whose caller goes away, leaves every task as it was.

use super::Core;
use legate_core::{Error, ErrorCode, Result, Task, TaskState};
use std::collections::HashSet;
use std::time::Duration;
use tokio::task::JoinSet;

/// The most tasks one joint wait may name (the seed's 1 to 32).
pub const MAX_WAIT_MANY: usize = 32;

/// When a joint wait is over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WaitMode {
    /// As soon as any one of the tasks is ready.
    First,
    /// Once every task is ready.
    #[default]
    All,
}

impl WaitMode {
    /// Parses the wire names `first` and `all`; anything else is `INVALID_INPUT`.
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "first" => Ok(Self::First),
            "all" => Ok(Self::All),
            _ => Err(Error::new(
                ErrorCode::InvalidInput,
                "mode must be \"first\" or \"all\"",
            )),
        }
    }
}

/// One task as a joint wait left it.
#[derive(Debug, Clone)]
pub struct Waited {
    /// The task, read once the wait was over.
    pub task: Task,
    /// Whether it is ready for the caller: ended, or waiting for input.
    pub ready: bool,
}

/// What a joint wait saw.
#[derive(Debug, Clone)]
pub struct JointWait {
    /// Each task named, in the order named.
    pub tasks: Vec<Waited>,
    /// Whether the wait's condition held when it returned (the first, or all, ready).
    pub ready: bool,
    /// Whether it returned because its timeout passed.
    pub timed_out: bool,
}

/// Whether a task needs nothing more from its agent before the caller acts.
fn is_ready(task: &Task) -> bool {
    task.is_terminal() || task.state == TaskState::InputRequired
}

impl Core {
    /// Waits on `ids` (ids or unique prefixes) as `mode` says, for at most `timeout`.
    /// `INVALID_INPUT` for no id, more than [`MAX_WAIT_MANY`], or a task named twice (under
    /// two prefixes too); `TASK_NOT_FOUND` for an id that names no task. Nothing is waited
    /// on until every id checked.
    pub(crate) async fn wait_many(
        &self,
        ids: &[String],
        mode: WaitMode,
        timeout: Duration,
    ) -> Result<JointWait> {
        if ids.is_empty() || ids.len() > MAX_WAIT_MANY {
            return Err(Error::new(
                ErrorCode::InvalidInput,
                format!(
                    "wait_many takes 1 to {MAX_WAIT_MANY} task ids; {} were given",
                    ids.len()
                ),
            ));
        }
        let mut tasks = Vec::with_capacity(ids.len());
        let mut seen = HashSet::new();
        for id in ids {
            let task = self.task(id)?;
            if !seen.insert(task.id.clone()) {
                return Err(Error::new(
                    ErrorCode::InvalidInput,
                    format!("task {} is named more than once", task.id),
                ));
            }
            tasks.push(task);
        }
        let done = |ready: usize| match mode {
            WaitMode::First => ready > 0,
            WaitMode::All => ready == tasks.len(),
        };
        let mut ready = tasks.iter().filter(|t| is_ready(t)).count();
        let mut timed_out = false;
        if !done(ready) {
            let mut waits = JoinSet::new();
            for task in tasks.iter().filter(|t| !is_ready(t)) {
                let core = self.clone();
                let id = task.id.clone();
                waits.spawn(async move { core.wait(&id).await });
            }
            let deadline = tokio::time::Instant::now() + timeout;
            while !done(ready) {
                match tokio::time::timeout_at(deadline, waits.join_next()).await {
                    Ok(Some(_)) => ready += 1,
                    Ok(None) => break,
                    Err(_) => {
                        timed_out = true;
                        break;
                    }
                }
            }
            // Dropping the set aborts the waits still running; the tasks go on.
        }
        let mut waited = Vec::with_capacity(tasks.len());
        for task in &tasks {
            let task = self.task(task.id.as_str())?;
            let ready = is_ready(&task);
            waited.push(Waited { task, ready });
        }
        let now = waited.iter().filter(|w| w.ready).count();
        Ok(JointWait {
            ready: done(now),
            timed_out: timed_out && !done(now),
            tasks: waited,
        })
    }
}
