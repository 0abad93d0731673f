//! Sessions kept on disk, so that a new `legate-scripted-agent` process can resume one:
//! ACP's `session/resume`, `session/close` and `session/list`, announced when
//! [`SESSIONS_ENV`] names them (and `no-load`: an agent that announces no way to continue a
//! session at all, not even the `loadSession` revisor announces otherwise).
//!
//! This module owns the scripted agent's session store: one JSON file per session under
//! `$HOME/`[`STORE_DIR`] (the agent's private state directory, under Legate), holding its
//! `cwd`, its prompts in order and whether it was closed, and a [`LIFECYCLE_LOG`] there with
//! one line per lifecycle call (`new <id>`, `resume <id>`, `close <id>`, `list`), which tests
//! read to see what Legate sent. A closed session stays on disk and can be resumed (ACP's
//! close frees an active session; it does not delete it). Session ids from the client are
//! checked before they name a file: one never leaves the store.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use agent_client_protocol::Error;
use agent_client_protocol::v1::schema::{
    CloseSessionRequest, ListSessionsRequest, ListSessionsResponse, ResumeSessionRequest,
    SessionCapabilities, SessionCloseCapabilities, SessionId, SessionInfo, SessionListCapabilities,
    SessionResumeCapabilities,
};
use legate_revisor::SessionHook;

/// The environment variable naming the lifecycle methods to announce, comma-separated:
/// `resume`, `close`, `list` (e.g. `resume,close`), and `no-load` to withhold
/// `loadSession`. Unset or empty: none, and no store.
pub const SESSIONS_ENV: &str = "LEGATE_TESTKIT_SESSIONS";
/// The store's directory, beneath `$HOME`.
pub const STORE_DIR: &str = "scripted-sessions";
/// The lifecycle log's file name, in the store.
pub const LIFECYCLE_LOG: &str = "lifecycle.log";

/// Which lifecycle methods are announced.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Announced {
    /// `session/resume`.
    pub resume: bool,
    /// `session/close`.
    pub close: bool,
    /// `session/list`.
    pub list: bool,
    /// `loadSession` withheld (`no-load`).
    pub no_load: bool,
}

impl Announced {
    /// Parses a [`SESSIONS_ENV`] value.
    ///
    /// # Errors
    /// An unknown method name.
    pub fn parse(value: &str) -> Result<Self, String> {
        let mut announced = Self::default();
        for name in value.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            match name {
                "resume" => announced.resume = true,
                "close" => announced.close = true,
                "list" => announced.list = true,
                "no-load" => announced.no_load = true,
                other => return Err(format!("unknown {SESSIONS_ENV} method {other:?}")),
            }
        }
        Ok(announced)
    }

    /// Whether anything is announced.
    #[must_use]
    pub fn any(self) -> bool {
        self.resume || self.close || self.list || self.no_load
    }
}

/// The store of one scripted agent process (the files are shared with its successors).
#[derive(Debug)]
pub struct DiskSessions {
    dir: PathBuf,
    announced: Announced,
    /// Serialises read-modify-write of the files within this process.
    lock: Mutex<()>,
}

/// Whether `id` may name a file: 1 to 128 ASCII letters, digits, `-` or `_`.
fn safe_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

fn not_found(id: &SessionId) -> Error {
    agent_client_protocol::v1::schema::Error::session_not_found(id.clone()).into()
}

fn internal(what: &str, e: &std::io::Error) -> Error {
    Error::internal_error().data(serde_json::json!({ "reason": format!("{what}: {e}") }))
}

impl DiskSessions {
    /// The store for what [`SESSIONS_ENV`] announces, under `$HOME`; `None` when nothing is.
    ///
    /// # Errors
    /// A bad [`SESSIONS_ENV`] value, no `HOME`, or a store that cannot be made.
    pub fn from_env() -> Result<Option<Self>, String> {
        let announced = Announced::parse(&std::env::var(SESSIONS_ENV).unwrap_or_default())?;
        if !announced.any() {
            return Ok(None);
        }
        let home = std::env::var_os("HOME").ok_or("no HOME for the session store")?;
        Self::open(&Path::new(&home).join(STORE_DIR), announced).map(Some)
    }

    /// The store in `dir` (made if missing).
    ///
    /// # Errors
    /// When `dir` cannot be made.
    pub fn open(dir: &Path, announced: Announced) -> Result<Self, String> {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot make the session store {}: {e}", dir.display()))?;
        Ok(Self {
            dir: dir.to_path_buf(),
            announced,
            lock: Mutex::new(()),
        })
    }

    fn file(&self, id: &str) -> Option<PathBuf> {
        safe_id(id).then(|| self.dir.join(format!("{id}.json")))
    }

    fn guard(&self) -> std::sync::MutexGuard<'_, ()> {
        self.lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn read(&self, id: &str) -> Option<serde_json::Value> {
        let text = std::fs::read_to_string(self.file(id)?).ok()?;
        serde_json::from_str(&text).ok()
    }

    fn write(&self, id: &str, record: &serde_json::Value) -> Result<(), Error> {
        let Some(path) = self.file(id) else {
            return Err(not_found(&SessionId::new(id)));
        };
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, record.to_string()).map_err(|e| internal("write", &e))?;
        std::fs::rename(&tmp, &path).map_err(|e| internal("rename", &e))
    }

    fn log(&self, line: &str) {
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(LIFECYCLE_LOG))
            .and_then(|mut f| writeln!(f, "{line}"));
        if let Err(e) = written {
            eprintln!("legate-scripted-agent: cannot write the lifecycle log: {e}");
        }
    }

    /// The prompts session `id` ran, in order (the running one last).
    #[must_use]
    pub fn prompts(&self, id: &str) -> Vec<String> {
        let _guard = self.guard();
        self.read(id)
            .and_then(|r| r["prompts"].as_array().cloned())
            .unwrap_or_default()
            .iter()
            .filter_map(|p| p.as_str().map(str::to_owned))
            .collect()
    }
}

impl SessionHook for DiskSessions {
    fn capabilities(&self) -> SessionCapabilities {
        let mut caps = SessionCapabilities::new();
        if self.announced.resume {
            caps = caps.resume(SessionResumeCapabilities::new());
        }
        if self.announced.close {
            caps = caps.close(SessionCloseCapabilities::new());
        }
        if self.announced.list {
            caps = caps.list(SessionListCapabilities::new());
        }
        caps
    }

    fn load_session(&self) -> bool {
        !self.announced.no_load
    }

    fn created(&self, id: &SessionId, cwd: &Path) {
        let _guard = self.guard();
        let record = serde_json::json!({ "cwd": cwd, "prompts": [], "closed": false });
        if let Err(e) = self.write(&id.0, &record) {
            eprintln!("legate-scripted-agent: cannot store session {}: {e}", id.0);
        }
        self.log(&format!("new {}", id.0));
    }

    fn resume(&self, request: &ResumeSessionRequest) -> Result<(), Error> {
        let _guard = self.guard();
        let id = &request.session_id;
        self.log(&format!("resume {}", id.0));
        if !self.announced.resume {
            return Err(Error::method_not_found());
        }
        let mut record = self.read(&id.0).ok_or_else(|| not_found(id))?;
        record["closed"] = serde_json::json!(false);
        record["cwd"] = serde_json::json!(request.cwd);
        self.write(&id.0, &record)
    }

    fn close(&self, request: &CloseSessionRequest) -> Result<(), Error> {
        let _guard = self.guard();
        let id = &request.session_id;
        self.log(&format!("close {}", id.0));
        if !self.announced.close {
            return Err(Error::method_not_found());
        }
        let mut record = self.read(&id.0).ok_or_else(|| not_found(id))?;
        record["closed"] = serde_json::json!(true);
        self.write(&id.0, &record)
    }

    fn list(&self, request: &ListSessionsRequest) -> Result<ListSessionsResponse, Error> {
        let _guard = self.guard();
        self.log("list");
        if !self.announced.list {
            return Err(Error::method_not_found());
        }
        let read = std::fs::read_dir(&self.dir).map_err(|e| internal("list", &e))?;
        let mut sessions = Vec::new();
        for entry in read.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(id) = name.strip_suffix(".json") else {
                continue;
            };
            let Some(record) = self.read(id) else {
                continue;
            };
            let cwd = PathBuf::from(record["cwd"].as_str().unwrap_or_default());
            if request.cwd.as_ref().is_some_and(|wanted| *wanted != cwd) {
                continue;
            }
            sessions.push(SessionInfo::new(id.to_owned(), cwd));
        }
        sessions.sort_by(|a, b| a.session_id.0.cmp(&b.session_id.0));
        Ok(ListSessionsResponse::new(sessions))
    }

    fn prompted(&self, id: &SessionId, prompt: &str) {
        let _guard = self.guard();
        let Some(mut record) = self.read(&id.0) else {
            // A session this store never made (`session/load` of any id): nothing to keep.
            return;
        };
        if let Some(prompts) = record["prompts"].as_array_mut() {
            prompts.push(serde_json::json!(prompt));
        }
        if let Err(e) = self.write(&id.0, &record) {
            eprintln!("legate-scripted-agent: cannot store session {}: {e}", id.0);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn announced_methods_parse() {
        assert_eq!(Announced::parse("").unwrap(), Announced::default());
        let all = Announced::parse("resume, close,list").unwrap();
        assert!(all.resume && all.close && all.list);
        assert!(Announced::parse("fork").is_err());
        let none = Announced::parse("no-load").unwrap();
        assert!(none.no_load && none.any() && !none.resume);
    }

    #[test]
    fn a_session_survives_the_store_and_hostile_ids_name_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let all = Announced::parse("resume,close,list").unwrap();
        let store = DiskSessions::open(dir.path(), all).unwrap();
        let id = SessionId::new("revisor-1");
        store.created(&id, Path::new("/w"));
        store.prompted(&id, "first");
        store.close(&CloseSessionRequest::new(id.clone())).unwrap();
        // A new process: the same files.
        let again = DiskSessions::open(dir.path(), all).unwrap();
        again
            .resume(&ResumeSessionRequest::new(id.clone(), "/w"))
            .unwrap();
        assert_eq!(again.prompts("revisor-1"), vec!["first".to_string()]);
        let listed = again.list(&ListSessionsRequest::new()).unwrap();
        assert_eq!(listed.sessions.len(), 1);
        for hostile in ["../x", "a/b", "", ".", "x.json"] {
            let request = ResumeSessionRequest::new(SessionId::new(hostile), "/w");
            assert!(again.resume(&request).is_err(), "{hostile:?}");
        }
        let log = std::fs::read_to_string(dir.path().join(LIFECYCLE_LOG)).unwrap();
        assert!(log.starts_with("new revisor-1\nclose revisor-1\nresume revisor-1\nlist\n"));
    }
}
