//! The approval queue: permission requests a policy sent to a supervisor (`ask`), one row
//! each, waiting for an answer from any Legate process on the same home.
//!
//! A row is inserted `pending` and leaves that state exactly once: answering and expiring are
//! compare-and-set on `state = 'pending'`, so two answerers (two processes, a person and the
//! deadline) can never both win; the loser gets `APPROVAL_CLOSED`. The store never decides
//! what an answer means for the agent (the engine turns it into an option id) and never
//! deletes a row except with its task.

use crate::Store;
use crate::sql::{SqlContext, clamp_i64, shorten, store_error};
use legate_core::{
    Decider, Decision, Error, ErrorCode, PermissionOption, Result, TaskId, Timestamp, ToolKind,
};
use rusqlite::{Connection, OptionalExtension, Row, params};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// The shortest prefix of an approval id [`Store::find_approval`] accepts.
pub const MIN_APPROVAL_PREFIX: usize = 8;

/// The tool call an approval or a decision is about, as the supervisor saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ToolCallSummary {
    /// Its kind.
    pub kind: ToolKind,
    /// Its title, as the agent gave it (agent-written text: show it, never run it).
    pub title: String,
    /// The paths it names, as the agent sent them.
    #[serde(default)]
    pub paths: Vec<PathBuf>,
    /// For a command: its parsed words (program first); `None` when none could be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// For a command that is not one plain command (a chain, a substitution, a shell wrapper
    /// with more arguments, text that does not read): the command as the agent sent it (shell
    /// text, or an argv as a JSON array), bounded. Without it a supervisor would see only the
    /// title, which the asking agent writes. Shown, never run or matched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script: Option<String>,
    /// For a connection the egress proxy put to a supervisor: its destination (`host:port`),
    /// as Legate's proxy read it from the request (never the agent's own words).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination: Option<String>,
}

legate_core::wire_enum! {
    /// Where an approval is in its life. Only `pending` ever changes, once.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    #[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
    pub enum ApprovalState {
        /// Waiting for an answer.
        Pending => "pending",
        /// A supervisor allowed it.
        Allowed => "allowed",
        /// A supervisor denied it.
        Denied => "denied",
        /// Nobody answered: the deadline passed, or the task was canceled, timed out, its
        /// agent exited or its process stopped while it waited.
        Expired => "expired",
    }
}

legate_core::wire_enum! {
    /// What a supervisor answers.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    #[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
    pub enum Answer {
        /// Allow this call.
        Allow => "allow",
        /// Allow this call and, for the rest of the task, every call in the same scope.
        AllowForTask => "allow-for-task",
        /// Refuse this call.
        Deny => "deny",
    }
}

impl Answer {
    /// Whether the tool may run.
    pub fn is_allow(self) -> bool {
        matches!(self, Self::Allow | Self::AllowForTask)
    }
}

/// An answer to one approval, from a named channel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ApprovalAnswer {
    /// Allow, allow for the rest of the task, or deny.
    pub answer: Answer,
    /// Why (shown to the agent with a refusal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Who answered: `cli`, `mcp`, `dashboard`, `agent:NAME`.
    pub channel: String,
}

/// One permission request waiting for (or given) a supervisor's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Approval {
    /// Its id (a UUID).
    pub id: String,
    /// The task whose agent asked.
    pub task_id: TaskId,
    /// The agent that asked.
    pub agent: String,
    /// The task's role.
    pub role: String,
    /// The tool call.
    pub tool: ToolCallSummary,
    /// The options the agent offered.
    pub options: Vec<PermissionOption>,
    /// The policy rule that asked for a supervisor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_id: Option<String>,
    /// Why a supervisor must decide (the rule's reason).
    pub reason: String,
    /// The channels that may answer (`human`, `agent:NAME`).
    pub answerers: Vec<String>,
    /// When it was asked.
    pub created_at: Timestamp,
    /// When it is refused if nobody answered.
    pub deadline: Timestamp,
    /// Where it is.
    pub state: ApprovalState,
    /// The answer it was given, once answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<ApprovalAnswer>,
    /// Why it expired, once expired.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closed_reason: Option<String>,
    /// The decision sent to the agent, once it was sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided: Option<AuditEntry>,
}

/// One permission decision, as the audit trail keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct AuditEntry {
    /// Its number (ascending in the order decisions were stored).
    pub id: i64,
    /// The task whose agent asked.
    pub task_id: TaskId,
    /// The agent that asked.
    pub agent: String,
    /// The tool call.
    pub tool: ToolCallSummary,
    /// Who decided.
    pub decider: Decider,
    /// The policy rule that decided or asked, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_id: Option<String>,
    /// The channel a person or agent answered through (`cli`, `mcp`, `agent:NAME`), or the
    /// scope of an earlier allow-for-task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    /// Allow or deny.
    pub decision: Decision,
    /// The option id sent to the agent; `None`: `cancelled` was sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub option_id: Option<String>,
    /// Why.
    pub reason: String,
    /// The approval it answered, if it went through the queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_id: Option<String>,
    /// When it was decided.
    pub at: Timestamp,
}

/// Which approvals [`Store::approvals`] lists.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalFilter {
    /// Only this task's.
    pub task_id: Option<TaskId>,
    /// Only pending ones.
    pub pending_only: bool,
    /// At most this many.
    pub limit: usize,
}

impl Default for ApprovalFilter {
    fn default() -> Self {
        Self {
            task_id: None,
            pending_only: true,
            limit: 100,
        }
    }
}

/// Which decisions [`Store::audit`] lists.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditFilter {
    /// Only this task's.
    pub task_id: Option<TaskId>,
    /// Only decisions at or after this instant.
    pub since: Option<Timestamp>,
    /// At most this many.
    pub limit: usize,
}

impl Default for AuditFilter {
    fn default() -> Self {
        Self {
            task_id: None,
            since: None,
            limit: 100,
        }
    }
}

const APPROVAL_COLUMNS: &str = "a.id, a.task_id, a.agent, a.role, a.tool, a.options, a.rule_id, \
     a.reason, a.answerers, a.created_at, a.deadline, a.state, a.answer, a.answer_reason, \
     a.channel, a.closed_reason, \
     (SELECT MAX(d.id) FROM decisions d WHERE d.approval_id = a.id)";

fn approval_not_found(id: &str) -> Error {
    Error::new(
        ErrorCode::ApprovalNotFound,
        format!("no approval has the id {}.", shorten(id)),
    )
}

fn json<T: Serialize>(value: &T, what: &str) -> Result<String> {
    serde_json::to_string(value)
        .map_err(|_| store_error(format!("the {what} could not be encoded.")))
}

pub(crate) fn from_json<T: for<'de> Deserialize<'de>>(text: &str, what: &str) -> Result<T> {
    serde_json::from_str(text).map_err(|_| store_error(format!("a stored {what} is not valid.")))
}

/// An approval row in its column form.
struct Raw {
    id: String,
    task_id: String,
    agent: String,
    role: String,
    tool: String,
    options: String,
    rule_id: Option<String>,
    reason: String,
    answerers: String,
    created_at: i64,
    deadline: i64,
    state: String,
    answer: Option<String>,
    answer_reason: Option<String>,
    channel: Option<String>,
    closed_reason: Option<String>,
    decision_id: Option<i64>,
}

impl Raw {
    fn from_row(r: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(Self {
            id: r.get(0)?,
            task_id: r.get(1)?,
            agent: r.get(2)?,
            role: r.get(3)?,
            tool: r.get(4)?,
            options: r.get(5)?,
            rule_id: r.get(6)?,
            reason: r.get(7)?,
            answerers: r.get(8)?,
            created_at: r.get(9)?,
            deadline: r.get(10)?,
            state: r.get(11)?,
            answer: r.get(12)?,
            answer_reason: r.get(13)?,
            channel: r.get(14)?,
            closed_reason: r.get(15)?,
            decision_id: r.get(16)?,
        })
    }

    fn decode(self, conn: &Connection) -> Result<Approval> {
        let state = ApprovalState::parse(&self.state)
            .ok_or_else(|| store_error("a stored approval has an unknown state."))?;
        let answer = match (self.answer.as_deref(), self.channel) {
            (Some(a), Some(channel)) => Some(ApprovalAnswer {
                answer: Answer::parse(a)
                    .ok_or_else(|| store_error("a stored approval has an unknown answer."))?,
                reason: self.answer_reason,
                channel,
            }),
            _ => None,
        };
        let decided = match self.decision_id {
            Some(id) => crate::decisions::entry(conn, id)?,
            None => None,
        };
        Ok(Approval {
            id: self.id,
            task_id: TaskId(self.task_id),
            agent: self.agent,
            role: self.role,
            tool: from_json(&self.tool, "approval's tool call")?,
            options: from_json(&self.options, "approval's options")?,
            rule_id: self.rule_id,
            reason: self.reason,
            answerers: from_json(&self.answerers, "approval's answerers")?,
            created_at: Timestamp(self.created_at),
            deadline: Timestamp(self.deadline),
            state,
            answer,
            closed_reason: self.closed_reason,
            decided,
        })
    }
}

fn load(conn: &Connection, id: &str) -> Result<Option<Approval>> {
    let raw = conn
        .prepare_cached(&format!(
            "SELECT {APPROVAL_COLUMNS} FROM approvals a WHERE a.id = ?1"
        ))
        .and_then(|mut st| st.query_row([id], Raw::from_row).optional())
        .ctx("read an approval")?;
    raw.map(|r| r.decode(conn)).transpose()
}

impl Store {
    /// Stores a new approval (its `state` must be `pending`). `scope` is the key an
    /// allow-for-task answer to it covers ([`Store::allowed_for_task`]).
    pub fn insert_approval(&self, approval: &Approval, scope: &str) -> Result<()> {
        if approval.state != ApprovalState::Pending {
            return Err(Error::internal("an approval is stored pending"));
        }
        let tool = json(&approval.tool, "approval's tool call")?;
        let options = json(&approval.options, "approval's options")?;
        let answerers = json(&approval.answerers, "approval's answerers")?;
        self.write("store an approval", |tx| {
            tx.prepare_cached(
                "INSERT INTO approvals (id, task_id, agent, role, tool, options, rule_id, reason, \
                 answerers, scope, created_at, deadline, state) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, 'pending')",
            )
            .and_then(|mut st| {
                st.execute(params![
                    approval.id,
                    approval.task_id.as_str(),
                    approval.agent,
                    approval.role,
                    tool,
                    options,
                    approval.rule_id,
                    approval.reason,
                    answerers,
                    scope,
                    approval.created_at.0,
                    approval.deadline.0,
                ])
            })
            .ctx("store an approval")?;
            Ok(())
        })
    }

    /// One approval by exact id, or `None`.
    pub fn approval(&self, id: &str) -> Result<Option<Approval>> {
        self.read(|conn| load(conn, id))
    }

    /// The whole id `given` names: itself when an approval has it, else the one approval whose
    /// id starts with it (at least [`MIN_APPROVAL_PREFIX`] characters). `INVALID_INPUT` for a
    /// malformed id or a prefix of several, `APPROVAL_NOT_FOUND` for none.
    pub fn find_approval(&self, given: &str) -> Result<String> {
        let given = given.trim();
        if given.is_empty() || given.len() > 200 || !given.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(Error::invalid_input(
                "an approval id is 1 to 200 visible ASCII characters",
            ));
        }
        let not_found = || {
            Error::new(
                ErrorCode::ApprovalNotFound,
                format!("no approval has the id {given:?}"),
            )
        };
        if self.approval(given)?.is_some() {
            return Ok(given.to_string());
        }
        if given.len() < MIN_APPROVAL_PREFIX {
            return Err(not_found());
        }
        let ids: Vec<String> = self.read(|conn| {
            conn.prepare_cached(
                "SELECT id FROM approvals WHERE substr(id, 1, length(?1)) = ?1 LIMIT 2",
            )
            .and_then(|mut st| {
                st.query_map(params![given], |r| r.get(0))?
                    .collect::<rusqlite::Result<Vec<String>>>()
            })
            .ctx("find an approval")
        })?;
        match ids.as_slice() {
            [one] => Ok(one.clone()),
            [] => Err(not_found()),
            _ => Err(Error::invalid_input(format!(
                "the prefix {given:?} names more than one approval; give more of the id"
            ))),
        }
    }

    /// Approvals, newest first.
    pub fn approvals(&self, filter: &ApprovalFilter) -> Result<Vec<Approval>> {
        self.read(|conn| {
            let raws = conn
                .prepare_cached(&format!(
                    "SELECT {APPROVAL_COLUMNS} FROM approvals a \
                     WHERE (?1 IS NULL OR a.task_id = ?1) AND (?2 = 0 OR a.state = 'pending') \
                     ORDER BY a.created_at DESC, a.rowid DESC LIMIT ?3"
                ))
                .and_then(|mut st| {
                    st.query_map(
                        params![
                            filter.task_id.as_ref().map(TaskId::as_str),
                            filter.pending_only,
                            clamp_i64(filter.limit)
                        ],
                        Raw::from_row,
                    )?
                    .collect::<rusqlite::Result<Vec<_>>>()
                })
                .ctx("list approvals")?;
            raws.into_iter().map(|r| r.decode(conn)).collect()
        })
    }

    /// Answers a pending approval: `allowed` or `denied` by `answer`, at most once.
    /// `APPROVAL_NOT_FOUND` for an unknown id, `APPROVAL_CLOSED` when it was already
    /// answered or expired (the earlier answer stands).
    pub fn answer_approval(&self, id: &str, answer: &ApprovalAnswer) -> Result<Approval> {
        let state = if answer.answer.is_allow() {
            ApprovalState::Allowed
        } else {
            ApprovalState::Denied
        };
        self.close_approval(id, state, Some(answer), None)
    }

    /// Expires a pending approval with `reason`. `Ok(false)` when it was no longer pending
    /// (someone answered first).
    pub fn expire_approval(&self, id: &str, reason: &str) -> Result<bool> {
        match self.close_approval(id, ApprovalState::Expired, None, Some(reason)) {
            Ok(_) => Ok(true),
            Err(e) if e.code == ErrorCode::ApprovalClosed => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn close_approval(
        &self,
        id: &str,
        state: ApprovalState,
        answer: Option<&ApprovalAnswer>,
        closed_reason: Option<&str>,
    ) -> Result<Approval> {
        self.write("answer an approval", |tx| {
            let changed = tx
                .prepare_cached(
                    "UPDATE approvals SET state = ?2, answer = ?3, answer_reason = ?4, \
                     channel = ?5, closed_reason = ?6, decided_at = ?7 \
                     WHERE id = ?1 AND state = 'pending'",
                )
                .and_then(|mut st| {
                    st.execute(params![
                        id,
                        state.as_str(),
                        answer.map(|a| a.answer.as_str()),
                        answer.and_then(|a| a.reason.as_deref()),
                        answer.map(|a| a.channel.as_str()),
                        closed_reason,
                        Timestamp::now().0,
                    ])
                })
                .ctx("answer an approval")?;
            let current = load(tx, id)?.ok_or_else(|| approval_not_found(id))?;
            if changed == 0 {
                return Err(Error::new(
                    ErrorCode::ApprovalClosed,
                    format!(
                        "approval {} is already {}; the first answer stands.",
                        shorten(id),
                        current.state
                    ),
                ));
            }
            Ok(current)
        })
    }

    /// Expires every pending approval of `tasks` (tasks a restart ended) with `reason`, and
    /// audits each as refused (`decider: deadline`, nothing sent: the agent is gone), in one
    /// transaction. Returns how many expired.
    pub fn expire_approvals_of(&self, tasks: &[TaskId], reason: &str) -> Result<usize> {
        if tasks.is_empty() {
            return Ok(0);
        }
        self.write("expire approvals", |tx| {
            let now = Timestamp::now().0;
            let mut expired = 0;
            for task in tasks {
                expired += expire_pending_in(tx, task, reason, now)?;
            }
            Ok(expired)
        })
    }

    /// The id of an approval of `task_id` answered allow-for-task in `scope`, if any.
    pub fn allowed_for_task(&self, task_id: &TaskId, scope: &str) -> Result<Option<String>> {
        self.read(|conn| {
            conn.prepare_cached(
                "SELECT id FROM approvals WHERE task_id = ?1 AND scope = ?2 \
                 AND state = 'allowed' AND answer = 'allow-for-task' \
                 ORDER BY created_at LIMIT 1",
            )
            .and_then(|mut st| {
                st.query_row(params![task_id.as_str(), scope], |r| r.get(0))
                    .optional()
            })
            .ctx("look up an allow-for-task answer")
        })
    }
}

/// Expires the pending approvals of `task` with `reason` inside `tx`, each audited as refused
/// (`decider: deadline`, nothing sent: the agent is gone). Returns how many expired.
pub(crate) fn expire_pending_in(
    tx: &rusqlite::Transaction<'_>,
    task: &TaskId,
    reason: &str,
    now: i64,
) -> Result<usize> {
    tx.prepare_cached(
        "INSERT INTO decisions (task_id, agent, tool, decider, rule_id, channel, \
         decision, option_id, reason, approval_id, at) \
         SELECT task_id, agent, tool, 'deadline', rule_id, NULL, 'deny', NULL, ?2, \
         id, ?3 FROM approvals WHERE task_id = ?1 AND state = 'pending'",
    )
    .and_then(|mut st| st.execute(params![task.as_str(), reason, now]))
    .ctx("audit expired approvals")?;
    tx.prepare_cached(
        "UPDATE approvals SET state = 'expired', closed_reason = ?2, \
         decided_at = ?3 WHERE task_id = ?1 AND state = 'pending'",
    )
    .and_then(|mut st| st.execute(params![task.as_str(), reason, now]))
    .ctx("expire approvals")
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
pub(crate) mod tests {
    use super::*;
    use crate::tasks::tests::{submitted, task};

    pub(crate) fn approval(id: &str, task_id: &TaskId, at: i64) -> Approval {
        Approval {
            id: id.into(),
            task_id: task_id.clone(),
            agent: "a".into(),
            role: "implementer".into(),
            tool: ToolCallSummary {
                kind: ToolKind::Execute,
                title: "touch x".into(),
                paths: vec![],
                command: Some(vec!["touch".into(), "x".into()]),
                script: None,
                destination: None,
            },
            options: vec![],
            rule_id: Some("r".into()),
            reason: "why".into(),
            answerers: vec!["human".into()],
            created_at: Timestamp(at),
            deadline: Timestamp(at + 1000),
            state: ApprovalState::Pending,
            answer: None,
            closed_reason: None,
            decided: None,
        }
    }

    pub(crate) fn allow_for_task() -> ApprovalAnswer {
        ApprovalAnswer {
            answer: Answer::AllowForTask,
            reason: None,
            channel: "cli".into(),
        }
    }

    #[test]
    fn an_approval_is_found_by_its_id_or_one_unambiguous_prefix() {
        let store = Store::open_in_memory().unwrap();
        let t = task("t1", 1);
        store.insert_task(&t, &submitted()).unwrap();
        for (id, at) in [("0123456789aa", 1), ("0123456789bb", 2), ("ffffffff-1", 3)] {
            store
                .insert_approval(&approval(id, &t.id, at), "s")
                .unwrap();
        }
        assert_eq!(store.find_approval("ffffffff-1").unwrap(), "ffffffff-1");
        assert_eq!(store.find_approval(" ffffffff ").unwrap(), "ffffffff-1");
        assert_eq!(store.find_approval("0123456789a").unwrap(), "0123456789aa");
        let several = store.find_approval("01234567").unwrap_err();
        assert_eq!(several.code, ErrorCode::InvalidInput, "{several}");
        for short_or_absent in ["ffff", "99999999"] {
            let e = store.find_approval(short_or_absent).unwrap_err();
            assert_eq!(e.code, ErrorCode::ApprovalNotFound, "{e}");
        }
        // A LIKE pattern would read `%` and `_` as wildcards; the prefix is compared as text.
        let e = store.find_approval("0123456%").unwrap_err();
        assert_eq!(e.code, ErrorCode::ApprovalNotFound, "{e}");
        for bad in ["", "a b c d e f g h", "é1234567"] {
            let e = store.find_approval(bad).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidInput, "{bad:?}: {e}");
        }
    }

    #[test]
    fn an_approval_closes_once_and_its_scope_is_remembered() {
        let store = Store::open_in_memory().unwrap();
        let t = task("t1", 1);
        store.insert_task(&t, &submitted()).unwrap();
        store
            .insert_approval(&approval("a1", &t.id, 1), "s")
            .unwrap();
        store
            .insert_approval(&approval("a2", &t.id, 2), "s")
            .unwrap();
        let pending = store.approvals(&ApprovalFilter::default()).unwrap();
        assert_eq!(
            pending.iter().map(|a| a.id.as_str()).collect::<Vec<_>>(),
            ["a2", "a1"]
        );
        assert_eq!(store.allowed_for_task(&t.id, "s").unwrap(), None);
        let done = store.answer_approval("a1", &allow_for_task()).unwrap();
        assert_eq!(done.state, ApprovalState::Allowed);
        assert_eq!(done.answer.unwrap().answer, Answer::AllowForTask);
        assert_eq!(
            store.allowed_for_task(&t.id, "s").unwrap().as_deref(),
            Some("a1")
        );
        assert_eq!(store.allowed_for_task(&t.id, "other").unwrap(), None);
        let again = store.answer_approval("a1", &allow_for_task()).unwrap_err();
        assert_eq!(again.code, ErrorCode::ApprovalClosed);
        assert!(!store.expire_approval("a1", "late").unwrap());
        let missing = store
            .answer_approval("nope", &allow_for_task())
            .unwrap_err();
        assert_eq!(missing.code, ErrorCode::ApprovalNotFound);
        // A restart expires what is left pending, and audits it.
        assert_eq!(
            store
                .expire_approvals_of(std::slice::from_ref(&t.id), "gone")
                .unwrap(),
            1
        );
        let a2 = store.approval("a2").unwrap().unwrap();
        assert_eq!(a2.state, ApprovalState::Expired);
        assert_eq!(a2.closed_reason.as_deref(), Some("gone"));
        assert_eq!(a2.decided.unwrap().decider, Decider::Deadline);
        assert!(
            store
                .approvals(&ApprovalFilter::default())
                .unwrap()
                .is_empty()
        );
        let all = ApprovalFilter {
            pending_only: false,
            ..ApprovalFilter::default()
        };
        assert_eq!(store.approvals(&all).unwrap().len(), 2);
        let audit = store.audit(&AuditFilter::default()).unwrap();
        assert_eq!(audit.len(), 1);
        assert_eq!(audit[0].decision, Decision::Deny);
    }
}
