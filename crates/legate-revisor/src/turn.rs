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

    fn fs_read(&self) -> bool {
        lock(&self.shared.client).fs.read_text_file
    }

    fn fs_write(&self) -> bool {
        lock(&self.shared.client).fs.write_text_file
    }

    /// Reads a text file, through the client when it offers `fs/read_text_file`.
    async fn read_text(&self, path: &Path) -> Result<String, String> {
        if self.fs_read() {
            self.cx
                .send_request(ReadTextFileRequest::new(
                    self.session.id.clone(),
                    path.to_path_buf(),
                ))
                .block_task()
                .await
                .map(|response| response.content)
                .map_err(|error| error.to_string())
        } else {
            tokio::fs::read_to_string(path)
                .await
                .map_err(|error| error.to_string())
        }
    }

    /// Writes a text file, through the client when it offers `fs/write_text_file`.
    async fn write_text(&self, path: &Path, content: &str) -> Result<(), String> {
        if self.fs_write() {
            self.cx
                .send_request(WriteTextFileRequest::new(
                    self.session.id.clone(),
                    path.to_path_buf(),
                    content.to_owned(),
                ))
                .block_task()
                .await
                .map(|_| ())
                .map_err(|error| error.to_string())
        } else {
            if let Some(parent) = path.parent() {
                tokio::fs::create_dir_all(parent)
                    .await
                    .map_err(|error| error.to_string())?;
            }
            tokio::fs::write(path, content)
                .await
                .map_err(|error| error.to_string())
        }
    }

    /// The current text of `path`, or `None` when it does not exist.
    async fn existing_text(&self, path: &Path) -> Result<Option<String>, String> {
        match tokio::fs::try_exists(path).await {
            Ok(false) => Ok(None),
            Ok(true) => self.read_text(path).await.map(Some),
            Err(error) => Err(error.to_string()),
        }
    }

    async fn perform(&self, instruction: Instruction) -> Result<Outcome, Error> {
        let title = instruction.title();
        let mode = self.session.mode();
        let cwd = &self.session.cwd;
        match instruction {
            Instruction::Write { path, content } => {
                let path = resolve(cwd, &path);
                let id = self.announce(
                    &title,
                    ToolKind::Edit,
                    &[&path],
                    json!({"file_path": path, "content": content}),
                )?;
                if mode == MODE_PLAN {
                    return self.fail(&id, &title, PLAN_MODE_REFUSAL);
                }
                let old = match self.existing_text(&path).await {
                    Ok(old) => old,
                    Err(why) => return self.fail(&id, &title, &why),
                };
                self.edit(&id, &title, &path, old, content).await
            }
            Instruction::Append { path, text } => {
                let path = resolve(cwd, &path);
                let id = self.announce(
                    &title,
                    ToolKind::Edit,
                    &[&path],
                    json!({"file_path": path, "text": text}),
                )?;
                if mode == MODE_PLAN {
                    return self.fail(&id, &title, PLAN_MODE_REFUSAL);
                }
                let old = match self.existing_text(&path).await {
                    Ok(old) => old,
                    Err(why) => return self.fail(&id, &title, &why),
                };
                let new = format!("{}{text}", old.as_deref().unwrap_or(""));
                self.edit(&id, &title, &path, old, new).await
            }
            Instruction::Replace { path, old, new } => {
                let path = resolve(cwd, &path);
                let id = self.announce(
                    &title,
                    ToolKind::Edit,
                    &[&path],
                    json!({"file_path": path, "old_string": old, "new_string": new}),
                )?;
                if mode == MODE_PLAN {
                    return self.fail(&id, &title, PLAN_MODE_REFUSAL);
                }
                let current = match self.read_text(&path).await {
                    Ok(current) => current,
                    Err(why) => return self.fail(&id, &title, &why),
                };
                if !current.contains(&old) {
                    let why = format!("{old:?} is not in {}", path.display());
                    return self.fail(&id, &title, &why);
                }
                let replaced = current.replace(&old, &new);
                self.edit(&id, &title, &path, Some(current), replaced).await
            }
            Instruction::Delete { path } => {
                let path = resolve(cwd, &path);
                let id =
                    self.announce(&title, ToolKind::Delete, &[&path], json!({"path": path}))?;
                if mode == MODE_PLAN {
                    return self.fail(&id, &title, PLAN_MODE_REFUSAL);
                }
                let Ok(metadata) = tokio::fs::symlink_metadata(&path).await else {
                    return self.fail(&id, &title, "no such file or directory");
                };
                let fields = ToolCallUpdateFields::new()
                    .title(title.clone())
                    .kind(ToolKind::Delete)
                    .locations(vec![ToolCallLocation::new(path.clone())]);
                if let Some(outcome) = self.ask_or_fail(&id, &title, fields).await? {
                    return Ok(outcome);
                }
                let removed = if metadata.is_dir() {
                    tokio::fs::remove_dir_all(&path).await
                } else {
                    tokio::fs::remove_file(&path).await
                };
                match removed {
                    Ok(()) => self.done(&id, &title, &format!("Deleted {}", path.display())),
                    Err(error) => self.fail(&id, &title, &error.to_string()),
                }
            }
            Instruction::Move { from, to } => {
                let (from, to) = (resolve(cwd, &from), resolve(cwd, &to));
                let id = self.announce(
                    &title,
                    ToolKind::Move,
                    &[&from, &to],
                    json!({"from": from, "to": to}),
                )?;
                if mode == MODE_PLAN {
                    return self.fail(&id, &title, PLAN_MODE_REFUSAL);
                }
                if tokio::fs::symlink_metadata(&from).await.is_err() {
                    return self.fail(&id, &title, "no such file or directory");
                }
                let fields = ToolCallUpdateFields::new()
                    .title(title.clone())
                    .kind(ToolKind::Move)
                    .locations(vec![
                        ToolCallLocation::new(from.clone()),
                        ToolCallLocation::new(to.clone()),
                    ]);
                if let Some(outcome) = self.ask_or_fail(&id, &title, fields).await? {
                    return Ok(outcome);
                }
                if let Some(parent) = to.parent()
                    && let Err(error) = tokio::fs::create_dir_all(parent).await
                {
                    return self.fail(&id, &title, &error.to_string());
                }
                match tokio::fs::rename(&from, &to).await {
                    Ok(()) => self.done(
                        &id,
                        &title,
                        &format!("Moved {} to {}", from.display(), to.display()),
                    ),
                    Err(error) => self.fail(&id, &title, &error.to_string()),
                }
            }
            Instruction::Run { command } => self.run_command(&title, &command, &mode).await,
            Instruction::Fetch { url } => {
                let id = self.announce(&title, ToolKind::Fetch, &[], json!({"url": url}))?;
                let fields = ToolCallUpdateFields::new()
                    .title(title.clone())
                    .kind(ToolKind::Fetch);
                if let Some(outcome) = self.ask_or_fail(&id, &title, fields).await? {
                    return Ok(outcome);
                }
                self.fail(&id, &title, "revisor has no network")
            }
            Instruction::Read { path } => {
                let path = resolve(cwd, &path);
                let id =
                    self.announce(&title, ToolKind::Read, &[&path], json!({"file_path": path}))?;
                match self.read_text(&path).await {
                    Ok(text) => {
                        let total = text.lines().count();
                        let first: Vec<&str> = text.lines().take(READ_LINES).collect();
                        let quoted = first.join("\n");
                        self.finish(&id, ToolCallStatus::Completed, &quoted)?;
                        let mut report = vec![format!(
                            "- {title}: {total} lines{}",
                            if total == 0 { "." } else { "; it begins:" }
                        )];
                        report.extend(first.iter().map(|line| format!("    {line}")));
                        Ok(Outcome { report, end: None })
                    }
                    Err(why) => self.fail(&id, &title, &why),
                }
            }
            Instruction::Plan { text } => self.propose_plan(&title, &text).await,
            Instruction::Think { text } => {
                self.update(SessionUpdate::AgentThoughtChunk(ContentChunk::new(
                    text_block(text),
                )))?;
                Ok(Outcome {
                    report: Vec::new(),
                    end: None,
                })
            }
            Instruction::Mode { id } => {
                if [MODE_DEFAULT, MODE_PLAN, MODE_ACCEPT_EDITS].contains(&id.as_str()) {
                    self.set_mode(&id)?;
                    Ok(Outcome::line(format!("- {title}: done.")))
                } else {
                    Ok(Outcome::line(format!(
                        "- {title}: unknown mode (known: {MODE_DEFAULT}, {MODE_PLAN}, {MODE_ACCEPT_EDITS})."
                    )))
                }
            }
        }
    }

    /// Asks about an edit (with its diff) and, if allowed, writes `new` to `path`.
    async fn edit(
        &self,
        id: &str,
        title: &str,
        path: &Path,
        old: Option<String>,
        new: String,
    ) -> Result<Outcome, Error> {
        let diff = Diff::new(path.to_path_buf(), new.clone()).old_text(old);
        let fields = ToolCallUpdateFields::new()
            .title(title.to_owned())
            .kind(ToolKind::Edit)
            .locations(vec![ToolCallLocation::new(path.to_path_buf())])
            .content(vec![ToolCallContent::Diff(diff)]);
        if let Some(outcome) = self.ask_or_fail(id, title, fields).await? {
            return Ok(outcome);
        }
        match self.write_text(path, &new).await {
            Ok(()) => self.done(
                id,
                title,
                &format!("Wrote {} bytes to {}", new.len(), path.display()),
            ),
            Err(why) => self.fail(id, title, &why),
        }
    }

    async fn run_command(&self, title: &str, command: &str, mode: &str) -> Result<Outcome, Error> {
        let description = format!("Run `{command}` in {}", self.session.cwd.display());
        let id = self.announce(
            title,
            ToolKind::Execute,
            &[],
            json!({"command": command, "description": description}),
        )?;
        if mode == MODE_PLAN {
            return self.fail(&id, title, PLAN_MODE_REFUSAL);
        }
        let fields = ToolCallUpdateFields::new()
            .title(title.to_owned())
            .kind(ToolKind::Execute)
            .raw_input(json!({"command": command, "description": description}));
        if let Some(outcome) = self.ask_or_fail(&id, title, fields).await? {
            return Ok(outcome);
        }
        self.update(SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
            id.clone(),
            ToolCallUpdateFields::new().status(ToolCallStatus::InProgress),
        )))?;
        let ran = run_shell(command, &self.session.cwd, self.token).await;
        let (status, text, report) = match ran {
            Ran::Exited { code, output } => {
                let status = if code == Some(0) {
                    ToolCallStatus::Completed
                } else {
                    ToolCallStatus::Failed
                };
                let code_text = code.map_or_else(|| "a signal".to_owned(), |c| c.to_string());
                let report = if code == Some(0) {
                    format!("- Ran `{command}`: exit 0.")
                } else {
                    format!("- Ran `{command}`: failed (exit {code_text}).")
                };
                (status, format!("exit {code_text}\n{output}"), report)
            }
            Ran::TimedOut { output } => (
                ToolCallStatus::Failed,
                format!("timed out after {}s\n{output}", RUN_TIMEOUT.as_secs()),
                format!("- Ran `{command}`: timed out."),
            ),
            Ran::Cancelled => (
                ToolCallStatus::Failed,
                "cancelled".to_owned(),
                format!("- Ran `{command}`: cancelled."),
            ),
            Ran::CouldNotStart(why) => (
                ToolCallStatus::Failed,
                format!("could not start: {why}"),
                format!("- Ran `{command}`: could not start ({why})."),
            ),
        };
        self.finish(&id, status, &text)?;
        Ok(Outcome::line(report))
    }

    async fn propose_plan(&self, title: &str, text: &str) -> Result<Outcome, Error> {
        let id = self.announce(title, ToolKind::SwitchMode, &[], json!({"plan": text}))?;
        let fields = ToolCallUpdateFields::new()
            .title(title.to_owned())
            .kind(ToolKind::SwitchMode)
            .raw_input(json!({"plan": text}))
            .content(text_content(text));
        match self.ask(&id, fields, plan_exit_options()).await {
            Decision::Selected(option) if option == "exit-plan-default" => {
                self.set_mode(MODE_DEFAULT)?;
                self.done(&id, title, "User approved the plan")
            }
            Decision::Selected(option) if option == "exit-plan-accept-edits" => {
                self.set_mode(MODE_ACCEPT_EDITS)?;
                self.done(&id, title, "User approved the plan")
            }
            Decision::Selected(_) | Decision::Cancelled | Decision::Failed(_) => {
                // Refusing to leave plan mode stops the turn (Claude's behaviour).
                self.finish(&id, ToolCallStatus::Failed, REFUSED)?;
                Ok(Outcome {
                    report: Vec::new(),
                    end: Some(StopReason::Cancelled),
                })
            }
        }
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
