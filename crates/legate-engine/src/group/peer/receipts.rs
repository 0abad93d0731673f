//! The receipts of a group's peer messages, paged without their bodies: the origin
//! (`agent-reported`), the route, the state and the text's sha256. This module reads; it
//! never records or delivers, and never returns a message's text or the task carrying it.

use crate::core::Core;
use crate::group::Groups;
use legate_core::{Error, Result, Timestamp};
use legate_store::{PeerMessageRecord, PeerState};
use serde::Serialize;

/// The largest page [`Groups::peer_receipts`] returns.
pub const MAX_RECEIPTS_PAGE: u32 = 20;

legate_core::wire_enum! {
    /// Who vouches for a peer message.
    #[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum ReceiptOrigin {
        /// A node's agent wrote it in its answer; Legate checked its route and shape only.
        AgentReported => "agent-reported",
    }
}

legate_core::wire_enum! {
    /// Where a peer message is.
    #[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum ReceiptState {
        /// Waits for its recipient to be admitted and its current turn to end.
        Queued => "queued",
        /// The recipient's continuation turn carrying it was accepted (not proof it was read).
        Sent => "sent",
    }
}

/// One receipt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct PeerReceipt {
    /// Its place in the group's order; pass the last one as `after` for the next page.
    pub cursor: i64,
    /// The id the sending agent chose.
    pub message_id: String,
    /// Always `agent-reported`.
    pub origin: ReceiptOrigin,
    /// The sending node.
    pub from: String,
    /// The receiving node.
    pub to: String,
    /// `queued` or `sent`.
    pub state: ReceiptState,
    /// sha256 of the message's text.
    pub sha256: String,
    /// When it was recorded (ms since the epoch).
    pub created_at: Timestamp,
    /// When it was sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sent_at: Option<Timestamp>,
}

impl PeerReceipt {
    pub(crate) fn of(record: &PeerMessageRecord) -> PeerReceipt {
        PeerReceipt {
            cursor: record.seq,
            message_id: record.message_id.clone(),
            origin: ReceiptOrigin::AgentReported,
            from: record.from_node.clone(),
            to: record.to_node.clone(),
            state: match record.state {
                PeerState::Queued => ReceiptState::Queued,
                PeerState::Sent => ReceiptState::Sent,
            },
            sha256: record.sha256.clone(),
            created_at: record.created_at,
            sent_at: record.sent_at,
        }
    }
}

/// A page of receipts: a snapshot; read it again to see states that changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct PeerReceiptPage {
    /// The group.
    pub group_id: String,
    /// Up to `limit` receipts after the cursor, oldest first.
    pub receipts: Vec<PeerReceipt>,
    /// The cursor of the last receipt, to pass as `after`; absent on an empty page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<i64>,
    /// True when more receipts follow this page.
    pub has_more: bool,
}

impl Groups {
    /// Up to `limit` (1 to 20) receipts of the group's peer messages after the cursor
    /// `after` (0 or absent: from the first), without their bodies.
    pub fn peer_receipts(
        &self,
        group_id: &str,
        after: Option<i64>,
        limit: u32,
    ) -> Result<PeerReceiptPage> {
        if !(1..=MAX_RECEIPTS_PAGE).contains(&limit) {
            return Err(Error::invalid_input(format!(
                "limit must be 1 to {MAX_RECEIPTS_PAGE}"
            )));
        }
        let after = after.unwrap_or(0);
        if after < 0 {
            return Err(Error::invalid_input(
                "after must be a cursor of this group's receipts (0 or more)",
            ));
        }
        self.core.peer_group_known(group_id)?;
        let mut rows = self
            .core
            .store()
            .peer_messages_after(group_id, after, limit + 1)?;
        let has_more = rows.len() > limit as usize;
        rows.truncate(limit as usize);
        let receipts: Vec<PeerReceipt> = rows.iter().map(PeerReceipt::of).collect();
        Ok(PeerReceiptPage {
            group_id: group_id.to_owned(),
            next_cursor: receipts.last().map(|r| r.cursor),
            receipts,
            has_more,
        })
    }
}

impl Core {
    /// `GROUP_NOT_FOUND` unless the group exists (its status is read).
    fn peer_group_known(&self, group_id: &str) -> Result<()> {
        self.group_status(group_id).map(|_| ())
    }
}
