//! Skill packs: Legate's own (the repository's `skills/` directory, embedded in the binary)
//! or a configured directory of packs in the same format, each verified against its
//! `manifest.json` before every new task.
//!
//! A pack is a directory named after the skill, holding `manifest.json` and the skill's files
//! (`SKILL.md` and resources). The manifest names the pack and lists every other file with
//! its size and sha256:
//!
//! ```json
//! {"name": "legate-code-care", "files": [{"path": "SKILL.md", "size": 1234, "sha256": "…"}]}
//! ```
//!
//! A file the manifest lists that is absent (or an absent manifest or directory) is
//! `SKILL_PACK_MISSING`; a size or hash that differs, a file it does not list, a link, a
//! non-text file or a manifest that does not parse is `SKILL_PACK_INVALID`. Nothing is ever
//! downloaded or repaired: the remedy is reinstalling Legate, or fixing the directory.
//! It must never follow a link in a pack directory or read a file larger than the skills'
//! whole budget.

use super::{MAX_RESOURCES, MAX_TOTAL_BYTES, SKILL_FILE, StagedSkill, check_package};
use legate_core::{Error, ErrorCode, SkillPackage, SkillResource, SkillSource};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// The manifest's file name in each pack.
pub const MANIFEST: &str = "manifest.json";

/// A pack's `manifest.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// The skill's name: the pack directory's name.
    pub name: String,
    /// Every file of the pack but the manifest.
    pub files: Vec<ManifestFile>,
}

/// One file a manifest lists.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestFile {
    /// Relative to the pack's directory.
    pub path: String,
    /// Its size in bytes.
    pub size: u64,
    /// Its sha256, lower-case hex.
    pub sha256: String,
}

/// The packs Legate ships, by name.
pub const BUNDLED_PACKS: &[&str] = &["legate-code-care", "legate-security-care"];

/// One embedded pack: its name, manifest and files as the repository's `skills/` holds them.
struct Embedded {
    name: &'static str,
    manifest: &'static [u8],
    files: &'static [(&'static str, &'static [u8])],
}

macro_rules! pack_file {
    ($pack:literal, $path:literal) => {
        (
            $path,
            include_bytes!(concat!("../../../../skills/", $pack, "/", $path)).as_slice(),
        )
    };
}

static EMBEDDED: &[Embedded] = &[
    Embedded {
        name: "legate-code-care",
        manifest: include_bytes!("../../../../skills/legate-code-care/manifest.json"),
        files: &[pack_file!("legate-code-care", "SKILL.md")],
    },
    Embedded {
        name: "legate-security-care",
        manifest: include_bytes!("../../../../skills/legate-security-care/manifest.json"),
        files: &[
            pack_file!("legate-security-care", "SKILL.md"),
            pack_file!("legate-security-care", "references/checklist.md"),
        ],
    },
];

/// Legate's own packs, verified against their manifests (see the module docs).
pub fn bundled_packs() -> Result<Vec<StagedSkill>, Error> {
    EMBEDDED
        .iter()
        .map(|p| {
            let files = p
                .files
                .iter()
                .map(|(path, bytes)| ((*path).to_string(), bytes.to_vec()))
                .collect();
            verify(p.name, Some(p.manifest), files)
        })
        .collect()
}

/// The packs in `dir` (one subdirectory per pack, sorted by name), verified against their
/// manifests. `SKILL_PACK_MISSING` when `dir` is absent or holds no pack.
pub fn load_packs(dir: &Path) -> Result<Vec<StagedSkill>, Error> {
    let missing = |why: String| Error::new(ErrorCode::SkillPackMissing, why);
    let invalid = |why: String| Error::new(ErrorCode::SkillPackInvalid, why);
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(invalid(format!(
                "the skill pack directory {} is not a directory",
                dir.display()
            )));
        }
        Err(e) => {
            return Err(missing(format!(
                "the skill pack directory {} cannot be read: {e}",
                dir.display()
            )));
        }
    }
    let mut names = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(|e| {
        Error::caused_by(
            ErrorCode::SkillPackMissing,
            format!("{} cannot be listed", dir.display()),
            e,
        )
    })?;
    for entry in entries {
        let entry = entry.map_err(|e| {
            Error::caused_by(
                ErrorCode::SkillPackMissing,
                format!("{} cannot be listed", dir.display()),
                e,
            )
        })?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let kind = entry.file_type().map_err(|e| {
            Error::caused_by(
                ErrorCode::SkillPackInvalid,
                format!("{name} cannot be measured"),
                e,
            )
        })?;
        if !kind.is_dir() {
            return Err(invalid(format!(
                "{name} in {} is not a pack directory (a link or a file)",
                dir.display()
            )));
        }
        names.push(name);
    }
    if names.is_empty() {
        return Err(missing(format!("{} holds no skill pack", dir.display())));
    }
    if names.len() > super::MAX_SKILLS {
        return Err(invalid(format!(
            "{} holds {} packs; at most {} skills are staged",
            dir.display(),
            names.len(),
            super::MAX_SKILLS
        )));
    }
    names.sort();
    names
        .into_iter()
        .map(|name| {
            let (manifest, files) = read_pack(&dir.join(&name), &name)?;
            verify(&name, manifest.as_deref(), files)
        })
        .collect()
}

/// The manifest (if present) and every other file of the pack at `dir`, by relative path.
type PackFiles = (Option<Vec<u8>>, BTreeMap<String, Vec<u8>>);

fn read_pack(dir: &Path, name: &str) -> Result<PackFiles, Error> {
    let invalid = |why: String| Error::new(ErrorCode::SkillPackInvalid, why);
    let root = legate_beneath::Root::open(dir).map_err(|e| {
        Error::caused_by(
            ErrorCode::SkillPackInvalid,
            format!("the pack {name} cannot be opened"),
            e,
        )
    })?;
    let mut found = Vec::new();
    walk(dir, "", name, &mut found)?;
    let mut manifest = None;
    let mut files = BTreeMap::new();
    let mut total = 0u64;
    for rel in found {
        let bytes = root
            .read(Path::new(&rel), MAX_TOTAL_BYTES + 1)
            .map_err(|e| {
                Error::caused_by(
                    ErrorCode::SkillPackInvalid,
                    format!("{name}/{rel} cannot be read"),
                    e,
                )
            })?;
        total = total.saturating_add(bytes.len() as u64);
        if total > MAX_TOTAL_BYTES {
            return Err(invalid(format!(
                "the pack {name} holds more than {MAX_TOTAL_BYTES} bytes"
            )));
        }
        if rel == MANIFEST {
            manifest = Some(bytes);
        } else {
            files.insert(rel, bytes);
        }
    }
    Ok((manifest, files))
}

/// Lists the regular files under `dir` (relative paths joined with `/`); a link or anything
/// but a file or directory is `SKILL_PACK_INVALID`, and so are more files than a skill may
/// have.
fn walk(dir: &Path, prefix: &str, pack: &str, out: &mut Vec<String>) -> Result<(), Error> {
    let invalid = |why: String| Error::new(ErrorCode::SkillPackInvalid, why);
    let here = dir.join(prefix);
    let entries = std::fs::read_dir(&here).map_err(|e| {
        Error::caused_by(
            ErrorCode::SkillPackInvalid,
            format!("{pack}/{prefix} cannot be listed"),
            e,
        )
    })?;
    for entry in entries {
        let entry = entry.map_err(|e| {
            Error::caused_by(
                ErrorCode::SkillPackInvalid,
                format!("{pack}/{prefix} cannot be listed"),
                e,
            )
        })?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            return Err(invalid(format!(
                "{pack}/{prefix} holds a name that is not UTF-8"
            )));
        };
        let rel = if prefix.is_empty() {
            name.to_string()
        } else {
            format!("{prefix}/{name}")
        };
        let kind = entry.file_type().map_err(|e| {
            Error::caused_by(
                ErrorCode::SkillPackInvalid,
                format!("{pack}/{rel} cannot be measured"),
                e,
            )
        })?;
        if kind.is_dir() {
            walk(dir, &rel, pack, out)?;
        } else if kind.is_file() {
            out.push(rel);
            if out.len() > MAX_RESOURCES + 2 {
                return Err(invalid(format!("the pack {pack} holds too many files")));
            }
        } else {
            return Err(invalid(format!(
                "{pack}/{rel} is a link or a special file; packs hold regular files only"
            )));
        }
    }
    Ok(())
}

/// Checks `files` (every file of pack `name` but its manifest) against `manifest`, and
/// returns the skill.
fn verify(
    name: &str,
    manifest: Option<&[u8]>,
    mut files: BTreeMap<String, Vec<u8>>,
) -> Result<StagedSkill, Error> {
    let missing = |why: String| Error::new(ErrorCode::SkillPackMissing, why);
    let invalid = |why: String| Error::new(ErrorCode::SkillPackInvalid, why);
    let manifest = manifest.ok_or_else(|| missing(format!("the pack {name} has no {MANIFEST}")))?;
    let manifest: Manifest = serde_json::from_slice(manifest).map_err(|e| {
        Error::caused_by(
            ErrorCode::SkillPackInvalid,
            format!("the {MANIFEST} of the pack {name} does not parse"),
            e,
        )
    })?;
    if manifest.name != name {
        return Err(invalid(format!(
            "the pack in {name}/ names itself {:?}",
            manifest.name
        )));
    }
    let mut content = None;
    let mut resources = Vec::new();
    for listed in &manifest.files {
        let bytes = files
            .remove(&listed.path)
            .ok_or_else(|| missing(format!("{name}/{} is missing", listed.path)))?;
        if bytes.len() as u64 != listed.size || crate::sha256_hex(&bytes) != listed.sha256 {
            return Err(invalid(format!(
                "{name}/{} is not the file its manifest lists (size or sha256 differs)",
                listed.path
            )));
        }
        let text = String::from_utf8(bytes)
            .map_err(|_| invalid(format!("{name}/{} is not UTF-8 text", listed.path)))?;
        if listed.path == SKILL_FILE {
            content = Some(text);
        } else {
            resources.push(SkillResource {
                path: listed.path.clone(),
                content: text,
            });
        }
    }
    if let Some(extra) = files.keys().next() {
        return Err(invalid(format!(
            "{name}/{extra} is not listed in the pack's manifest"
        )));
    }
    let content =
        content.ok_or_else(|| invalid(format!("the pack {name} lists no {SKILL_FILE}")))?;
    let package = SkillPackage {
        name: name.to_string(),
        content,
        resources,
    };
    // The check's sentence is folded in without its code (SKILL_INVALID would contradict
    // SKILL_PACK_INVALID); the error is kept as the source too.
    check_package(&package, SkillSource::Bundled).map_err(|e| {
        Error::caused_by(
            ErrorCode::SkillPackInvalid,
            format!("the pack {name} is not a valid skill: {}", e.message),
            e,
        )
    })
}
