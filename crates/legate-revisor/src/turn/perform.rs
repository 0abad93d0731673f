//! Performing one step of a turn: the file it reads or writes (through the client when it
//! offers `fs/read_text_file` / `fs/write_text_file`, else the disk), the edit it asks
//! about, the command it runs, the plan it proposes.
//!
//! This module owns each step's side effect and its tool call's end. It must never act
//! before the client allowed it (reads ask nobody), and never change anything in plan mode.

use super::*;

/// Why a file could not be read or written: the client's refusal or the disk's, kept as
/// itself; it reads as its own words, the text a failed tool call reports.
#[derive(Debug, thiserror::Error)]
enum FileError {
    #[error(transparent)]
    Client(#[from] Error),
    #[error(transparent)]
    Disk(#[from] std::io::Error),
}

impl Turn<'_> {
    fn fs_read(&self) -> bool {
        lock(&self.shared.client).fs.read_text_file
    }

    fn fs_write(&self) -> bool {
        lock(&self.shared.client).fs.write_text_file
    }

    /// Sends `text` back in pieces of 5 bytes (whole characters), each piece as an answer chunk
    /// and then as a reasoning chunk: both streams carry all of it, interleaved.
    fn recite(&self, text: &str) -> Result<(), Error> {
        let mut pieces = Vec::new();
        let mut piece = String::new();
        for c in text.chars() {
            piece.push(c);
            if piece.len() >= 5 {
                pieces.push(std::mem::take(&mut piece));
            }
        }
        pieces.extend((!piece.is_empty()).then_some(piece));
        for piece in pieces {
            self.update(SessionUpdate::AgentMessageChunk(ContentChunk::new(
                text_block(piece.clone()),
            )))?;
            self.update(SessionUpdate::AgentThoughtChunk(ContentChunk::new(
                text_block(piece),
            )))?;
        }
        Ok(())
    }

    /// Reads a text file, through the client when it offers `fs/read_text_file`.
    async fn read_text(&self, path: &Path) -> Result<String, FileError> {
        if self.fs_read() {
            self.cx
                .send_request(ReadTextFileRequest::new(
                    self.session.id.clone(),
                    path.to_path_buf(),
                ))
                .block_task()
                .await
                .map(|response| response.content)
                .map_err(FileError::Client)
        } else {
            tokio::fs::read_to_string(path)
                .await
                .map_err(FileError::Disk)
        }
    }

    /// Writes a text file, through the client when it offers `fs/write_text_file`.
    async fn write_text(&self, path: &Path, content: &str) -> Result<(), FileError> {
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
                .map_err(FileError::Client)
        } else {
            if let Some(parent) = path.parent() {
                tokio::fs::create_dir_all(parent)
                    .await
                    .map_err(FileError::Disk)?;
            }
            tokio::fs::write(path, content)
                .await
                .map_err(FileError::Disk)
        }
    }

    /// The current text of `path`, or `None` when it does not exist.
    async fn existing_text(&self, path: &Path) -> Result<Option<String>, FileError> {
        match tokio::fs::try_exists(path).await {
            Ok(false) => Ok(None),
            Ok(true) => self.read_text(path).await.map(Some),
            Err(error) => Err(FileError::Disk(error)),
        }
    }

    pub(super) async fn perform(&self, instruction: Instruction) -> Result<Outcome, Error> {
        let title = instruction.title();
        let mode = self.session.mode();
        let cwd = &self.session.cwd;
        match instruction {
            Instruction::Write { path, content } => {
                let path = resolve(cwd, &path);
                let input = json!({"file_path": path, "content": content});
                self.rewrite(&title, &mode, &path, input, |_| content).await
            }
            Instruction::Append { path, text } => {
                let path = resolve(cwd, &path);
                let input = json!({"file_path": path, "text": text});
                self.rewrite(&title, &mode, &path, input, |old| {
                    format!("{}{text}", old.unwrap_or(""))
                })
                .await
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
                    Err(why) => return self.fail(&id, &title, &why.to_string()),
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
                    Err(why) => self.fail(&id, &title, &why.to_string()),
                }
            }
            Instruction::Recite { path } => {
                let path = resolve(cwd, &path);
                match self.read_text(&path).await {
                    Ok(text) => {
                        self.recite(&text)?;
                        Ok(Outcome::line(format!("- {title}: {} bytes.", text.len())))
                    }
                    Err(why) => Ok(Outcome::line(format!("- {title}: {why}."))),
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
            Err(why) => self.fail(id, title, &why.to_string()),
        }
    }

    /// Announces an edit of `path` (`input`, as the instruction gave it), refuses it in plan
    /// mode, reads what the file holds (nothing when it does not exist) and asks to replace
    /// that with `content` of it ([`Turn::edit`]).
    async fn rewrite(
        &self,
        title: &str,
        mode: &str,
        path: &Path,
        input: serde_json::Value,
        content: impl FnOnce(Option<&str>) -> String,
    ) -> Result<Outcome, Error> {
        let id = self.announce(title, ToolKind::Edit, &[path], input)?;
        if mode == MODE_PLAN {
            return self.fail(&id, title, PLAN_MODE_REFUSAL);
        }
        let old = match self.existing_text(path).await {
            Ok(old) => old,
            Err(why) => return self.fail(&id, title, &why.to_string()),
        };
        let new = content(old.as_deref());
        self.edit(&id, title, path, old, new).await
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
