//! The audit trail: every permission decision sent to an agent (the table's, a policy rule's,
//! a person's through a named channel, the supervising agent's, the deadline's), one row
//! each, appended and never changed.
//!
//! Rows are not tied to their task by a foreign key: pruning old tasks keeps their audit.
//! The store records what the engine decided; it never decides.

use crate::Store;
use crate::approvals::{AuditEntry, AuditFilter, from_json};
use crate::sql::{SqlContext, clamp_i64, store_error};
use legate_core::{Decider, Decision, Result, TaskId, Timestamp};
use rusqlite::{Connection, OptionalExtension, Row, params};

const COLUMNS: &str = "id, task_id, agent, tool, decider, rule_id, channel, decision, option_id, \
     reason, approval_id, at";

fn decision_text(d: Decision) -> &'static str {
    match d {
        Decision::Allow => "allow",
        Decision::Deny => "deny",
        Decision::Ask => "ask",
    }
}

fn parse_decision(s: &str) -> Result<Decision> {
    match s {
        "allow" => Ok(Decision::Allow),
        "deny" => Ok(Decision::Deny),
        "ask" => Ok(Decision::Ask),
        _ => Err(store_error("a stored decision is unknown.")),
    }
}

type RawEntry = (
    i64,
    String,
    String,
    String,
    String,
    Option<String>,
    Option<String>,
    String,
    Option<String>,
    String,
    Option<String>,
    i64,
);

fn raw(r: &Row<'_>) -> rusqlite::Result<RawEntry> {
    Ok((
        r.get(0)?,
        r.get(1)?,
        r.get(2)?,
        r.get(3)?,
        r.get(4)?,
        r.get(5)?,
        r.get(6)?,
        r.get(7)?,
        r.get(8)?,
        r.get(9)?,
        r.get(10)?,
        r.get(11)?,
    ))
}

fn decode(raw: RawEntry) -> Result<AuditEntry> {
    let (
        id,
        task_id,
        agent,
        tool,
        decider,
        rule_id,
        channel,
        decision,
        option_id,
        reason,
        approval_id,
        at,
    ) = raw;
    Ok(AuditEntry {
        id,
        task_id: TaskId(task_id),
        agent,
        tool: from_json(&tool, "decision's tool call")?,
        decider: Decider::parse(&decider)
            .ok_or_else(|| store_error("a stored decision has an unknown decider."))?,
        rule_id,
        channel,
        decision: parse_decision(&decision)?,
        option_id,
        reason,
        approval_id,
        at: Timestamp(at),
    })
}

/// One audit row by number.
pub(crate) fn entry(conn: &Connection, id: i64) -> Result<Option<AuditEntry>> {
    let row = conn
        .prepare_cached(&format!("SELECT {COLUMNS} FROM decisions WHERE id = ?1"))
        .and_then(|mut st| st.query_row([id], raw).optional())
        .ctx("read a decision")?;
    row.map(decode).transpose()
}

impl Store {
    /// Appends one decision to the audit trail (one insert); `entry.id` is ignored. Returns
    /// the stored row's number.
    pub fn record_decision(&self, entry: &AuditEntry) -> Result<i64> {
        let tool = serde_json::to_string(&entry.tool)
            .map_err(|_| store_error("a decision's tool call could not be encoded."))?;
        self.write("record a decision", |tx| {
            tx.prepare_cached(
                "INSERT INTO decisions (task_id, agent, tool, decider, rule_id, channel, \
                 decision, option_id, reason, approval_id, at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            )
            .and_then(|mut st| {
                st.execute(params![
                    entry.task_id.as_str(),
                    entry.agent,
                    tool,
                    entry.decider.as_str(),
                    entry.rule_id,
                    entry.channel,
                    decision_text(entry.decision),
                    entry.option_id,
                    entry.reason,
                    entry.approval_id,
                    entry.at.0,
                ])
            })
            .ctx("record a decision")?;
            Ok(tx.last_insert_rowid())
        })
    }

    /// Decisions, newest first.
    pub fn audit(&self, filter: &AuditFilter) -> Result<Vec<AuditEntry>> {
        self.read(|conn| {
            let rows = conn
                .prepare_cached(&format!(
                    "SELECT {COLUMNS} FROM decisions \
                     WHERE (?1 IS NULL OR task_id = ?1) AND (?2 IS NULL OR at >= ?2) \
                     ORDER BY id DESC LIMIT ?3"
                ))
                .and_then(|mut st| {
                    st.query_map(
                        params![
                            filter.task_id.as_ref().map(TaskId::as_str),
                            filter.since.map(|t| t.0),
                            clamp_i64(filter.limit)
                        ],
                        raw,
                    )?
                    .collect::<rusqlite::Result<Vec<_>>>()
                })
                .ctx("list decisions")?;
            rows.into_iter().map(decode).collect()
        })
    }
}
