//! The memory a task is given: a caller's selection checked at submit (at most
//! [`MAX_SELECTED`] entries of the task's project, each named by specialist and the sha256 it
//! read), then the snapshots taken when the task is stored, from the entries or, for a
//! continuation and a handoff that inherits, from the earlier task's snapshots.
//!
//! It never takes an entry at another version than the one named (`MEMORY_CHANGED`), one
//! that holds a credential (`INPUT_SECRET_DETECTED`), or one of another project. A task of a
//! sandbox has no project, so it gets no memory (`INVALID_INPUT`).

use super::{changed, check_sha, check_specialist, not_found};
use crate::core::Core;
use crate::core::request::{Checked, SubmitRequest, WorkspaceRequest};
use legate_core::{Error, ErrorCode, MemorySelection, MemorySnapshot, Result, TaskId};
use legate_store::{Snapshot, SnapshotSource};
use std::path::{Path, PathBuf};

/// At most this many entries are selected for one task.
pub const MAX_SELECTED: usize = 8;

/// The project a request's memory belongs to: a copy's source, or a shared directory that is
/// a git root. `INVALID_INPUT` for a sandbox or a copy made from received files.
fn project_of(workspace: &WorkspaceRequest) -> Result<&Path> {
    match workspace {
        WorkspaceRequest::Copy { source, .. } => Ok(source),
        WorkspaceRequest::Shared(dir) | WorkspaceRequest::Directory { path: dir, .. } => Ok(dir),
        _ => Err(Error::invalid_input(
            "memory belongs to a project: select it for a copy workspace, or a shared directory that is a git root (a sandbox has no project)",
        )),
    }
}

impl Core {
    /// The snapshots `request` selects, checked against the store now (and again when they
    /// are taken). Changes nothing.
    pub(crate) fn check_memory(&self, request: &SubmitRequest) -> Result<Vec<MemorySnapshot>> {
        let selection = match &request.memory {
            Some(s) if !s.is_empty() => s,
            _ => return Ok(Vec::new()),
        };
        if selection.len() > MAX_SELECTED {
            return Err(Error::invalid_input(format!(
                "{} memory entries selected; at most {MAX_SELECTED} go with one task",
                selection.len()
            )));
        }
        let project = self.memory_project(project_of(&request.workspace)?)?;
        let key = project.to_string_lossy();
        let mut out: Vec<MemorySnapshot> = Vec::with_capacity(selection.len());
        let mut block_chars = 0usize;
        for MemorySelection { specialist, sha256 } in selection {
            check_specialist(specialist)?;
            check_sha("memory[].sha256", sha256)?;
            if out.iter().any(|s| s.specialist == *specialist) {
                return Err(Error::invalid_input(format!(
                    "specialist {specialist} is selected twice; a project keeps one memory entry per specialist"
                )));
            }
            let Some(entry) = self.store().memory_entry(&key, specialist)? else {
                return Err(not_found(specialist, sha256));
            };
            if entry.meta.sha256 != *sha256 {
                return Err(changed(specialist, Some(&entry.meta.sha256)));
            }
            legate_credentials::refuse_credential(
                &format!("the memory of specialist {specialist}"),
                &entry.text,
            )?;
            block_chars += super::block::entry_len(specialist, sha256, &entry.text);
            out.push(MemorySnapshot {
                specialist: specialist.clone(),
                sha256: sha256.clone(),
                bytes: entry.meta.bytes,
            });
        }
        let total = request.prompt.chars().count() + block_chars + super::block::FRAME_CHARS;
        let limit = self.config().max_prompt_chars;
        if total > limit {
            return Err(Error::invalid_input(format!(
                "the prompt with its selected memory has {total} characters; the limit is {limit} (max_prompt_chars; nothing is cut: select fewer or shorter entries)"
            )));
        }
        Ok(out)
    }

    /// Takes the snapshots of a task about to be stored as `task_id`: from the entries the
    /// caller selected (each must still be at its sha256), or the earlier task's for a
    /// continuation or an inheriting handoff. Nothing when the task gets no memory.
    pub(crate) fn take_memory_snapshots(
        &self,
        task_id: &TaskId,
        request: &SubmitRequest,
        checked: &Checked,
    ) -> Result<()> {
        let wanted = &checked.controls.memory;
        if wanted.is_empty() {
            return Ok(());
        }
        let selected = request.memory.as_ref().is_some_and(|m| !m.is_empty());
        let taken = if selected {
            let project = self.snapshot_project(checked)?;
            let key = project.to_string_lossy();
            let pairs: Vec<(String, String)> = wanted
                .iter()
                .map(|s| (s.specialist.clone(), s.sha256.clone()))
                .collect();
            self.store().snapshot_memory(
                task_id,
                SnapshotSource::Entries {
                    project: &key,
                    selection: &pairs,
                },
            )?
        } else {
            let from = match checked.copy.as_ref().and_then(|c| c.handoff.as_ref()) {
                Some(h) => h.source_task_id.clone(),
                None => self.latest_task(&checked.context_id)?.id,
            };
            self.store()
                .snapshot_memory(task_id, SnapshotSource::Task(&from))?
        };
        let texts = match taken {
            Snapshot::Taken(texts) => texts,
            Snapshot::Missing { index } => {
                let s = &wanted[index];
                return Err(Error::new(
                    ErrorCode::MemoryChanged,
                    format!(
                        "the memory of specialist {} changed since the task was checked; nothing was submitted. Read memory_list again",
                        s.specialist
                    ),
                ));
            }
        };
        let intact = texts.len() == wanted.len()
            && texts.iter().zip(wanted).all(|(t, w)| {
                t.sha256 == w.sha256
                    && t.specialist == w.specialist
                    && legate_workspace::sha256_hex(t.text.as_bytes()) == t.sha256
            });
        if !intact {
            self.forget_memory_snapshots(task_id);
            return Err(Error::new(
                ErrorCode::StoreError,
                "the memory snapshots taken do not match the entries selected; nothing was submitted",
            ));
        }
        Ok(())
    }

    /// The bytes the memory block of a handoff's new task will take: the source task's
    /// snapshots when it inherits them (`selected` false), else the entries of `project` it
    /// selected (checked by [`Core::check_memory`] already).
    pub(crate) fn memory_block_len(
        &self,
        source: &TaskId,
        project: &Path,
        snapshots: &[MemorySnapshot],
        selected: bool,
    ) -> Result<usize> {
        if snapshots.is_empty() {
            return Ok(0);
        }
        let texts: Vec<(String, String, String)> = if selected {
            let key = self.memory_project(project)?.to_string_lossy().into_owned();
            let mut out = Vec::new();
            for s in snapshots {
                let Some(e) = self.store().memory_entry(&key, &s.specialist)? else {
                    return Err(not_found(&s.specialist, &s.sha256));
                };
                out.push((s.specialist.clone(), s.sha256.clone(), e.text));
            }
            out
        } else {
            self.store()
                .memory_snapshots(source)?
                .into_iter()
                .map(|t| (t.specialist, t.sha256, t.text))
                .collect()
        };
        Ok(super::block::FRAME_CHARS
            + texts
                .iter()
                .map(|(s, h, t)| super::block::entry_len(s, h, t))
                .sum::<usize>())
    }

    /// Forgets the snapshots of a task that was not stored after all.
    pub(crate) fn forget_memory_snapshots(&self, task_id: &TaskId) {
        if let Err(e) = self.store().forget_memory_snapshots(task_id) {
            tracing::warn!(task = %task_id, error = %e, "could not forget the memory snapshots of a refused task");
        }
    }

    /// The project of a checked task: its copy's source, or its shared directory's root.
    fn snapshot_project(&self, checked: &Checked) -> Result<PathBuf> {
        let path = match (&checked.copy, &checked.root) {
            (Some(copy), _) => copy.source.clone(),
            (None, Some(root)) => root.clone(),
            (None, None) => {
                return Err(Error::invalid_input(
                    "memory belongs to a project; a sandbox has none",
                ));
            }
        };
        self.memory_project(&path)
    }

    /// The memory block `task`'s agent reads (see `block`), if it was given memory.
    pub(crate) fn memory_block(&self, task: &legate_core::Task) -> Option<String> {
        if task.controls.memory.is_empty() {
            return None;
        }
        match self.store().memory_snapshots(&task.id) {
            Ok(texts) => super::block::block(&texts),
            Err(e) => {
                // The agent is told, rather than run as if no memory had been selected.
                tracing::warn!(task = %task.id, error = %e, "could not read a task's memory snapshots");
                Some(super::block::UNREADABLE.to_string())
            }
        }
    }
}
