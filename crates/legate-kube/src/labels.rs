//! What ties a pod to the Legate that made it: labels for selection (home, runner, agent)
//! and annotations for people (the task, the context).
//!
//! The home is a random id kept in the home itself ([`home_id`]: two machines with the same
//! home path are two homes, and one home reached by two paths is one); the runner is the
//! engine's runner id, whose lock file says whether it is alive (`legate-engine`'s `runner`).
//! This module never reads a lock itself.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::Path;

/// `app.kubernetes.io/managed-by`: `legate`.
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// The id of the Legate home that made the pod ([`home_id`]).
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
    /// [`home_id`] of the Legate home.
    pub home: String,
    /// The runner id (letters and digits).
    pub runner: String,
    /// The task the session opens for.
    pub task: String,
    /// The agent's name.
    pub agent: String,
}

impl Owner {
    /// The owner of a session opened by runner `runner` of the home whose id is `home`.
    pub fn new(home: &str, runner: &str, task: &str, agent: &str) -> Self {
        Self {
            home: label_value(home),
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

/// The file in a Legate home that holds its id.
pub const HOME_ID_FILE: &str = "kube-home-id";

/// The id of the Legate home at `home`: 20 random hex digits kept in [`HOME_ID_FILE`] (mode
/// 0600), made by the first process that asks (of two at once, one makes it, the other reads
/// it).
pub fn home_id(home: &Path) -> std::io::Result<String> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = home.join(HOME_ID_FILE);
    let valid = |s: &str| {
        s.len() == 20
            && s.chars()
                .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
    };
    let fresh = uuid::Uuid::new_v4().simple().to_string()[..20].to_string();
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
    {
        Ok(mut f) => {
            f.write_all(fresh.as_bytes())?;
            f.sync_all()?;
            return Ok(fresh);
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    // Made by another process, which may still be writing it.
    for _ in 0..50 {
        let mut text = String::new();
        std::fs::File::open(&path)?
            .take(64)
            .read_to_string(&mut text)?;
        if valid(text.trim()) {
            return Ok(text.trim().to_string());
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("{} does not hold a home id", path.display()),
    ))
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
    fn a_home_keeps_one_id_and_labels_carry_it() {
        let (one, two) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let id = home_id(one.path()).unwrap();
        assert_eq!(id.len(), 20);
        assert_eq!(home_id(one.path()).unwrap(), id, "kept");
        assert_ne!(home_id(two.path()).unwrap(), id, "another home, another id");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(one.path().join(HOME_ID_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        std::fs::write(two.path().join(HOME_ID_FILE), "not an id").unwrap();
        assert!(
            home_id(two.path()).is_err(),
            "a damaged id is an error, not a new id"
        );
        let a = Owner::new(&id, "r1", "t-1", "revisor");
        let b = Owner::new(
            &home_id(tempfile::tempdir().unwrap().path()).unwrap(),
            "r1",
            "t-1",
            "revisor",
        );
        assert_ne!(a.home, b.home);
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
