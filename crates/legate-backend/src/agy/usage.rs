//! Per-turn tokens from `agy`'s session-cumulative counters.
//!
//! `agy` reports usage cumulated over the whole conversation, whatever models it used. A
//! turn's own usage is the difference from the conversation's previous total, which is kept
//! in the agent's state directory (`conversations/<id>.json`) so that it survives Legate
//! restarts. A counter that is missing, invalid, smaller than before (reset) or without a
//! known baseline is `None`, and the caller reports a warning; it is never 0 by default. A turn
//! that ends without valid counters (a crash, a timeout, a cancel, invalid usage) may still
//! have spent tokens, so it drops the baseline: the next turn has none, rather than being
//! charged with the lost turn's tokens.

use legate_core::{Usage, UsageCounters, UsageSource};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The counters of one `usage` object, cumulative for the conversation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub struct Counters {
    /// `input_tokens`.
    pub input_tokens: Option<u64>,
    /// `output_tokens`.
    pub output_tokens: Option<u64>,
    /// `total_tokens`.
    pub total_tokens: Option<u64>,
    /// `thinking_tokens`.
    pub thinking_tokens: Option<u64>,
    /// `cache_read_tokens`.
    pub cache_read_tokens: Option<u64>,
}

impl Counters {
    /// Reads a `usage` object. `Err` says why it is unusable (not an object, a counter that
    /// is not a whole number, or no counter at all).
    pub fn parse(v: &Value) -> Result<Self, String> {
        let obj = v.as_object().ok_or("usage is not an object")?;
        let field = |k: &str| -> Result<Option<u64>, String> {
            match obj.get(k) {
                None | Some(Value::Null) => Ok(None),
                Some(n) => n
                    .as_u64()
                    .map(Some)
                    .ok_or_else(|| format!("{k} is not a whole number")),
            }
        };
        let c = Self {
            input_tokens: field("input_tokens")?,
            output_tokens: field("output_tokens")?,
            total_tokens: field("total_tokens")?,
            thinking_tokens: field("thinking_tokens")?,
            cache_read_tokens: field("cache_read_tokens")?,
        };
        if c == Self::default() {
            return Err("usage has no counter".into());
        }
        Ok(c)
    }
}

/// A turn's usage from the conversation's cumulative counters `now` and the previous total
/// `before` (`Some(Counters::default())` for a conversation this turn started). `Err` says
/// why there is none; each counter the difference cannot be known for is `None`.
pub fn turn_usage(before: Option<&Counters>, now: &Counters) -> Result<Usage, String> {
    let Some(before) = before else {
        return Err("the conversation's previous total is unknown".into());
    };
    let pairs = [
        (now.input_tokens, before.input_tokens, "input_tokens"),
        (now.output_tokens, before.output_tokens, "output_tokens"),
        (now.total_tokens, before.total_tokens, "total_tokens"),
        (
            now.thinking_tokens,
            before.thinking_tokens,
            "thinking_tokens",
        ),
        (
            now.cache_read_tokens,
            before.cache_read_tokens,
            "cache_read_tokens",
        ),
    ];
    for (n, b, name) in pairs {
        if let (Some(n), Some(b)) = (n, b)
            && n < b
        {
            return Err(format!(
                "{name} went down from {b} to {n} (the counters were reset)"
            ));
        }
    }
    let fresh = *before == Counters::default();
    let diff = |n: Option<u64>, b: Option<u64>| match (n, b) {
        (Some(n), Some(b)) => Some(n - b),
        (Some(n), None) if fresh => Some(n),
        _ => None,
    };
    let u = Usage {
        input_tokens: diff(now.input_tokens, before.input_tokens),
        output_tokens: diff(now.output_tokens, before.output_tokens),
        total_tokens: diff(now.total_tokens, before.total_tokens),
        thinking_tokens: diff(now.thinking_tokens, before.thinking_tokens),
        cache_read_tokens: diff(now.cache_read_tokens, before.cache_read_tokens),
        source: Some(if fresh {
            UsageSource::SessionTotal
        } else {
            UsageSource::SessionDelta
        }),
        observed_cumulative: Some(UsageCounters {
            input_tokens: now.input_tokens,
            output_tokens: now.output_tokens,
            total_tokens: now.total_tokens,
            thinking_tokens: now.thinking_tokens,
            cache_read_tokens: now.cache_read_tokens,
        }),
        ..Usage::default()
    };
    if u.counters() == UsageCounters::default() {
        return Err("no counter has a known previous total".into());
    }
    Ok(u)
}

#[derive(Debug, Serialize, Deserialize)]
struct Saved {
    cumulative: Counters,
}

fn file(state_dir: &Path, conversation: &str) -> PathBuf {
    state_dir
        .join("conversations")
        .join(format!("{conversation}.json"))
}

/// The conversation's last observed cumulative counters, if they were saved.
pub(crate) fn load_total(state_dir: &Path, conversation: &str) -> Option<Counters> {
    let text = std::fs::read_to_string(file(state_dir, conversation)).ok()?;
    serde_json::from_str::<Saved>(&text)
        .ok()
        .map(|s| s.cumulative)
}

/// Forgets the conversation's saved total: a turn that spent tokens without reporting valid
/// counters leaves the previous total meaningless, so the next turn has no baseline.
pub(crate) fn forget_total(state_dir: &Path, conversation: &str) -> std::io::Result<()> {
    match std::fs::remove_file(file(state_dir, conversation)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Saves the conversation's cumulative counters.
pub(crate) fn save_total(
    state_dir: &Path,
    conversation: &str,
    total: &Counters,
) -> std::io::Result<()> {
    let body = serde_json::to_vec(&Saved { cumulative: *total })?;
    write_private(&file(state_dir, conversation), &body)
}

/// Writes `body` to `path` atomically (a temporary file renamed over it), mode 0600, making
/// the parent directories (0700) first.
pub(crate) fn write_private(path: &Path, body: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let parent = path
        .parent()
        .ok_or_else(|| std::io::Error::other("the path has no parent"))?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(parent)?;
    let tmp = parent.join(format!(
        ".{}.{}.tmp",
        path.file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default(),
        std::process::id()
    ));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(body)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;

    fn total(n: u64) -> Counters {
        Counters {
            total_tokens: Some(n),
            ..Counters::default()
        }
    }

    #[test]
    fn a_resumed_turn_gets_the_difference_and_a_new_one_the_whole() {
        let first = turn_usage(Some(&Counters::default()), &total(120)).unwrap();
        assert_eq!(first.total_tokens, Some(120));
        let second = turn_usage(Some(&total(120)), &total(170)).unwrap();
        assert_eq!(second.total_tokens, Some(50));
        assert_eq!(
            second.input_tokens, None,
            "never 0 for an unreported counter"
        );
    }

    #[test]
    fn missing_invalid_reset_and_unknown_baselines_are_errors_not_zero() {
        assert!(turn_usage(None, &total(170)).is_err());
        assert!(
            turn_usage(Some(&total(170)), &total(20))
                .unwrap_err()
                .contains("reset")
        );
        assert!(Counters::parse(&json!({})).is_err());
        assert!(Counters::parse(&json!("x")).is_err());
        assert!(Counters::parse(&json!({"total_tokens": -3})).is_err());
        assert!(Counters::parse(&json!({"total_tokens": "12"})).is_err());
        let c = Counters::parse(&json!({"input_tokens": 100, "output_tokens": 20, "total_tokens": 120, "thinking_tokens": null})).unwrap();
        assert_eq!(c.total_tokens, Some(120));
        assert_eq!(c.thinking_tokens, None);
        let prev = Counters {
            input_tokens: Some(5),
            ..Counters::default()
        };
        assert!(
            turn_usage(Some(&prev), &total(9)).is_err(),
            "no baseline for total"
        );
    }

    #[test]
    fn totals_persist_privately() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(load_total(dir.path(), "c1"), None);
        save_total(dir.path(), "c1", &total(120)).unwrap();
        assert_eq!(load_total(dir.path(), "c1"), Some(total(120)));
        let mode = std::fs::metadata(file(dir.path(), "c1"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
