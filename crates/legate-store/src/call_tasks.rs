//! Tool calls answered as MCP tasks (issue 30): for each, the tool, the tool's direct answer
//! (JSON the engine owns) and, for the work the engine runs in the background (`test`,
//! `integrate`), its state and the runner running it.
//!
//! The store records what the engine decided and never interprets an answer; an ended call
//! never changes again (every ending is a compare-and-set on `running`).

use crate::Store;
use crate::sql::{SqlContext, store_error};
use legate_core::{Result, Timestamp};
use rusqlite::{OptionalExtension, params};
use serde_json::Value;

/// Where a call answered as a task stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallTaskState {
    /// Answered at once; the work it started is followed elsewhere (a task, group or
    /// comparison).
    Answered,
    /// Running in the background.
    Running,
    /// Ended with an answer (which may be a tool error).
    Completed,
    /// Ended without one (its process stopped).
    Failed,
    /// Canceled before it ended.
    Canceled,
}

impl CallTaskState {
    /// The stored form.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Answered => "answered",
            Self::Running => "running",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Canceled => "canceled",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        [
            Self::Answered,
            Self::Running,
            Self::Completed,
            Self::Failed,
            Self::Canceled,
        ]
        .into_iter()
        .find(|v| v.as_str() == s)
    }
}

/// One call answered as a task, as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct CallTaskRecord {
    /// The id the caller follows.
    pub id: String,
    /// The tool called.
    pub tool: String,
    /// Where it stands.
    pub state: CallTaskState,
    /// The tool's answer, once there is one.
    pub answer: Option<Value>,
    /// Whether the answer is a tool error (`{error: {code, message}}`).
    pub is_error: bool,
    /// The runner running it, while it runs.
    pub runner: Option<String>,
    /// When it was recorded.
    pub created_at: Timestamp,
    /// When it last changed.
    pub updated_at: Timestamp,
}

fn encode(answer: Option<&Value>) -> Result<Option<String>> {
    answer
        .map(serde_json::to_string)
        .transpose()
        .map_err(|_| store_error("a call's answer could not be serialized."))
}

impl Store {
    /// Records a call answered as a task; `false` (nothing written) when `id` is already
    /// recorded.
    pub fn insert_call_task(
        &self,
        id: &str,
        tool: &str,
        state: CallTaskState,
        answer: Option<&Value>,
        runner: Option<&str>,
    ) -> Result<bool> {
        let text = encode(answer)?;
        let now = Timestamp::now().0;
        self.write("record a call answered as a task", |tx| {
            let n = tx
                .prepare_cached(
                    "INSERT OR IGNORE INTO call_tasks \
                     (id, tool, state, answer, is_error, runner, created_at, updated_at) \
                     VALUES (?1, ?2, ?3, ?4, 0, ?5, ?6, ?6)",
                )
                .and_then(|mut st| st.execute(params![id, tool, state.as_str(), text, runner, now]))
                .ctx("record a call answered as a task")?;
            Ok(n == 1)
        })
    }

    /// The call `id`, or `None`.
    pub fn call_task(&self, id: &str) -> Result<Option<CallTaskRecord>> {
        type Row = (
            String,
            String,
            Option<String>,
            i64,
            Option<String>,
            i64,
            i64,
        );
        let row: Option<Row> = self.read(|conn| {
            conn.prepare_cached(
                "SELECT tool, state, answer, is_error, runner, created_at, updated_at \
                 FROM call_tasks WHERE id = ?1",
            )
            .and_then(|mut st| {
                st.query_row([id], |r| {
                    Ok((
                        r.get(0)?,
                        r.get(1)?,
                        r.get(2)?,
                        r.get(3)?,
                        r.get(4)?,
                        r.get(5)?,
                        r.get(6)?,
                    ))
                })
                .optional()
            })
            .ctx("read a call answered as a task")
        })?;
        let Some((tool, state, answer, is_error, runner, created, updated)) = row else {
            return Ok(None);
        };
        let state = CallTaskState::parse(&state)
            .ok_or_else(|| store_error(format!("call {id} has an unreadable state.")))?;
        let answer = answer
            .map(|a| serde_json::from_str(&a))
            .transpose()
            .map_err(|_| store_error(format!("call {id} has an unreadable answer.")))?;
        Ok(Some(CallTaskRecord {
            id: id.to_string(),
            tool,
            state,
            answer,
            is_error: is_error != 0,
            runner,
            created_at: Timestamp(created),
            updated_at: Timestamp(updated),
        }))
    }

    /// Ends the running call `id` as `state` with `answer`; `false` (nothing written) when it
    /// is not running (it already ended, or was canceled).
    pub fn end_call_task(
        &self,
        id: &str,
        state: CallTaskState,
        answer: Option<&Value>,
        is_error: bool,
    ) -> Result<bool> {
        let text = encode(answer)?;
        let now = Timestamp::now().0;
        self.write("end a call answered as a task", |tx| {
            let n = tx
                .prepare_cached(
                    "UPDATE call_tasks SET state = ?2, answer = ?3, is_error = ?4, runner = NULL, \
                     updated_at = ?5 WHERE id = ?1 AND state = 'running'",
                )
                .and_then(|mut st| {
                    st.execute(params![id, state.as_str(), text, i64::from(is_error), now])
                })
                .ctx("end a call answered as a task")?;
            Ok(n == 1)
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_call_is_recorded_once_and_ends_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("legate.db")).unwrap();
        assert!(
            store
                .insert_call_task("op-1", "test", CallTaskState::Running, None, Some("r1"))
                .unwrap()
        );
        assert!(
            !store
                .insert_call_task("op-1", "integrate", CallTaskState::Answered, None, None)
                .unwrap()
        );
        let answer = json!({"passed": true});
        assert!(
            store
                .end_call_task("op-1", CallTaskState::Completed, Some(&answer), false)
                .unwrap()
        );
        // Ended: a second ending (a late cancel, a restart sweep) changes nothing.
        assert!(
            !store
                .end_call_task("op-1", CallTaskState::Canceled, None, false)
                .unwrap()
        );
        drop(store);
        let store = Store::open(&dir.path().join("legate.db")).unwrap();
        let r = store.call_task("op-1").unwrap().unwrap();
        assert_eq!(r.tool, "test");
        assert_eq!(r.state, CallTaskState::Completed);
        assert_eq!(r.answer, Some(answer));
        assert_eq!(r.runner, None);
        assert!(store.call_task("op-2").unwrap().is_none());
    }
}
