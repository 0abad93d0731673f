//! `!flip`: the symlink race against Legate's file service, played by a hostile agent.
//!
//! A thread flips two names inside the agent's working directory while the directive keeps
//! sending `fs/write_text_file` and `fs/read_text_file` requests about them:
//!
//! - [`FLIP_FILE`] cycles through a regular file of the agent's own ([`INSIDE_CONTENT`]), a
//!   symlink to the outside file, and nothing (each swap a `rename` over the name, so it is
//!   never missing when it should be a file or a link);
//! - [`FLIP_DIR`] cycles through a real directory, a symlink to the outside directory, and
//!   nothing.
//!
//! Each state is held for a few hundred microseconds (the attacker's pace; nothing waits on
//! it). Writes carry [`WRITTEN_CONTENT`]. Every read whose content is not the agent's own is
//! quoted in the report, so the test sees whatever Legate let through. The names are removed
//! at the end. This module must never run outside the scripted agent binary.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use agent_client_protocol::v1::schema::{ReadTextFileRequest, WriteTextFileRequest};
use legate_revisor::DirectiveContext;

/// The file name flipped inside the working directory.
pub const FLIP_FILE: &str = "flip.txt";
/// The directory name flipped inside the working directory.
pub const FLIP_DIR: &str = "flipdir";
/// What the agent's own regular file holds.
pub const INSIDE_CONTENT: &str = "the agent's own file\n";
/// What every write request carries.
pub const WRITTEN_CONTENT: &str = "written through Legate by !flip\n";
/// How long each state is held unless the directive says otherwise.
const DEFAULT_HOLD_US: u64 = 300;
/// A ceiling on rounds of requests, whatever the flipper does.
const MAX_ROUNDS: usize = 100_000;

/// What a `!flip` run saw.
#[derive(Debug, Default)]
pub struct FlipReport {
    /// States the flipper went through.
    pub flips: usize,
    /// Write requests sent / answered with success.
    pub writes: (usize, usize),
    /// Read requests sent / answered with success.
    pub reads: (usize, usize),
    /// Contents read that were neither the agent's own nor what it wrote.
    pub foreign: Vec<String>,
    /// Errors of the flipper itself.
    pub flipper_errors: Vec<String>,
}

impl FlipReport {
    /// The one-paragraph report sent as a message chunk.
    #[must_use]
    pub fn text(&self) -> String {
        let mut text = format!(
            "flip: {} flips, writes {}/{} allowed, reads {}/{} allowed, {} foreign reads\n",
            self.flips,
            self.writes.1,
            self.writes.0,
            self.reads.1,
            self.reads.0,
            self.foreign.len()
        );
        for content in &self.foreign {
            text.push_str(&format!("foreign read: {content:?}\n"));
        }
        for error in &self.flipper_errors {
            text.push_str(&format!("flipper error: {error}\n"));
        }
        text
    }
}

/// Parses `N OUTSIDE_FILE OUTSIDE_DIR [HOLD_US]`.
pub fn parse(rest: &str) -> Result<(usize, PathBuf, PathBuf, u64), String> {
    let words: Vec<&str> = rest.split_whitespace().collect();
    let usage = || format!("!flip needs N OUTSIDE_FILE OUTSIDE_DIR [HOLD_US], not {rest:?}");
    let (Some(n), Some(file), Some(dir)) = (words.first(), words.get(1), words.get(2)) else {
        return Err(usage());
    };
    let n = n.parse::<usize>().map_err(|_| usage())?;
    let hold = match words.get(3) {
        Some(h) => h.parse::<u64>().map_err(|_| usage())?,
        None => DEFAULT_HOLD_US,
    };
    let (file, dir) = (PathBuf::from(file), PathBuf::from(dir));
    if !file.is_absolute() || !dir.is_absolute() {
        return Err(usage());
    }
    Ok((n, file, dir, hold))
}

fn remove_any(path: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// One state change of both names; `i` picks the state.
fn flip_once(cwd: &Path, i: usize, outside_file: &Path, outside_dir: &Path) -> std::io::Result<()> {
    let file = cwd.join(FLIP_FILE);
    let staged = cwd.join(".flip-staged");
    let dir = cwd.join(FLIP_DIR);
    match i % 3 {
        0 => {
            std::fs::write(&staged, INSIDE_CONTENT)?;
            std::fs::rename(&staged, &file)?;
            remove_any(&dir)?;
            std::fs::create_dir(&dir)?;
        }
        1 => {
            remove_any(&staged)?;
            std::os::unix::fs::symlink(outside_file, &staged)?;
            std::fs::rename(&staged, &file)?;
            remove_any(&dir)?;
            std::os::unix::fs::symlink(outside_dir, &dir)?;
        }
        _ => {
            remove_any(&file)?;
            remove_any(&dir)?;
        }
    }
    Ok(())
}

/// Runs the race and reports.
pub async fn run(
    context: &DirectiveContext,
    flips: usize,
    outside_file: PathBuf,
    outside_dir: PathBuf,
    hold_us: u64,
) -> FlipReport {
    let cwd = context.cwd().to_path_buf();
    let done = Arc::new(AtomicBool::new(false));
    let flipper = {
        let (cwd, done) = (cwd.clone(), done.clone());
        std::thread::spawn(move || {
            let mut errors = Vec::new();
            for i in 0..flips {
                if let Err(e) = flip_once(&cwd, i, &outside_file, &outside_dir) {
                    errors.push(format!("flip {i}: {e}"));
                }
                // The attacker's pace: hold each state a moment.
                std::thread::sleep(Duration::from_micros(hold_us));
            }
            done.store(true, Ordering::SeqCst);
            errors
        })
    };

    let mut report = FlipReport {
        flips,
        ..FlipReport::default()
    };
    let cx = context.connection().clone();
    let session = context.session_id().clone();
    let mut round = 0usize;
    while !done.load(Ordering::SeqCst) && round < MAX_ROUNDS {
        let write_file = cx
            .send_request(WriteTextFileRequest::new(
                session.clone(),
                cwd.join(FLIP_FILE),
                WRITTEN_CONTENT,
            ))
            .block_task();
        let write_dir = cx
            .send_request(WriteTextFileRequest::new(
                session.clone(),
                cwd.join(FLIP_DIR).join(format!("w-{round}.txt")),
                WRITTEN_CONTENT,
            ))
            .block_task();
        let read_file = cx
            .send_request(ReadTextFileRequest::new(
                session.clone(),
                cwd.join(FLIP_FILE),
            ))
            .block_task();
        let (a, b, c) = futures::join!(write_file, write_dir, read_file);
        report.writes.0 += 2;
        report.writes.1 += usize::from(a.is_ok()) + usize::from(b.is_ok());
        report.reads.0 += 1;
        if let Ok(read) = c {
            report.reads.1 += 1;
            if read.content != INSIDE_CONTENT && read.content != WRITTEN_CONTENT {
                report.foreign.push(read.content);
            }
        }
        round += 1;
    }
    report.flipper_errors = flipper
        .join()
        .unwrap_or_else(|_| vec!["the flipper panicked".into()]);
    for name in [FLIP_FILE, FLIP_DIR, ".flip-staged"] {
        if let Err(e) = remove_any(&cwd.join(name)) {
            report
                .flipper_errors
                .push(format!("cleanup of {name}: {e}"));
        }
    }
    report
}
