//! Legate's workspaces: the directories agents work in, and the review pipeline of copies.
//!
//! This crate owns making and checking those directories: a **sandbox** is an empty directory
//! Legate creates itself under `$LEGATE_HOME/sandboxes/` (so it is `owned`), a **shared**
//! directory is one the user named (never `owned`), and a **copy** is a copy of a git
//! project's eligible files under `$LEGATE_HOME/copies/<task>/` with a private baseline under
//! `$LEGATE_HOME/baselines/<task>/`. Each comes back as a [`legate_core::Boundary`] whose
//! root is canonical, ready for the supervisor's containment.
//!
//! For copies it owns making them and their git side, one concept per module: `select`
//! (what git would copy, narrowed by `include` paths), `secrets` (the preflight: configured
//! exclusions and exceptions over the `legate_credentials` detector), `scan_cache` (the
//! preflight's verdicts kept per project, so that an unchanged file is not read again),
//! `file_state` (a file's stat identity, the one test of "unchanged" the copy, the cache and
//! integration share), `copy` (one file's copy
//! in `copy_file`; clones where the file system can, in `reflink`; on btrfs the whole copy
//! and its baseline as snapshots of the project's base, in `base` over `subvolume`), `read_inside` (a file read
//! beneath an untrusted directory), `baseline` (its
//! index written by `staging` in the `git_index` format, its commit by `git_objects`),
//! `changes` (the copy's change against its baseline as data, and the tree its current state
//! stages to, every file whose stat data changed to the nanosecond re-read by git: `smudge`),
//! `line_endings`, `cleanup`, `handoff` (a copy's current files handed to
//! another role, on the original baseline), `skills` (skill packages staged under
//! `.agents/skills/`, never part of a patch, and the bundled packs with their manifests),
//! `stamp` (proving with `lstat` alone that a copy did not change since it was hashed), and
//! `transfer` (a copy's files sent to a remote Legate, a copy made from files received, and a
//! remote's patch applied to the local copy, checked against the remote's manifest), and `disk`
//! (a bounded walk saying how much disk the copies and baselines take, for metrics and
//! `legate show`).
//!
//! What is done with a copy afterwards lives above it: reviewing it (preview, patch reads,
//! verification) in `legate-review`, integrating it into the project (with its crash
//! journal) in `legate-integration`, and running test commands in it in `legate-testrun`.
//!
//! It must never infer `owned` from a path, build a directory name from caller text, adopt an
//! existing directory or symlink as one it made, or place a workspace under the system temp
//! tree or inside a project. It decides no permissions (that is `legate-supervisor`) and keeps
//! no records (the engine persists which task owns which copy, its reviews and evidence).

mod agent_files;
mod base;
mod base_ahead;
mod base_snapshots;
mod base_upkeep;
mod baseline;
mod changes;
mod cleanup;
mod copy;
mod copy_file;
pub mod disk;
mod expansion;
mod file_state;
mod fresh;
mod git;
mod git_check;
mod git_index;
mod git_objects;
mod git_run;
mod handoff;
mod hidden;
mod include;
mod limits;
mod line_endings;
mod measure;
mod read_inside;
mod reflink;
mod returned;
mod sandbox;
mod scan_cache;
mod secrets;
mod select;
mod shared;
mod skills;
mod smudge;
mod source_ignores;
mod staged_size;
mod staging;
mod stamp;
mod subvolume;
mod transfer;

pub use agent_files::is_agent_file;
pub use base::{base_dir, make_copy_with_base};
pub use base_ahead::{CopyPlaces, select_and_copy};
pub use base_upkeep::prune as prune_bases;
pub use baseline::Baseline;
pub use changes::{
    ChangeStatus, FileChange, PATCH_DIFF, PatchSummary, Preview, parse_raw, stage_tree,
};
pub use cleanup::{entries, remove_owned_dir};
pub use copy::{
    CopyReport, make_copy, make_copy_cached, make_copy_with_baseline,
    make_copy_with_baseline_cached,
};
pub use file_state::FileState;
pub use fresh::{FreshTree, fresh_tree};
pub use git::{Git, split_z};
pub use git_check::{GitPlace, MIN_GIT_VERSION, git_place, require_git_version};
pub use git_run::{CLEANUP_MARKER, GitBounds, git_bounds, set_git_bounds};
pub use handoff::{START_REF, copy_selection, make_handoff_copy, tree_sha256};
pub use hidden::dot_git_entries;
pub use include::{check_path, covers, path_problem, validate_include_paths};
pub use limits::CopyLimits;
pub use line_endings::{BOM, Checked, check as check_line_endings};
pub use read_inside::{read_inside, read_inside_with_metadata};
pub use returned::returned_from_files;
pub use sandbox::{WARM_PREFIX, is_context_sandbox, label, sandbox, warm_runner, warm_sandbox};
pub use scan_cache::{
    MAX_ENTRIES as SCAN_CACHE_MAX_ENTRIES, RACY_MARGIN, ScanCache, prune as prune_scan_verdicts,
};
pub use secrets::{BlockReason, BlockedFile, SecretPatterns};
pub use select::{
    ProjectFile, ProjectFiles, SelectedFile, Selection, list_project_files, project_root, select,
};
pub use shared::shared;
pub use skills::{
    BUNDLED_PACKS, MANIFEST, MAX_NAME_LEN, MAX_RESOURCES, MAX_SKILLS, MAX_TOTAL_BYTES, Manifest,
    ManifestFile, SKILL_FILE, STAGING_DIR, SkillFile, StagedSkill, bundled_packs, check_name,
    check_package, is_staging_path, load_packs, resource_problem, skill_set, stage_skills,
};
pub use source_ignores::ignored_in_source;
pub use staged_size::stage_tree_within;
pub use stamp::{Unstamped, copy_stamp};
pub use transfer::{
    FileBytes, apply_returned, baseline_files, baseline_of_copy, make_copy_from_files, post_state,
    read_copy,
};

use legate_core::{Error, ErrorCode};
use std::path::Path;

/// Lower-case hex sha256 of `bytes`: the one definition, in core, shared with the
/// copy-workspace extension's manifests.
pub use legate_core::remote::sha256_hex;

/// Makes `dir` (and missing parents) with mode 0700 unless it exists; it must then be a
/// directory (a symlink to one is refused).
pub fn private_dir(dir: &Path) -> Result<(), Error> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.file_type().is_dir() => Ok(()),
        Ok(_) => Err(Error::new(
            ErrorCode::InvalidWorkspace,
            format!("{} is not a plain directory", dir.display()),
        )),
        Err(_) => std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| {
                Error::caused_by(
                    ErrorCode::InvalidWorkspace,
                    format!("{} could not be created", dir.display()),
                    e,
                )
            }),
    }
}
