//! One prompt turn: plan, perform each step as a real tool call, answer.
//!
//! This module owns the order of a turn's session updates and every side effect revisor
//! has: file writes, deletes, moves and commands, each only after the client allowed it
//! through `session/request_permission` (reads ask nobody). It runs in a task spawned off
//! the dispatch loop, so it may await the client. It must never panic, never act on a
//! refused or cancelled permission, and never change anything in plan mode.

use std::path::{Component, Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;

use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    ContentBlock, ContentChunk, CurrentModeUpdate, Diff, PermissionOption, PermissionOptionKind,
    Plan, PlanEntry, PlanEntryPriority, PlanEntryStatus, PromptRequest, ReadTextFileRequest,
    RequestPermissionOutcome, RequestPermissionRequest, SessionModeId, SessionNotification,
    SessionUpdate, StopReason, TextContent, ToolCall, ToolCallContent, ToolCallLocation,
    ToolCallStatus, ToolCallUpdate, ToolCallUpdateFields, ToolKind, UsageUpdate,
    WriteTextFileRequest,
};
use agent_client_protocol::{Client, Error};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::agent::{
    Connection, MODE_ACCEPT_EDITS, MODE_DEFAULT, MODE_PLAN, Session, lock, next_tool_call_id,
};
use crate::hook::{Directed, DirectiveContext};
use crate::instruction::{Instruction, parse_line};
use crate::report;
use crate::shell::{Ran, run_shell};
use crate::summary;

mod perform;

/// How long `run` lets a command go on.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(60);
/// How much command output (stdout then stderr) is kept.
pub const OUTPUT_LIMIT: usize = 8 * 1024;
/// How many lines of a `read` file the answer quotes.
pub const READ_LINES: usize = 20;
/// The nominal context window reported in `usage_update`.
pub const CONTEXT_WINDOW: u64 = 200_000;
/// The failure text of a refused tool call (Claude's wording).
pub const REFUSED: &str = "User refused permission to run tool";
/// The failure text of a change attempted in plan mode.
pub const PLAN_MODE_REFUSAL: &str = "revisor is in plan mode";

/// One step of a turn.
#[derive(Debug)]
enum Step {
    Instruction(Instruction),
    Directive(String),
}

impl Step {
    fn title(&self) -> String {
        match self {
            Self::Instruction(instruction) => instruction.title(),
            Self::Directive(line) => line.clone(),
        }
    }
}

/// What became of one step, for the answer; `end` stops the turn.
struct Outcome {
    report: Vec<String>,
    end: Option<StopReason>,
}

impl Outcome {
    fn line(text: String) -> Self {
        Self {
            report: vec![text],
            end: None,
        }
    }
}

/// What the client said to a permission request.
enum Decision {
    /// The client picked this option id.
    Selected(String),
    /// The client answered `cancelled`, or the turn was cancelled while waiting.
    Cancelled,
    /// The request failed (the client answered with an error).
    Failed(String),
}

/// Everything a turn needs, borrowed.
struct Turn<'a> {
    shared: &'a Connection,
    session: &'a Session,
    cx: &'a ConnectionTo<Client>,
    token: &'a CancellationToken,
}

/// Runs one turn of `request` and returns its stop reason.
pub(crate) async fn run_turn(
    shared: &Connection,
    session: &Session,
    cx: &ConnectionTo<Client>,
    request: &PromptRequest,
    token: &CancellationToken,
) -> Result<StopReason, Error> {
    let turn = Turn {
        shared,
        session,
        cx,
        token,
    };
    turn.run(request).await
}

fn text_block(text: impl Into<String>) -> ContentBlock {
    ContentBlock::Text(TextContent::new(text.into()))
}

fn text_content(text: impl Into<String>) -> Vec<ToolCallContent> {
    vec![ToolCallContent::from(text_block(text))]
}

fn words(text: &str) -> u64 {
    u64::try_from(text.split_whitespace().count()).unwrap_or(u64::MAX)
}

/// `path` against `cwd`, with `.` and `..` resolved lexically.
pub(crate) fn resolve(cwd: &Path, path: &str) -> PathBuf {
    let joined = cwd.join(path);
    let mut out = PathBuf::new();
    for component in joined.components() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    out
}

fn ask_options() -> Vec<PermissionOption> {
    vec![
        PermissionOption::new(
            "allow_always",
            "Always Allow",
            PermissionOptionKind::AllowAlways,
        ),
        PermissionOption::new("allow", "Allow", PermissionOptionKind::AllowOnce),
        PermissionOption::new("reject", "Reject", PermissionOptionKind::RejectOnce),
    ]
}

fn plan_exit_options() -> Vec<PermissionOption> {
    vec![
        PermissionOption::new(
            "exit-plan-default",
            "Yes, and manually approve edits",
            PermissionOptionKind::AllowOnce,
        ),
        PermissionOption::new(
            "exit-plan-accept-edits",
            "Yes, and auto-accept edits",
            PermissionOptionKind::AllowAlways,
        ),
        PermissionOption::new(
            "reject",
            "No, keep planning",
            PermissionOptionKind::RejectOnce,
        ),
    ]
}

impl Turn<'_> {
    async fn run(&self, request: &PromptRequest) -> Result<StopReason, Error> {
        let prompt_text = request
            .prompt
            .iter()
            .filter_map(|block| match block {
                ContentBlock::Text(text) => Some(text.text.as_str()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n");
        self.session
            .words
            .fetch_add(words(&prompt_text), Ordering::Relaxed);

        let hook = self.shared.options.directive.clone();
        if let Some(verdict) = crate::judge::answer(&prompt_text) {
            return self.judge(hook.as_deref(), &prompt_text, verdict).await;
        }
        let mut steps = Vec::new();
        let mut question = Vec::new();
        let mut contract = report::ContractSkip::default();
        let mut asked = None;
        for line in prompt_text.lines().map(str::trim).filter(|l| !l.is_empty()) {
            if contract.skips(line, &mut asked) {
                continue;
            }
            if hook.as_ref().is_some_and(|hook| hook.claims(line)) {
                steps.push(Step::Directive(line.to_owned()));
                continue;
            }
            match parse_line(line) {
                Some(instruction) => steps.push(Step::Instruction(instruction)),
                None => question.push(line.to_owned()),
            }
        }

        let mut entries: Vec<PlanEntry> = steps
            .iter()
            .map(|step| {
                PlanEntry::new(
                    step.title(),
                    PlanEntryPriority::Medium,
                    PlanEntryStatus::Pending,
                )
            })
            .collect();
        entries.push(PlanEntry::new(
            "Answer",
            PlanEntryPriority::Medium,
            PlanEntryStatus::Pending,
        ));
        self.send_plan(&entries)?;

        let mut report = Vec::new();
        for (index, step) in steps.into_iter().enumerate() {
            if self.token.is_cancelled() {
                return Ok(StopReason::Cancelled);
            }
            self.set_entry(&mut entries, index, PlanEntryStatus::InProgress)?;
            let outcome = match step {
                Step::Instruction(instruction) => self.perform(instruction).await?,
                Step::Directive(line) => match &hook {
                    Some(hook) => {
                        let context = DirectiveContext {
                            connection: self.cx.clone(),
                            session_id: self.session.id.clone(),
                            cwd: self.session.cwd.clone(),
                            mcp_servers: self.session.mcp_servers.clone(),
                            model: self.session.model(),
                        };
                        match hook.perform(line.clone(), context).await {
                            Directed::Continue => Outcome::line(format!("- {line}: done.")),
                            Directed::EndTurn(reason) => Outcome {
                                report: Vec::new(),
                                end: Some(reason),
                            },
                        }
                    }
                    None => Outcome::line(format!("- {line}: not understood.")),
                },
            };
            self.set_entry(&mut entries, index, PlanEntryStatus::Completed)?;
            report.extend(outcome.report);
            if let Some(reason) = outcome.end {
                return Ok(reason);
            }
        }
        if self.token.is_cancelled() {
            return Ok(StopReason::Cancelled);
        }

        let answer_index = entries.len() - 1;
        self.set_entry(&mut entries, answer_index, PlanEntryStatus::InProgress)?;
        let mut answer = Vec::new();
        if !report.is_empty() {
            answer.push("What I did:".to_owned());
            answer.extend(report);
        }
        let root = self.session.cwd.clone();
        let question_text = question.join("\n");
        let described = tokio::task::spawn_blocking(move || match asked {
            Some(asked) => report::answer(asked, &root, &question_text),
            None => summary::describe(&root, &question_text),
        })
        .await
        .unwrap_or_else(|error| vec![format!("Could not look at the directory: {error}")]);
        answer.extend(described);
        let mut answer_words = 0;
        for line in &answer {
            answer_words += words(line);
            self.update(SessionUpdate::AgentMessageChunk(ContentChunk::new(
                text_block(format!("{line}\n")),
            )))?;
        }
        self.set_entry(&mut entries, answer_index, PlanEntryStatus::Completed)?;
        let used = self
            .session
            .words
            .fetch_add(answer_words, Ordering::Relaxed)
            .saturating_add(answer_words);
        self.update(SessionUpdate::UsageUpdate(UsageUpdate::new(
            used,
            CONTEXT_WINDOW,
        )))?;
        Ok(StopReason::EndTurn)
    }

    /// A judge prompt (see [`crate::judge`]): one answer, no tool call, no instruction read.
    /// A hook that claims the header line answers instead (a test kit's chosen verdict).
    async fn judge(
        &self,
        hook: Option<&dyn crate::hook::DirectiveHook>,
        prompt_text: &str,
        verdict: String,
    ) -> Result<StopReason, Error> {
        let header = prompt_text.lines().next().unwrap_or_default().trim();
        if let Some(hook) = hook.filter(|hook| hook.claims(header)) {
            let context = DirectiveContext {
                connection: self.cx.clone(),
                session_id: self.session.id.clone(),
                cwd: self.session.cwd.clone(),
                mcp_servers: self.session.mcp_servers.clone(),
                model: self.session.model(),
            };
            return Ok(match hook.perform(header.to_owned(), context).await {
                Directed::Continue => StopReason::EndTurn,
                Directed::EndTurn(reason) => reason,
            });
        }
        self.update(SessionUpdate::AgentMessageChunk(ContentChunk::new(
            text_block(verdict),
        )))?;
        Ok(StopReason::EndTurn)
    }

    fn update(&self, update: SessionUpdate) -> Result<(), Error> {
        self.cx
            .send_notification(SessionNotification::new(self.session.id.clone(), update))
    }

    fn send_plan(&self, entries: &[PlanEntry]) -> Result<(), Error> {
        self.update(SessionUpdate::Plan(Plan::new(entries.to_vec())))
    }

    fn set_entry(
        &self,
        entries: &mut [PlanEntry],
        index: usize,
        status: PlanEntryStatus,
    ) -> Result<(), Error> {
        if let Some(entry) = entries.get_mut(index) {
            entry.status = status;
        }
        self.send_plan(entries)
    }

    fn set_mode(&self, mode: &str) -> Result<(), Error> {
        self.session.set_mode(mode);
        self.update(SessionUpdate::CurrentModeUpdate(CurrentModeUpdate::new(
            SessionModeId::new(mode),
        )))
    }

    /// Announces a tool call (status pending).
    fn announce(
        &self,
        title: &str,
        kind: ToolKind,
        locations: &[&Path],
        raw_input: serde_json::Value,
    ) -> Result<String, Error> {
        let id = next_tool_call_id();
        let call = ToolCall::new(id.clone(), title)
            .kind(kind)
            .status(ToolCallStatus::Pending)
            .locations(
                locations
                    .iter()
                    .map(|p| ToolCallLocation::new(p.to_path_buf()))
                    .collect(),
            )
            .raw_input(raw_input);
        self.update(SessionUpdate::ToolCall(call))?;
        Ok(id)
    }

    /// Ends a tool call with `status` and a short text.
    fn finish(&self, id: &str, status: ToolCallStatus, text: &str) -> Result<(), Error> {
        self.update(SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
            id.to_owned(),
            ToolCallUpdateFields::new()
                .status(status)
                .content(text_content(text)),
        )))
    }

    /// Asks the client about tool call `id`. A `session/cancel` while waiting counts as
    /// [`Decision::Cancelled`]; so does the client's `cancelled` outcome.
    async fn ask(
        &self,
        id: &str,
        fields: ToolCallUpdateFields,
        options: Vec<PermissionOption>,
    ) -> Decision {
        let request = RequestPermissionRequest::new(
            self.session.id.clone(),
            ToolCallUpdate::new(id.to_owned(), fields),
            options,
        );
        let sent = self.cx.send_request(request).block_task();
        let response = tokio::select! {
            response = sent => response,
            () = self.token.cancelled() => return Decision::Cancelled,
        };
        match response {
            Ok(response) => match response.outcome {
                RequestPermissionOutcome::Selected(selected) => {
                    Decision::Selected(selected.option_id.0.to_string())
                }
                RequestPermissionOutcome::Cancelled => Decision::Cancelled,
                _ => Decision::Failed("an outcome revisor does not know".to_owned()),
            },
            Err(error) => Decision::Failed(format!("the permission request failed: {error}")),
        }
    }

    /// Asks with Claude's three options; on refusal or cancellation finishes the tool call
    /// as failed and returns the outcome to report.
    async fn ask_or_fail(
        &self,
        id: &str,
        title: &str,
        fields: ToolCallUpdateFields,
    ) -> Result<Option<Outcome>, Error> {
        match self.ask(id, fields, ask_options()).await {
            Decision::Selected(option) if option == "allow" || option == "allow_always" => Ok(None),
            Decision::Selected(_) => {
                self.finish(id, ToolCallStatus::Failed, REFUSED)?;
                Ok(Some(Outcome::line(format!("- {title}: refused."))))
            }
            Decision::Failed(why) => {
                tracing::warn!(%why, "permission request failed; not acting");
                self.finish(id, ToolCallStatus::Failed, REFUSED)?;
                Ok(Some(Outcome::line(format!("- {title}: refused ({why})."))))
            }
            Decision::Cancelled => {
                self.finish(id, ToolCallStatus::Failed, REFUSED)?;
                let end = self.token.is_cancelled().then_some(StopReason::Cancelled);
                Ok(Some(Outcome {
                    report: vec![format!("- {title}: cancelled.")],
                    end,
                }))
            }
        }
    }

    /// Finishes a tool call as failed and reports why.
    fn fail(&self, id: &str, title: &str, why: &str) -> Result<Outcome, Error> {
        self.finish(id, ToolCallStatus::Failed, why)?;
        Ok(Outcome::line(format!("- {title}: failed ({why}).")))
    }

    fn done(&self, id: &str, title: &str, text: &str) -> Result<Outcome, Error> {
        self.finish(id, ToolCallStatus::Completed, text)?;
        Ok(Outcome::line(format!("- {title}: done.")))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn resolves_relative_and_dot_dot() {
        let cwd = Path::new("/work/project");
        assert_eq!(resolve(cwd, "a/b.txt"), Path::new("/work/project/a/b.txt"));
        assert_eq!(
            resolve(cwd, "./a/../b.txt"),
            Path::new("/work/project/b.txt")
        );
        assert_eq!(resolve(cwd, "../../etc/x"), Path::new("/etc/x"));
        assert_eq!(resolve(cwd, "/abs/x"), Path::new("/abs/x"));
    }
}
