//! `legate caller-skill`: the skill that teaches a calling agent (Claude Code, Codex) to
//! delegate through Legate's MCP tools, printed or installed where that agent looks for
//! skills.
//!
//! The skill's text is `caller-skill/legate/SKILL.md`, compiled into the binary, so what is
//! installed is what this version's tools answer to (a test checks every tool and argument it
//! names against the served schemas). This module only writes that one file: it never
//! overwrites a different `SKILL.md` unless told to (`SKILL_CONFLICT`), never writes through a
//! symbolic link anywhere below a named project, nor at the skill's own directory or file
//! (`UNSAFE_PATH`: a cloned project could point `.claude` anywhere), and replaces the file
//! atomically (a temporary file
//! in the same directory, then a rename), so a `kill -9` leaves the old file or the new one.

use crate::fail;
use anyhow::{Context as _, Result};
use clap::{Args, Subcommand, ValueEnum};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The skill's text, as shipped with this binary.
pub const SKILL_MD: &str = include_str!("../caller-skill/legate/SKILL.md");

/// The skill's directory name (its frontmatter `name`).
const SKILL_NAME: &str = "legate";

/// `legate caller-skill …`.
#[derive(Debug, Args)]
pub struct CallerSkillFlags {
    #[command(subcommand)]
    command: CallerSkillCommand,
}

#[derive(Debug, Subcommand)]
enum CallerSkillCommand {
    /// Print the skill's SKILL.md.
    Print,
    /// Write the skill where the calling agent finds it and print the file's path.
    Install(InstallArgs),
}

#[derive(Debug, Args)]
struct InstallArgs {
    /// The calling agent that will read it.
    #[arg(long = "for", value_enum)]
    caller: Caller,
    /// Install into this project (its `.claude/skills/` or `.agents/skills/`) instead of the
    /// user's own skills.
    #[arg(long)]
    project: Option<PathBuf>,
    /// Replace a `SKILL.md` that differs from this version's (an older Legate's, or edited).
    #[arg(long)]
    force: bool,
}

/// A calling agent whose skill folder Legate knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Caller {
    /// Claude Code: `~/.claude/skills/` (`$CLAUDE_CONFIG_DIR/skills/`), or a project's
    /// `.claude/skills/`.
    ClaudeCode,
    /// Codex: `~/.agents/skills/`, or a project's `.agents/skills/`.
    Codex,
}

/// Runs `legate caller-skill`.
pub fn run(flags: CallerSkillFlags) -> Result<ExitCode> {
    match flags.command {
        CallerSkillCommand::Print => {
            out!("{}", SKILL_MD.trim_end())?;
        }
        CallerSkillCommand::Install(args) => {
            let (base, dir) = skills_dir(args.caller, args.project.as_deref())?;
            let (path, outcome) = install(&base, &dir, args.force)?;
            out!("{}", path.display())?;
            eprintln!("{outcome}; start a new session of the agent to load it");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The folder of skills `caller` reads, and the directory below which no link is followed: the
/// project's (`.claude/skills` or `.agents/skills` under it) when one is named, else the
/// user's own (whose `~/.claude` may well be a link a dotfiles manager made).
fn skills_dir(caller: Caller, project: Option<&Path>) -> Result<(PathBuf, PathBuf)> {
    let project_dir = match caller {
        Caller::ClaudeCode => ".claude",
        Caller::Codex => ".agents",
    };
    if let Some(project) = project {
        if !project.is_dir() {
            fail!(
                InvalidInput,
                "--project must be an existing directory ({} is not)",
                project.display()
            );
        }
        return Ok((
            project.to_path_buf(),
            project.join(project_dir).join("skills"),
        ));
    }
    if caller == Caller::ClaudeCode
        && let Some(dir) = std::env::var_os("CLAUDE_CONFIG_DIR").filter(|d| !d.is_empty())
    {
        let skills = PathBuf::from(dir).join("skills");
        return Ok((skills.clone(), skills));
    }
    let Some(home) = std::env::var_os("HOME").filter(|h| !h.is_empty()) else {
        fail!(
            InvalidInput,
            "HOME is not set: name the project to install into with --project"
        );
    };
    let skills = PathBuf::from(home).join(project_dir).join("skills");
    Ok((skills.clone(), skills))
}

/// Writes the skill under `skills` (`skills/legate/SKILL.md`) and says what changed; no
/// directory from `base` down, nor the file, may be a link.
fn install(base: &Path, skills: &Path, force: bool) -> Result<(PathBuf, &'static str)> {
    let dir = skills.join(SKILL_NAME);
    let file = dir.join("SKILL.md");
    let below = file
        .strip_prefix(base)
        .unwrap_or(Path::new("legate/SKILL.md"));
    let mut path = base.to_path_buf();
    for part in below.components() {
        path.push(part);
        if std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink()) {
            fail!(
                UnsafePath,
                "{} is a symbolic link; Legate writes its skill only into a real directory",
                path.display()
            );
        }
    }
    let outcome = match std::fs::read(&file) {
        Ok(found) if found == SKILL_MD.as_bytes() => return Ok((file, "already installed")),
        Ok(_) if !force => fail!(
            SkillConflict,
            "{} holds a different skill named legate; --force replaces it",
            file.display()
        ),
        Ok(_) => "replaced",
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => "installed",
        Err(e) => {
            return Err(e).with_context(|| format!("could not read {}", file.display()));
        }
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("could not create {}", dir.display()))?;
    let mut temp = tempfile::NamedTempFile::new_in(&dir)
        .with_context(|| format!("could not write into {}", dir.display()))?;
    temp.write_all(SKILL_MD.as_bytes())
        .and_then(|()| temp.as_file().sync_all())
        .with_context(|| format!("could not write into {}", dir.display()))?;
    temp.persist(&file)
        .with_context(|| format!("could not write {}", file.display()))?;
    Ok((file, outcome))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    /// The frontmatter Claude Code and Codex read: `name` (the directory's name, lower case
    /// and hyphens, at most 64 characters) and `description` (at most 1,024 characters).
    #[test]
    fn the_skill_has_the_frontmatter_both_callers_read() {
        let body = SKILL_MD.strip_prefix("---\n").expect("frontmatter first");
        let (front, rest) = body.split_once("\n---\n").expect("frontmatter closed");
        let field = |key: &str| {
            front
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{key}: ")))
                .unwrap_or_else(|| panic!("no {key}"))
        };
        assert_eq!(field("name"), SKILL_NAME);
        let description = field("description");
        assert!((20..=1024).contains(&description.chars().count()));
        assert!(!description.contains(['<', '>']));
        assert!(rest.trim_start().starts_with("# "));
    }

    #[test]
    fn installs_once_and_keeps_a_different_skill_unless_forced() {
        let home = tempfile::tempdir().unwrap();
        let skills = home.path().join("skills");
        let (file, outcome) = install(&skills, &skills, false).unwrap();
        assert_eq!(outcome, "installed");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), SKILL_MD);
        assert_eq!(
            install(&skills, &skills, false).unwrap().1,
            "already installed"
        );

        std::fs::write(&file, "my own legate skill").unwrap();
        let refused = install(&skills, &skills, false).unwrap_err();
        assert!(
            refused.to_string().starts_with("SKILL_CONFLICT"),
            "{refused}"
        );
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            "my own legate skill"
        );
        assert_eq!(install(&skills, &skills, true).unwrap().1, "replaced");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), SKILL_MD);
        // Nothing but the skill is left in its directory (no temporary file).
        assert_eq!(
            std::fs::read_dir(file.parent().unwrap()).unwrap().count(),
            1
        );
    }

    #[test]
    fn never_writes_through_a_link() {
        let home = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let skills = home.path().join("skills");
        std::fs::create_dir_all(&skills).unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), skills.join(SKILL_NAME)).unwrap();
        let refused = install(&skills, &skills, true).unwrap_err();
        assert!(refused.to_string().starts_with("UNSAFE_PATH"), "{refused}");
        assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);

        std::fs::remove_file(skills.join(SKILL_NAME)).unwrap();
        std::fs::create_dir(skills.join(SKILL_NAME)).unwrap();
        let target = elsewhere.path().join("target");
        std::fs::write(&target, "untouched").unwrap();
        std::os::unix::fs::symlink(&target, skills.join(SKILL_NAME).join("SKILL.md")).unwrap();
        let refused = install(&skills, &skills, true).unwrap_err();
        assert!(refused.to_string().starts_with("UNSAFE_PATH"), "{refused}");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "untouched");

        // A project whose `.claude` leads elsewhere.
        let project = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), project.path().join(".claude")).unwrap();
        let (base, skills) = skills_dir(Caller::ClaudeCode, Some(project.path())).unwrap();
        let refused = install(&base, &skills, true).unwrap_err();
        assert!(refused.to_string().starts_with("UNSAFE_PATH"), "{refused}");
        assert!(!elsewhere.path().join("skills").exists());
    }
}
