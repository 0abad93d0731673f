//! What an A2A caller is answered must not show where this machine keeps things: the
//! serving `$LEGATE_HOME` (copies, state, agents' homes beneath it), the task's workspace
//! root and the user's home directory. [`Scrub`] replaces each in every text an answer
//! carries (status and history messages, artifacts' texts and values, metadata, error
//! messages) with a placeholder: `$LEGATE_HOME`, `<workspace>`, `~`.
//!
//! This module only rewrites text on the way out. It never touches file bytes a caller is
//! handed (a collected file, the `patch` artifact, whose sha256 the caller checks), never
//! changes what is stored, and decides nothing.

use a2a::{A2AError, Artifact, Message, Part, PartContent, StreamResponse, Task};
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;

/// The placeholders, and the paths they stand for, longest path first.
#[derive(Debug, Clone, Default)]
pub struct Scrub {
    paths: Vec<(String, &'static str)>,
}

/// A path worth hiding: absolute, more than the root directory.
fn worth(path: &Path) -> Option<String> {
    let s = path.to_str()?.trim_end_matches('/');
    (s.starts_with('/') && s.len() > 1).then(|| s.to_string())
}

/// Whether `c` may continue a path component (so `/home/al` is not found in `/home/alice`).
fn continues(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '-' | '_' | '.' | '~' | '+')
}

/// Whether the text `after` a match continues its last path component: a path character
/// does, a `.` only when another path character follows it (`/home/al.bak` goes on,
/// `/home/al.` ends a sentence).
fn goes_on(after: &str) -> bool {
    let mut chars = after.chars();
    match chars.next() {
        Some('.') => chars.next().is_some_and(|c| c != '.' && continues(c)),
        Some(c) => continues(c),
        None => false,
    }
}

impl Scrub {
    /// Hides `home` (`$LEGATE_HOME`), `root` (the task's workspace) and the user's home.
    pub fn new(home: &Path, root: Option<&Path>) -> Self {
        let mut paths = Vec::new();
        if let Some(r) = root.and_then(worth) {
            paths.push((r, "<workspace>"));
        }
        if let Some(h) = worth(home) {
            paths.push((h.clone(), "$LEGATE_HOME"));
            // The same directory by its canonical name, when a link leads to it.
            if let Some(c) = std::fs::canonicalize(home).ok().as_deref().and_then(worth)
                && c != h
            {
                paths.push((c, "$LEGATE_HOME"));
            }
        }
        if let Some(u) = std::env::var_os("HOME")
            .as_deref()
            .map(Path::new)
            .and_then(worth)
        {
            paths.push((u, "~"));
        }
        paths.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
        Self { paths }
    }

    /// `text` with every hidden path replaced by its placeholder.
    pub fn text(&self, text: &str) -> String {
        let mut out = text.to_string();
        for (path, placeholder) in &self.paths {
            if !out.contains(path.as_str()) {
                continue;
            }
            let mut next = String::with_capacity(out.len());
            let mut rest = out.as_str();
            while let Some(i) = rest.find(path.as_str()) {
                let after = &rest[i + path.len()..];
                next.push_str(&rest[..i]);
                if goes_on(after) {
                    next.push_str(path);
                } else {
                    next.push_str(placeholder);
                }
                rest = after;
            }
            next.push_str(rest);
            out = next;
        }
        out
    }

    fn in_place(&self, s: &mut String) {
        if self.paths.iter().any(|(p, _)| s.contains(p.as_str())) {
            *s = self.text(s);
        }
    }

    fn value(&self, v: &mut Value) {
        match v {
            Value::String(s) => self.in_place(s),
            Value::Array(a) => a.iter_mut().for_each(|x| self.value(x)),
            Value::Object(o) => o.values_mut().for_each(|x| self.value(x)),
            _ => {}
        }
    }

    fn metadata(&self, m: &mut Option<HashMap<String, Value>>) {
        m.iter_mut()
            .flat_map(|m| m.values_mut())
            .for_each(|v| self.value(v));
    }

    fn part(&self, p: &mut Part) {
        match &mut p.content {
            PartContent::Text(t) => self.in_place(t),
            PartContent::Data(v) => self.value(v),
            PartContent::Url(u) => self.in_place(u),
            // A file's bytes are the file: handed over as they are.
            PartContent::Raw(_) => {}
        }
        if let Some(f) = &mut p.filename {
            self.in_place(f);
        }
        self.metadata(&mut p.metadata);
    }

    /// Scrubs `m` in place.
    pub fn message(&self, m: &mut Message) {
        m.parts.iter_mut().for_each(|p| self.part(p));
        self.metadata(&mut m.metadata);
    }

    fn artifact(&self, a: &mut Artifact) {
        for p in &mut a.parts {
            match &mut p.content {
                // The patch's own text is checked by sha256 on the other side: as it is.
                PartContent::Text(_) if a.artifact_id == crate::patch::PATCH_ARTIFACT => {}
                _ => self.part(p),
            }
        }
        for s in [&mut a.name, &mut a.description].into_iter().flatten() {
            self.in_place(s);
        }
        self.metadata(&mut a.metadata);
    }

    /// Scrubs `t` in place.
    pub fn task(&self, t: &mut Task) {
        if let Some(m) = &mut t.status.message {
            self.message(m);
        }
        t.history.iter_mut().flatten().for_each(|m| self.message(m));
        t.artifacts
            .iter_mut()
            .flatten()
            .for_each(|a| self.artifact(a));
        self.metadata(&mut t.metadata);
    }

    /// `r` scrubbed.
    pub fn response(&self, mut r: StreamResponse) -> StreamResponse {
        match &mut r {
            StreamResponse::Task(t) => self.task(t),
            StreamResponse::Message(m) => self.message(m),
            StreamResponse::StatusUpdate(u) => {
                if let Some(m) = &mut u.status.message {
                    self.message(m);
                }
                self.metadata(&mut u.metadata);
            }
            StreamResponse::ArtifactUpdate(u) => {
                self.artifact(&mut u.artifact);
                self.metadata(&mut u.metadata);
            }
        }
        r
    }

    /// `e` with its message scrubbed.
    pub fn error(&self, mut e: A2AError) -> A2AError {
        self.in_place(&mut e.message);
        e
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn paths_are_hidden_whole_components_only() {
        let s = Scrub::new(
            Path::new("/srv/lg/home/"),
            Some(Path::new("/srv/lg/home/copies/t1")),
        );
        assert_eq!(
            s.text(
                "wrote /srv/lg/home/copies/t1/a.rs and /srv/lg/home/agents/x, not /srv/lg/homes"
            ),
            "wrote <workspace>/a.rs and $LEGATE_HOME/agents/x, not /srv/lg/homes"
        );
        let mut v = serde_json::json!({"root": "/srv/lg/home/copies/t1", "n": [1, "/srv/lg/home"]});
        s.value(&mut v);
        assert_eq!(
            v,
            serde_json::json!({"root": "<workspace>", "n": [1, "$LEGATE_HOME"]})
        );
        // The root directory alone is never a path to hide.
        assert_eq!(Scrub::new(Path::new("/"), None).text("/etc"), "/etc");
        // A path at the end of a sentence is hidden; one that goes on after a dot is not it.
        assert_eq!(
            s.text("it is in /srv/lg/home. Also /srv/lg/home.bak and /srv/lg/home..."),
            "it is in $LEGATE_HOME. Also /srv/lg/home.bak and $LEGATE_HOME..."
        );
    }
}
