//! Reading: the lines of every log file under a directory, oldest first ([`read`]), or as
//! they are written ([`Follow`]), optionally only those of one task.
//!
//! A line belongs to a task when one of its fields or its spans' fields named `task`,
//! `task_id` or `taskId` starts with the id given (a prefix, as the CLI takes ids). Lines
//! that are not JSON are kept as they are, never matched to a task.

use crate::parse_name;
use serde_json::Value;
use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// One log line and the process kind whose file held it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// `serve`, `mcp`, `ui`, `cli`.
    pub kind: String,
    /// The line as written (JSON, already redacted).
    pub text: String,
}

impl Line {
    /// Its `timestamp` field (empty when it has none), for ordering.
    fn timestamp(&self) -> String {
        serde_json::from_str::<Value>(&self.text)
            .ok()
            .and_then(|v| {
                v.get("timestamp")
                    .and_then(Value::as_str)
                    .map(str::to_string)
            })
            .unwrap_or_default()
    }

    /// Whether it is about task `id` (a prefix).
    pub fn is_about(&self, id: &str) -> bool {
        serde_json::from_str::<Value>(&self.text).is_ok_and(|v| mentions(&v, id))
    }
}

fn mentions(v: &Value, id: &str) -> bool {
    match v {
        Value::Object(map) => map.iter().any(|(k, v)| {
            (matches!(k.as_str(), "task" | "task_id" | "taskId")
                && v.as_str()
                    .is_some_and(|s| !id.is_empty() && s.starts_with(id)))
                || mentions(v, id)
        }),
        Value::Array(items) => items.iter().any(|v| mentions(v, id)),
        _ => false,
    }
}

/// The log files under `dir`: per kind, rotated ones oldest first, then the current one.
fn files(dir: &Path) -> Vec<(String, PathBuf)> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<(String, u64, PathBuf)> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let (kind, stamp) = parse_name(&name)?;
            Some((kind.to_string(), stamp.unwrap_or(u64::MAX), e.path()))
        })
        .collect();
    found.sort();
    found.into_iter().map(|(k, _, p)| (k, p)).collect()
}

/// Every line under `dir` (only task `task`'s when given), ordered by time.
pub fn read(dir: &Path, task: Option<&str>) -> io::Result<Vec<Line>> {
    let mut lines = Vec::new();
    for (kind, path) in files(dir) {
        let Ok(file) = File::open(&path) else {
            continue;
        };
        for text in BufReader::new(file).lines() {
            let line = Line {
                kind: kind.clone(),
                text: text?,
            };
            if task.is_none_or(|t| line.is_about(t)) {
                lines.push(line);
            }
        }
    }
    lines.sort_by_cached_key(Line::timestamp);
    Ok(lines)
}

/// New lines of the current files as they are written, from where they end now.
#[derive(Debug)]
pub struct Follow {
    dir: PathBuf,
    task: Option<String>,
    // Per current file: its inode and how far it was read.
    read: HashMap<PathBuf, (u64, u64)>,
}

impl Follow {
    /// Follows `dir` from its files' current ends (only task `task`'s lines when given).
    pub fn new(dir: &Path, task: Option<&str>) -> Self {
        let mut follow = Self {
            dir: dir.to_path_buf(),
            task: task.map(str::to_string),
            read: HashMap::new(),
        };
        for (_, path) in follow.current() {
            if let Ok(meta) = fs::metadata(&path) {
                follow.read.insert(path, (meta.ino(), meta.len()));
            }
        }
        follow
    }

    fn current(&self) -> Vec<(String, PathBuf)> {
        files(&self.dir)
            .into_iter()
            .filter(|(kind, p)| {
                p.file_name().and_then(|n| n.to_str()) == Some(&format!("{kind}.log"))
            })
            .collect()
    }

    /// The whole lines written since the last call (a file rotated meanwhile is read from
    /// its start).
    pub fn poll(&mut self) -> Vec<Line> {
        let mut out = Vec::new();
        for (kind, path) in self.current() {
            let Ok(mut file) = File::open(&path) else {
                continue;
            };
            let Ok(meta) = file.metadata() else { continue };
            let (ino, mut offset) = self.read.get(&path).copied().unwrap_or((meta.ino(), 0));
            if ino != meta.ino() || meta.len() < offset {
                offset = 0;
            }
            let mut bytes = Vec::new();
            if file.seek(SeekFrom::Start(offset)).is_err() || file.read_to_end(&mut bytes).is_err()
            {
                continue;
            }
            // Only whole lines: a line being written is read on the next poll.
            let whole = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
            for text in String::from_utf8_lossy(&bytes[..whole]).lines() {
                let line = Line {
                    kind: kind.clone(),
                    text: text.to_string(),
                };
                if self.task.as_deref().is_none_or(|t| line.is_about(t)) {
                    out.push(line);
                }
            }
            self.read.insert(path, (meta.ino(), offset + whole as u64));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_tasks_lines_are_found_in_fields_and_spans_by_prefix_in_time_order() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(
            dir.path().join("cli.log"),
            "{\"timestamp\":\"2026-01-01T00:00:02Z\",\"fields\":{\"task\":\"abc123\"}}\nnot json\n",
        )
        .unwrap();
        fs::write(
            dir.path().join("serve.5.log"),
            "{\"timestamp\":\"2026-01-01T00:00:01Z\",\"spans\":[{\"task_id\":\"abc999\"}]}\n{\"timestamp\":\"2026-01-01T00:00:03Z\",\"fields\":{\"task\":\"zzz\"}}\n",
        )
        .unwrap();
        let all = read(dir.path(), None).unwrap();
        assert_eq!(all.len(), 4);
        let mine = read(dir.path(), Some("abc")).unwrap();
        assert_eq!(mine.len(), 2);
        assert_eq!(mine[0].kind, "serve");
        assert_eq!(mine[1].kind, "cli");
        assert!(read(dir.path(), Some("")).unwrap().is_empty());
    }

    #[test]
    fn following_reads_whole_new_lines_and_starts_over_after_a_rotation() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("cli.log");
        fs::write(&log, "{\"old\":1}\n").unwrap();
        let mut follow = Follow::new(dir.path(), None);
        assert!(follow.poll().is_empty());
        let mut f = fs::OpenOptions::new().append(true).open(&log).unwrap();
        std::io::Write::write_all(&mut f, b"{\"new\":1}\n{\"half\":").unwrap();
        let got = follow.poll();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].text, "{\"new\":1}");
        fs::rename(&log, dir.path().join("cli.7.log")).unwrap();
        fs::write(&log, "{\"after\":1}\n").unwrap();
        let got = follow.poll();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].text, "{\"after\":1}");
    }
}
