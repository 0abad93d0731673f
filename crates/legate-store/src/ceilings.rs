//! Caller-set ceilings: one JSON document per name (today `sandbox`, the test
//! ceiling), each stored with its sha256, replaced only by a caller who names the sha256 of
//! the version it read (compare-and-set, in one transaction, so two processes replacing at
//! once cannot both win).
//!
//! The store keeps the document and never interprets it: what a ceiling may hold, its
//! default, how it is normalized and hashed are the engine's. It never computes a hash.

use crate::Store;
use crate::sql::{SqlContext, store_error};
use legate_core::{Result, Timestamp};
use rusqlite::{OptionalExtension, params};

/// A stored ceiling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredCeiling {
    /// The document, as the engine wrote it.
    pub document: serde_json::Value,
    /// The sha256 the engine gave it.
    pub sha256: String,
    /// When it was stored (milliseconds).
    pub updated_at: i64,
}

/// What a compare-and-set replacement did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CeilingReplace {
    /// Stored: the expected sha256 was the current one.
    Replaced,
    /// Nothing stored: the current sha256 is another.
    Changed {
        /// The sha256 that is current.
        current_sha256: String,
    },
}

impl Store {
    /// The stored ceiling `name`, if one was ever stored.
    pub fn ceiling(&self, name: &str) -> Result<Option<StoredCeiling>> {
        let row: Option<(String, String, i64)> = self.read(|conn| {
            conn.prepare_cached("SELECT document, sha256, updated_at FROM policies WHERE name = ?1")
                .and_then(|mut st| {
                    st.query_row([name], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                        .optional()
                })
                .ctx("read a policy")
        })?;
        row.map(|(text, sha256, updated_at)| {
            let document = serde_json::from_str(&text)
                .map_err(|_| store_error("a stored policy is not valid JSON."))?;
            Ok(StoredCeiling {
                document,
                sha256,
                updated_at,
            })
        })
        .transpose()
    }

    /// Replaces ceiling `name` with `document` (whose sha256 is `sha256`) if its current
    /// sha256 is `expected_sha256`; a ceiling never stored counts as `absent_sha256` (the
    /// sha256 of the engine's default).
    pub fn replace_ceiling(
        &self,
        name: &str,
        expected_sha256: &str,
        absent_sha256: &str,
        document: &serde_json::Value,
        sha256: &str,
    ) -> Result<CeilingReplace> {
        let text = serde_json::to_string(document)
            .map_err(|_| store_error("a policy could not be serialized."))?;
        self.write("replace a policy", |tx| {
            let current: Option<String> = tx
                .prepare_cached("SELECT sha256 FROM policies WHERE name = ?1")
                .and_then(|mut st| st.query_row([name], |r| r.get(0)).optional())
                .ctx("read a policy's sha256")?;
            let current = current.unwrap_or_else(|| absent_sha256.to_owned());
            if current != expected_sha256 {
                return Ok(CeilingReplace::Changed {
                    current_sha256: current,
                });
            }
            tx.prepare_cached(
                "INSERT INTO policies (name, document, sha256, updated_at) VALUES (?1, ?2, ?3, ?4) \
                 ON CONFLICT (name) DO UPDATE SET document = excluded.document, \
                 sha256 = excluded.sha256, updated_at = excluded.updated_at",
            )
            .and_then(|mut st| st.execute(params![name, text, sha256, Timestamp::now().0]))
            .ctx("store a policy")?;
            Ok(CeilingReplace::Replaced)
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_replacement_must_name_the_current_sha256() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("s.db")).unwrap();
        assert_eq!(store.ceiling("sandbox").unwrap(), None);
        let a = json!({"network": true});
        // Never stored: the default's sha256 is current.
        assert_eq!(
            store
                .replace_ceiling("sandbox", "other", "default", &a, "sha-a")
                .unwrap(),
            CeilingReplace::Changed {
                current_sha256: "default".into()
            }
        );
        assert_eq!(store.ceiling("sandbox").unwrap(), None);
        assert_eq!(
            store
                .replace_ceiling("sandbox", "default", "default", &a, "sha-a")
                .unwrap(),
            CeilingReplace::Replaced
        );
        let stored = store.ceiling("sandbox").unwrap().unwrap();
        assert_eq!((stored.document, stored.sha256.as_str()), (a, "sha-a"));
        // The stale sha256 (the default's) no longer replaces it.
        let b = json!({"network": false});
        assert_eq!(
            store
                .replace_ceiling("sandbox", "default", "default", &b, "sha-b")
                .unwrap(),
            CeilingReplace::Changed {
                current_sha256: "sha-a".into()
            }
        );
        assert_eq!(
            store
                .replace_ceiling("sandbox", "sha-a", "default", &b, "sha-b")
                .unwrap(),
            CeilingReplace::Replaced
        );
        assert_eq!(store.ceiling("sandbox").unwrap().unwrap().sha256, "sha-b");
        // Another name is another ceiling.
        assert_eq!(store.ceiling("other").unwrap(), None);
    }
}
