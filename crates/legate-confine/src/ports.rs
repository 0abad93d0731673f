//! Legate's listening ports: the registry that lets every confinement refuse them.
//!
//! Every `legate serve` front registers the TCP ports it listens on ([`register`]) right after
//! `bind`. They are kept in this process (so its own confinements refuse them at once) and, once
//! [`use_registry`] named the directory (`$LEGATE_HOME/run/listen`), in `<pid>.json` there,
//! so that confinements built by *other* `legate` processes sharing the home refuse them too.
//!
//! A registry file is written atomically (a temporary file, locked, synced, then renamed) and
//! holds an exclusive lock for as long as its process lives, the way runner locks do: the kernel
//! releases the lock however the process dies, so a file whose lock can be taken is stale and
//! is ignored. A [`Listening`] removes its ports (and the file, with the last port) when dropped.
//!
//! This module owns the registry's format and liveness. It never decides what a confinement
//! does with the ports ([`crate::Confinement::prepare`] does), and never trusts a file beyond
//! a size limit and a strict format.

use legate_core::{Error, ErrorCode, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::fs::{File, TryLockError};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, OnceLock};

/// The largest registry file read; anything longer is not one of ours.
const MAX_ENTRY_BYTES: u64 = 64 * 1024;

/// What a registry file says.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
struct Entry {
    pid: u32,
    ports: BTreeSet<u16>,
}

/// This process's side of the registry.
#[derive(Default)]
struct Own {
    /// Every registered port, with how many registrations hold it.
    ports: Vec<(u16, usize)>,
    /// The registry file and its lock, while it has ports.
    file: Option<(PathBuf, File)>,
}

static DIR: OnceLock<PathBuf> = OnceLock::new();
static OWN: Mutex<Own> = Mutex::new(Own {
    ports: Vec::new(),
    file: None,
});

fn own() -> MutexGuard<'static, Own> {
    // A poisoned lock means a panic mid-update; the state is still a valid set of ports.
    OWN.lock().unwrap_or_else(|e| e.into_inner())
}

fn io_error(what: String, e: std::io::Error) -> Error {
    Error::new(
        ErrorCode::Internal,
        format!("the listening-port registry: {what}: {e}"),
    )
}

/// Names the registry directory of this process (`$LEGATE_HOME/run/listen`). The first call
/// wins; later ones are ignored (one home per process).
pub fn use_registry(dir: impl Into<PathBuf>) {
    let _ = DIR.set(dir.into());
}

/// The registry directory, if one was named.
pub fn registry() -> Option<&'static Path> {
    DIR.get().map(PathBuf::as_path)
}

/// Ports registered by [`register`]; dropping it unregisters them.
#[derive(Debug)]
#[must_use = "the ports are unregistered when this is dropped"]
pub struct Listening {
    ports: Vec<u16>,
}

impl Listening {
    /// The ports it holds.
    pub fn ports(&self) -> &[u16] {
        &self.ports
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        let mut own = own();
        for port in &self.ports {
            if let Some(i) = own.ports.iter().position(|(p, _)| p == port) {
                own.ports[i].1 -= 1;
                if own.ports[i].1 == 0 {
                    own.ports.remove(i);
                }
            }
        }
        if let Err(e) = publish(&mut own) {
            tracing::warn!(error = %e.message, "could not update the listening-port registry");
        }
    }
}

/// Registers `ports` as Legate's: from now on, confinements prepared by this process, and by
/// any `legate` process sharing the registry, refuse TCP `connect` to them (where the kernel
/// can). Fails (`INTERNAL`) when the registry file cannot be written: a front whose port the
/// agents could reach should not start.
pub fn register(ports: &[u16]) -> Result<Listening> {
    let mut own = own();
    for &port in ports {
        match own.ports.iter_mut().find(|(p, _)| *p == port) {
            Some(held) => held.1 += 1,
            None => own.ports.push((port, 1)),
        }
    }
    let listening = Listening {
        ports: ports.to_vec(),
    };
    let published = publish(&mut own);
    drop(own);
    // On failure, dropping `listening` takes the ports back out.
    published?;
    tracing::info!(ports = ?ports, registry = ?registry(), "listening ports registered");
    Ok(listening)
}

/// Writes this process's registry file (or removes it when no port is left).
fn publish(own: &mut Own) -> Result<()> {
    let Some(dir) = registry() else {
        return Ok(());
    };
    let pid = std::process::id();
    let path = dir.join(format!("{pid}.json"));
    if own.ports.is_empty() {
        if let Some((path, _lock)) = own.file.take() {
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_error(format!("removing {}", path.display()), e)),
            }
        }
        return Ok(());
    }
    std::fs::create_dir_all(dir).map_err(|e| io_error(format!("creating {}", dir.display()), e))?;
    let entry = Entry {
        pid,
        ports: own.ports.iter().map(|(p, _)| *p).collect(),
    };
    let tmp = dir.join(format!(".{pid}.json.tmp"));
    let mut file =
        File::create(&tmp).map_err(|e| io_error(format!("creating {}", tmp.display()), e))?;
    // Locked before it has its name, so that no reader ever sees it unlocked while we live.
    file.try_lock()
        .map_err(|e| io_error(format!("locking {}", tmp.display()), e.into()))?;
    let text = serde_json::to_vec(&entry).map_err(|e| {
        Error::new(
            ErrorCode::Internal,
            format!("the listening-port registry: encoding an entry: {e}"),
        )
    })?;
    file.write_all(&text)
        .and_then(|()| file.sync_all())
        .map_err(|e| io_error(format!("writing {}", tmp.display()), e))?;
    std::fs::rename(&tmp, &path)
        .map_err(|e| io_error(format!("renaming {} into place", tmp.display()), e))?;
    // The previous file's inode (and its lock) is replaced; keep the new one locked.
    own.file = Some((path, file));
    Ok(())
}

/// Every port Legate listens on, as far as this process knows: its own registered ports, and
/// those of every live entry in the registry. Unreadable, malformed and stale entries are
/// ignored (and said so at debug level).
pub fn legate_ports() -> BTreeSet<u16> {
    let mut ports: BTreeSet<u16> = own().ports.iter().map(|(p, _)| *p).collect();
    if let Some(dir) = registry() {
        ports.extend(live_ports(dir));
    }
    ports
}

/// The ports of the live entries in `dir`.
pub fn live_ports(dir: &Path) -> BTreeSet<u16> {
    let mut ports = BTreeSet::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return ports;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.starts_with('.') || !name.ends_with(".json") {
            continue;
        }
        match read_live(&path) {
            Ok(Some(e)) => ports.extend(e.ports),
            Ok(None) => {
                tracing::debug!(path = %path.display(), "stale listening-port entry ignored")
            }
            Err(why) => {
                tracing::debug!(path = %path.display(), why, "listening-port entry ignored")
            }
        }
    }
    ports
}

/// The entry at `path` if its process still holds its lock; `None` when it is stale.
fn read_live(path: &Path) -> std::result::Result<Option<Entry>, String> {
    use std::os::unix::fs::MetadataExt;
    // A live owner republishing renames a new, locked file over the old one, then lets the
    // old one's lock go: a file whose lock we can take is stale only if it is still the one
    // at `path`; otherwise it was just replaced, and the new one is read.
    let mut attempts = 0;
    let file = loop {
        let file = File::open(path).map_err(|e| e.to_string())?;
        match file.try_lock_shared() {
            Err(TryLockError::WouldBlock) => break file,
            Err(TryLockError::Error(e)) => return Err(e.to_string()),
            Ok(()) => {
                let opened = file.metadata().map_err(|e| e.to_string())?.ino();
                let current = std::fs::metadata(path).map(|m| m.ino());
                attempts += 1;
                if current.is_ok_and(|ino| ino != opened) && attempts < 8 {
                    continue;
                }
                // Its owner is gone.
                return Ok(None);
            }
        }
    };
    let mut text = Vec::new();
    (&file)
        .take(MAX_ENTRY_BYTES + 1)
        .read_to_end(&mut text)
        .map_err(|e| e.to_string())?;
    if text.len() as u64 > MAX_ENTRY_BYTES {
        return Err("too long".into());
    }
    parse(&text).map(Some)
}

/// A registry file's content, strictly.
fn parse(text: &[u8]) -> std::result::Result<Entry, String> {
    serde_json::from_slice(text).map_err(|e| e.to_string())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn an_entry_round_trips_and_nothing_else_parses() {
        let e = Entry {
            pid: 7,
            ports: [8731, 8732].into(),
        };
        assert_eq!(parse(&serde_json::to_vec(&e).unwrap()).unwrap(), e);
        for bad in [
            &b""[..],
            b"{}",
            b"{\"pid\":1,\"ports\":[70000]}",
            b"{\"pid\":1,\"ports\":[-1]}",
            b"{\"pid\":1,\"ports\":[1],\"extra\":1}",
            b"[1,2]",
        ] {
            assert!(parse(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn an_unlocked_entry_is_stale_and_a_locked_one_is_live() {
        let dir = tempfile::tempdir().unwrap();
        let text = br#"{"pid":1,"ports":[4242]}"#;
        let path = dir.path().join("1.json");
        std::fs::write(&path, text).unwrap();
        std::fs::write(dir.path().join(".2.json.tmp"), br#"{"pid":2,"ports":[1]}"#).unwrap();
        assert!(live_ports(dir.path()).is_empty(), "nobody holds the lock");
        let held = File::open(&path).unwrap();
        held.try_lock().unwrap();
        assert_eq!(live_ports(dir.path()), [4242].into());
        drop(held);
        assert!(live_ports(dir.path()).is_empty());
    }

    proptest! {
        /// Whatever bytes a registry file holds, reading it never panics and yields ports
        /// only from a well-formed entry.
        #[test]
        fn hostile_entries_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            if let Ok(e) = parse(&bytes) {
                prop_assert_eq!(parse(&serde_json::to_vec(&e).unwrap()).unwrap(), e);
            }
        }
    }
}
