//! The steps of an `agy` turn around its one process: before it, the supervision check, the
//! model choice and the `--json-schema` argument; after it, the turn's usage from the
//! conversation's cumulative counters and how the run's end is classified as an error.
//!
//! It owns only those steps; it must never spawn or stop a process (that is `run`'s) nor
//! open a session (that is [`super::backend`]'s).

use super::args;
use super::backend::{AgySession, lock};
use super::discovery::Discovery;
use super::models;
use super::run::RunEnd;
use super::usage::{self, Counters};
use crate::selection::{self, Choice};
use crate::{EventSink, Turn};
use legate_core::{Error, ErrorCode, EventKind, Result, TaskMode};
use std::ffi::OsString;
use std::path::PathBuf;
use tracing::warn;

/// `--json-schema`'s value for one run, and the file holding the schema when it was too
/// long to pass inline (removed when this is dropped).
#[derive(Debug)]
pub(super) struct SchemaArg {
    pub(super) arg: OsString,
    file: Option<PathBuf>,
}

impl Drop for SchemaArg {
    fn drop(&mut self) {
        if let Some(file) = &self.file {
            let _ = std::fs::remove_file(file);
        }
    }
}

impl AgySession {
    /// What discovery found (version, capabilities).
    pub fn discovery(&self) -> &Discovery {
        &self.discovery
    }

    /// Refuses what this protocol cannot supervise: a write task in a directory Legate does
    /// not own (agy edits without asking, and its sandbox is the only limit).
    pub(super) fn check_supervision(&self, mode: TaskMode) -> Result<()> {
        if mode == TaskMode::Write && !self.boundary.owned && !self.boundary.allow_execute {
            return Err(Error::new(
                ErrorCode::AgentUnsupervised,
                format!(
                    "agy acts without asking, so agent `{}` may write only in a sandbox Legate owns; run it read-only in {}, or set allow_execute for it",
                    self.spec.name,
                    self.root.display()
                ),
            ));
        }
        Ok(())
    }

    /// The model for this turn, checked against `agy models`.
    pub(super) async fn model_for(&self, turn: &Turn) -> Result<Choice> {
        let saved = match &self.legate_home {
            Some(home) => selection::load_preference(home, &self.spec.name)?,
            None => None,
        };
        let choice = selection::choose(turn.model.as_deref(), saved, self.spec.model.as_deref());
        let Choice::Model(id) = &choice else {
            return Ok(choice);
        };
        let caps = &self.discovery.capabilities;
        if !caps.model_flag || !caps.models {
            return Err(Error::new(
                ErrorCode::ModelNotAvailable,
                format!("this agy cannot select models, so model {id} is not available; use auto"),
            ));
        }
        let offered = models::list_models(
            &self.discovery.executable,
            &self.env,
            &self.root,
            self.probe_timeout,
            self.fence.fenced(),
        )
        .await?;
        if !offered.iter().any(|m| m.id == *id) {
            let ids: Vec<&str> = offered.iter().map(|m| m.id.as_str()).collect();
            return Err(Error::new(
                ErrorCode::ModelNotAvailable,
                format!(
                    "agy does not offer model {id}; it offers: {}",
                    ids.join(", ")
                ),
            ));
        }
        Ok(choice)
    }

    /// Turns the run's cumulative usage into the turn's, saving the new total. A run without
    /// valid counters drops the total (in memory and on disk): the tokens it may have spent
    /// are unknown, so the next turn gets no usage rather than this one's.
    pub(super) fn account(&self, end: &RunEnd, model: Option<String>, sink: &EventSink) {
        let tr = &end.translator;
        let raw = tr
            .result
            .as_ref()
            .and_then(|r| r.usage.clone())
            .or_else(|| tr.step_usage.clone());
        let warn_event = |why: String| {
            warn!(agent = %self.spec.name, reason = %why, "agy usage not available for this turn");
            sink.send(EventKind::Notice {
                message: format!("usage not available for this turn: {why}"),
                detail: serde_json::json!({ "warning": "usage", "reason": why }),
            });
        };
        let conversation = tr
            .conversation_id
            .clone()
            .or_else(|| lock(&self.conversation).clone())
            .filter(|id| args::valid_conversation_id(id));
        let now = match raw.as_ref().map(Counters::parse) {
            Some(Ok(c)) => c,
            invalid => {
                *lock(&self.total) = None;
                if let (Some(dir), Some(id)) = (&self.state_dir, conversation.as_deref())
                    && let Err(e) = usage::forget_total(dir, id)
                {
                    warn!(error = %e, "could not forget the conversation's usage total");
                }
                match invalid {
                    Some(Err(why)) => warn_event(why),
                    _ => warn_event(if tr.result.is_some() {
                        "agy reported no usage".into()
                    } else {
                        "the run ended without reporting usage".into()
                    }),
                }
                return;
            }
        };
        let before = *lock(&self.total);
        *lock(&self.total) = Some(now);
        if let (Some(dir), Some(id)) = (&self.state_dir, conversation.as_deref())
            && let Err(e) = usage::save_total(dir, id, &now)
        {
            warn!(error = %e, "could not save the conversation's usage total");
        }
        match usage::turn_usage(before.as_ref(), &now) {
            Ok(mut u) => {
                u.model = model;
                sink.send(EventKind::Usage { usage: u });
            }
            Err(why) => warn_event(why),
        }
    }

    /// The turn's JSON Schema as `--json-schema` takes it: compact JSON inline when short,
    /// else a 0600 file in the agent's state directory (`schemas/<task>.json`, removed with
    /// the returned value). `AGY_INCOMPATIBLE` when this agy has no `--json-schema`.
    pub(super) fn schema_arg(&self, turn: &Turn) -> Result<Option<SchemaArg>> {
        let Some(schema) = &turn.json_schema else {
            return Ok(None);
        };
        if !self.discovery.capabilities.json_schema {
            return Err(Error::new(
                ErrorCode::AgyIncompatible,
                "this agy does not offer `--json-schema`, so it cannot answer with structured output",
            ));
        }
        let text = schema.to_string();
        let dir = match &self.state_dir {
            Some(dir) if text.len() > args::INLINE_SCHEMA_MAX => dir.join("schemas"),
            _ => {
                return Ok(Some(SchemaArg {
                    arg: text.into(),
                    file: None,
                }));
            }
        };
        let file = dir.join(format!("{}.json", turn.task_id));
        usage::write_private(&file, text.as_bytes()).map_err(|e| {
            let sentence = format!("could not write the JSON Schema to {}", file.display());
            Error::quoting(ErrorCode::AgentStartFailed, sentence, e)
        })?;
        Ok(Some(SchemaArg {
            arg: file.clone().into_os_string(),
            file: Some(file),
        }))
    }

    /// How the run ended, as an error, or `None` for a success. In this order: a login
    /// phrase is `AGY_AUTH_REQUIRED`; agy's own refusal of an MCP call it could not ask about
    /// is `AGY_MCP_PERMISSION_REQUIRED` (even when the run says `SUCCESS`: the selected tool
    /// never ran); otherwise a failed run is `CLI_INPUT_FAILED` when the prompt could not be
    /// written to its stdin, `AGY_IO_FAILED` when its stdout could not be read,
    /// `STREAM_PARSE_ERROR` when no result came and lines could not be parsed, and
    /// `AGY_PROCESS_FAILED` for the process's own failure (an exit code, no result, a status
    /// other than `SUCCESS`).
    pub(super) fn failure(&self, end: &mut RunEnd) -> Option<Error> {
        let tr = &end.translator;
        let success = tr.result.as_ref().is_some_and(|r| r.status == "SUCCESS");
        let exit_ok = end.status.is_some_and(|s| s.success());
        if success && exit_ok && !end.mcp_permission_denied {
            return None;
        }
        let exit = match end.status {
            Some(s) => match s.code() {
                Some(c) => format!("exited with code {c}"),
                None => "was killed by a signal".to_string(),
            },
            None => "ended with an unknown status".to_string(),
        };
        let result_error = tr.result.as_ref().and_then(|r| r.error.clone());
        let login =
            end.login_required || result_error.as_deref().is_some_and(models::is_login_phrase);
        if !login && end.mcp_permission_denied {
            return Some(Error::new(
                ErrorCode::AgyMcpPermissionRequired,
                "agy denied a call to a selected MCP tool because its own permission for it (`mcp(<server>/<tool>)` in agy's settings) is not granted, and headless agy cannot ask; grant exactly that server and tool in agy's settings, then run again",
            ));
        }
        let mut message = match (&result_error, &tr.result) {
            (Some(e), _) => format!("agy failed: {}", super::translate::truncate(e, 500)),
            (None, Some(r)) if r.status != "SUCCESS" => {
                format!("agy ended its turn with status {:?} and {exit}", r.status)
            }
            (None, Some(_)) => format!("agy {exit}"),
            (None, None) => format!("agy {exit} without a result"),
        };
        if let Some(last) = end.stderr_tail.last() {
            message.push_str(&format!(
                "; its last stderr line: {}",
                super::translate::truncate(last, 300)
            ));
        }
        if login {
            return Some(Error::new(ErrorCode::AgyAuthRequired, message));
        }
        if let Some(e) = end.input_error.take() {
            message.push_str("; the prompt could not be written to its stdin");
            return Some(Error::caused_by(ErrorCode::CliInputFailed, message, e));
        }
        if let Some(e) = end.output_error.take() {
            message.push_str("; its output could not be read");
            return Some(Error::caused_by(ErrorCode::AgyIoFailed, message, e));
        }
        if tr.result.is_none() && tr.parse_errors > 0 {
            message.push_str(&format!(
                "; {} line(s) of its output could not be parsed",
                tr.parse_errors
            ));
            return Some(Error::new(ErrorCode::StreamParseError, message));
        }
        Some(Error::new(ErrorCode::AgyProcessFailed, message))
    }
}
