//! Writing checked skills into a copy, beneath its root, and recognising the staging
//! directory's paths.
//!
//! Every write is resolved beneath the copy in the kernel (`legate-beneath`, no symlink
//! followed), files are written `0644` by temporary file and rename, and a skill whose
//! directory the project already has (in any letter case) is refused before anything is
//! written. It must never write outside `.agents/skills/`, make a file executable, or run
//! anything it writes.

use super::{STAGING_DIR, StagedSkill};
use crate::CopyLimits;
use legate_beneath::{BeneathError, Kind, Root};
use legate_core::{Error, ErrorCode};
use std::path::Path;

/// Whether the copy-relative `path` is inside the staging directory (`.agents/skills`, in
/// any letter case), or is one of the files staged for agy's tool controls
/// (`.agents/hooks.json`, `.agents/mcp_config.json`): Legate's, never part of a patch.
pub fn is_staging_path(path: &str) -> bool {
    let mut parts = path.split('/');
    let (Some(first), Some(second)) = (parts.next(), parts.next()) else {
        return false;
    };
    if !first.eq_ignore_ascii_case(".agents") {
        return false;
    }
    second.eq_ignore_ascii_case("skills")
        || (parts.next().is_none()
            && (second.eq_ignore_ascii_case("hooks.json")
                || second.eq_ignore_ascii_case("mcp_config.json")))
}

/// Stages `skills` in the copy at `copy` (canonical), which already holds `copied_files`
/// files and `copied_bytes` bytes: the skills count toward the copy's limits.
///
/// Errors: `COPY_LIMIT_EXCEEDED` past the limits; `SKILL_CONFLICT` when the copy already has
/// a skill's directory, or `.agents`/`skills` under another letter case; `UNSAFE_PATH` when
/// something on the way is not a directory or is a link; `INVALID_WORKSPACE` when a write
/// fails. Files already written are left for the caller, which removes the copy.
pub fn stage_skills(
    copy: &Path,
    skills: &[StagedSkill],
    limits: &CopyLimits,
    copied_files: usize,
    copied_bytes: u64,
) -> Result<(), Error> {
    if skills.is_empty() {
        return Ok(());
    }
    let files: usize = skills.iter().map(|s| s.files.len()).sum();
    let bytes: u64 = skills.iter().map(StagedSkill::bytes).sum();
    if copied_files.saturating_add(files) > limits.max_files
        || copied_bytes.saturating_add(bytes) > limits.max_bytes
    {
        return Err(Error::new(
            ErrorCode::CopyLimitExceeded,
            format!(
                "the copy holds {copied_files} files ({copied_bytes} bytes) and its skills {files} ({bytes} bytes); the limits are {} files and {} bytes",
                limits.max_files, limits.max_bytes
            ),
        ));
    }
    let root = Root::open(copy).map_err(|e| beneath_error(copy.display(), &e))?;
    check_aliases(&root, copy, skills)?;
    for skill in skills {
        let dir = skill.dir();
        match root.kind(Path::new(&dir)) {
            Ok(None) => {}
            Ok(Some(_)) => {
                return Err(Error::new(
                    ErrorCode::SkillConflict,
                    format!(
                        "the project already has {dir}; the skill {:?} cannot be staged over it (rename the skill)",
                        skill.name
                    ),
                ));
            }
            Err(e) => return Err(beneath_error(&dir, &e)),
        }
        root.create_dir_all(Path::new(&dir))
            .map_err(|e| beneath_error(&dir, &e))?;
        for f in &skill.files {
            let rel = format!("{dir}/{}", f.path);
            root.write(Path::new(&rel), f.content.as_bytes(), true)
                .map_err(|e| beneath_error(&rel, &e))?;
        }
        tracing::debug!(skill = %skill.name, dir = %dir, files = skill.files.len(), "skill staged");
    }
    Ok(())
}

/// `SKILL_CONFLICT` when the copy has `.agents` or `.agents/skills` under another letter
/// case, or an entry in `.agents/skills` that differs from a skill's directory only in case:
/// on a case-insensitive file system they would be one directory.
fn check_aliases(root: &Root, copy: &Path, skills: &[StagedSkill]) -> Result<(), Error> {
    let alias = |found: &str| {
        Error::new(
            ErrorCode::SkillConflict,
            format!(
                "the project has {found}, which is {STAGING_DIR} where letter case does not count; skills cannot be staged beside it"
            ),
        )
    };
    for (parent, want) in [("", ".agents"), (".agents", "skills")] {
        let dir = copy.join(parent);
        if parent == ".agents"
            && !matches!(root.kind(Path::new(".agents")), Ok(Some(Kind::Directory)))
        {
            continue;
        }
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.eq_ignore_ascii_case(want) && name != want {
                let found = if parent.is_empty() {
                    name.to_string()
                } else {
                    format!("{parent}/{name}")
                };
                return Err(alias(&found));
            }
        }
    }
    if matches!(root.kind(Path::new(STAGING_DIR)), Ok(Some(Kind::Directory)))
        && let Ok(entries) = std::fs::read_dir(copy.join(STAGING_DIR))
    {
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let lower = name.to_lowercase();
            if let Some(s) = skills
                .iter()
                .find(|s| s.name.to_ascii_lowercase() == lower && *name != lower)
            {
                return Err(Error::new(
                    ErrorCode::SkillConflict,
                    format!(
                        "the project has {STAGING_DIR}/{name}, which is the skill {:?}'s directory where letter case does not count",
                        s.name
                    ),
                ));
            }
        }
    }
    Ok(())
}

fn beneath_error(what: impl std::fmt::Display, e: &BeneathError) -> Error {
    match e {
        BeneathError::Symlink { .. } => Error::new(
            ErrorCode::UnsafePath,
            format!("{what}: a link is on the way; skills are never staged through one"),
        ),
        e if e.is_refusal() => Error::new(ErrorCode::UnsafePath, format!("{what}: {e}")),
        e => Error::new(
            ErrorCode::InvalidWorkspace,
            format!("{what} could not be staged: {e}"),
        ),
    }
}
