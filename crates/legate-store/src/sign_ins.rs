//! What the dashboard's sign-in remembers across restarts: the one-time codes already
//! redeemed and the sessions signed out, each until it would have expired anyway (issue 29,
//! finding 8: a used code worked again, and a signed-out cookie came back, after a restart).
//!
//! The store keeps opaque ids (a code's nonce, a session's id, as the dashboard names them)
//! and their expiry; it never sees a code, a cookie or a token, and never decides whether a
//! sign-in is valid. Rows past their expiry are removed whenever one is added.

use crate::Store;
use crate::sql::SqlContext;
use legate_core::Result;
use rusqlite::{OptionalExtension, params};

legate_core::wire_enum! {
    /// What a remembered id stands for.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum Spent {
        /// A one-time code's nonce, redeemed.
        Code => "code",
        /// A session's id, signed out.
        Session => "session",
    }
}

impl Store {
    /// Records `id` of `kind` as spent until `expires_at` (Unix milliseconds), in one
    /// transaction, so two processes redeeming one code cannot both succeed: `true` if it was
    /// not spent yet, `false` if it already was. Removes rows expired at `now_ms`.
    pub fn spend(&self, kind: Spent, id: &str, expires_at: i64, now_ms: i64) -> Result<bool> {
        self.write("record a spent sign-in", |tx| {
            tx.prepare_cached("DELETE FROM sign_in_spent WHERE expires_at <= ?1")
                .and_then(|mut st| st.execute([now_ms]))
                .ctx("remove expired sign-ins")?;
            let added = tx
                .prepare_cached(
                    "INSERT OR IGNORE INTO sign_in_spent (kind, id, expires_at) VALUES (?1, ?2, ?3)",
                )
                .and_then(|mut st| st.execute(params![kind.as_str(), id, expires_at]))
                .ctx("record a spent sign-in")?;
            Ok(added == 1)
        })
    }

    /// Whether `id` of `kind` is spent and not yet expired at `now_ms`.
    pub fn is_spent(&self, kind: Spent, id: &str, now_ms: i64) -> Result<bool> {
        self.read(|conn| {
            conn.prepare_cached(
                "SELECT 1 FROM sign_in_spent WHERE kind = ?1 AND id = ?2 AND expires_at > ?3",
            )
            .and_then(|mut st| {
                st.query_row(params![kind.as_str(), id, now_ms], |_| Ok(()))
                    .optional()
            })
            .map(|row| row.is_some())
            .ctx("read a spent sign-in")
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn an_id_is_spent_once_until_it_expires_and_kinds_are_apart() {
        let store = Store::open_in_memory().unwrap();
        assert!(store.spend(Spent::Code, "n1", 100, 10).unwrap());
        assert!(!store.spend(Spent::Code, "n1", 100, 20).unwrap());
        assert!(store.is_spent(Spent::Code, "n1", 20).unwrap());
        assert!(!store.is_spent(Spent::Session, "n1", 20).unwrap());
        assert!(!store.is_spent(Spent::Code, "n1", 100).unwrap());
        // Past its expiry it is gone, and may be spent again (its MAC has expired by then).
        assert!(store.spend(Spent::Code, "n1", 300, 150).unwrap());
    }
}
