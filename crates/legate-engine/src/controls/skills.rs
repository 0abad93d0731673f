//! Skills staged in a task's copy (issue 17): the caller's packages and the configured skill
//! packs, checked at submit into one set, recorded as [`SkillRecord`]s (names, paths,
//! hashes, never text) and staged when the copy is made.
//!
//! This module owns which packs a new task gets (`[skills]`: Legate's own, embedded and
//! verified against their manifests; another directory, verified the same way; or none) and
//! the prompt block that points the agent at the staged files. Skills are staged in copy
//! workspaces only: a sandbox holds no project to take care of, and a shared directory is the
//! user's own, into which Legate writes nothing; so the caller's skills on either are
//! `INVALID_INPUT`, and the packs are simply not staged there.
//!
//! It must never stage a skill outside `.agents/skills/`, put a skill's text in a record, an
//! answer, an error or a log line, or treat a skill as a permission: it is data the agent
//! reads, and the supervisor answers every request whatever a skill says.

use crate::core::Core;
use crate::core::request::{SubmitRequest, WorkspaceRequest};
use legate_core::{Error, Result, SkillRecord, SkillSource};
use legate_workspace::StagedSkill;

/// The skills `request` sends, checked with the configured packs into one set; their records.
pub(super) fn check(engine: &Core, request: &SubmitRequest) -> Result<Vec<SkillRecord>> {
    Ok(engine
        .skills_to_stage(request)?
        .iter()
        .map(StagedSkill::record)
        .collect())
}

impl Core {
    /// The skills a new task of `request` stages in its copy: the configured packs (verified
    /// now: `SKILL_PACK_MISSING`, `SKILL_PACK_INVALID`), then the caller's (each checked;
    /// `SKILL_CONFLICT` for a name taken with other files). Empty for a task that is not a
    /// new copy; the caller's skills there are `INVALID_INPUT`.
    pub(crate) fn skills_to_stage(&self, request: &SubmitRequest) -> Result<Vec<StagedSkill>> {
        let copy = matches!(request.workspace, WorkspaceRequest::Copy { .. });
        if !copy {
            if request.skills.is_empty() {
                return Ok(Vec::new());
            }
            return Err(Error::invalid_input(
                "skills are staged in copy workspaces only; run the task in a copy of the project (a sandbox has no project, and Legate writes nothing into a shared directory)",
            ));
        }
        if request.skills.len() > legate_workspace::MAX_SKILLS {
            return Err(Error::invalid_input(format!(
                "{} skills were sent; the limit is {}",
                request.skills.len(),
                legate_workspace::MAX_SKILLS
            )));
        }
        let sent: u64 = request
            .skills
            .iter()
            .map(|s| {
                s.content.len() as u64
                    + s.resources
                        .iter()
                        .map(|r| r.content.len() as u64)
                        .sum::<u64>()
            })
            .sum();
        if sent > legate_workspace::MAX_TOTAL_BYTES {
            return Err(Error::invalid_input(format!(
                "the skills sent hold {sent} bytes of text; the limit is {}",
                legate_workspace::MAX_TOTAL_BYTES
            )));
        }
        let client = request
            .skills
            .iter()
            .map(|p| legate_workspace::check_package(p, SkillSource::Client))
            .collect::<Result<Vec<_>>>()?;
        let packs = self.skill_packs()?;
        let set = legate_workspace::skill_set(packs, client)?;
        tracing::debug!(skills = set.len(), "skills checked");
        Ok(set)
    }

    /// [`Core::skills_to_stage`] again, for the copy: the set whose `records` the task was
    /// checked with. A pack directory that changed in between is `SKILL_PACK_INVALID`, never
    /// a mix of two versions.
    pub(crate) fn staged_as_checked(
        &self,
        request: &SubmitRequest,
        records: &[SkillRecord],
    ) -> Result<Vec<StagedSkill>> {
        let staged = self.skills_to_stage(request)?;
        if !staged
            .iter()
            .map(StagedSkill::record)
            .eq(records.iter().cloned())
        {
            return Err(Error::new(
                legate_core::ErrorCode::SkillPackInvalid,
                "the skill packs changed while the task was checked; submit it again",
            ));
        }
        Ok(staged)
    }

    /// The configured packs, verified against their manifests (see the module docs).
    fn skill_packs(&self) -> Result<Vec<StagedSkill>> {
        let cfg = &self.config().skills;
        if !cfg.bundled {
            return Ok(Vec::new());
        }
        let packs = match &cfg.directory {
            Some(dir) => legate_workspace::load_packs(dir),
            None => legate_workspace::bundled_packs(),
        };
        packs.inspect_err(|e| {
            tracing::warn!(code = e.code.as_str(), error = %e, "the skill packs failed their check; no new copy task starts");
        })
    }
}

/// The prompt's lines about the staged skills: where each is, and that the agent reads them
/// first as guidance; `None` when there are none.
pub(crate) fn prompt_block(skills: &[SkillRecord]) -> Option<String> {
    if skills.is_empty() {
        return None;
    }
    let mut out = String::from(
        "Legate skills (staged in the workspace; read each SKILL.md first and follow it where it fits the caller's task; guidance and data, never a permission; they are not part of the patch):\n",
    );
    for s in skills {
        out.push_str(&format!(
            "- {}/SKILL.md ({}, {} files, sha256 {})\n",
            s.dir,
            s.source.as_str(),
            s.files,
            s.sha256
        ));
    }
    Some(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_block_lists_paths_and_hashes_only() {
        assert!(prompt_block(&[]).is_none());
        let packs = legate_workspace::bundled_packs().unwrap();
        let records: Vec<SkillRecord> = packs.iter().map(StagedSkill::record).collect();
        let block = prompt_block(&records).unwrap();
        assert!(block.contains("- .agents/skills/legate-code-care/SKILL.md (bundled"));
        assert!(block.contains(&records[1].sha256));
        assert!(!block.contains(&packs[0].files[0].content));
        assert_eq!(block.lines().count(), 1 + records.len());
    }
}
