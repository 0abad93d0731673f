//! Skills staged in a copy: packages of a `SKILL.md` and text resources that the agent reads
//! under `.agents/skills/<lowercase name>/`, sent by the caller (`client`) or shipped with
//! Legate (`bundled`, see `packs`).
//!
//! This module owns what a skill package may be (its name, its paths, its size), the set a
//! task gets (client and bundled together: at most [`MAX_SKILLS`], [`MAX_TOTAL_BYTES`] of
//! text; the same name with the same files once, with other files `SKILL_CONFLICT`), each
//! skill's sha256, and writing them into a copy (`stage`). The staging directory is Legate's
//! in every copy: a copy's baseline ignores it (`/.agents/skills`, in every letter case), so
//! nothing the agent writes there, and no staged file, ever reaches a preview, a patch or an
//! integration (see `patch`).
//!
//! It must never execute a skill's file, write one executable, follow a link on the way into
//! the copy, stage a skill over a directory the project already has, or put a skill's text in
//! an error or a log line.

mod packs;
mod stage;

pub use packs::{BUNDLED_PACKS, MANIFEST, Manifest, ManifestFile, bundled_packs, load_packs};
pub use stage::{is_staging_path, stage_skills};

use crate::include::path_problem;
use legate_core::{Error, ErrorCode, SkillPackage, SkillRecord, SkillSource};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// Where skills are staged, relative to the copy's root.
pub const STAGING_DIR: &str = ".agents/skills";
/// The file every skill has.
pub const SKILL_FILE: &str = "SKILL.md";
/// At most this many skills per task, bundled ones included.
pub const MAX_SKILLS: usize = 8;
/// At most this many resources per skill (`SKILL.md` not counted).
pub const MAX_RESOURCES: usize = 100;
/// At most this much text in all the skills of a task, bundled ones included.
pub const MAX_TOTAL_BYTES: u64 = 1024 * 1024;
/// The longest skill name.
pub const MAX_NAME_LEN: usize = 64;
/// The deepest resource path, in components.
const MAX_DEPTH: usize = 8;
/// The longest resource path, in bytes.
const MAX_RESOURCE_PATH: usize = 255;

/// One file of a staged skill, relative to its directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SkillFile {
    /// `SKILL.md` or a resource's path.
    pub path: String,
    /// Its text.
    pub content: String,
}

/// A skill checked and ready to stage: its declared name, where it came from, and its files
/// sorted by path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StagedSkill {
    /// The declared name, kept as given.
    pub name: String,
    /// Client or bundled.
    pub source: SkillSource,
    /// Its files, `SKILL.md` among them, sorted by path.
    pub files: Vec<SkillFile>,
}

impl StagedSkill {
    /// Its directory relative to the copy's root: `.agents/skills/<lowercase name>`.
    pub fn dir(&self) -> String {
        format!("{STAGING_DIR}/{}", self.name.to_ascii_lowercase())
    }

    /// Its size in bytes: the sum of its files' lengths.
    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|f| f.content.len() as u64).sum()
    }

    /// The sha256 over its files: for each in path order, the path's length and bytes, then
    /// the content's length and bytes (lengths as 8 big-endian bytes).
    pub fn sha256(&self) -> String {
        let mut hash = Sha256::new();
        for f in &self.files {
            hash.update((f.path.len() as u64).to_be_bytes());
            hash.update(f.path.as_bytes());
            hash.update((f.content.len() as u64).to_be_bytes());
            hash.update(f.content.as_bytes());
        }
        hash.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }

    /// What a task records of it: names, paths and hashes, never text.
    pub fn record(&self) -> SkillRecord {
        SkillRecord {
            name: self.name.clone(),
            dir: self.dir(),
            sha256: self.sha256(),
            files: u32::try_from(self.files.len()).unwrap_or(u32::MAX),
            bytes: self.bytes(),
            source: self.source,
        }
    }
}

/// Checks one package and returns it ready to stage (files sorted by path).
///
/// Errors: `INVALID_INPUT` for a bad name, too many resources, a NUL in a text;
/// `UNSAFE_PATH` for a resource path that is absolute, has `..`, a device name, a backslash,
/// a case alias of another file (or of `SKILL.md`), or is both a file and a directory;
/// `INPUT_SECRET_DETECTED` for text that looks like a credential (its kind only is named).
pub fn check_package(package: &SkillPackage, source: SkillSource) -> Result<StagedSkill, Error> {
    check_name(&package.name)?;
    let name = &package.name;
    if package.resources.len() > MAX_RESOURCES {
        return Err(Error::invalid_input(format!(
            "skill {name:?} has {} resources; the limit is {MAX_RESOURCES}",
            package.resources.len()
        )));
    }
    let mut files = Vec::with_capacity(package.resources.len() + 1);
    files.push(SkillFile {
        path: SKILL_FILE.to_string(),
        content: package.content.clone(),
    });
    for r in &package.resources {
        if let Some(why) = resource_problem(&r.path) {
            return Err(Error::new(
                ErrorCode::UnsafePath,
                format!("skill {name:?}: the resource path {:?} {why}", r.path),
            ));
        }
        files.push(SkillFile {
            path: r.path.clone(),
            content: r.content.clone(),
        });
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    check_layout(name, &files)?;
    for f in &files {
        if f.content.contains('\0') {
            return Err(Error::invalid_input(format!(
                "skill {name:?}: {} holds a NUL; skills are text",
                f.path
            )));
        }
        if let Some(kind) = legate_credentials::scan_content(f.content.as_bytes()) {
            return Err(Error::new(
                ErrorCode::InputSecretDetected,
                format!(
                    "skill {name:?}: {} looks like it holds a credential ({kind}); skills are copied to the agent, so leave secrets out",
                    f.path
                ),
            ));
        }
    }
    Ok(StagedSkill {
        name: name.clone(),
        source,
        files,
    })
}

/// The set a task stages: `bundled` first, then `client`, one skill per directory.
///
/// A client skill whose directory (its lowercase name) is already in the set is dropped when
/// its files are the same, and is `SKILL_CONFLICT` otherwise. More than [`MAX_SKILLS`] skills
/// or [`MAX_TOTAL_BYTES`] of text in all is `INVALID_INPUT`.
pub fn skill_set(
    bundled: Vec<StagedSkill>,
    client: Vec<StagedSkill>,
) -> Result<Vec<StagedSkill>, Error> {
    let mut by_dir: BTreeMap<String, usize> = BTreeMap::new();
    let mut out: Vec<StagedSkill> = Vec::new();
    for skill in bundled.into_iter().chain(client) {
        let dir = skill.dir();
        if let Some(&i) = by_dir.get(&dir) {
            let kept = &out[i];
            if kept.files == skill.files {
                tracing::debug!(skill = %skill.name, "a skill sent twice with the same files is staged once");
                continue;
            }
            return Err(Error::new(
                ErrorCode::SkillConflict,
                format!(
                    "skill {:?} ({}) has other files than the {} skill {:?} staged in {dir}; rename one of them",
                    skill.name,
                    skill.source.as_str(),
                    kept.source.as_str(),
                    kept.name
                ),
            ));
        }
        by_dir.insert(dir, out.len());
        out.push(skill);
    }
    if out.len() > MAX_SKILLS {
        return Err(Error::invalid_input(format!(
            "{} skills would be staged (bundled ones included); the limit is {MAX_SKILLS}",
            out.len()
        )));
    }
    let total: u64 = out.iter().map(StagedSkill::bytes).sum();
    if total > MAX_TOTAL_BYTES {
        return Err(Error::invalid_input(format!(
            "the skills hold {total} bytes of text (bundled ones included); the limit is {MAX_TOTAL_BYTES}"
        )));
    }
    Ok(out)
}

/// `INVALID_INPUT` unless `name` is 1 to [`MAX_NAME_LEN`] ASCII letters, digits, `.`, `_`
/// or `-`, starting with a letter or digit, not ending with `.`, and not a device name.
pub fn check_name(name: &str) -> Result<(), Error> {
    let bad = |why: &str| {
        Err(Error::invalid_input(format!(
            "the skill name {name:?} {why}; use 1 to {MAX_NAME_LEN} ASCII letters, digits, '.', '_' or '-', starting with a letter or digit"
        )))
    };
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return bad("has the wrong length");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        return bad("holds a character other than those allowed");
    }
    if !name.as_bytes()[0].is_ascii_alphanumeric() {
        return bad("does not start with a letter or digit");
    }
    if name.ends_with('.') {
        return bad("ends with '.'");
    }
    if is_device_name(name) {
        return bad("is a device name");
    }
    Ok(())
}

/// Why `path` cannot be a resource's path, if it cannot: [`path_problem`]'s reasons, then
/// device names, characters some file systems refuse, trailing dots or spaces, depth and
/// length.
pub fn resource_problem(path: &str) -> Option<&'static str> {
    if let Some(why) = path_problem(path) {
        return Some(why);
    }
    if path.len() > MAX_RESOURCE_PATH {
        return Some("is too long");
    }
    let parts: Vec<&str> = path.split('/').collect();
    if parts.len() > MAX_DEPTH {
        return Some("is too deep");
    }
    for part in parts {
        if is_device_name(part) {
            return Some("names a device");
        }
        if part.contains(['<', '>', ':', '"', '|', '?', '*']) {
            return Some("holds a character some file systems refuse");
        }
        if part.ends_with('.') || part.ends_with(' ') {
            return Some("has a component ending with a dot or a space");
        }
    }
    None
}

/// Whether `component` is a DOS device name (`CON`, `NUL`, `COM1`, …), with any extension,
/// in any letter case.
fn is_device_name(component: &str) -> bool {
    let stem = component.split('.').next().unwrap_or(component).trim_end();
    let upper = stem.to_ascii_uppercase();
    matches!(
        upper.as_str(),
        "CON" | "PRN" | "AUX" | "NUL" | "CONIN$" | "CONOUT$"
    ) || ((upper.starts_with("COM") || upper.starts_with("LPT"))
        && upper.len() == 4
        && upper.as_bytes()[3].is_ascii_digit())
}

/// Refuses two files whose paths differ only in letter case (`SKILL.md` included) and a path
/// that is both a file and a directory: on a case-insensitive file system, or once written,
/// one would replace the other.
fn check_layout(name: &str, files: &[SkillFile]) -> Result<(), Error> {
    let mut seen: BTreeMap<String, &str> = BTreeMap::new();
    for f in files {
        if let Some(other) = seen.insert(f.path.to_lowercase(), &f.path) {
            return Err(Error::new(
                ErrorCode::UnsafePath,
                format!(
                    "skill {name:?}: {:?} and {other:?} are the same file where letter case does not count",
                    f.path
                ),
            ));
        }
    }
    for f in files {
        let lower = f.path.to_lowercase();
        let mut prefix = String::new();
        for part in lower.split('/') {
            if !prefix.is_empty() && seen.contains_key(&prefix) {
                return Err(Error::new(
                    ErrorCode::UnsafePath,
                    format!(
                        "skill {name:?}: {:?} is a file and a directory on the way to {:?}",
                        seen[&prefix], f.path
                    ),
                ));
            }
            if !prefix.is_empty() {
                prefix.push('/');
            }
            prefix.push_str(part);
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
