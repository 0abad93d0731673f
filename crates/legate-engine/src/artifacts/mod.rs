//! Artifacts: the files a task named in `artifactPaths`, collected from its workspace when a
//! turn ends and kept under Legate's home (`$LEGATE_HOME/artifacts/<task>/<sha256>`, 0700
//! directories, 0600 files, written by temporary file, `fsync` and rename, the directory
//! synced, before the record is stored and the end is told), then read back in pieces bound
//! to their sha256.
//!
//! Every path the task names is hostile: it is resolved beneath the workspace in the kernel
//! with no symlink followed (`legate-beneath`), so a symlink (to `/etc/passwd`, or swapped in
//! at the last moment) is refused, never read through. The secret policy (name, content and
//! the configured exclusions) is applied at collection and again at every read; a violation
//! is `BLOCKED_ARTIFACT_PATH`. At read the kept bytes are checked against the recorded
//! sha256 and size: a kept file that changed, grew or became a link since collection is
//! `BLOCKED_ARTIFACT_PATH`, never served. The workspace itself is never read again after
//! collection, so changing it later changes no artifact.
//!
//! This module never decides a task's state: an artifact that cannot be collected is recorded
//! as missing, blocked or too large, and the task ends as its turn did.

use crate::core::Core;
use legate_beneath::{BeneathError, Kind, Root};
use legate_core::delivery::{MAX_ARTIFACT_BYTES, MAX_ARTIFACT_TOTAL_BYTES};
use legate_core::{Artifact, ArtifactState, Error, ErrorCode, Result, Task, TaskId, Timestamp};
use legate_workspace::SecretPatterns;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// An artifact read back: its record and its bytes, checked.
#[derive(Debug, Clone)]
pub struct ArtifactBytes {
    /// The record.
    pub artifact: Artifact,
    /// Its bytes, whose sha256 is the record's.
    pub bytes: Vec<u8>,
}

/// The artifacts tasks keep: list and read them.
/// Handed out by [`Artifacts::list`](crate::Artifacts::list).
#[derive(Debug, Clone)]
pub struct Artifacts {
    pub(crate) core: Core,
}

impl Core {
    /// The artifacts recorded for task `id` (empty before its first turn ended, or when it
    /// named none).
    pub(crate) fn artifacts(&self, id: &str) -> Result<Vec<Artifact>> {
        let task = self.task(id)?;
        self.store().artifacts(&task.id)
    }

    /// Where task `task_id`'s artifacts are kept.
    fn artifact_dir(&self, task_id: &TaskId) -> Result<PathBuf> {
        let id = task_id.as_str();
        // Task ids are Legate's own; refuse anything that is not one path component anyway.
        if id.is_empty()
            || !id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(Error::internal("a task id is not fit for a directory name"));
        }
        Ok(self.config().paths.home().join("artifacts").join(id))
    }

    /// Collects `task`'s artifacts from `root` (its workspace) at the end of a turn and
    /// records them, replacing an earlier turn's. Does nothing for a task that named none.
    /// Failures are logged and recorded per artifact; none changes the task's ending.
    pub(crate) async fn collect_artifacts(&self, task: &Task, root: &Path) {
        let names = task.controls.artifact_paths.clone();
        if names.is_empty() {
            return;
        }
        let dir = match self.artifact_dir(&task.id) {
            Ok(d) => d,
            Err(e) => {
                tracing::error!(task = %task.id, error = %e, "artifacts not collected");
                return;
            }
        };
        let secrets = self.config().review.secrets.clone();
        // What the agent's namespace covers beneath its root (a home inside a shared
        // workspace) is never collected: the root is all it may write there.
        let covered = legate_confine::Covered::new(
            root,
            &self.config().hidden_paths(),
            &[root.to_path_buf()],
        );
        let root = root.to_path_buf();
        let collected =
            tokio::task::spawn_blocking(move || collect(&root, &dir, &names, &secrets, &covered))
                .await;
        let records = match collected {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(task = %task.id, error = %e, "artifact collection stopped");
                return;
            }
        };
        let kept = records
            .iter()
            .filter(|a| a.state == ArtifactState::Collected)
            .count();
        match self.store().replace_artifacts(&task.id, &records) {
            Ok(()) => {
                tracing::info!(task = %task.id, named = records.len(), kept, "artifacts collected")
            }
            Err(e) => tracing::error!(task = %task.id, error = %e, "artifacts not recorded"),
        }
    }
}

impl Artifacts {
    /// The artifacts recorded for task `id` (empty before its first turn ended, or when it
    /// named none).
    pub fn list(&self, id: &str) -> Result<Vec<Artifact>> {
        self.core.artifacts(id)
    }

    /// The bytes of artifact `name` of task `id`, bound to `expected_sha256`. `ARTIFACT_NOT_FOUND`
    /// for a name the task did not collect (or a missing file); `BLOCKED_ARTIFACT_PATH` for
    /// one refused at collection, refused now by the secret policy, or whose kept bytes
    /// changed; `CONTENT_CHANGED` when `expected_sha256` is not the recorded sha256.
    pub async fn read(&self, id: &str, name: &str, expected_sha256: &str) -> Result<ArtifactBytes> {
        let task = self.core.task(id)?;
        let artifact = self
            .core
            .store()
            .artifacts(&task.id)?
            .into_iter()
            .find(|a| a.name == name)
            .ok_or_else(|| not_found(&task.id, name))?;
        let sha = match (artifact.state, &artifact.sha256) {
            (ArtifactState::Collected, Some(sha)) => sha.clone(),
            (ArtifactState::Missing, _) => return Err(not_found(&task.id, name)),
            (ArtifactState::TooLarge, _) => {
                return Err(Error::invalid_input(format!(
                    "artifact {:?} of task {} was over the size limit and was not collected",
                    short(name),
                    task.id
                )));
            }
            _ => {
                return Err(blocked(format!(
                    "artifact {:?} of task {} was refused at collection ({})",
                    short(name),
                    task.id,
                    artifact.reason.as_deref().unwrap_or("blocked")
                )));
            }
        };
        if !expected_sha256.eq_ignore_ascii_case(&sha) {
            return Err(Error::new(
                ErrorCode::ContentChanged,
                format!(
                    "artifact {:?} of task {} has sha256 {sha}, not the expected {}",
                    short(name),
                    task.id,
                    short(expected_sha256)
                ),
            ));
        }
        let dir = self.core.artifact_dir(&task.id)?;
        let secrets = self.core.config().review.secrets.clone();
        let size = artifact.bytes.unwrap_or(0);
        let name_owned = name.to_string();
        let bytes =
            tokio::task::spawn_blocking(move || read_kept(&dir, &sha, size, &name_owned, &secrets))
                .await
                .map_err(|e| {
                    Error::caused_by(ErrorCode::Internal, "reading an artifact stopped", e)
                })??;
        Ok(ArtifactBytes { artifact, bytes })
    }
}

fn not_found(task: &TaskId, name: &str) -> Error {
    Error::new(
        ErrorCode::ArtifactNotFound,
        format!("task {task} has no collected artifact {:?}", short(name)),
    )
}

fn blocked(message: String) -> Error {
    Error::new(ErrorCode::BlockedArtifactPath, message)
}

fn short(s: &str) -> String {
    match s.char_indices().nth(120) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

/// Collects each of `names` beneath `root` into `dir`.
fn collect(
    root: &Path,
    dir: &Path,
    names: &[String],
    secrets: &SecretPatterns,
    covered: &legate_confine::Covered,
) -> Vec<Artifact> {
    let at = Timestamp::now().0;
    let record = |name: &str, state, reason: String| Artifact {
        name: name.to_string(),
        state,
        bytes: None,
        sha256: None,
        reason: Some(reason),
        collected_at: at,
    };
    let held = match Root::open(root) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(error = %e, "the workspace could not be opened for artifacts");
            return names
                .iter()
                .map(|n| record(n, ArtifactState::Missing, "the workspace is gone".into()))
                .collect();
        }
    };
    let mut total: u64 = 0;
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let rel = Path::new(name);
        let hidden = legate_beneath::components(rel)
            .map(|names| covered.covers(&names.iter().collect::<PathBuf>()))
            .unwrap_or(false);
        if hidden {
            out.push(record(
                name,
                ArtifactState::Blocked,
                "BLOCKED_ARTIFACT_PATH: in Legate's home or a file hidden from agents".into(),
            ));
            continue;
        }
        let bytes = match held.kind(rel) {
            Ok(None) => {
                out.push(record(
                    name,
                    ArtifactState::Missing,
                    "no file at this path".into(),
                ));
                continue;
            }
            Ok(Some(Kind::File)) => {
                let room = MAX_ARTIFACT_BYTES.min(MAX_ARTIFACT_TOTAL_BYTES - total);
                match held.read(rel, room) {
                    Ok(b) => b,
                    Err(BeneathError::TooLarge { .. }) => {
                        out.push(record(
                            name,
                            ArtifactState::TooLarge,
                            format!(
                                "over {MAX_ARTIFACT_BYTES} bytes, or over {MAX_ARTIFACT_TOTAL_BYTES} for all of the task's artifacts"
                            ),
                        ));
                        continue;
                    }
                    Err(e) => {
                        out.push(refused(name, &e, at));
                        continue;
                    }
                }
            }
            Ok(Some(Kind::Symlink)) => {
                out.push(record(
                    name,
                    ArtifactState::Blocked,
                    "UNSAFE_PATH: a symlink".into(),
                ));
                continue;
            }
            Ok(Some(_)) => {
                out.push(record(
                    name,
                    ArtifactState::Blocked,
                    "UNSAFE_PATH: not a regular file".into(),
                ));
                continue;
            }
            Err(e) => {
                out.push(refused(name, &e, at));
                continue;
            }
        };
        if let Some(b) = secrets.check(name, &bytes) {
            out.push(record(
                name,
                ArtifactState::Blocked,
                format!("{}: {}", b.reason.as_str(), b.rule),
            ));
            continue;
        }
        let sha = legate_core::remote::sha256_hex(&bytes);
        if let Err(e) = keep(dir, &sha, &bytes) {
            tracing::error!(error = %e, "an artifact could not be kept");
            out.push(record(
                name,
                ArtifactState::Missing,
                "it could not be kept".into(),
            ));
            continue;
        }
        total += bytes.len() as u64;
        out.push(Artifact {
            name: name.clone(),
            state: ArtifactState::Collected,
            bytes: Some(bytes.len() as u64),
            sha256: Some(sha),
            reason: None,
            collected_at: at,
        });
    }
    out
}

/// The record of a path the kernel refused to resolve (a symlink on the way, not a file).
fn refused(name: &str, e: &BeneathError, at: i64) -> Artifact {
    let reason = match e {
        BeneathError::Symlink { .. } => "UNSAFE_PATH: it goes through a symlink",
        BeneathError::IsDirectory { .. } | BeneathError::NotRegular { .. } => {
            "UNSAFE_PATH: not a regular file"
        }
        _ => "UNSAFE_PATH: it could not be resolved beneath the workspace",
    };
    Artifact {
        name: name.to_string(),
        state: ArtifactState::Blocked,
        bytes: None,
        sha256: None,
        reason: Some(reason.to_string()),
        collected_at: at,
    }
}

/// Writes `bytes` to `dir/sha` durably: a fresh temporary file (0600), `fsync`, rename, the
/// directory synced.
fn keep(dir: &Path, sha: &str, bytes: &[u8]) -> std::io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let target = dir.join(sha);
    let tmp = dir.join(format!(".{sha}.{}.tmp", std::process::id()));
    let _ = fs::remove_file(&tmp);
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc_nofollow())
        .open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    drop(f);
    fs::rename(&tmp, &target)?;
    File::open(dir)?.sync_all()
}

/// `O_NOFOLLOW`, so a link planted at the temporary name is never written through.
fn libc_nofollow() -> i32 {
    rustix::fs::OFlags::NOFOLLOW.bits() as i32
}

/// The kept bytes of an artifact, checked: resolved beneath `dir` with no link followed, the
/// recorded size and sha256, and the secret policy again.
fn read_kept(
    dir: &Path,
    sha: &str,
    size: u64,
    name: &str,
    secrets: &SecretPatterns,
) -> Result<Vec<u8>> {
    let changed = |why: &str| {
        blocked(format!(
            "artifact {:?} changed since it was collected ({why}); it is not served",
            short(name)
        ))
    };
    let held = Root::open(dir).map_err(|_| changed("its directory is gone"))?;
    let bytes = match held.read(Path::new(sha), size) {
        Ok(b) => b,
        Err(BeneathError::TooLarge { .. }) => return Err(changed("it grew")),
        Err(BeneathError::Symlink { .. }) => return Err(changed("it is now a symlink")),
        Err(BeneathError::Io { .. }) => return Err(changed("it is gone")),
        Err(_) => return Err(changed("it is no longer a regular file")),
    };
    if bytes.len() as u64 != size || legate_core::remote::sha256_hex(&bytes) != sha {
        return Err(changed("its sha256 differs"));
    }
    if let Some(b) = secrets.check(name, &bytes) {
        return Err(blocked(format!(
            "artifact {:?} is refused by the secret policy ({}, {})",
            short(name),
            b.reason.as_str(),
            b.rule
        )));
    }
    Ok(bytes)
}
