//! Plan events as stored: in proportion to their change.
//!
//! An agent's plan update replaces its whole plan, so a task whose plan grows by one step per
//! update would store the square of its plan. A plan event is stored as the hunks that turn
//! the task's previous plan into it (`{"type":"plan","keyframe":K,"since":S,"hunks":[…]}`),
//! and whole, as any other event (a keyframe), when it is the task's first or when the
//! changes since the last keyframe would outgrow it ([`PlanTrail`]'s policy). Rows of older
//! releases are all whole. A reader rebuilds each plan from its keyframe (row `K`) and the
//! plan rows after it, so every reader sees `EventKind::Plan { entries }` whole and exactly
//! as it was appended.
//!
//! The appender keeps each task's last plan in memory ([`PlanCache`]), checked against the
//! store's last plan row before use (another process, or a transaction rolled back, may have
//! moved it) and rebuilt from the store when it does not match. This module owns that form,
//! that cache and the rebuilding; it never changes what a plan says.

use crate::sql::{SqlContext, store_error, to_i64, to_u64};
use legate_core::plan_change::{PlanStep, PlanTrail};
use legate_core::{EventKind, PlanEntry, PlanHunk, Result, TaskId, plan_apply};
use rusqlite::{Connection, OptionalExtension};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

/// The most bytes of plans (as JSON) the appender keeps in memory, over all tasks; past it
/// the cache is emptied and refilled from the store as tasks append again.
const CACHE_BYTES: u64 = 64 << 20;

/// A plan row as stored.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum StoredPlan {
    /// Changes against the plan row before it (checked first: a whole plan has no `hunks`).
    Changes {
        keyframe: u64,
        since: u64,
        hunks: Vec<PlanHunk>,
    },
    /// Whole: a keyframe (every plan row of older releases).
    Whole { entries: Vec<PlanEntry> },
}

/// What a changes row is written as.
#[derive(Serialize)]
struct ChangesRow<'a> {
    r#type: &'static str,
    keyframe: u64,
    since: u64,
    hunks: &'a [PlanHunk],
}

/// The last plan row of one task, as its appender knows it.
#[derive(Debug, Clone)]
struct Tip {
    /// The row's number.
    seq: u64,
    /// The number of its keyframe.
    keyframe: u64,
    /// The log from it on.
    trail: PlanTrail,
}

/// Each task's last plan, as its appender last stored it, with its size as JSON; and the
/// sum of those sizes.
#[derive(Debug, Default)]
struct Tips {
    map: HashMap<TaskId, (Tip, u64)>,
    held: u64,
}

impl Tips {
    fn take(&mut self, task_id: &TaskId) -> Option<Tip> {
        let (tip, bytes) = self.map.remove(task_id)?;
        self.held -= bytes;
        Some(tip)
    }
}

/// Each task's last plan, as its appender last stored it.
#[derive(Debug, Default)]
pub(crate) struct PlanCache {
    tips: Mutex<Tips>,
}

impl PlanCache {
    fn lock(&self) -> MutexGuard<'_, Tips> {
        // A panic cannot leave a tip half-written (each is replaced whole), and every tip is
        // checked against the store before use.
        self.tips.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Forgets every tip (after a write transaction that may have rolled back).
    pub(crate) fn clear(&self) {
        *self.lock() = Tips::default();
    }
}

/// The appender's side of one batch: the task's last plan row, found once.
pub(crate) struct PlanWriter<'a> {
    cache: Option<&'a PlanCache>,
    tip: Option<Option<Tip>>,
}

impl<'a> PlanWriter<'a> {
    pub(crate) fn new(cache: Option<&'a PlanCache>) -> Self {
        Self { cache, tip: None }
    }

    /// The payload of plan `entries` stored as row `seq` of `task_id`.
    pub(crate) fn payload(
        &mut self,
        tx: &Connection,
        task_id: &TaskId,
        seq: u64,
        entries: &[PlanEntry],
    ) -> Result<Option<String>> {
        let tip = match self.tip.take() {
            Some(tip) => tip,
            None => self.find_tip(tx, task_id)?,
        };
        let (mut trail, keyframe) = match tip {
            Some(t) => (t.trail, t.keyframe),
            None => (PlanTrail::default(), seq),
        };
        let (payload, keyframe) = match trail.step(entries) {
            PlanStep::Whole => (None, seq),
            PlanStep::Changes { hunks, .. } => {
                let row = ChangesRow {
                    r#type: "plan",
                    keyframe,
                    since: trail.since,
                    hunks: &hunks,
                };
                let text = serde_json::to_string(&row).map_err(|_| {
                    store_error(format!("a plan of task {task_id} could not be encoded."))
                })?;
                (Some(text), keyframe)
            }
        };
        let tip = Tip {
            seq,
            keyframe,
            trail,
        };
        self.tip = Some(Some(tip));
        Ok(payload)
    }

    /// The task's last plan row: the cached one when the store's last plan row is it,
    /// rebuilt from the store otherwise.
    fn find_tip(&self, tx: &Connection, task_id: &TaskId) -> Result<Option<Tip>> {
        let last: Option<(i64, String)> = tx
            .prepare_cached(
                "SELECT seq, payload FROM events WHERE task_id = ?1 AND type = 'plan' \
                 ORDER BY seq DESC LIMIT 1",
            )
            .and_then(|mut st| {
                st.query_row([task_id.as_str()], |r| Ok((r.get(0)?, r.get(1)?)))
                    .optional()
            })
            .ctx("read a task's last plan")?;
        let Some((seq, payload)) = last else {
            return Ok(None);
        };
        let seq = to_u64(seq, "event number")?;
        // Taken out of the cache for the batch; put back by `finish`.
        if let Some(cache) = self.cache
            && let Some(tip) = cache.lock().take(task_id).filter(|t| t.seq == seq)
        {
            return Ok(Some(tip));
        }
        let (keyframe, since) = match decode(task_id, seq, &payload)? {
            StoredPlan::Whole { .. } => (seq, 0),
            StoredPlan::Changes {
                keyframe, since, ..
            } => (keyframe, since),
        };
        let plan = rebuild(tx, task_id, keyframe, seq)?;
        Ok(Some(Tip {
            seq,
            keyframe,
            trail: PlanTrail::resumed(plan, since),
        }))
    }

    /// After the batch's rows are written: the task's last plan kept for its next batch,
    /// within the cache's bound.
    pub(crate) fn finish(self, task_id: &TaskId) {
        let (Some(cache), Some(Some(mut tip))) = (self.cache, self.tip) else {
            return;
        };
        let bytes = tip.trail.plan_bytes();
        if bytes > CACHE_BYTES {
            return;
        }
        let mut tips = cache.lock();
        tips.take(task_id);
        if tips.held.saturating_add(bytes) > CACHE_BYTES {
            *tips = Tips::default();
        }
        tips.held += bytes;
        tips.map.insert(task_id.clone(), (tip, bytes));
    }
}

fn decode(task_id: &TaskId, seq: u64, payload: &str) -> Result<StoredPlan> {
    serde_json::from_str(payload).map_err(|_| {
        store_error(format!(
            "event {seq} of task {task_id} could not be decoded."
        ))
    })
}

/// The plan of row `to`, rebuilt from its keyframe `from` and the plan rows between.
fn rebuild(conn: &Connection, task_id: &TaskId, from: u64, to: u64) -> Result<Vec<PlanEntry>> {
    let (first, last) = (
        to_i64(from, "an event number")?,
        to_i64(to, "an event number")?,
    );
    let rows = conn
        .prepare_cached(
            "SELECT seq, payload FROM events WHERE task_id = ?1 AND type = 'plan' \
             AND seq >= ?2 AND seq <= ?3 ORDER BY seq",
        )
        .and_then(|mut st| {
            st.query_map((task_id.as_str(), first, last), |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()
        })
        .ctx("read a task's plans")?;
    let mut reader = PlanReader {
        last: None,
        chained: true,
    };
    let mut plan = None;
    for (seq, payload) in rows {
        let seq = to_u64(seq, "event number")?;
        plan = Some(reader.read(conn, task_id, seq, &payload)?);
    }
    plan.ok_or_else(|| {
        store_error(format!(
            "the plan of event {to} of task {task_id} has no keyframe."
        ))
    })
}

/// A reader's side of one page of events: the last plan it read, to which the next plan
/// row's changes apply.
#[derive(Debug, Default)]
pub(crate) struct PlanReader {
    last: Option<Vec<PlanEntry>>,
    /// Rebuilding already: the first row must be a keyframe, never rebuilt again.
    chained: bool,
}

impl PlanReader {
    /// Plan row `seq` of `task_id`, whole. The rows are read in order: a changes row applies
    /// to the plan row this reader read before it, or is rebuilt from its keyframe.
    pub(crate) fn read(
        &mut self,
        conn: &Connection,
        task_id: &TaskId,
        seq: u64,
        payload: &str,
    ) -> Result<Vec<PlanEntry>> {
        let plan = match decode(task_id, seq, payload)? {
            StoredPlan::Whole { entries } => entries,
            StoredPlan::Changes {
                keyframe, hunks, ..
            } => {
                let mut plan = match self.last.take() {
                    Some(plan) => plan,
                    None if keyframe < seq && !self.chained => {
                        rebuild(conn, task_id, keyframe, seq - 1)?
                    }
                    None => {
                        return Err(store_error(format!(
                            "the plan of event {seq} of task {task_id} has no keyframe."
                        )));
                    }
                };
                plan_apply(&mut plan, &hunks).map_err(|e| {
                    store_error(format!(
                        "the plan of event {seq} of task {task_id} does not rebuild: {e}."
                    ))
                })?;
                plan
            }
        };
        self.last = Some(plan.clone());
        Ok(plan)
    }

    /// Event `seq` of `task_id`: its payload decoded, a plan rebuilt whole.
    pub(crate) fn event(
        &mut self,
        conn: &Connection,
        task_id: &TaskId,
        seq: u64,
        kind: &str,
        payload: &str,
    ) -> Result<EventKind> {
        if kind == "plan" {
            return Ok(EventKind::Plan {
                entries: self.read(conn, task_id, seq, payload)?,
            });
        }
        serde_json::from_str::<EventKind>(payload).map_err(|_| {
            store_error(format!(
                "event {seq} of task {task_id} could not be decoded."
            ))
        })
    }
}

#[cfg(test)]
#[path = "plans_tests.rs"]
mod tests;
