//! [`ApprovalDesk`]: where a front reads and answers the approval queue, whether the agents
//! wait in this process (an [`Engine`]) or in another process on the same home
//! ([`Records`]); and the two readings every supervisor front shares ([`parse_since`],
//! [`seconds_left`]).
//!
//! It holds no method that starts, continues or cancels a task: a front given only a desk
//! cannot delegate anything. It never decides an answer's meaning (that is [`Approvals::answer`]).

use super::{Approval, ApprovalAnswer, ApprovalFilter, ApprovalState, AuditEntry, AuditFilter};
use crate::{Engine, Records};
use legate_core::{Error, Result, Timestamp};

/// Where the queue is read and answered: the engine of this process (`legate serve --mcp`),
/// or the records of a home whose agents wait in another process (`legate mcp` on stdio, the
/// CLI). An answer written through either is seen by the process whose agent waits.
#[derive(Clone)]
pub enum ApprovalDesk {
    /// The running engine.
    Engine(Engine),
    /// The store, read and answered from outside the process whose agent waits.
    Records(Records),
}

impl std::fmt::Debug for ApprovalDesk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Engine(_) => "ApprovalDesk::Engine",
            Self::Records(_) => "ApprovalDesk::Records",
        })
    }
}

impl ApprovalDesk {
    /// Approvals, newest first.
    pub fn approvals(&self, filter: &ApprovalFilter) -> Result<Vec<Approval>> {
        match self {
            Self::Engine(e) => e.approvals().list(filter),
            Self::Records(r) => r.approvals(filter),
        }
    }

    /// Answers approval `id` (a whole id, or an unambiguous prefix of at least
    /// [`MIN_APPROVAL_PREFIX`](crate::MIN_APPROVAL_PREFIX) characters).
    pub fn answer(&self, id: &str, answer: ApprovalAnswer) -> Result<Approval> {
        let id = self.resolve(id)?;
        match self {
            Self::Engine(e) => e.approvals().answer(&id, answer),
            Self::Records(r) => r.answer_approval(&id, answer),
        }
    }

    /// Decisions, newest first.
    pub fn audit(&self, filter: &AuditFilter) -> Result<Vec<AuditEntry>> {
        match self {
            Self::Engine(e) => e.approvals().audit(filter),
            Self::Records(r) => r.audit(filter),
        }
    }

    /// The whole id `given` names ([`crate::Approvals::find`]: the id, or the one id it is a
    /// prefix of).
    pub fn resolve(&self, given: &str) -> Result<String> {
        match self {
            Self::Engine(e) => e.approvals().find(given),
            Self::Records(r) => r.find_approval(given),
        }
    }
}

/// `since` as a duration back from `now` (`90s`, `2h`, `1day`) or an RFC 3339 instant.
pub fn parse_since(text: &str, now: Timestamp) -> Result<Timestamp> {
    let text = text.trim();
    if let Ok(d) = humantime::parse_duration(text) {
        let ms = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        return Ok(Timestamp(now.0.saturating_sub(ms).max(0)));
    }
    if let Ok(t) = humantime::parse_rfc3339_weak(text) {
        let ms = t
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        return Ok(Timestamp(ms));
    }
    Err(Error::invalid_input(format!(
        "since must be a duration (90s, 2h, 1day) or an RFC 3339 time (got {text:?})"
    )))
}

/// Seconds left before `approval`'s deadline at `now`: `None` once it is no longer pending.
pub fn seconds_left(approval: &Approval, now: Timestamp) -> Option<u64> {
    (approval.state == ApprovalState::Pending)
        .then(|| u64::try_from(approval.deadline.0.saturating_sub(now.0) / 1000).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn since_reads_durations_and_instants() {
        let now = Timestamp(10_000_000);
        assert_eq!(
            parse_since("90s", now).unwrap(),
            Timestamp(10_000_000 - 90_000)
        );
        assert_eq!(parse_since("1day", now).unwrap(), Timestamp(0));
        assert_eq!(
            parse_since("1970-01-01T00:00:01Z", now).unwrap(),
            Timestamp(1000)
        );
        let e = parse_since("yesterday-ish", now).unwrap_err();
        assert_eq!(e.code, legate_core::ErrorCode::InvalidInput);
    }

    proptest! {
        /// Whatever a caller passes as `since`, it is an instant or INVALID_INPUT, never a
        /// panic.
        #[test]
        fn since_never_panics(s in ".{0,60}") {
            let now = Timestamp(1_700_000_000_000);
            match parse_since(&s, now) {
                Ok(t) => prop_assert!(t.0 >= 0),
                Err(e) => prop_assert_eq!(e.code, legate_core::ErrorCode::InvalidInput),
            }
        }
    }
}
