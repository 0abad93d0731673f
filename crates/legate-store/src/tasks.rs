//! Task rows: inserting and updating them (with their events, in one transaction), reading
//! one by id or unique prefix, and listing.
//!
//! A task row mirrors [`Task`]; `runner` and `cancel_requested_at` belong to the `recovery`
//! module, and `remote` to [`Store::set_task_remote`]: [`Store::update_task`] never touches
//! them.

use crate::Store;
use crate::events::{append_in, last_seq_in};
use crate::recovery::set_runner_in;
use crate::sql::{SqlContext, clamp_i64, shorten, store_error, task_not_found, to_i64, to_u64};
use legate_core::{
    Error, ErrorCode, Event, EventKind, RemoteRef, Result, Task, TaskId, TaskMode, TaskResult,
    TaskRole, TaskState, Timestamp, Usage, WorkspaceKind,
};
use rusqlite::types::{ToSql, Value};
use rusqlite::{Connection, OptionalExtension, Row, Transaction, params};
use std::path::{Path, PathBuf};

/// The shortest prefix [`Store::find_task`] accepts.
const MIN_PREFIX: usize = 4;

/// The columns [`Store::insert_task`] writes, in order: those of [`Encoded::written`], then
/// `created_at` and `controls`.
const INSERTED_COLUMNS: &str = "id, context_id, agent, workspace, root, prompt, mode, \
     state, error_code, error_message, status_message, usage, result, session_id, timeout_secs, \
     updated_at, model, role, created_at, controls";

/// The columns [`RawTask::from_row`] reads, in order: the inserted ones, then `remote` (only
/// [`Store::set_task_remote`] writes it).
pub(crate) const TASK_COLUMNS: &str = "id, context_id, agent, workspace, root, prompt, mode, \
     state, error_code, error_message, status_message, usage, result, session_id, timeout_secs, \
     created_at, updated_at, model, role, controls, remote";

/// Which tasks [`Store::list_tasks`] returns. Every `Some` narrows the list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskFilter {
    /// Only tasks in this state.
    pub state: Option<TaskState>,
    /// Only tasks of this context.
    pub context_id: Option<String>,
    /// Only tasks of this agent.
    pub agent: Option<String>,
    /// At most this many (default 50).
    pub limit: usize,
    /// Only tasks created strictly before this instant (for paging back).
    pub before: Option<Timestamp>,
    /// Only tasks whose context an inbound message started (`TaskControls::inbound`).
    pub inbound_only: bool,
}

impl Default for TaskFilter {
    fn default() -> Self {
        Self {
            state: None,
            context_id: None,
            agent: None,
            limit: 50,
            before: None,
            inbound_only: false,
        }
    }
}

/// A task's fields in their column form.
struct Encoded<'a> {
    workspace: &'static str,
    root: Option<&'a str>,
    mode: &'static str,
    state: &'static str,
    error_code: Option<&'static str>,
    error_message: Option<&'a str>,
    usage: Option<String>,
    result: Option<String>,
    timeout_secs: i64,
    role: Option<String>,
    /// `None` for empty controls, so that older readers see the column they knew: empty.
    controls: Option<String>,
}

fn path_text<'a>(path: Option<&'a Path>, what: &str) -> Result<Option<&'a str>> {
    path.map(|p| {
        p.to_str().ok_or_else(|| {
            store_error(format!(
                "the {what} is not valid UTF-8 and cannot be stored."
            ))
        })
    })
    .transpose()
}

fn encode(task: &Task) -> Result<Encoded<'_>> {
    let json_fail = |what: &str| {
        store_error(format!(
            "the {what} of task {} could not be encoded.",
            task.id
        ))
    };
    Ok(Encoded {
        workspace: task.workspace.as_str(),
        root: path_text(task.root.as_deref(), "workspace root")?,
        mode: task.mode.as_str(),
        state: task.state.as_str(),
        error_code: task.error.as_ref().map(|e| e.code.as_str()),
        error_message: task.error.as_ref().map(|e| e.message.as_str()),
        usage: task
            .usage
            .as_ref()
            .map(serde_json::to_string)
            .transpose()
            .map_err(|_| json_fail("usage"))?,
        result: task
            .result
            .as_ref()
            .map(serde_json::to_string)
            .transpose()
            .map_err(|_| json_fail("result"))?,
        timeout_secs: to_i64(task.timeout_secs, "the timeout")?,
        role: task
            .role
            .as_ref()
            .map(serde_json::to_string)
            .transpose()
            .map_err(|_| json_fail("role"))?,
        controls: (!task.controls.is_empty())
            .then(|| serde_json::to_string(&task.controls))
            .transpose()
            .map_err(|_| json_fail("controls"))?,
    })
}

impl Encoded<'_> {
    /// The values of the columns a task's insert and its update both write, `?1` to `?18`:
    /// `id`, `context_id`, `agent`, `workspace`, `root`, `prompt`, `mode`, `state`,
    /// `error_code`, `error_message`, `status_message`, `usage`, `result`, `session_id`,
    /// `timeout_secs`, `updated_at`, `model` and `role`.
    fn written<'v>(&'v self, task: &'v Task) -> [&'v dyn ToSql; 18] {
        [
            &task.id.0,
            &task.context_id,
            &task.agent,
            &self.workspace,
            &self.root,
            &task.prompt,
            &self.mode,
            &self.state,
            &self.error_code,
            &self.error_message,
            &task.status_message,
            &self.usage,
            &self.result,
            &task.session_id,
            &self.timeout_secs,
            &task.updated_at.0,
            &task.model,
            &self.role,
        ]
    }
}

/// A task row as SQLite hands it over, before any parsing.
pub(crate) struct RawTask {
    id: String,
    context_id: String,
    agent: String,
    workspace: String,
    root: Option<String>,
    prompt: String,
    mode: String,
    state: String,
    error_code: Option<String>,
    error_message: Option<String>,
    status_message: Option<String>,
    usage: Option<String>,
    result: Option<String>,
    session_id: Option<String>,
    timeout_secs: i64,
    created_at: i64,
    updated_at: i64,
    model: Option<String>,
    role: Option<String>,
    controls: Option<String>,
    remote: Option<String>,
}

impl RawTask {
    /// Reads the [`TASK_COLUMNS`] of a row.
    pub(crate) fn from_row(r: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(Self {
            id: r.get(0)?,
            context_id: r.get(1)?,
            agent: r.get(2)?,
            workspace: r.get(3)?,
            root: r.get(4)?,
            prompt: r.get(5)?,
            mode: r.get(6)?,
            state: r.get(7)?,
            error_code: r.get(8)?,
            error_message: r.get(9)?,
            status_message: r.get(10)?,
            usage: r.get(11)?,
            result: r.get(12)?,
            session_id: r.get(13)?,
            timeout_secs: r.get(14)?,
            created_at: r.get(15)?,
            updated_at: r.get(16)?,
            model: r.get(17)?,
            role: r.get(18)?,
            controls: r.get(19)?,
            remote: r.get(20)?,
        })
    }

    /// Parses the row into a [`Task`].
    pub(crate) fn decode(self) -> Result<Task> {
        let id = self.id;
        let bad = |what: &str| store_error(format!("task {id} has an unreadable {what}."));
        let workspace =
            WorkspaceKind::parse(&self.workspace).ok_or_else(|| bad("workspace kind"))?;
        let mode = TaskMode::parse(&self.mode).ok_or_else(|| bad("mode"))?;
        let state = TaskState::parse(&self.state).ok_or_else(|| bad("state"))?;
        // A code written by a newer Legate still reads; its sentence is kept.
        let error = match (self.error_code, self.error_message) {
            (Some(code), message) => Some(Error::new(
                ErrorCode::parse(&code).unwrap_or(ErrorCode::Internal),
                message.unwrap_or_default(),
            )),
            (None, _) => None,
        };
        let usage = self
            .usage
            .map(|s| serde_json::from_str::<Usage>(&s))
            .transpose()
            .map_err(|_| bad("usage"))?;
        let result = self
            .result
            .map(|s| serde_json::from_str::<TaskResult>(&s))
            .transpose()
            .map_err(|_| bad("result"))?;
        let role = self
            .role
            .map(|s| serde_json::from_str::<TaskRole>(&s))
            .transpose()
            .map_err(|_| bad("role"))?;
        let remote = self
            .remote
            .map(|s| serde_json::from_str::<RemoteRef>(&s))
            .transpose()
            .map_err(|_| bad("remote reference"))?;
        let controls = self
            .controls
            .map(|s| serde_json::from_str::<legate_core::TaskControls>(&s))
            .transpose()
            .map_err(|_| bad("controls"))?
            .unwrap_or_default();
        let timeout_secs = to_u64(self.timeout_secs, "timeout")?;
        Ok(Task {
            id: TaskId(id),
            context_id: self.context_id,
            agent: self.agent,
            workspace,
            root: self.root.map(PathBuf::from),
            prompt: self.prompt,
            mode,
            model: self.model,
            role,
            state,
            error,
            status_message: self.status_message,
            usage,
            result,
            session_id: self.session_id,
            timeout_secs,
            remote,
            controls,
            created_at: Timestamp(self.created_at),
            updated_at: Timestamp(self.updated_at),
        })
    }
}

/// Reads one task by exact id.
pub(crate) fn load(conn: &Connection, id: &str) -> Result<Option<Task>> {
    conn.prepare_cached(&format!("SELECT {TASK_COLUMNS} FROM tasks WHERE id = ?1"))
        .and_then(|mut st| st.query_row([id], RawTask::from_row).optional())
        .ctx("read a task")?
        .map(RawTask::decode)
        .transpose()
}

/// Whether a task row exists.
pub(crate) fn exists(conn: &Connection, id: &str) -> Result<bool> {
    conn.prepare_cached("SELECT 1 FROM tasks WHERE id = ?1")
        .and_then(|mut st| st.exists([id]))
        .ctx("look up a task")
}

/// A GLOB pattern matching exactly the strings that start with `prefix`.
fn glob_prefix(prefix: &str) -> String {
    let mut pattern = String::with_capacity(prefix.len() + 1);
    for c in prefix.chars() {
        match c {
            '*' | '?' | '[' => {
                pattern.push('[');
                pattern.push(c);
                pattern.push(']');
            }
            _ => pattern.push(c),
        }
    }
    pattern.push('*');
    pattern
}

impl Store {
    /// Stores a new task and its event #1 in one transaction; returns that event.
    ///
    /// The task's `runner` starts empty and no cancel is requested. An id that exists already
    /// is a `STORE_ERROR` and changes nothing.
    pub fn insert_task(&self, task: &Task, first: &EventKind) -> Result<Event> {
        self.insert_task_run_by(task, first, None)
    }

    /// [`Store::insert_task`], with `runner` recorded as the task's runner in the same
    /// transaction: a `kill -9` can never leave a stored task that no process claims and
    /// that recovery would therefore never settle. `None` records no runner.
    pub fn insert_task_run_by(
        &self,
        task: &Task,
        first: &EventKind,
        runner: Option<&str>,
    ) -> Result<Event> {
        self.insert_task_with(task, std::slice::from_ref(first), runner)?
            .into_iter()
            .next()
            .ok_or_else(|| store_error("the store did not return the first event."))
    }

    /// [`Store::insert_task_run_by`] with several first events (at least one), appended in
    /// order in the same transaction.
    pub fn insert_task_with(
        &self,
        task: &Task,
        events: &[EventKind],
        runner: Option<&str>,
    ) -> Result<Vec<Event>> {
        if events.is_empty() {
            return Err(store_error("a task is stored with its first event."));
        }
        let enc = encode(task)?;
        self.write("store a task", |tx| {
            let inserted = tx
                .prepare_cached(&format!(
                    "INSERT INTO tasks ({INSERTED_COLUMNS}) VALUES \
                     (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20) \
                     ON CONFLICT (id) DO NOTHING"
                ))
                .and_then(|mut st| {
                    let mut values = enc.written(task).to_vec();
                    values.extend([&task.created_at.0 as &dyn ToSql, &enc.controls]);
                    st.execute(values.as_slice())
                })
                .ctx("store a task")?;
            if inserted == 0 {
                return Err(store_error(format!(
                    "a task with the id {} exists already.",
                    task.id
                )));
            }
            if let Some(runner) = runner {
                set_runner_in(tx, &task.id, runner)?;
            }
            append_in(tx, &task.id, events, Timestamp::now())
        })
    }

    /// Overwrites a task's row from `task` (all but `id`, `created_at`, runner and cancel
    /// request) and appends `events` after it, in one transaction. `TASK_NOT_FOUND` if there
    /// is no such task.
    pub fn update_task(&self, task: &Task, events: &[EventKind]) -> Result<Vec<Event>> {
        let enc = encode(task)?;
        self.write("update a task", |tx| update_in(tx, task, &enc, events))
    }

    /// [`Store::update_task`], with `runner` recorded as the task's runner in the same
    /// transaction (a reply that runs the task again, in this process).
    pub fn update_task_run_by(
        &self,
        task: &Task,
        events: &[EventKind],
        runner: &str,
    ) -> Result<Vec<Event>> {
        let enc = encode(task)?;
        self.write("update a task", |tx| {
            let stored = update_in(tx, task, &enc, events)?;
            set_runner_in(tx, &task.id, runner)?;
            Ok(stored)
        })
    }

    /// Stores a reply into a task that waits for input, as [`Store::update_task_run_by`]
    /// does, only while the stored task is still `input-required` and, when `question` is
    /// given, its last event is still event `question` (the question the reply answers): a
    /// compare-and-set, so two replies (from any processes) start one turn.
    /// `TASK_NOT_AWAITING_INPUT`, nothing written, otherwise.
    pub fn reply_task(
        &self,
        task: &Task,
        events: &[EventKind],
        runner: &str,
        question: Option<u64>,
    ) -> Result<Vec<Event>> {
        let enc = encode(task)?;
        self.write("reply into a task", |tx| {
            let state: Option<String> = tx
                .prepare_cached("SELECT state FROM tasks WHERE id = ?1")
                .and_then(|mut st| st.query_row([task.id.as_str()], |r| r.get(0)).optional())
                .ctx("reply into a task")?;
            let Some(state) = state else {
                return Err(task_not_found(task.id.as_str()));
            };
            let waiting = state == TaskState::InputRequired.as_str()
                && question.is_none_or(|q| last_seq_in(tx, &task.id).is_ok_and(|last| last == q));
            if !waiting {
                return Err(Error::new(
                    ErrorCode::TaskNotAwaitingInput,
                    format!(
                        "task {} no longer waits on that question (it was answered, or it moved on)",
                        task.id
                    ),
                ));
            }
            let stored = update_in(tx, task, &enc, events)?;
            set_runner_in(tx, &task.id, runner)?;
            Ok(stored)
        })
    }

    /// Ends task `id`: in one write transaction, reads the task as stored and whether a cancel
    /// of it was requested ([`Store::request_cancel`]), asks `end` for the task and events to
    /// store given those, and stores them as [`Store::update_task`] does. `end` answers `None`
    /// to leave the task alone (it ended already, say). A cancel request and a task's end are
    /// thus ordered: a request that commits first is seen by `end`; one that comes after finds
    /// the task finished. Returns the task as stored and its events, or `None`.
    pub fn end_task(
        &self,
        id: &TaskId,
        end: impl FnOnce(Task, bool) -> Option<(Task, Vec<EventKind>)>,
    ) -> Result<Option<(Task, Vec<Event>)>> {
        self.write("end a task", |tx| {
            let Some(stored) = load(tx, id.as_str())? else {
                return Err(task_not_found(id.as_str()));
            };
            let requested: Option<i64> = tx
                .prepare_cached("SELECT cancel_requested_at FROM tasks WHERE id = ?1")
                .and_then(|mut st| st.query_row([id.as_str()], |r| r.get(0)))
                .ctx("end a task")?;
            let Some((task, events)) = end(stored, requested.is_some()) else {
                return Ok(None);
            };
            let enc = encode(&task)?;
            let stored = update_in(tx, &task, &enc, &events)?;
            Ok(Some((task, stored)))
        })
    }

    /// Binds task `task_id` to the remote task `remote` (replacing any earlier binding):
    /// the remote backend calls this as soon as the remote server names its task, before it
    /// relays anything else, so that a restart can re-attach. `TASK_NOT_FOUND` for an unknown
    /// task; nothing else about the task changes.
    pub fn set_task_remote(&self, task_id: &TaskId, remote: &RemoteRef) -> Result<()> {
        let text = serde_json::to_string(remote).map_err(|_| {
            store_error(format!(
                "the remote reference of task {task_id} could not be encoded."
            ))
        })?;
        self.write("record a task's remote task", |tx| {
            let changed = tx
                .prepare_cached("UPDATE tasks SET remote = ?2 WHERE id = ?1")
                .and_then(|mut st| st.execute(params![task_id.as_str(), text]))
                .ctx("record a task's remote task")?;
            if changed == 0 {
                return Err(task_not_found(task_id.as_str()));
            }
            Ok(())
        })
    }

    /// Whether a task with exactly this id is stored (nothing of it read).
    pub fn has_task(&self, id: &str) -> Result<bool> {
        self.read(|conn| exists(conn, id))
    }

    /// The task with exactly this id, if any.
    pub fn task(&self, id: &TaskId) -> Result<Option<Task>> {
        self.read(|conn| load(conn, id.as_str()))
    }

    /// The task with this exact id, or else the only task whose id starts with it (a prefix
    /// needs at least 4 characters). `TASK_NOT_FOUND` when none matches; `INVALID_INPUT`
    /// naming how many match when the prefix is ambiguous.
    pub fn find_task(&self, id_or_prefix: &str) -> Result<Task> {
        self.read(|conn| {
            if let Some(task) = load(conn, id_or_prefix)? {
                return Ok(task);
            }
            if id_or_prefix.chars().count() < MIN_PREFIX || id_or_prefix.contains('\0') {
                return Err(task_not_found(id_or_prefix));
            }
            let pattern = glob_prefix(id_or_prefix);
            let mut hits = conn
                .prepare_cached(&format!(
                    "SELECT {TASK_COLUMNS} FROM tasks WHERE id GLOB ?1 ORDER BY id LIMIT 2"
                ))
                .and_then(|mut st| {
                    st.query_map([&pattern], RawTask::from_row)?
                        .collect::<rusqlite::Result<Vec<_>>>()
                })
                .ctx("look up a task by prefix")?;
            match hits.len() {
                0 => Err(task_not_found(id_or_prefix)),
                1 => hits
                    .pop()
                    .map_or_else(|| Err(task_not_found(id_or_prefix)), RawTask::decode),
                _ => {
                    let n: i64 = conn
                        .prepare_cached("SELECT COUNT(*) FROM tasks WHERE id GLOB ?1")
                        .and_then(|mut st| st.query_row([&pattern], |r| r.get(0)))
                        .ctx("count tasks by prefix")?;
                    Err(Error::invalid_input(format!(
                        "{n} tasks have ids starting with {}; give more of the id.",
                        shorten(id_or_prefix)
                    )))
                }
            }
        })
    }

    /// Tasks matching `filter`, newest first (by creation time, then id).
    pub fn list_tasks(&self, filter: &TaskFilter) -> Result<Vec<Task>> {
        let mut sql = format!("SELECT {TASK_COLUMNS} FROM tasks WHERE 1 = 1");
        let mut args: Vec<Value> = Vec::new();
        if let Some(state) = filter.state {
            args.push(Value::Text(state.as_str().to_owned()));
            sql.push_str(&format!(" AND state = ?{}", args.len()));
        }
        if let Some(context_id) = &filter.context_id {
            args.push(Value::Text(context_id.clone()));
            sql.push_str(&format!(" AND context_id = ?{}", args.len()));
        }
        if let Some(agent) = &filter.agent {
            args.push(Value::Text(agent.clone()));
            sql.push_str(&format!(" AND agent = ?{}", args.len()));
        }
        if let Some(before) = filter.before {
            args.push(Value::Integer(before.0));
            sql.push_str(&format!(" AND created_at < ?{}", args.len()));
        }
        if filter.inbound_only {
            sql.push_str(" AND json_extract(controls, '$.inbound') = 1");
        }
        args.push(Value::Integer(clamp_i64(filter.limit)));
        sql.push_str(&format!(
            " ORDER BY created_at DESC, id DESC LIMIT ?{}",
            args.len()
        ));
        self.read(|conn| {
            conn.prepare_cached(&sql)
                .and_then(|mut st| {
                    st.query_map(rusqlite::params_from_iter(args), RawTask::from_row)?
                        .collect::<rusqlite::Result<Vec<_>>>()
                })
                .ctx("list tasks")?
                .into_iter()
                .map(RawTask::decode)
                .collect()
        })
    }
}

/// Stores `task` over its row and appends `events`, inside `tx`.
fn update_in(
    tx: &Transaction<'_>,
    task: &Task,
    enc: &Encoded<'_>,
    events: &[EventKind],
) -> Result<Vec<Event>> {
    let changed = tx
        .prepare_cached(
            "UPDATE tasks SET context_id = ?2, agent = ?3, workspace = ?4, root = ?5, \
             prompt = ?6, mode = ?7, state = ?8, error_code = ?9, error_message = ?10, \
             status_message = ?11, usage = ?12, result = ?13, session_id = ?14, \
             timeout_secs = ?15, updated_at = ?16, model = ?17, role = ?18 WHERE id = ?1",
        )
        .and_then(|mut st| st.execute(enc.written(task)))
        .ctx("update a task")?;
    if changed == 0 {
        return Err(task_not_found(task.id.as_str()));
    }
    append_in(tx, &task.id, events, Timestamp::now())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
pub(crate) mod tests {
    use super::*;
    use legate_core::{Refusal, TaskMode};

    /// A task with every optional field empty.
    pub(crate) fn task(id: &str, created_at: i64) -> Task {
        Task::new(id, "ctx", "claude", "do the thing").at(Timestamp(created_at))
    }

    pub(crate) fn submitted() -> EventKind {
        EventKind::Status {
            state: TaskState::Submitted,
            message: None,
            error: None,
        }
    }

    #[test]
    fn a_task_round_trips_with_every_field() {
        let store = Store::open_in_memory().unwrap();
        let mut t = task("0190-full", 5);
        t.root = Some("/home/u/.legate/sandboxes/x".into());
        t.workspace = WorkspaceKind::Shared;
        t.mode = TaskMode::ReadOnly;
        t.role = Some(legate_core::TaskRole {
            name: "security-review".into(),
            base: legate_core::RoleBase::Reviewer,
            instructions: "cite evidence".into(),
        });
        t.state = TaskState::Failed;
        t.error = Some(Error::new(ErrorCode::TaskTimeout, "it ran for 600 s."));
        t.status_message = Some("timed out".into());
        t.usage = Some(Usage {
            input_tokens: Some(10),
            total_tokens: Some(12),
            ..Usage::default()
        });
        t.result = Some(TaskResult {
            text: "done ✓".into(),
            stop_reason: Some("end_turn".into()),
            tool_calls: 3,
            failed_tool_calls: 1,
            refusals: vec![Refusal {
                title: "rm".into(),
                reason: "no".into(),
            }],
            attachments: vec![legate_core::Attachment {
                name: Some("out.txt".into()),
                media_type: Some("text/plain".into()),
                uri: Some("out.txt".into()),
                text: None,
                base64: Some("dGNr".into()),
            }],
            notices: vec![legate_core::TaskNotice {
                code: legate_core::NOTICE_SILENT_TURN.into(),
                message: "claimed".into(),
            }],
            report: Some(legate_core::Report {
                origin: legate_core::ReportOrigin::AgentReported,
                citations_checked: true,
                body: legate_core::ReportBody::Review(legate_core::ReviewReport {
                    summary: "one finding".into(),
                    reviewed_files: vec!["a.rs".into()],
                    findings: vec![legate_core::Finding {
                        severity: legate_core::Severity::P2,
                        path: "a.rs".into(),
                        line: 1,
                        quote: "fn main".into(),
                        message: "m".into(),
                        impact: "i".into(),
                        suggestion: "s".into(),
                    }],
                    unverified: vec![],
                }),
            }),
        });
        t.session_id = Some("sess-1".into());
        t.timeout_secs = u64::try_from(i64::MAX).unwrap();
        let first = store.insert_task(&t, &submitted()).unwrap();
        assert_eq!(first.seq, 1);
        assert_eq!(first.task_id, t.id);
        assert_eq!(store.task(&t.id).unwrap(), Some(t));
    }

    #[test]
    fn a_duplicate_id_is_refused_and_changes_nothing() {
        let store = Store::open_in_memory().unwrap();
        let t = task("dup-1", 1);
        store.insert_task(&t, &submitted()).unwrap();
        let mut other = t.clone();
        other.prompt = "different".into();
        let err = store.insert_task(&other, &submitted()).unwrap_err();
        assert_eq!(err.code, ErrorCode::StoreError);
        assert!(!err.message.contains("different"));
        assert_eq!(store.task(&t.id).unwrap(), Some(t.clone()));
        assert_eq!(store.last_seq(&t.id).unwrap(), 1);
    }

    #[test]
    fn a_timeout_beyond_i64_is_refused() {
        let store = Store::open_in_memory().unwrap();
        let mut t = task("big", 1);
        t.timeout_secs = u64::MAX;
        let err = store.insert_task(&t, &submitted()).unwrap_err();
        assert_eq!(err.code, ErrorCode::StoreError);
        assert!(store.task(&t.id).unwrap().is_none());
    }

    #[test]
    fn update_writes_the_row_and_events_together() {
        let store = Store::open_in_memory().unwrap();
        let mut t = task("upd-1", 1);
        store.insert_task(&t, &submitted()).unwrap();
        t.state = TaskState::Working;
        t.updated_at = Timestamp(9);
        t.session_id = Some("s".into());
        let events = store
            .update_task(
                &t,
                &[
                    EventKind::Status {
                        state: TaskState::Working,
                        message: None,
                        error: None,
                    },
                    EventKind::Message { text: "hi".into() },
                ],
            )
            .unwrap();
        assert_eq!(events.iter().map(|e| e.seq).collect::<Vec<_>>(), [2, 3]);
        assert_eq!(store.task(&t.id).unwrap(), Some(t));
    }

    #[test]
    fn updating_a_missing_task_is_task_not_found_and_writes_no_events() {
        let store = Store::open_in_memory().unwrap();
        let t = task("ghost", 1);
        let err = store
            .update_task(&t, &[EventKind::Message { text: "x".into() }])
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::TaskNotFound);
        assert_eq!(store.last_seq(&t.id).unwrap(), 0);
    }

    #[test]
    fn update_keeps_created_at() {
        let store = Store::open_in_memory().unwrap();
        let t = task("keep-created", 1);
        store.insert_task(&t, &submitted()).unwrap();
        let mut changed = t.clone();
        changed.created_at = Timestamp(99);
        store.update_task(&changed, &[]).unwrap();
        assert_eq!(store.task(&t.id).unwrap().unwrap().created_at, Timestamp(1));
    }

    #[test]
    fn find_task_by_id_and_prefix() {
        let store = Store::open_in_memory().unwrap();
        for id in ["abcd1111", "abcd2222", "abce3333", "a*b?[c]x"] {
            store.insert_task(&task(id, 1), &submitted()).unwrap();
        }
        assert_eq!(store.find_task("abcd1111").unwrap().id.as_str(), "abcd1111");
        assert_eq!(store.find_task("abcd1").unwrap().id.as_str(), "abcd1111");
        assert_eq!(store.find_task("abce").unwrap().id.as_str(), "abce3333");
        // Glob characters are literal.
        assert_eq!(store.find_task("a*b?").unwrap().id.as_str(), "a*b?[c]x");
        assert_eq!(store.find_task("a*b?[c").unwrap().id.as_str(), "a*b?[c]x");
        let err = store.find_task("a*b*").unwrap_err();
        assert_eq!(err.code, ErrorCode::TaskNotFound);

        let err = store.find_task("abcd").unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidInput);
        assert!(err.message.starts_with("2 tasks"), "{}", err.message);
        let err = store.find_task("abc").unwrap_err();
        assert_eq!(err.code, ErrorCode::TaskNotFound, "too short for a prefix");
        let err = store.find_task("zzzz").unwrap_err();
        assert_eq!(err.code, ErrorCode::TaskNotFound);
        assert_eq!(err.message, "no task has the id zzzz.");
        assert_eq!(
            store.find_task("ABCD1").unwrap_err().code,
            ErrorCode::TaskNotFound,
            "ids are case-sensitive"
        );
    }

    #[test]
    fn list_filters_and_orders_newest_first() {
        let store = Store::open_in_memory().unwrap();
        for (i, (ctx, agent, state)) in [
            ("c1", "a", TaskState::Submitted),
            ("c1", "b", TaskState::Completed),
            ("c2", "a", TaskState::Completed),
            ("c2", "b", TaskState::Working),
        ]
        .into_iter()
        .enumerate()
        {
            let mut t = task(&format!("t{i}"), i64::try_from(i).unwrap() * 10);
            t.context_id = ctx.into();
            t.agent = agent.into();
            t.state = state;
            store.insert_task(&t, &submitted()).unwrap();
        }
        let ids = |f: TaskFilter| {
            store
                .list_tasks(&f)
                .unwrap()
                .into_iter()
                .map(|t| t.id.0)
                .collect::<Vec<_>>()
        };
        assert_eq!(ids(TaskFilter::default()), ["t3", "t2", "t1", "t0"]);
        assert_eq!(
            ids(TaskFilter {
                state: Some(TaskState::Completed),
                ..TaskFilter::default()
            }),
            ["t2", "t1"]
        );
        assert_eq!(
            ids(TaskFilter {
                context_id: Some("c2".into()),
                agent: Some("a".into()),
                ..TaskFilter::default()
            }),
            ["t2"]
        );
        assert_eq!(
            ids(TaskFilter {
                limit: 2,
                before: Some(Timestamp(30)),
                ..TaskFilter::default()
            }),
            ["t2", "t1"]
        );
        assert_eq!(TaskFilter::default().limit, 50);
    }

    #[test]
    fn a_remote_binding_is_kept_by_updates_and_read_back_with_the_task() {
        let store = Store::open_in_memory().unwrap();
        let t = task("r1", 1);
        store.insert_task(&t, &submitted()).unwrap();
        let remote = RemoteRef {
            url: "http://127.0.0.1:9/agents/a".into(),
            binding: "JSONRPC".into(),
            task_id: "remote-1".into(),
            context_id: Some("ctx".into()),
        };
        store.set_task_remote(&t.id, &remote).unwrap();
        // The engine's own copy of the task has no remote: its update must not erase it.
        let mut updated = t.clone();
        updated.state = TaskState::Working;
        store.update_task(&updated, &[]).unwrap();
        let read = store.task(&t.id).unwrap().unwrap();
        assert_eq!(read.state, TaskState::Working);
        assert_eq!(read.remote, Some(remote.clone()));
        assert_eq!(
            store
                .set_task_remote(&TaskId("nope".into()), &remote)
                .unwrap_err()
                .code,
            ErrorCode::TaskNotFound
        );
    }

    #[test]
    fn controls_are_stored_at_insert_and_never_changed_by_updates() {
        let store = Store::open_in_memory().unwrap();
        let mut t = task("c1", 1);
        t.controls.delivery_mode = legate_core::DeliveryMode::Messages;
        t.controls.artifact_paths = vec!["out/report.txt".into()];
        store.insert_task(&t, &submitted()).unwrap();
        let mut updated = t.clone();
        updated.state = TaskState::Working;
        updated.controls = legate_core::TaskControls::default();
        store.update_task(&updated, &[]).unwrap();
        let read = store.task(&t.id).unwrap().unwrap();
        assert_eq!(read.state, TaskState::Working);
        assert_eq!(read.controls, t.controls);
        // A task without controls reads back empty.
        let plain = task("c2", 2);
        store.insert_task(&plain, &submitted()).unwrap();
        assert!(store.task(&plain.id).unwrap().unwrap().controls.is_empty());
    }
}
