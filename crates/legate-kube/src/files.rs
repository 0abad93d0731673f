//! A workspace's files into a pod and back, as tar streams over `exec`.
//!
//! In: [`pack`] writes the files (regular files only, each with its mode) into a tar archive,
//! and [`ship_in`] runs `sh -c 'head -c N | tar -xf - -C /workspace'` in the pod (Kubernetes
//! before 1.30 cannot close an exec's stdin, so the archive's length ends it). Back:
//! [`ship_back`] runs `tar -cf - -C /workspace .` and reads at most the bound, and [`unpack`]
//! reads the archive as hostile input: regular files only (a link, a device, a FIFO or
//! anything in a `.git` directory is left out and named, as a local copy would never stage
//! it), relative UTF-8 paths without `..` (else `UNSAFE_PATH`), each path once ignoring case,
//! bounded in entries, files and bytes (`COPY_TOO_LARGE`). Both commands run in the pod, as the agent's user,
//! under the pod's confinement. The image must have `sh`, `head` and `tar`.
//!
//! This module never writes a local file: the workspace checks and applies what comes back.

use crate::WORKSPACE;
use crate::pod::{ExitReason, Pod, wait_for};
use legate_core::{Error, ErrorCode, Result};
use std::collections::HashSet;
use std::io::Read;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One file of a workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its relative path (`/`-separated).
    pub path: String,
    /// Its bytes.
    pub bytes: Vec<u8>,
    /// Whether it is executable.
    pub executable: bool,
}

/// `entries` as a tar archive.
pub fn pack(entries: &[Entry]) -> Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    for e in entries {
        let mut header = tar::Header::new_ustar();
        header.set_size(e.bytes.len() as u64);
        header.set_mode(if e.executable { 0o755 } else { 0o644 });
        header.set_entry_type(tar::EntryType::Regular);
        header.set_mtime(0);
        builder
            .append_data(&mut header, &e.path, e.bytes.as_slice())
            .map_err(|err| {
                Error::caused_by(
                    ErrorCode::Internal,
                    format!("{} could not be packed", e.path),
                    err,
                )
            })?;
    }
    builder
        .into_inner()
        .map_err(|e| Error::caused_by(ErrorCode::Internal, "the archive could not be finished", e))
}

/// What an archive from a pod holds: its regular files, and the paths of what was left out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Unpacked {
    /// The regular files, sorted by path.
    pub files: Vec<Entry>,
    /// Links, devices, FIFOs and anything inside a `.git` directory: never brought back (a
    /// local copy would not stage them either), named for a notice.
    pub skipped: Vec<String>,
}

/// The files of a tar archive that came back from a pod (see the module docs).
pub fn unpack(archive: &[u8], max_files: usize, max_bytes: u64) -> Result<Unpacked> {
    let mut reader = tar::Archive::new(archive);
    let entries = reader.entries().map_err(unreadable)?;
    let mut out = Unpacked::default();
    let mut seen = HashSet::new();
    let mut total = 0u64;
    let mut count = 0usize;
    for entry in entries {
        let mut entry = entry.map_err(unreadable)?;
        count += 1;
        if count > MAX_ENTRIES {
            return Err(too_large(max_files, max_bytes));
        }
        let raw = entry.path_bytes().into_owned();
        let path = clean_path(&raw)?;
        let kind = entry.header().entry_type();
        if kind.is_dir() {
            continue;
        }
        if path.is_empty() {
            return Err(unsafe_path(".", "a file without a name"));
        }
        if !seen.insert(path.to_lowercase()) {
            return Err(unsafe_path(
                &path,
                "it appears twice in the archive (ignoring case)",
            ));
        }
        let in_git = path.split('/').any(|c| c.eq_ignore_ascii_case(".git"));
        if in_git || !(kind.is_file() || kind == tar::EntryType::Continuous) {
            out.skipped.push(path);
            continue;
        }
        let size = entry.header().size().map_err(unreadable)?;
        total = total.saturating_add(size);
        if out.files.len() >= max_files || total > max_bytes {
            return Err(too_large(max_files, max_bytes));
        }
        let mode = entry.header().mode().map_err(unreadable)?;
        let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        entry
            .by_ref()
            .take(size)
            .read_to_end(&mut bytes)
            .map_err(unreadable)?;
        out.files.push(Entry {
            path,
            bytes,
            executable: mode & 0o111 != 0,
        });
    }
    out.files.sort_by(|a, b| a.path.cmp(&b.path));
    out.skipped.sort();
    Ok(out)
}

fn too_large(max_files: usize, max_bytes: u64) -> Error {
    Error::new(
        ErrorCode::CopyTooLarge,
        format!(
            "the pod's workspace holds more than {max_files} files, {max_bytes} bytes or {MAX_ENTRIES} entries"
        ),
    )
}

/// `./a/b` → `a/b`; refuses absolute paths, `..`, empty components and names that are not
/// UTF-8.
fn clean_path(raw: &[u8]) -> Result<String> {
    let text = std::str::from_utf8(raw)
        .map_err(|_| unsafe_path(&String::from_utf8_lossy(raw), "its name is not UTF-8"))?;
    if text.starts_with('/') {
        return Err(unsafe_path(text, "it is absolute"));
    }
    let mut parts = Vec::new();
    for part in text.split('/') {
        match part {
            "" | "." => {}
            ".." => return Err(unsafe_path(text, "it climbs out with `..`")),
            p => parts.push(p),
        }
    }
    Ok(parts.join("/"))
}

fn unsafe_path(path: &str, why: &str) -> Error {
    let shown: String = path.chars().take(200).collect();
    Error::new(ErrorCode::UnsafePath, format!("{shown}: {why}"))
}

fn unreadable(e: std::io::Error) -> Error {
    Error::caused_by(
        ErrorCode::UnsafePath,
        "the pod's workspace archive could not be read",
        e,
    )
}

/// The most entries (files, directories, links) an archive from a pod may hold, for the
/// bound on its framing.
pub const MAX_ENTRIES: usize = 20_000;

/// How long shipping a workspace in or back may take in all.
pub const SHIP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);

/// Writes `archive` (from [`pack`]) into the pod's workspace, within [`SHIP_TIMEOUT`].
pub async fn ship_in(pod: &Pod, archive: &[u8]) -> Result<()> {
    bounded(
        "unpacking the workspace in the pod",
        ship_in_now(pod, archive),
    )
    .await
}

/// Reads the pod's workspace as a tar archive of at most `max_bytes` (plus the archive's own
/// framing), within [`SHIP_TIMEOUT`]; `COPY_TOO_LARGE` past the bound.
pub async fn ship_back(pod: &Pod, max_bytes: u64) -> Result<Vec<u8>> {
    bounded("reading the pod's workspace", ship_back_now(pod, max_bytes)).await
}

async fn bounded<T>(what: &str, work: impl std::future::Future<Output = Result<T>>) -> Result<T> {
    tokio::time::timeout(SHIP_TIMEOUT, work)
        .await
        .unwrap_or_else(|_| {
            Err(Error::new(
                ErrorCode::PodLost,
                format!("{what} did not end within {} s", SHIP_TIMEOUT.as_secs()),
            ))
        })
}

async fn ship_in_now(pod: &Pod, archive: &[u8]) -> Result<()> {
    let command = vec![
        "sh".to_string(),
        "-c".to_string(),
        format!("head -c \"$1\" | tar -xf - -C {WORKSPACE}"),
        "sh".to_string(),
        archive.len().to_string(),
    ];
    let mut exec = pod.exec(&command).await?;
    let errors = drain(std::mem::replace(
        &mut exec.stderr,
        Box::new(tokio::io::empty()),
    ));
    let ended_rx = exec.ended.clone();
    let stdin = &mut exec.stdin;
    let written = async {
        stdin.write_all(archive).await?;
        stdin.flush().await
    };
    let write = tokio::select! {
        r = written => r.map_err(|e| Error::caused_by(ErrorCode::PodStartFailed, "the workspace could not be sent to the pod", e)),
        reason = wait_for(ended_rx) => Err(ended("unpacking the workspace in the pod", &reason, b"")),
    };
    write?;
    let reason = exec.wait().await;
    let text = errors.await.unwrap_or_default();
    match reason {
        ExitReason::Exited(0) => Ok(()),
        other => Err(ended("unpacking the workspace in the pod", &other, &text)),
    }
}

async fn ship_back_now(pod: &Pod, max_bytes: u64) -> Result<Vec<u8>> {
    let command: Vec<String> = ["tar", "-cf", "-", "-C", WORKSPACE, "."]
        .iter()
        .map(|s| (*s).to_string())
        .collect();
    let mut exec = pod.exec(&command).await?;
    // tar's complaints (a file it may not read, one per file) are read as they come, and the
    // first 4 KiB kept: left unread, they would fill the stream's buffer and stall its output.
    let errors = drain(std::mem::replace(
        &mut exec.stderr,
        Box::new(tokio::io::empty()),
    ));
    // Headers and padding: a file costs at most 1.5 KiB over its bytes (a long name's extra
    // header included), for at most `MAX_ENTRIES` entries.
    let bound = max_bytes.saturating_add(MAX_ENTRIES as u64 * 1536);
    let mut archive = Vec::new();
    let ended_rx = exec.ended.clone();
    let mut limited = (&mut exec.stdout).take(bound.saturating_add(1));
    let read = limited.read_to_end(&mut archive);
    let result = tokio::select! {
        r = read => r.map_err(|e| Error::caused_by(ErrorCode::PodLost, "the pod's workspace could not be read", e)),
        reason = async {
            let r = wait_for(ended_rx).await;
            // A command that ended may still have output in flight: only a lost pod stops the read.
            if matches!(r, ExitReason::Lost(_)) { r } else { std::future::pending().await }
        } => Err(ended("reading the pod's workspace", &reason, b"")),
    };
    result?;
    if archive.len() as u64 > bound {
        exec.abort();
        return Err(Error::new(
            ErrorCode::CopyTooLarge,
            format!("the pod's workspace is larger than {max_bytes} bytes"),
        ));
    }
    let reason = exec.wait().await;
    let said = errors.await.unwrap_or_default();
    match reason {
        ExitReason::Exited(0) => Ok(archive),
        other => Err(ended("reading the pod's workspace", &other, &said)),
    }
}

/// Reads `stream` to its end in the background, keeping its first 4 KiB.
fn drain(
    mut stream: Box<dyn tokio::io::AsyncRead + Unpin + Send + Sync>,
) -> tokio::task::JoinHandle<Vec<u8>> {
    tokio::spawn(async move {
        let mut kept = Vec::new();
        let mut buf = [0u8; 8192];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return kept,
                Ok(n) => {
                    let room = 4096usize.saturating_sub(kept.len());
                    kept.extend_from_slice(&buf[..n.min(room)]);
                }
            }
        }
    })
}

fn ended(what: &str, reason: &ExitReason, stderr: &[u8]) -> Error {
    let code = match reason {
        ExitReason::Lost(_) => ErrorCode::PodLost,
        _ => ErrorCode::PodStartFailed,
    };
    let said = String::from_utf8_lossy(stderr);
    let said: String = said.trim().chars().take(300).collect();
    let tail = if said.is_empty() {
        String::new()
    } else {
        format!("; it said: {said}")
    };
    Error::new(code, format!("{what} failed ({reason}){tail}"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    fn entry(path: &str, bytes: &[u8], executable: bool) -> Entry {
        Entry {
            path: path.into(),
            bytes: bytes.to_vec(),
            executable,
        }
    }

    #[test]
    fn what_is_packed_unpacks_the_same() {
        let files = vec![
            entry("a.txt", b"hello", false),
            entry("bin/run", b"#!/bin/sh\n", true),
        ];
        let back = unpack(&pack(&files).unwrap(), 10, 1000).unwrap();
        assert_eq!(back.files, files);
        assert!(back.skipped.is_empty());
    }

    fn archive_with(kind: tar::EntryType, path: &str) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_size(0);
        h.set_mode(0o644);
        if kind == tar::EntryType::Symlink || kind == tar::EntryType::Link {
            h.set_link_name("/etc/passwd").unwrap();
        }
        // Written raw: the builder itself refuses `..`.
        let name = h.as_old_mut();
        name.name[..path.len()].copy_from_slice(path.as_bytes());
        h.set_cksum();
        b.append(&h, std::io::empty()).unwrap();
        b.into_inner().unwrap()
    }

    /// A hostile pod's archive: absolute paths and `..` are refused; links, devices, FIFOs
    /// and `.git` entries are left out and named, never brought back.
    #[test]
    fn hostile_archives_are_refused_or_left_out() {
        for path in ["/etc/x", "../x", "a/../../x"] {
            let e = unpack(&archive_with(tar::EntryType::Regular, path), 10, 1000).unwrap_err();
            assert_eq!(e.code, ErrorCode::UnsafePath, "{path}: {}", e.message);
        }
        for (kind, path) in [
            (tar::EntryType::Symlink, "a"),
            (tar::EntryType::Link, "a"),
            (tar::EntryType::Char, "dev"),
            (tar::EntryType::Fifo, "fifo"),
            (tar::EntryType::Regular, ".git/config"),
            (tar::EntryType::Regular, "sub/.GIT/hooks/x"),
        ] {
            let back = unpack(&archive_with(kind, path), 10, 1000).unwrap();
            assert!(back.files.is_empty(), "{kind:?} {path}");
            assert_eq!(back.skipped, [path], "{kind:?}");
        }
    }

    #[test]
    fn archives_past_the_bounds_are_refused() {
        let files: Vec<_> = (0..5)
            .map(|i| entry(&format!("f{i}"), b"12345", false))
            .collect();
        let a = pack(&files).unwrap();
        assert_eq!(
            unpack(&a, 4, 1000).unwrap_err().code,
            ErrorCode::CopyTooLarge
        );
        assert_eq!(
            unpack(&a, 10, 24).unwrap_err().code,
            ErrorCode::CopyTooLarge
        );
        assert_eq!(unpack(&a, 5, 25).unwrap().files.len(), 5);
        let twice = pack(&[entry("a.txt", b"1", false), entry("A.TXT", b"2", false)]).unwrap();
        assert_eq!(
            unpack(&twice, 10, 100).unwrap_err().code,
            ErrorCode::UnsafePath
        );
    }

    proptest! {
        /// Any bytes: an error or files, never a panic.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..4096)) {
            let _ = unpack(&bytes, 100, 1 << 20);
        }
    }
}
