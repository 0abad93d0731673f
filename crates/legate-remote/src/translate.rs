//! A remote task's A2A updates as Legate's own events, bounded: status messages, message
//! parts and artifacts become [`EventKind`]s, the remote's end becomes a [`Finish`].
//!
//! The mapping (a remote Legate's front writes the same shapes, see `legate-a2a`'s
//! `convert.rs`, so a remote Legate's events come back as they were):
//!
//! | A2A | Legate event |
//! |---|---|
//! | status message part of kind `message` | `Message` (the line, with its newline) |
//! | status message part of kind `thought`, or a working status's plain text | `Thought` |
//! | status message part of kind `tool_call`, `tool_call_update`, `plan`, `permission` | `Notice` (`detail.event` = `remote_<kind>`) |
//! | `input-required` or final status message, when nothing of the answer came before | `Message` (the question, or the answer) |
//! | artifact text part (not the `answer` artifact's text once the answer streamed) | `Message` |
//! | artifact file or data part | `Attachment` (the `answer` artifact's data part is read for `usage`) |
//! | a bare `Message` answer | `Message` and the end of the turn |
//!
//! From a remote Legate (its card declares the supervision extension), a status update
//! that carries its structured event (`legateEvent` in the message metadata) is relayed as
//! that event when it is a thought, tool call, tool call update or plan; a permission becomes a
//! notice saying the remote's supervisor decided it; the text parts are the fallback. A plan
//! that comes as what changed (the plan-changes extension: `{"type":"plan_changes","n":…,
//! "base":…,"hunks":[…]}`) is rebuilt on the last plan this turn relayed and relayed whole;
//! one that does not follow that plan or does not fit it falls back to its text.
//!
//! State changes are not relayed as `Status` events: the engine states the local task's
//! status itself, so fronts see exactly what a local task shows.
//!
//! This module does no I/O and trusts nothing: every text is cut at its bound, every count
//! past its bound ends the turn with `REMOTE_PROTOCOL_ERROR`.

use crate::errors::{excerpt, protocol};
use a2a::{Artifact, Message, Part, PartContent, StreamResponse, Task, TaskState, TaskStatus};
use base64::Engine as _;
use legate_core::plan_change::json_size;
use legate_core::{Attachment, EventKind, PlanEntry, PlanHunk, Result, Usage, plan_apply};
use serde_json::Value;

/// What a turn may bring back from the remote.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// Updates (stream responses or polled changes) per turn.
    pub max_updates: usize,
    /// Bytes of answer text per turn; past it the rest is dropped with one notice.
    pub max_text_bytes: usize,
    /// Bytes of one attachment (file or data part).
    pub max_part_bytes: usize,
    /// Attachments per turn.
    pub max_attachments: usize,
    /// Bytes of plans rebuilt from plan changes per turn: a change of a few bytes rebuilds a
    /// whole plan, so past this the changes are no longer rebuilt (their text is relayed).
    pub max_rebuilt_plan_bytes: u64,
}

impl Default for Bounds {
    fn default() -> Self {
        Self {
            max_updates: 100_000,
            max_text_bytes: 8 << 20,
            max_part_bytes: 4 << 20,
            max_attachments: 64,
            max_rebuilt_plan_bytes: 256 << 20,
        }
    }
}

/// How the remote task ended the turn.
#[derive(Debug, Clone, PartialEq)]
pub enum Finish {
    /// Completed (or answered with a bare message).
    Completed,
    /// It asks for input: the turn ends with the question.
    InputRequired,
    /// Canceled.
    Canceled,
    /// Failed, with the remote's words.
    Failed(String),
    /// Rejected, with the remote's words.
    Rejected(String),
    /// It wants authentication the caller cannot give.
    AuthRequired,
}

/// The metadata key of a remote Legate's structured event (`legate-a2a`'s `convert.rs`).
const LEGATE_EVENT_KEY: &str = "legateEvent";

/// The id of a remote Legate's answer artifact.
const ANSWER_ARTIFACT: &str = "answer";

/// `v` with every whole, non-negative number as an integer: A2A's data parts are protobuf
/// `Struct`s, whose numbers travel as doubles (`11` arrives as `11.0`).
fn integral(v: &Value) -> Value {
    match v {
        Value::Number(n) => match n.as_f64() {
            Some(f) if f.fract() == 0.0 && (0.0..9.0e15).contains(&f) => {
                // Exact: a whole double below 2^53.
                Value::from(f as u64)
            }
            _ => v.clone(),
        },
        Value::Object(m) => {
            Value::Object(m.iter().map(|(k, x)| (k.clone(), integral(x))).collect())
        }
        Value::Array(a) => Value::Array(a.iter().map(integral).collect()),
        other => other.clone(),
    }
}

/// The longest model name kept from a remote's usage (longer ones end with `…`).
const MAX_MODEL_CHARS: usize = 128;

/// `model` without control characters, at most [`MAX_MODEL_CHARS`] of them (then `…`).
fn clean_model(model: &str) -> String {
    let mut out: String = model
        .chars()
        .filter(|c| !c.is_control())
        .take(MAX_MODEL_CHARS + 1)
        .collect();
    if out.chars().count() > MAX_MODEL_CHARS {
        out = out.chars().take(MAX_MODEL_CHARS).collect();
        out.push('…');
    }
    out
}

/// One turn's translation state.
#[derive(Debug)]
pub struct Relay {
    bounds: Bounds,
    updates: usize,
    text_bytes: usize,
    text_cut: bool,
    attachments: usize,
    /// Whether any answer text was relayed this turn.
    answered: bool,
    /// Usage the remote reported (a remote Legate's task metadata or answer data).
    pub usage: Option<Usage>,
    /// The remote task's id, once named.
    pub task_id: Option<String>,
    /// The remote context's id, once named.
    pub context_id: Option<String>,
    /// How it ended, once it did.
    pub finish: Option<Finish>,
    /// The last working status message relayed (a polled task repeats it).
    last_working: Option<String>,
    /// Whether the remote is a Legate (its card declares the supervision extension) whose
    /// updates carry their structured event (`legateEvent`).
    legate_events: bool,
    /// Whether this is a copy task's turn, whose `patch` artifact is applied, not relayed.
    copy: bool,
    /// The last plan relayed from a remote Legate, with its number on the remote's stream:
    /// what its next plan's changes apply to.
    plan: Option<(u64, Vec<PlanEntry>)>,
    /// Bytes of plans rebuilt from changes this turn.
    rebuilt: u64,
}

/// A plan as what changed, as a remote Legate sends it under the plan-changes extension.
#[derive(serde::Deserialize)]
struct PlanChanges {
    n: u64,
    base: u64,
    hunks: Vec<PlanHunk>,
}

fn text_of(parts: &[Part]) -> String {
    parts
        .iter()
        .filter_map(|p| match &p.content {
            PartContent::Text(t) => Some(t.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn kind_of(meta: Option<&std::collections::HashMap<String, Value>>) -> Option<&str> {
    meta?.get("kind")?.as_str()
}

impl Relay {
    /// A fresh turn.
    pub fn new(bounds: Bounds) -> Self {
        Self {
            bounds,
            updates: 0,
            text_bytes: 0,
            text_cut: false,
            attachments: 0,
            answered: false,
            usage: None,
            task_id: None,
            context_id: None,
            finish: None,
            last_working: None,
            legate_events: false,
            copy: false,
            plan: None,
            rebuilt: 0,
        }
    }

    /// The same relay for a copy task's turn: the remote's `patch` artifact is not relayed
    /// (it is applied to the local copy).
    #[must_use]
    pub fn for_copy(mut self, copy: bool) -> Self {
        self.copy = copy;
        self
    }

    /// The same relay reading a remote Legate's structured events (`legateEvent`) where its
    /// updates carry them; text parts are the fallback.
    #[must_use]
    pub fn with_legate_events(mut self, on: bool) -> Self {
        self.legate_events = on;
        self
    }

    /// A remote Legate's structured event, when it is one this side relays as is: a thought,
    /// a tool call or its update, a plan. A permission the remote's supervisor decided becomes
    /// a notice saying so (never a local decision); anything else (a status, a session, usage)
    /// is not taken from the remote: `None`, and the text parts are used.
    fn structured(&mut self, m: &Message) -> Option<EventKind> {
        if !self.legate_events {
            return None;
        }
        let v = m.metadata.as_ref()?.get(LEGATE_EVENT_KEY)?;
        if v.to_string().len() > self.bounds.max_part_bytes {
            return None;
        }
        let v = integral(v);
        if v.get("type").and_then(Value::as_str) == Some("plan_changes") {
            return self.plan_changes(v);
        }
        let n = v.get("n").and_then(Value::as_u64);
        match serde_json::from_value::<EventKind>(v).ok()? {
            EventKind::Plan { entries } => {
                self.plan = n.map(|n| (n, entries.clone()));
                Some(EventKind::Plan { entries })
            }
            e @ (EventKind::Thought { .. }
            | EventKind::ToolCall(_)
            | EventKind::ToolCallUpdate(_)) => Some(e),
            EventKind::Permission {
                title,
                tool_kind,
                verdict,
                ..
            } => Some(EventKind::Notice {
                message: format!(
                    "the remote's supervisor {}: {} ({})",
                    if verdict.is_allow() {
                        "allowed"
                    } else {
                        "refused"
                    },
                    excerpt(&title),
                    excerpt(&verdict.reason)
                ),
                detail: serde_json::json!({
                    "event": "remote_permission",
                    "toolKind": tool_kind,
                    "allowed": verdict.is_allow(),
                }),
            }),
            _ => None,
        }
    }

    /// A plan sent as what changed, rebuilt on the last plan relayed: `None` (its text is
    /// the fallback) when it does not follow that plan, does not fit it, rebuilds past the
    /// bound of a part, or past the turn's bytes of rebuilt plans (an empty change of a few
    /// bytes rebuilding a plan of megabytes, again and again); the next whole plan starts
    /// again.
    fn plan_changes(&mut self, v: Value) -> Option<EventKind> {
        let changes: PlanChanges = serde_json::from_value(v).ok()?;
        let max = self.bounds.max_part_bytes as u64;
        let (have, plan) = self.plan.as_mut()?;
        // A misfit leaves the plan as it was; it is dropped all the same.
        let size = if *have != changes.base || plan_apply(plan, &changes.hunks).is_err() {
            u64::MAX
        } else {
            json_size(plan)
        };
        if size > max || self.rebuilt.saturating_add(size) > self.bounds.max_rebuilt_plan_bytes {
            self.plan = None;
            return None;
        }
        self.rebuilt += size;
        *have = changes.n;
        Some(EventKind::Plan {
            entries: plan.clone(),
        })
    }

    /// Whether the remote task ended the turn.
    pub fn done(&self) -> bool {
        self.finish.is_some()
    }

    /// Counts one update against the bound.
    fn count(&mut self) -> Result<()> {
        self.updates += 1;
        if self.updates > self.bounds.max_updates {
            return Err(protocol(format!(
                "the remote sent more than {} updates in one turn",
                self.bounds.max_updates
            )));
        }
        Ok(())
    }

    /// The ids an update names (task, context), without relaying it: the caller records
    /// them before anything is relayed.
    pub fn names(update: &StreamResponse) -> (Option<&str>, Option<&str>) {
        match update {
            StreamResponse::Task(t) => (Some(&t.id), Some(&t.context_id)),
            StreamResponse::StatusUpdate(u) => (Some(&u.task_id), Some(&u.context_id)),
            StreamResponse::ArtifactUpdate(u) => (Some(&u.task_id), Some(&u.context_id)),
            StreamResponse::Message(m) => (m.task_id.as_deref(), m.context_id.as_deref()),
        }
    }

    fn answer(&mut self, text: &str, out: &mut Vec<EventKind>) {
        if text.is_empty() {
            return;
        }
        let room = self.bounds.max_text_bytes.saturating_sub(self.text_bytes);
        let mut cut = text.len().min(room);
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        if cut > 0 {
            self.text_bytes += cut;
            self.answered = true;
            out.push(EventKind::Message {
                text: text[..cut].to_string(),
            });
        }
        if cut < text.len() && !self.text_cut {
            self.text_cut = true;
            out.push(EventKind::Notice {
                message: format!(
                    "the remote's answer is longer than {} bytes; the rest was dropped",
                    self.bounds.max_text_bytes
                ),
                detail: serde_json::json!({"event": "remote_answer_truncated"}),
            });
        }
    }

    fn bounded(&self, text: &str) -> String {
        let mut cut = text.len().min(self.bounds.max_part_bytes);
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text[..cut].to_string()
    }

    fn attach(&mut self, part: &Part, out: &mut Vec<EventKind>) {
        if self.attachments >= self.bounds.max_attachments {
            return;
        }
        let max = self.bounds.max_part_bytes;
        let mut a = Attachment {
            name: part.filename.as_deref().map(excerpt),
            media_type: part.media_type.as_deref().map(excerpt),
            uri: None,
            text: None,
            base64: None,
        };
        let fits = match &part.content {
            PartContent::Text(_) => return,
            PartContent::Raw(bytes) => {
                a.base64 = Some(base64::engine::general_purpose::STANDARD.encode(bytes));
                bytes.len() <= max
            }
            PartContent::Url(u) => {
                a.uri = Some(excerpt(u));
                true
            }
            PartContent::Data(v) => {
                let text = v.to_string();
                a.media_type
                    .get_or_insert_with(|| "application/json".into());
                let fits = text.len() <= max;
                a.text = Some(text);
                fits
            }
        };
        if !fits {
            out.push(EventKind::Notice {
                message: format!("an attachment of the remote larger than {max} bytes was dropped"),
                detail: serde_json::json!({"event": "remote_attachment_dropped"}),
            });
            return;
        }
        self.attachments += 1;
        out.push(EventKind::Attachment(a));
    }

    fn usage_from(&mut self, v: Option<&Value>) {
        if let Some(u) = v.filter(|u| u.is_object())
            && let Ok(mut usage) = serde_json::from_value::<Usage>(integral(u))
        {
            // The model name is shown by `legate usage` and the dashboard: no escape
            // sequence of the remote's, and bounded.
            usage.model = usage.model.map(|m| clean_model(&m));
            self.usage = Some(usage);
        }
    }

    fn status(&mut self, status: &TaskStatus, out: &mut Vec<EventKind>) {
        let message = status.message.as_ref();
        let text = message.map(|m| text_of(&m.parts)).unwrap_or_default();
        match status.state {
            TaskState::InputRequired => {
                if !self.answered {
                    self.answer(&text, out);
                }
                self.finish = Some(Finish::InputRequired);
            }
            TaskState::Completed => {
                if !self.answered {
                    self.answer(&text, out);
                }
                self.finish = Some(Finish::Completed);
            }
            TaskState::Canceled => self.finish = Some(Finish::Canceled),
            TaskState::Failed => self.finish = Some(Finish::Failed(excerpt(&text))),
            TaskState::Rejected => self.finish = Some(Finish::Rejected(excerpt(&text))),
            TaskState::AuthRequired => self.finish = Some(Finish::AuthRequired),
            TaskState::Working | TaskState::Submitted | TaskState::Unspecified => {
                let Some(m) = message else { return };
                let key = format!("{}\u{0}{text}", m.message_id);
                if self.last_working.as_deref() == Some(key.as_str()) {
                    return;
                }
                self.last_working = Some(key);
                if let Some(e) = self.structured(m) {
                    out.push(e);
                    return;
                }
                for part in &m.parts {
                    let PartContent::Text(t) = &part.content else {
                        self.attach(part, out);
                        continue;
                    };
                    let kind = kind_of(part.metadata.as_ref()).or(kind_of(m.metadata.as_ref()));
                    match kind {
                        Some("message") => self.answer(&format!("{t}\n"), out),
                        Some(k @ ("tool_call" | "tool_call_update" | "plan" | "permission")) => {
                            out.push(EventKind::Notice {
                                message: self.bounded(t),
                                detail: serde_json::json!({"event": format!("remote_{k}")}),
                            });
                        }
                        _ => {
                            if !t.trim().is_empty() {
                                out.push(EventKind::Thought {
                                    text: self.bounded(t),
                                });
                            }
                        }
                    }
                }
            }
        }
    }

    fn artifact(&mut self, artifact: &Artifact, out: &mut Vec<EventKind>) {
        if self.copy && artifact.artifact_id == crate::copy::PATCH_ARTIFACT {
            // A remote Legate's copy-task patch: applied to the local copy, not relayed.
            return;
        }
        let legate_answer = artifact.artifact_id == ANSWER_ARTIFACT;
        let skip_text = legate_answer && self.answered;
        for part in artifact.parts.iter().take(self.bounds.max_attachments * 4) {
            match &part.content {
                PartContent::Text(t) if !skip_text => self.answer(t, out),
                PartContent::Text(_) => {}
                // A remote Legate's answer data: its outcome, not a file the agent handed
                // over. Its usage is the remote's count for the turn.
                PartContent::Data(v) if legate_answer && v.get("stopReason").is_some() => {
                    self.usage_from(v.get("usage"));
                }
                _ => self.attach(part, out),
            }
        }
    }

    /// One streamed update as events.
    pub fn update(&mut self, update: &StreamResponse) -> Result<Vec<EventKind>> {
        self.count()?;
        let mut out = Vec::new();
        let (task, context) = Self::names(update);
        if let Some(t) = task {
            self.task_id.get_or_insert_with(|| t.to_string());
        }
        if let Some(c) = context {
            self.context_id.get_or_insert_with(|| c.to_string());
        }
        match update {
            StreamResponse::Task(t) => self.task(t, &mut out),
            StreamResponse::StatusUpdate(u) => {
                if let Some(m) = &u.metadata {
                    self.usage_from(m.get("usage"));
                }
                self.status(&u.status, &mut out);
            }
            StreamResponse::ArtifactUpdate(u) => self.artifact(&u.artifact, &mut out),
            StreamResponse::Message(m) => self.message(m, &mut out),
        }
        Ok(out)
    }

    /// A bare message answer: its text is the answer and the turn is over.
    pub fn message(&mut self, m: &Message, out: &mut Vec<EventKind>) {
        self.answer(&text_of(&m.parts), out);
        for p in &m.parts {
            self.attach(p, out);
        }
        self.finish = Some(Finish::Completed);
    }

    /// A whole task (the first streamed update, or a polled one): its artifacts and status.
    pub fn task(&mut self, t: &Task, out: &mut Vec<EventKind>) {
        self.task_id.get_or_insert_with(|| t.id.clone());
        self.context_id.get_or_insert_with(|| t.context_id.clone());
        if let Some(m) = &t.metadata {
            self.usage_from(m.get("usage"));
        }
        let terminal = t.status.state.is_terminal() || t.status.state == TaskState::InputRequired;
        if terminal {
            for a in t
                .artifacts
                .iter()
                .flatten()
                .take(self.bounds.max_attachments)
            {
                self.artifact(a, out);
            }
        }
        self.status(&t.status, out);
    }

    /// A polled task, counted as one update.
    pub fn polled(&mut self, t: &Task) -> Result<Vec<EventKind>> {
        self.count()?;
        let mut out = Vec::new();
        self.task(t, &mut out);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use a2a::{Role, TaskArtifactUpdateEvent, TaskStatusUpdateEvent};

    fn status(state: TaskState, text: Option<&str>, kind: Option<&str>) -> StreamResponse {
        let message = text.map(|t| {
            let mut p = Part::text(t);
            if let Some(k) = kind {
                p.metadata = Some([("kind".to_string(), Value::from(k))].into());
            }
            Message::new(Role::Agent, vec![p])
        });
        StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
            task_id: "t".into(),
            context_id: "c".into(),
            status: TaskStatus {
                state,
                message,
                timestamp: None,
            },
            metadata: None,
        })
    }

    /// The remote's usage is its own numbers and words: a model name with escape sequences
    /// or of any length is cleaned and bounded; negative or fractional counts are not usage.
    #[test]
    fn hostile_remote_usage_is_cleaned_or_dropped() {
        let with = |usage: Value| {
            let mut u = status(TaskState::Working, None, None);
            if let StreamResponse::StatusUpdate(s) = &mut u {
                s.metadata = Some([("usage".to_string(), usage)].into());
            }
            let mut r = Relay::new(Bounds::default());
            r.update(&u).unwrap();
            r.usage
        };
        let model = format!("\x1b]0;pwned\x07gpt{}", "m".repeat(10_000));
        let u = with(serde_json::json!({"inputTokens": 5, "model": model})).unwrap();
        let m = u.model.unwrap();
        assert!(!m.chars().any(char::is_control), "{m:?}");
        assert!(m.chars().count() <= MAX_MODEL_CHARS + 1, "{}", m.len());
        assert!(with(serde_json::json!({"inputTokens": -5})).is_none());
        assert!(with(serde_json::json!({"outputTokens": 2.5})).is_none());
    }

    #[test]
    fn a_remote_legates_stream_reads_back_as_its_events() {
        let mut r = Relay::new(Bounds::default());
        let e = r
            .update(&status(TaskState::Working, Some("hello"), Some("message")))
            .unwrap();
        assert_eq!(
            e,
            [EventKind::Message {
                text: "hello\n".into()
            }]
        );
        let e = r
            .update(&status(TaskState::Working, Some("hmm"), Some("thought")))
            .unwrap();
        assert_eq!(e, [EventKind::Thought { text: "hmm".into() }]);
        let answer = StreamResponse::ArtifactUpdate(TaskArtifactUpdateEvent {
            task_id: "t".into(),
            context_id: "c".into(),
            artifact: Artifact {
                artifact_id: "answer".into(),
                name: None,
                description: None,
                parts: vec![
                    Part::text("hello"),
                    Part::data(
                        serde_json::json!({"stopReason": "end_turn", "usage": {"inputTokens": 7.0, "outputTokens": 3}}),
                    ),
                ],
                metadata: None,
                extensions: None,
            },
            append: None,
            last_chunk: None,
            metadata: None,
        });
        assert!(
            r.update(&answer).unwrap().is_empty(),
            "the answer is not repeated"
        );
        assert_eq!(r.usage.as_ref().unwrap().input_tokens, Some(7));
        let e = r
            .update(&status(TaskState::Completed, Some("hello"), None))
            .unwrap();
        assert!(e.is_empty());
        assert_eq!(r.finish, Some(Finish::Completed));
        assert_eq!(
            (r.task_id.as_deref(), r.context_id.as_deref()),
            (Some("t"), Some("c"))
        );
    }

    #[test]
    fn a_remote_legates_structured_events_are_taken_only_where_safe() {
        let with = |event: Value| {
            let mut m = Message::new(
                Role::Agent,
                vec![Part::text("tool t1 (read, pending): look")],
            );
            m.metadata = Some([("legateEvent".to_string(), event)].into());
            StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
                task_id: "t".into(),
                context_id: "c".into(),
                status: TaskStatus {
                    state: TaskState::Working,
                    message: Some(m),
                    timestamp: None,
                },
                metadata: None,
            })
        };
        let call = serde_json::json!({"type": "tool_call", "id": "t1", "title": "look", "toolKind": "read", "status": "pending"});
        let mut r = Relay::new(Bounds::default()).with_legate_events(true);
        let e = r.update(&with(call.clone())).unwrap();
        assert!(
            matches!(&e[..], [EventKind::ToolCall(c)] if c.id == "t1"),
            "{e:?}"
        );
        // A session or usage event from the remote is never taken as one: its text is used.
        let session = serde_json::json!({"type": "session", "sessionId": "evil", "resumed": true});
        let e = r.update(&with(session)).unwrap();
        assert!(matches!(&e[..], [EventKind::Thought { .. }]), "{e:?}");
        // A remote that is not a Legate gets no such trust.
        let mut r = Relay::new(Bounds::default());
        let e = r.update(&with(call)).unwrap();
        assert!(matches!(&e[..], [EventKind::Thought { .. }]), "{e:?}");
    }

    #[test]
    fn a_question_is_the_message_and_bounds_hold() {
        let mut r = Relay::new(Bounds {
            max_updates: 2,
            max_text_bytes: 5,
            ..Bounds::default()
        });
        let e = r
            .update(&status(TaskState::InputRequired, Some("which file?"), None))
            .unwrap();
        assert_eq!(
            e[0],
            EventKind::Message {
                text: "which".into()
            }
        );
        assert!(matches!(&e[1], EventKind::Notice { .. }));
        assert_eq!(r.finish, Some(Finish::InputRequired));
        r.update(&status(TaskState::Working, None, None)).unwrap();
        let err = r
            .update(&status(TaskState::Working, None, None))
            .unwrap_err();
        assert_eq!(err.code, legate_core::ErrorCode::RemoteProtocolError);
    }
}
