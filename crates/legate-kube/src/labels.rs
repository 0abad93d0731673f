//! What ties a pod to the Legate that made it: labels for selection (home, runner, agent)
//! and annotations for people (the task, the context).
//!
//! The home is a hash (a label value is at most 63 characters of a small alphabet); the
//! runner is the engine's runner id, whose lock file says whether it is alive
//! (`legate-engine`'s `runner`). This module never reads a lock itself.

use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::Path;

/// `app.kubernetes.io/managed-by`: `legate`.
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// The hash of the Legate home that made the pod.
pub const HOME: &str = "legate.dev/home";
/// The runner (engine process) that owns the pod.
pub const RUNNER: &str = "legate.dev/runner";
/// The agent's name.
pub const AGENT: &str = "legate.dev/agent";
/// The task the session was opened for (an annotation: a task id may not fit a label).
pub const TASK: &str = "legate.dev/task";

/// Who a pod belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// [`home_hash`] of the Legate home.
    pub home: String,
    /// The runner id (letters and digits).
    pub runner: String,
    /// The task the session opens for.
    pub task: String,
    /// The agent's name.
    pub agent: String,
}

impl Owner {
    /// The owner of a session opened by runner `runner` of the home at `home`.
    pub fn new(home: &Path, runner: &str, task: &str, agent: &str) -> Self {
        Self {
            home: home_hash(home),
            runner: label_value(runner),
            task: task.to_string(),
            agent: label_value(agent),
        }
    }

    /// The pod's labels.
    pub fn labels(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            (MANAGED_BY.to_string(), "legate".to_string()),
            (HOME.to_string(), self.home.clone()),
            (RUNNER.to_string(), self.runner.clone()),
            (AGENT.to_string(), self.agent.clone()),
        ])
    }

    /// The pod's annotations.
    pub fn annotations(&self) -> BTreeMap<String, String> {
        BTreeMap::from([(TASK.to_string(), self.task.clone())])
    }

    /// The label selector of every pod of this home.
    pub fn home_selector(&self) -> String {
        home_selector(&self.home)
    }
}

/// The label selector of every pod Legate made for the home whose hash is `home`.
pub fn home_selector(home: &str) -> String {
    format!("{MANAGED_BY}=legate,{HOME}={home}")
}

/// The first 20 hex digits of the sha256 of `home`'s path.
pub fn home_hash(home: &Path) -> String {
    let digest = Sha256::digest(home.as_os_str().as_encoded_bytes());
    digest.iter().take(10).map(|b| format!("{b:02x}")).collect()
}

/// `text` made a valid label value: letters, digits, `-`, `_` and `.`, at most 63, starting
/// and ending with a letter or digit (anything else becomes `x`).
pub fn label_value(text: &str) -> String {
    let mut v: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                'x'
            }
        })
        .take(63)
        .collect();
    if !v.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        v.replace_range(..v.chars().next().map_or(0, char::len_utf8), "x");
    }
    if !v.ends_with(|c: char| c.is_ascii_alphanumeric()) {
        v.pop();
        v.push('x');
    }
    v
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever a name holds, its label value is valid.
        #[test]
        fn label_values_are_always_valid(text in ".{0,100}") {
            let v = label_value(&text);
            prop_assert!(v.len() <= 63);
            prop_assert!(v.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')));
            if !v.is_empty() {
                prop_assert!(v.starts_with(|c: char| c.is_ascii_alphanumeric()));
                prop_assert!(v.ends_with(|c: char| c.is_ascii_alphanumeric()));
            }
        }
    }

    #[test]
    fn homes_hash_apart_and_labels_carry_them() {
        let a = Owner::new(Path::new("/a"), "r1", "t-1", "revisor");
        let b = Owner::new(Path::new("/b"), "r1", "t-1", "revisor");
        assert_ne!(a.home, b.home);
        assert_eq!(a.home.len(), 20);
        assert_eq!(a.labels()[HOME], a.home);
        assert_eq!(
            a.home_selector(),
            format!(
                "app.kubernetes.io/managed-by=legate,legate.dev/home={}",
                a.home
            )
        );
    }
}
