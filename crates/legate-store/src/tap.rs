//! The wire tap's frames: a tapped task's protocol frames, append-only, numbered from 1 per
//! task like its events (one lookup of the last `seq` inside the `BEGIN IMMEDIATE` write,
//! so no gap and no duplicate), and pruned with their task.
//!
//! This module stores what it is given. It never redacts, cuts or caps a frame: the engine's
//! recorder has done that before a frame gets here, and decides when the cap is reached.

use crate::Store;
use crate::sql::{SqlContext, clamp_i64, store_error, task_not_found, to_i64, to_u64};
use crate::tasks::exists;
use legate_core::{NewTapFrame, Result, TapDirection, TapFrame, TapProtocol, TaskId, Timestamp};
use rusqlite::Connection;

/// What a task's tap holds so far: where a new recorder starts its count.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TapTotals {
    /// Frames stored, markers not counted.
    pub frames: u64,
    /// The bytes of those frames as stored (what the cap counts).
    pub bytes: u64,
    /// The marker saying the cap was reached, if it was.
    pub marker: Option<TapFrame>,
}

fn last_seq_in(conn: &Connection, task_id: &TaskId) -> Result<u64> {
    let last: i64 = conn
        .prepare_cached("SELECT COALESCE(MAX(seq), 0) FROM tap_frames WHERE task_id = ?1")
        .and_then(|mut st| st.query_row([task_id.as_str()], |r| r.get(0)))
        .ctx("read the last tap frame number")?;
    to_u64(last, "tap frame number")
}

/// `n` as SQLite's integer; past `i64::MAX` (never in practice) it saturates.
fn clamp(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

type Row = (i64, i64, String, String, String, i64, bool, i64);

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Row> {
    Ok((
        r.get(0)?,
        r.get(1)?,
        r.get(2)?,
        r.get(3)?,
        r.get(4)?,
        r.get(5)?,
        r.get(6)?,
        r.get(7)?,
    ))
}

const COLUMNS: &str = "seq, at, direction, protocol, frame, wire_bytes, truncated, dropped";

fn frame_of(task_id: &TaskId, r: Row) -> Result<TapFrame> {
    let (seq, at, direction, protocol, frame, wire_bytes, truncated, dropped) = r;
    let direction = TapDirection::parse(&direction).ok_or_else(|| {
        store_error(format!(
            "tap frame {seq} of task {task_id} has an unknown direction."
        ))
    })?;
    let protocol = TapProtocol::parse(&protocol).ok_or_else(|| {
        store_error(format!(
            "tap frame {seq} of task {task_id} has an unknown protocol."
        ))
    })?;
    Ok(TapFrame {
        task_id: task_id.clone(),
        seq: to_u64(seq, "tap frame number")?,
        at: Timestamp(at),
        direction,
        protocol,
        frame,
        wire_bytes: to_u64(wire_bytes, "tap frame size")?,
        truncated,
        dropped: to_u64(dropped, "tap frames dropped")?,
    })
}

impl Store {
    /// Appends `frames` to the task's tap in one transaction, numbered after the last one,
    /// stamped now; returns them as stored. `TASK_NOT_FOUND` if there is no such task. An
    /// empty slice does nothing.
    pub fn append_tap_frames(
        &self,
        task_id: &TaskId,
        frames: &[NewTapFrame],
    ) -> Result<Vec<TapFrame>> {
        if frames.is_empty() {
            return Ok(Vec::new());
        }
        let at = Timestamp::now();
        self.write("record tap frames", |tx| {
            if !exists(tx, task_id.as_str())? {
                return Err(task_not_found(task_id.as_str()));
            }
            let last = last_seq_in(tx, task_id)?;
            let mut insert = tx
                .prepare_cached(
                    "INSERT INTO tap_frames (task_id, seq, at, direction, protocol, frame, \
                     wire_bytes, truncated, dropped) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                )
                .ctx("record tap frames")?;
            let mut out = Vec::with_capacity(frames.len());
            for (seq, f) in (last + 1..).zip(frames) {
                insert
                    .execute((
                        task_id.as_str(),
                        to_i64(seq, "the tap frame number")?,
                        at.0,
                        f.direction.as_str(),
                        f.protocol.as_str(),
                        &f.frame,
                        clamp(f.wire_bytes),
                        f.truncated,
                        clamp(f.dropped),
                    ))
                    .ctx("record tap frames")?;
                out.push(TapFrame {
                    task_id: task_id.clone(),
                    seq,
                    at,
                    direction: f.direction,
                    protocol: f.protocol,
                    frame: f.frame.clone(),
                    wire_bytes: f.wire_bytes,
                    truncated: f.truncated,
                    dropped: f.dropped,
                });
            }
            Ok(out)
        })
    }

    /// Rewrites the marker frame `seq` of the task's tap: its sentence, and the frames and
    /// bytes dropped so far. Only a marker is changed; another frame is left as it was.
    pub fn update_tap_marker(
        &self,
        task_id: &TaskId,
        seq: u64,
        frame: &str,
        dropped: u64,
        dropped_bytes: u64,
    ) -> Result<()> {
        self.write("update the tap marker", |tx| {
            tx.prepare_cached(
                "UPDATE tap_frames SET frame = ?3, dropped = ?4, wire_bytes = ?5 \
                 WHERE task_id = ?1 AND seq = ?2 AND direction = 'marker'",
            )
            .and_then(|mut st| {
                st.execute((
                    task_id.as_str(),
                    clamp(seq),
                    frame,
                    clamp(dropped),
                    clamp(dropped_bytes),
                ))
            })
            .ctx("update the tap marker")?;
            Ok(())
        })
    }

    /// Up to `limit` frames of the task's tap with `seq > after`, in ascending order. An
    /// unknown task has none.
    pub fn tap_frames(&self, task_id: &TaskId, after: u64, limit: usize) -> Result<Vec<TapFrame>> {
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        self.read(|conn| {
            let rows = conn
                .prepare_cached(&format!(
                    "SELECT {COLUMNS} FROM tap_frames WHERE task_id = ?1 AND seq > ?2 \
                     ORDER BY seq LIMIT ?3"
                ))
                .and_then(|mut st| {
                    st.query_map((task_id.as_str(), after, clamp_i64(limit)), row)?
                        .collect::<rusqlite::Result<Vec<_>>>()
                })
                .ctx("read tap frames")?;
            rows.into_iter().map(|r| frame_of(task_id, r)).collect()
        })
    }

    /// What the task's tap holds so far (all zero for a task with none).
    pub fn tap_totals(&self, task_id: &TaskId) -> Result<TapTotals> {
        self.read(|conn| {
            let (frames, bytes): (i64, i64) = conn
                .prepare_cached(
                    "SELECT COUNT(*), COALESCE(SUM(LENGTH(CAST(frame AS BLOB))), 0) \
                     FROM tap_frames WHERE task_id = ?1 AND direction <> 'marker'",
                )
                .and_then(|mut st| st.query_row([task_id.as_str()], |r| Ok((r.get(0)?, r.get(1)?))))
                .ctx("count a task's tap frames")?;
            let marker = conn
                .prepare_cached(&format!(
                    "SELECT {COLUMNS} FROM tap_frames WHERE task_id = ?1 AND direction = 'marker' \
                     ORDER BY seq LIMIT 1"
                ))
                .and_then(|mut st| {
                    st.query_map([task_id.as_str()], row)?
                        .collect::<rusqlite::Result<Vec<_>>>()
                })
                .ctx("read the tap marker")?
                .into_iter()
                .next()
                .map(|r| frame_of(task_id, r))
                .transpose()?;
            Ok(TapTotals {
                frames: to_u64(frames, "tap frame count")?,
                bytes: to_u64(bytes, "tap frame bytes")?,
                marker,
            })
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::tasks::tests::{submitted, task};
    use legate_core::{ErrorCode, TaskState};

    fn frame(direction: TapDirection, text: &str) -> NewTapFrame {
        NewTapFrame {
            direction,
            protocol: TapProtocol::Acp,
            frame: text.into(),
            wire_bytes: text.len() as u64,
            truncated: false,
            dropped: 0,
        }
    }

    #[test]
    fn frames_are_numbered_per_task_counted_and_read_back_in_order() {
        let store = Store::open_in_memory().unwrap();
        let t = task("tap-1", 1);
        store.insert_task(&t, &submitted()).unwrap();
        let stored = store
            .append_tap_frames(
                &t.id,
                &[
                    frame(TapDirection::ToAgent, r#"{"method":"initialize"}"#),
                    frame(TapDirection::FromAgent, r#"{"result":{}}"#),
                ],
            )
            .unwrap();
        assert_eq!(stored.iter().map(|f| f.seq).collect::<Vec<_>>(), [1, 2]);
        let marker = store
            .append_tap_frames(&t.id, &[frame(TapDirection::Marker, "cap")])
            .unwrap();
        assert_eq!(marker[0].seq, 3);
        store
            .update_tap_marker(&t.id, 3, "cap reached: 7 dropped", 7, 700)
            .unwrap();
        // Only a marker is rewritten.
        store.update_tap_marker(&t.id, 1, "no", 1, 1).unwrap();

        let read = store.tap_frames(&t.id, 0, 100).unwrap();
        assert_eq!(read.len(), 3);
        assert_eq!(read[..2], stored[..]);
        assert_eq!(read[2].frame, "cap reached: 7 dropped");
        assert_eq!((read[2].dropped, read[2].wire_bytes), (7, 700));
        assert_eq!(store.tap_frames(&t.id, 2, 100).unwrap().len(), 1);

        let totals = store.tap_totals(&t.id).unwrap();
        assert_eq!(totals.frames, 2);
        assert_eq!(
            totals.bytes,
            (read[0].frame.len() + read[1].frame.len()) as u64
        );
        assert_eq!(totals.marker.unwrap().seq, 3);
        assert_eq!(
            store.tap_totals(&TaskId("none".into())).unwrap(),
            TapTotals::default()
        );
    }

    #[test]
    fn a_missing_task_has_no_tap_and_a_pruned_task_takes_its_tap_along() {
        let store = Store::open_in_memory().unwrap();
        let err = store
            .append_tap_frames(&TaskId("nope".into()), &[frame(TapDirection::ToAgent, "x")])
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::TaskNotFound);

        let mut t = task("tap-old", 1);
        t.state = TaskState::Completed;
        store.insert_task(&t, &submitted()).unwrap();
        store
            .append_tap_frames(&t.id, &[frame(TapDirection::FromAgent, "x")])
            .unwrap();
        assert_eq!(store.prune_finished(0).unwrap(), 1);
        assert!(store.tap_frames(&t.id, 0, 10).unwrap().is_empty());
        let left: i64 = store
            .read(|c| {
                c.query_row("SELECT COUNT(*) FROM tap_frames", [], |r| r.get(0))
                    .ctx("count")
            })
            .unwrap();
        assert_eq!(left, 0);
    }
}
