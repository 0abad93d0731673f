//! Finishing an integration that stopped: rolling it forward to the end, or back to the
//! original, from its journal (`journal`).
//!
//! This module owns the rules, and applies them to a journal whose lock it holds (so two
//! processes never recover the same integration, and none touches a live one):
//!
//! - **No whole journal** (missing, torn, truncated, bad checksum): nothing was done in the
//!   project (the journal is committed before the first file is created there). The journal
//!   directory is removed; nothing is recorded.
//! - **`staged` without `abort`**: every new content was durably staged before the first
//!   rename, so the integration rolls **forward**, provided each file is at its result, or at
//!   its original with its staged result intact (checked by sha256), and each deleted file is
//!   gone or still its original. If any is neither (the user edited it after the crash, or a
//!   staged file was lost), it rolls back instead.
//! - **Otherwise** it rolls **back**: staged files are removed; when `staged` is there (so
//!   renames may have happened) each file at its result gets its pre-image back (from
//!   `pre/<n>`, never from the project), an added file at its result is removed, and a
//!   deleted file comes back from its set-aside name or its pre-image. Created directories
//!   are removed when empty.
//!
//! Either way no `.legate-<id>-*` file remains. A file that is neither the original nor the
//! result is left as found and named in `conflicts`. Every step checks what is there first,
//! so running a recovery again after a crash in the middle of one is harmless.
//!
//! It must never follow a symlink, write outside the journal's root, take bytes to restore
//! from the project, or touch an integration whose lock another process holds.

use crate::integrate::{Ops, RealOps};
use crate::journal::{self, Found, Intent, Journal};
use crate::no_links;
use legate_core::Error;
use legate_workspace::{ChangeStatus, read_inside_with_metadata, sha256_hex};
use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

legate_core::wire_enum! {
    /// Which way a recovery went.
    #[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Outcome {
        /// The project is exactly integrated.
        RolledForward => "rolled-forward",
        /// The project is as it was before the integration.
        RolledBack => "rolled-back",
    }
}

/// What an undo did.
#[derive(Debug, Default)]
pub(crate) struct Undone {
    /// Paths left as found: neither the original nor the result, or not restorable.
    pub conflicts: Vec<String>,
}

/// An integration recovered in the project, its journal still there until
/// [`Recovered::finish`]: the caller records it first.
#[derive(Debug)]
pub struct Recovered {
    /// The journal directory's name (the engine's task id).
    pub task: String,
    /// The journal's id (also in a finished integration's record).
    pub journal_id: String,
    /// The project.
    pub root: PathBuf,
    /// Which way it went.
    pub outcome: Outcome,
    /// The files of the integration.
    pub files: Vec<String>,
    /// Paths left as found (see the module docs).
    pub conflicts: Vec<String>,
    /// The caller's data from the journal.
    pub meta: serde_json::Value,
    journal: Journal,
}

impl Recovered {
    /// Removes the journal: the recovery is recorded.
    pub fn finish(self) {
        if let Err(e) = self.journal.finish() {
            tracing::warn!(task = %self.task, error = %e, "a recovered integration journal could not be removed");
        }
    }
}

/// What the records say of a stopped integration, asked before recovery touches anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// Not recorded: roll it forward or back.
    Unrecorded,
    /// Recorded as done (the crash came after the record was stored): the project is
    /// integrated; only Legate's own leftovers (`.legate-<id>-*`) are removed.
    Recorded,
    /// No task's project is at that root (a journal no task owns, or one whose root is not
    /// its task's project): nothing is touched, and the journal stays for a person to see.
    Foreign,
}

/// Recovers every stopped integration under `integrations` (`$LEGATE_HOME/run/integrations`),
/// skipping those another process holds. `standing(task, journal id, root)` says, before
/// anything in a project is touched, what the records know of each. Safe to run from any
/// process at any time.
pub fn recover_integrations(
    integrations: &Path,
    standing: &dyn Fn(&str, &str, &Path) -> Standing,
) -> Vec<Result<Recovered, Error>> {
    journal::directories(integrations)
        .iter()
        .filter_map(|dir| recover_one(dir, standing).transpose())
        .collect()
}

/// Recovers the integration journaled in `dir`; `None` when there is nothing to record.
fn recover_one(
    dir: &Path,
    standing: &dyn Fn(&str, &str, &Path) -> Standing,
) -> Result<Option<Recovered>, Error> {
    let journal = match Journal::open(dir)? {
        Found::Busy | Found::Nothing => return Ok(None),
        Found::Journal(j) => *j,
    };
    let task = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    match standing(&task, &journal.intent.id, &journal.intent.root) {
        Standing::Foreign => {
            tracing::warn!(task = %task, root = %journal.intent.root.display(), "an integration journal names no task's project; left untouched");
            return Ok(None);
        }
        Standing::Recorded => {
            let intent = &journal.intent;
            for i in 0..intent.steps.len() {
                if !plain_parents(&intent.root, &intent.steps[i].path) {
                    continue;
                }
                let tmp = intent.staged(i).map(|t| intent.root.join(t));
                let aside = intent.aside(i).map(|a| intent.root.join(a));
                remove_if_there(tmp.as_deref());
                remove_if_there(aside.as_deref());
            }
            return Ok(Some(Recovered {
                task,
                journal_id: intent.id.clone(),
                root: intent.root.clone(),
                outcome: Outcome::RolledForward,
                files: intent.steps.iter().map(|s| s.path.clone()).collect(),
                conflicts: Vec::new(),
                meta: intent.meta.clone(),
                journal,
            }));
        }
        Standing::Unrecorded => {}
    }
    let forward = journal.has(journal::STAGED)
        && !journal.has(journal::ABORT)
        && can_roll_forward(&journal.intent);
    let (outcome, conflicts) = if forward {
        (Outcome::RolledForward, roll_forward(&journal.intent))
    } else {
        if journal.has(journal::STAGED)
            && let Err(e) = journal.mark(journal::ABORT)
        {
            tracing::warn!(error = %e, "the abort marker could not be written");
        }
        (
            Outcome::RolledBack,
            roll_back(&journal, usize::MAX).conflicts,
        )
    };
    tracing::warn!(
        task = %task,
        journal = %journal.intent.id,
        outcome = outcome.as_str(),
        files = journal.intent.steps.len(),
        conflicts = conflicts.len(),
        "recovered a stopped integration"
    );
    Ok(Some(Recovered {
        task,
        journal_id: journal.intent.id.clone(),
        root: journal.intent.root.clone(),
        outcome,
        files: journal
            .intent
            .steps
            .iter()
            .map(|s| s.path.clone())
            .collect(),
        conflicts,
        meta: journal.intent.meta.clone(),
        journal,
    }))
}

/// The sha256 of the regular file `rel` under `root`; `Ok(None)` when it is missing. A link or
/// anything odd on the way is an error (and the step a conflict).
fn hash_at(root: &Path, rel: &str) -> Result<Option<String>, Error> {
    // The user's own project: read whole, as it is.
    Ok(read_inside_with_metadata(root, rel, u64::MAX)?.map(|(bytes, _)| sha256_hex(&bytes)))
}

fn sha(c: &Option<journal::Content>) -> Option<&str> {
    c.as_ref().map(|c| c.sha256.as_str())
}

fn can_roll_forward(intent: &Intent) -> bool {
    let root = &intent.root;
    intent.steps.iter().enumerate().all(|(i, s)| {
        let Ok(target) = hash_at(root, &s.path) else {
            return false;
        };
        match s.status {
            ChangeStatus::D => target.is_none() || target.as_deref() == sha(&s.before),
            ChangeStatus::A | ChangeStatus::M => {
                if target.as_deref() == sha(&s.after) {
                    return true;
                }
                let untouched = match s.status {
                    ChangeStatus::A => target.is_none(),
                    _ => target.as_deref() == sha(&s.before),
                };
                let staged = intent
                    .staged(i)
                    .and_then(|t| hash_at(root, &t).ok().flatten());
                untouched && staged.as_deref() == sha(&s.after)
            }
        }
    })
}

/// Puts every staged result in place and removes every deleted file (checked feasible by
/// [`can_roll_forward`]). Returns the paths it could not finish.
fn roll_forward(intent: &Intent) -> Vec<String> {
    let root = &intent.root;
    let mut ops = RealOps;
    let mut conflicts = Vec::new();
    for (i, s) in intent.steps.iter().enumerate() {
        if !plain_parents(root, &s.path) {
            conflicts.push(s.path.clone());
            continue;
        }
        let target = root.join(&s.path);
        let done = match s.status {
            ChangeStatus::D => {
                let aside = intent.aside(i).map(|a| root.join(a));
                let gone = match hash_at(root, &s.path) {
                    Ok(Some(_)) => ops.remove_file(&target).is_ok(),
                    Ok(None) => true,
                    Err(_) => false,
                };
                remove_if_there(aside.as_deref()) && gone
            }
            ChangeStatus::A | ChangeStatus::M => {
                let tmp = intent.staged(i).map(|t| root.join(t));
                let at_result = hash_at(root, &s.path).ok().flatten().as_deref() == sha(&s.after);
                let placed = at_result
                    || tmp
                        .as_deref()
                        .is_some_and(|t| ops.rename(t, &target).is_ok());
                remove_if_there(tmp.as_deref()) && placed
            }
        };
        if !done {
            conflicts.push(s.path.clone());
        }
    }
    sync_dirs(intent);
    conflicts
}

/// Puts the original back (see the module docs); used by a failed integration and by
/// recovery alike. Only the first `judged` steps may have been renamed (a failed integration
/// knows where it stopped; a recovery passes `usize::MAX`): later ones lose their staged
/// file and are otherwise left alone.
pub(crate) fn roll_back(journal: &Journal, judged: usize) -> Undone {
    let intent = &journal.intent;
    let root = &intent.root;
    // Renames happen only after `staged`: without it nothing in the project is ours but the
    // staged files and the created directories.
    let renamed = journal.has(journal::STAGED);
    let mut ops = RealOps;
    let mut undone = Undone::default();
    for (i, s) in intent.steps.iter().enumerate() {
        if !plain_parents(root, &s.path) {
            undone.conflicts.push(s.path.clone());
            continue;
        }
        let tmp = intent.staged(i).map(|t| root.join(t));
        let aside = intent.aside(i).map(|a| root.join(a));
        let mut ok = remove_if_there(tmp.as_deref());
        if i >= judged {
            if !ok {
                undone.conflicts.push(s.path.clone());
            }
            continue;
        }
        let target = hash_at(root, &s.path);
        let target_path = root.join(&s.path);
        ok &= match (s.status, target) {
            (_, Err(_)) => false,
            (ChangeStatus::A, Ok(None)) => true,
            (ChangeStatus::A, Ok(Some(h))) => {
                renamed
                    && Some(h.as_str()) == sha(&s.after)
                    && ops.remove_file(&target_path).is_ok()
            }
            (ChangeStatus::M, Ok(h)) => {
                let h = h.as_deref();
                if h == sha(&s.before) {
                    true
                } else {
                    renamed && h == sha(&s.after) && restore(journal, i, &mut ops)
                }
            }
            (ChangeStatus::D, Ok(Some(h))) => Some(h.as_str()) == sha(&s.before),
            (ChangeStatus::D, Ok(None)) => {
                let aside_rel = intent.aside(i).unwrap_or_default();
                let from_aside = matches!(hash_at(root, &aside_rel), Ok(Some(h)) if Some(h.as_str()) == sha(&s.before))
                    && aside
                        .as_deref()
                        .is_some_and(|a| ops.rename(a, &target_path).is_ok());
                !renamed || from_aside || restore(journal, i, &mut ops)
            }
        };
        if !ok {
            undone.conflicts.push(s.path.clone());
        }
    }
    for d in intent.dirs.iter().rev() {
        // Not empty: something else lives there now; not ours to remove. Never through a
        // link, and never a link itself.
        let path = root.join(d);
        let is_dir = no_links::metadata(&path).is_ok_and(|m| m.is_some_and(|m| m.is_dir()));
        if is_dir && plain_parents(root, d) {
            let _ = no_links::remove_dir(&path);
        }
    }
    sync_dirs(intent);
    undone
}

/// Writes step `index`'s pre-image back over its path (through its staged name), synced.
fn restore(journal: &Journal, index: usize, ops: &mut RealOps) -> bool {
    let intent = &journal.intent;
    let (Some(step), Some(tmp)) = (intent.steps.get(index), intent.staged(index)) else {
        return false;
    };
    let Some(before) = &step.before else {
        return false;
    };
    let Ok(bytes) = journal.pre_image(index) else {
        return false;
    };
    if sha256_hex(&bytes) != before.sha256 {
        return false;
    }
    let tmp = intent.root.join(tmp);
    let target = intent.root.join(&step.path);
    let done = ops
        .create_temp(&tmp)
        .and_then(|()| ops.fill(&tmp, &bytes, before.mode))
        .and_then(|()| ops.sync(&[&tmp]))
        .and_then(|()| ops.rename(&tmp, &target));
    if done.is_err() {
        let _ = no_links::remove_file(&tmp);
    }
    done.is_ok()
}

/// Whether every directory above `rel` under `root` is a real directory (no symlink): only
/// then may recovery create, rename or remove anything at `rel`. A project whose directory
/// was swapped for a link since the journal was written makes that step a conflict.
fn plain_parents(root: &Path, rel: &str) -> bool {
    let mut at = root.to_path_buf();
    let mut parts: Vec<&str> = rel.split('/').collect();
    parts.pop();
    for part in parts {
        if part.is_empty() || part == "." || part == ".." {
            return false;
        }
        at.push(part);
        match fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_dir() => {}
            // Missing is fine (nothing beneath it to touch); anything else is not.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return true,
            _ => return false,
        }
    }
    true
}

/// Removes `path` if it is there (never following a link); whether it is gone.
fn remove_if_there(path: Option<&Path>) -> bool {
    let Some(path) = path else {
        return true;
    };
    match no_links::metadata(path) {
        Ok(Some(_)) => no_links::remove_file(path).is_ok(),
        Ok(None) => true,
        Err(_) => false,
    }
}

/// Syncs every directory the intent touched (best effort: a recovery runs again anyway).
fn sync_dirs(intent: &Intent) {
    let mut dirs = BTreeSet::new();
    for s in &intent.steps {
        if let Some(p) = intent.root.join(&s.path).parent() {
            dirs.insert(p.to_path_buf());
        }
    }
    for d in &intent.dirs {
        if let Some(p) = intent.root.join(d).parent() {
            dirs.insert(p.to_path_buf());
        }
    }
    for d in dirs {
        let _ = no_links::open_read(&d).and_then(|f| f.sync_all());
    }
}
