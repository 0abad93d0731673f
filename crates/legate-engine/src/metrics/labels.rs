//! Label values made fit for a metric: hostile text (a model name comes from the agent)
//! redacted by the credential detector, put on one line and cut short, and the number of
//! distinct values held to a bound, the rest counted under [`OTHER`].
//!
//! This module shapes values only; the exposition format's own escaping is the front's, and
//! which numbers exist is `metrics`'.

use std::collections::{BTreeMap, BTreeSet};

/// The value every label beyond its bound is counted under.
pub const OTHER: &str = "other";
/// The value of a model label when no model is known.
pub const UNKNOWN: &str = "unknown";
/// The longest label value, in characters (longer ones are cut, with `…`).
pub const MAX_LABEL_CHARS: usize = 96;

/// `raw` fit to be a label value: credentials redacted, one line, control characters escaped,
/// at most [`MAX_LABEL_CHARS`] characters. Empty text is [`UNKNOWN`].
pub fn clean(raw: &str) -> String {
    let redacted = legate_credentials::redact(raw);
    let cut = legate_core::text::excerpt(&redacted, MAX_LABEL_CHARS);
    if cut.trim().is_empty() {
        UNKNOWN.to_string()
    } else {
        cut
    }
}

/// The values to keep as themselves: the `max` with the largest weights (ties by name), from
/// `(value, weight)` pairs that may repeat a value. Every other value becomes [`OTHER`].
pub fn keep_largest<'a>(
    weights: impl IntoIterator<Item = (&'a str, u64)>,
    max: usize,
) -> BTreeSet<String> {
    let mut by_value: BTreeMap<&str, u64> = BTreeMap::new();
    for (value, w) in weights {
        let entry = by_value.entry(value).or_default();
        *entry = entry.saturating_add(w);
    }
    let mut ranked: Vec<(&str, u64)> = by_value.into_iter().collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    ranked
        .into_iter()
        .take(max)
        .map(|(v, _)| v.to_string())
        .collect()
}

/// `value` if it is kept, else [`OTHER`].
pub fn or_other(value: String, kept: &BTreeSet<String>) -> String {
    if kept.contains(&value) {
        value
    } else {
        OTHER.to_string()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn hostile_values_are_one_short_line_without_credentials() {
        assert_eq!(clean(""), UNKNOWN);
        assert_eq!(clean("claude-sonnet-4"), "claude-sonnet-4");
        let long = clean(&"m".repeat(1000));
        assert_eq!(long.chars().count(), MAX_LABEL_CHARS + 1);
        assert!(!clean("a\nb\"c").contains('\n'));
        let key = format!("ghp_{}", "Zq7Rk2LmN9xWv3TpB5yHc8JdF6sGa1Ue0abc");
        let shown = clean(&format!("model {key}"));
        assert!(!shown.contains(&key), "{shown}");
        assert!(shown.contains("REDACTED"), "{shown}");
    }

    #[test]
    fn only_the_largest_values_keep_their_name() {
        let kept = keep_largest([("a", 5), ("b", 1), ("c", 3), ("b", 3)], 2);
        assert_eq!(kept.into_iter().collect::<Vec<_>>(), ["a", "b"]);
        let kept = keep_largest([("z", 1), ("y", 1)], 1);
        assert_eq!(or_other("z".into(), &kept), OTHER);
        assert_eq!(or_other("y".into(), &kept), "y");
    }
}
