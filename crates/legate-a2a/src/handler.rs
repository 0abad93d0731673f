//! The A2A methods over the engine, for one agent. The SDK parses JSON-RPC and HTTP+JSON and
//! frames SSE; this handler checks `A2A-Version` and the message's required fields, and
//! otherwise only translates into engine calls. Every answer and error is scrubbed of this
//! machine's paths on the way out (`crate::scrub`). Tasks
//! are the engine's own (its store is the task store): the SDK's in-memory store is bypassed,
//! so stored tasks answer `GetTask` and `SubscribeToTask` after a restart.

use crate::convert;
use crate::scrub::Scrub;
use a2a::{
    A2AError, AgentCard, CancelTaskRequest, DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest, GetTaskPushNotificationConfigRequest, GetTaskRequest,
    ListTaskPushNotificationConfigsRequest, ListTaskPushNotificationConfigsResponse,
    ListTasksRequest, ListTasksResponse, Message, PartContent, Role, SendMessageRequest,
    SendMessageResponse, StreamResponse, SubscribeToTaskRequest, TaskPushNotificationConfig,
};
use a2a_server::{RequestHandler, ServiceParams};
use async_trait::async_trait;
use futures::stream::BoxStream;
use legate_core::{ErrorCode, EventKind, Task, TaskState, Timestamp};
use legate_engine::TaskFilter;
use legate_engine::{Engine, Inbound};
use std::path::PathBuf;
use tokio::sync::mpsc;

/// Default and largest `ListTasks` page.
pub const DEFAULT_PAGE_SIZE: i32 = 50;
/// The largest `pageSize` accepted.
pub const MAX_PAGE_SIZE: i32 = 100;
/// How many stored events one read of a task's history takes at a time.
const HISTORY_PAGE: usize = 1000;

/// The A2A request handler of one configured agent.
#[derive(Debug, Clone)]
pub struct AgentHandler {
    engine: Engine,
    agent: String,
    /// Where a copy workspace's project may lie (canonical); empty: copies refused.
    copy_roots: Vec<PathBuf>,
}

impl AgentHandler {
    /// The handler of `agent` (a configured agent name).
    pub fn new(engine: Engine, agent: impl Into<String>) -> Self {
        Self {
            engine,
            agent: agent.into(),
            copy_roots: Vec::new(),
        }
    }

    /// Allows copy workspaces of projects under `roots` (see `crate::workspace`).
    pub fn with_copy_roots(mut self, roots: Vec<PathBuf>) -> Self {
        self.copy_roots = roots;
        self
    }

    /// What hides this machine's paths in answers about `task` (or in errors, without one).
    fn hide(&self, task: Option<&Task>) -> Scrub {
        Scrub::new(
            self.engine.config().paths.home(),
            task.and_then(|t| t.root.as_deref()),
        )
    }

    /// An engine error as the A2A error the caller gets, this machine's paths hidden.
    fn error(&self, e: &legate_core::Error) -> A2AError {
        self.hide(None).error(convert::error(e))
    }

    /// `task` as an A2A task, with its `patch` artifact when it is a finished copy task and
    /// artifacts are asked for.
    async fn a2a_task(
        &self,
        task: &Task,
        history: Option<i32>,
        artifacts: bool,
    ) -> Result<a2a::Task, A2AError> {
        let messages = self.history(task, history)?;
        let mut out = convert::task_with_history(task, messages, history, artifacts);
        if artifacts && let Some(patch) = crate::patch::artifact(&self.engine, task).await {
            out.artifacts.get_or_insert_with(Vec::new).push(patch);
        }
        if artifacts && task.is_terminal() {
            for a in self
                .engine
                .artifacts()
                .list(task.id.as_str())
                .unwrap_or_default()
            {
                let bytes = match &a.sha256 {
                    Some(sha) => self
                        .engine
                        .artifacts()
                        .read(task.id.as_str(), &a.name, sha)
                        .await
                        .ok()
                        .map(|r| r.bytes),
                    None => None,
                };
                out.artifacts
                    .get_or_insert_with(Vec::new)
                    .push(convert::collected_artifact(&a, bytes));
            }
        }
        self.hide(Some(task)).task(&mut out);
        Ok(out)
    }

    /// The task's messages over all its turns, read from its stored events (see
    /// [`crate::history`]); none are read when `history_length` is 0.
    fn history(
        &self,
        task: &Task,
        history_length: Option<i32>,
    ) -> Result<Vec<a2a::Message>, A2AError> {
        if history_length == Some(0) {
            return Ok(Vec::new());
        }
        let mut events = Vec::new();
        loop {
            let after = events.last().map_or(0, |e: &legate_core::Event| e.seq);
            let page = self
                .engine
                .events(&task.id, after, HISTORY_PAGE)
                .map_err(|e| self.error(&e))?;
            let done = page.len() < HISTORY_PAGE;
            events.extend(page);
            if done {
                break;
            }
        }
        Ok(crate::history::from_events(task, &events)
            .unwrap_or_else(|| crate::history::from_row(task)))
    }

    /// A task of this agent by exact id; anything else is `TASK_NOT_FOUND`.
    fn find(&self, id: &str) -> Result<Task, A2AError> {
        match self.engine.messages().task_of(&self.agent, id) {
            Ok(t) => Ok(t),
            Err(e) if e.code == ErrorCode::TaskNotFound => Err(A2AError::task_not_found(id)),
            Err(e) => Err(self.error(&e)),
        }
    }

    /// Starts the task a message asks for, through the engine's one call for an inbound
    /// message ([`Messages::deliver`](legate_engine::Messages::deliver), which holds every conversation rule). Returns the task and
    /// the event number after which its stream starts.
    fn submit(&self, message: &Message) -> Result<(Task, u64), A2AError> {
        // The copy-workspace extension: the message carries the copy's files (`bundle`).
        let max_transfer = self.engine.config().fronts.max_transfer_bytes;
        let (text, workspace) = match crate::bundle::received(message, max_transfer)? {
            Some(b) => (b.text, Some(b.workspace)),
            None => (
                message_text(message)?,
                crate::workspace::requested(message, &self.copy_roots)?,
            ),
        };
        let inbound = Inbound {
            agent: self.agent.clone(),
            context_id: message.context_id.clone(),
            task_id: message.task_id.clone(),
            message_id: Some(message.message_id.clone()),
            text,
            workspace,
            role: crate::workspace::role(message)?,
            continues: crate::continuation::continues(message)?,
        };
        let delivered = self
            .engine
            .messages()
            .deliver(inbound)
            .map_err(|e| self.error(&e))?;
        Ok((delivered.task, delivered.after))
    }

    /// The stream of a task: the task first, then every event translated, replayed from the
    /// store (after event `after`) and then live, until the terminal status. With
    /// `ends_at_input` (the stream of a message), a task waiting for input ends the stream
    /// there: the caller replies with a new message. Without it (`SubscribeToTask`), the
    /// stream follows the task through waits and replies to its terminal status. With
    /// `plan_changes` (the message named the plan-changes extension), plans after the first
    /// travel as what changed.
    fn stream(
        &self,
        task: Task,
        after: u64,
        ends_at_input: bool,
        plan_changes: bool,
    ) -> BoxStream<'static, Result<StreamResponse, A2AError>> {
        let (tx, rx) = mpsc::channel::<Result<StreamResponse, A2AError>>(64);
        let engine = self.engine.clone();
        let handler = self.clone();
        let mut scrub = self.hide(Some(&task));
        tokio::spawn(async move {
            if tx
                .send(Ok(scrub.response(StreamResponse::Task(convert::task(
                    &task, None, true,
                )))))
                .await
                .is_err()
                || task.is_terminal()
                || (ends_at_input && task.state == TaskState::InputRequired)
            {
                return;
            }
            let mut current = task;
            // A stream relays plans: one that fell behind skips those already superseded.
            let mut sub = engine
                .subscribe(&current.id, after)
                .skipping_superseded_plans();
            let mut translator = convert::Translator::new().with_plan_changes(plan_changes);
            loop {
                let event = match sub.next().await {
                    Ok(Some(e)) => e,
                    Ok(None) => return,
                    Err(e) => {
                        let _ = tx.send(Err(handler.error(&e))).await;
                        return;
                    }
                };
                let waits = matches!(
                    &event.kind,
                    EventKind::Status { state, .. } if *state == TaskState::InputRequired
                );
                if let EventKind::Status { state, .. } = &event.kind {
                    if state.is_terminal() || waits {
                        // As stored with this status: result, status message, error.
                        match engine.records().stored_task(&current.id) {
                            Ok(Some(t)) => current = t,
                            Ok(None) => {}
                            Err(e) => {
                                let _ = tx.send(Err(handler.error(&e))).await;
                                return;
                            }
                        }
                    } else if *state == current.state {
                        // Already said: the task frame or the previous status carried it.
                        continue;
                    } else {
                        current.state = *state;
                    }
                }
                if current.root.is_none() {
                    // The workspace is made after the stream starts: hide it once it is.
                    if let Ok(Some(t)) = engine.records().stored_task(&current.id)
                        && t.root.is_some()
                    {
                        scrub = handler.hide(Some(&t));
                        current.root = t.root;
                    }
                }
                let mut items = translator.event_at(&current, &event.kind, event.at);
                let ends =
                    matches!(&event.kind, EventKind::Status { state, .. } if state.is_terminal());
                if ends && let Some(patch) = crate::patch::artifact(&handler.engine, &current).await
                {
                    // Just before the final status, which ends the stream.
                    let at = items.len().saturating_sub(1);
                    items.insert(
                        at,
                        StreamResponse::ArtifactUpdate(a2a::TaskArtifactUpdateEvent {
                            task_id: current.id.0.clone(),
                            context_id: current.context_id.clone(),
                            artifact: patch,
                            append: None,
                            last_chunk: Some(true),
                            metadata: None,
                        }),
                    );
                }
                for item in items {
                    if tx.send(Ok(scrub.response(item))).await.is_err() {
                        return;
                    }
                }
                if waits && ends_at_input {
                    return;
                }
            }
        });
        Box::pin(futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|item| (item, rx))
        }))
    }
}

/// What a message to an agent must carry (§4.1.4): a `messageId` and the role `ROLE_USER`.
/// A request without a message at all decodes as an empty one, and is refused here.
fn check_message(message: &Message) -> Result<(), A2AError> {
    if message.message_id.trim().is_empty() {
        return Err(A2AError::invalid_params(
            "INVALID_INPUT: message.messageId is required",
        ));
    }
    if message.role != Role::User {
        return Err(A2AError::invalid_params(
            "INVALID_INPUT: message.role must be ROLE_USER",
        ));
    }
    Ok(())
}

/// §3.6.2: the `A2A-Version` a request names (an absent header means 0.3) must be 1.x. The
/// SDK checks this for JSON-RPC; its HTTP+JSON binding passes the headers here unchecked, so
/// every method checks.
fn check_version(params: &ServiceParams) -> Result<(), A2AError> {
    let requested = params
        .get("a2a-version")
        .and_then(|v| v.first())
        .map_or("0.3", String::as_str);
    match requested.trim().split('.').next().map(str::parse::<u32>) {
        Some(Ok(1)) => Ok(()),
        _ => Err(A2AError::version_not_supported(requested)),
    }
}

/// The text of a message: its text parts, one per line (empty when it has none). Other parts
/// are refused (Legate's agents take text prompts).
fn message_text(message: &Message) -> Result<String, A2AError> {
    let mut lines = Vec::new();
    for part in &message.parts {
        match &part.content {
            PartContent::Text(t) => lines.push(t.as_str()),
            _ => {
                return Err(A2AError::new(
                    a2a::error_code::CONTENT_TYPE_NOT_SUPPORTED,
                    "only text parts are accepted",
                ));
            }
        }
    }
    Ok(lines.join("\n"))
}

fn history_length(n: Option<i32>) -> Result<Option<i32>, A2AError> {
    match n {
        Some(n) if n < 0 => Err(A2AError::invalid_params(
            "historyLength must not be negative",
        )),
        other => Ok(other),
    }
}

#[async_trait]
impl RequestHandler for AgentHandler {
    async fn send_message(
        &self,
        params: &ServiceParams,
        req: SendMessageRequest,
    ) -> Result<SendMessageResponse, A2AError> {
        check_version(params)?;
        let config = req.configuration.as_ref();
        let history = history_length(config.and_then(|c| c.history_length))?;
        if config.is_some_and(|c| c.task_push_notification_config.is_some()) {
            return Err(A2AError::push_notification_not_supported());
        }
        check_message(&req.message)?;
        let (task, _) = self.submit(&req.message)?;
        let task = if config.and_then(|c| c.return_immediately) == Some(true)
            || task.state == TaskState::InputRequired
        {
            task
        } else {
            let ended = self
                .engine
                .wait(&task.id)
                .await
                .map_err(|e| self.error(&e))?;
            // The agent said its answer needs no task (A2A §3.1.1): a bare Message.
            if req.message.task_id.is_none()
                && let Some(mut message) = crate::direct::direct_message(&ended)
            {
                self.hide(Some(&ended)).message(&mut message);
                return Ok(SendMessageResponse::Message(message));
            }
            ended
        };
        Ok(SendMessageResponse::Task(
            self.a2a_task(&task, history, true).await?,
        ))
    }

    async fn send_streaming_message(
        &self,
        params: &ServiceParams,
        req: SendMessageRequest,
    ) -> Result<BoxStream<'static, Result<StreamResponse, A2AError>>, A2AError> {
        check_version(params)?;
        if req
            .configuration
            .as_ref()
            .is_some_and(|c| c.task_push_notification_config.is_some())
        {
            return Err(A2AError::push_notification_not_supported());
        }
        check_message(&req.message)?;
        let (task, after) = self.submit(&req.message)?;
        let changes = req.message.extensions.as_ref().is_some_and(|uris| {
            uris.iter()
                .any(|u| u == legate_core::remote::PLAN_CHANGES_EXTENSION)
        });
        Ok(self.stream(task, after, true, changes))
    }

    async fn get_task(
        &self,
        params: &ServiceParams,
        req: GetTaskRequest,
    ) -> Result<a2a::Task, A2AError> {
        check_version(params)?;
        let history = history_length(req.history_length)?;
        let task = self.find(&req.id)?;
        self.a2a_task(&task, history, true).await
    }

    async fn list_tasks(
        &self,
        params: &ServiceParams,
        req: ListTasksRequest,
    ) -> Result<ListTasksResponse, A2AError> {
        check_version(params)?;
        let page_size = req.page_size.unwrap_or(DEFAULT_PAGE_SIZE);
        if !(1..=MAX_PAGE_SIZE).contains(&page_size) {
            return Err(A2AError::invalid_params(format!(
                "pageSize must be between 1 and {MAX_PAGE_SIZE}"
            )));
        }
        let history = history_length(req.history_length)?;
        let before = match req.page_token.as_deref() {
            None | Some("") => None,
            Some(token) => Some(Timestamp(token.parse::<i64>().map_err(|_| {
                A2AError::invalid_params("pageToken is not a token this server gave")
            })?)),
        };
        let filter = TaskFilter {
            state: req.status.and_then(convert::legate_state),
            context_id: req.context_id.clone(),
            limit: usize::try_from(page_size).unwrap_or(50) + 1,
            before,
            ..TaskFilter::default()
        };
        let after = req.status_timestamp_after.map(|t| t.timestamp_millis());
        let keep = |t: &Task| after.is_none_or(|a| t.updated_at.0 > a);
        let messages = self.engine.messages();
        let mut page = messages
            .tasks_of(&self.agent, &filter)
            .map_err(|e| self.error(&e))?;
        let more = page.len() > usize::try_from(page_size).unwrap_or(50);
        page.truncate(usize::try_from(page_size).unwrap_or(50));
        let next_page_token = match (more, page.last()) {
            (true, Some(last)) => last.created_at.0.to_string(),
            _ => String::new(),
        };
        let total = messages
            .tasks_of(
                &self.agent,
                &TaskFilter {
                    before: None,
                    limit: 100_000,
                    ..filter
                },
            )
            .map_err(|e| self.error(&e))?
            .iter()
            .filter(|t| keep(t))
            .count();
        let artifacts = req.include_artifacts.unwrap_or(false);
        let mut tasks = Vec::new();
        for t in page.iter().filter(|t| keep(t)) {
            let messages = self.history(t, history)?;
            let mut task = convert::task_with_history(t, messages, history, artifacts);
            self.hide(Some(t)).task(&mut task);
            tasks.push(task);
        }
        Ok(ListTasksResponse {
            tasks,
            next_page_token,
            page_size,
            total_size: i32::try_from(total).unwrap_or(i32::MAX),
        })
    }

    async fn cancel_task(
        &self,
        params: &ServiceParams,
        req: CancelTaskRequest,
    ) -> Result<a2a::Task, A2AError> {
        check_version(params)?;
        let task = self.find(&req.id)?;
        self.engine
            .cancel(task.id.as_str())
            .map_err(|e| self.error(&e))?;
        let wait = self.engine.config().fronts.cancel_wait;
        let ended = tokio::time::timeout(wait, self.engine.wait(&task.id)).await;
        let task = match ended {
            Ok(Ok(t)) => t,
            _ => self.find(&req.id)?,
        };
        self.a2a_task(&task, None, true).await
    }

    async fn subscribe_to_task(
        &self,
        params: &ServiceParams,
        req: SubscribeToTaskRequest,
    ) -> Result<BoxStream<'static, Result<StreamResponse, A2AError>>, A2AError> {
        check_version(params)?;
        let task = self.find(&req.id)?;
        if task.is_terminal() {
            // §3.1.6: nothing more will happen; GetTask has its final state.
            return Err(A2AError::unsupported_operation(format!(
                "task {} already ended ({}); GetTask answers its final state",
                task.id, task.state
            )));
        }
        Ok(self.stream(task, 0, false, false))
    }

    async fn create_push_config(
        &self,
        params: &ServiceParams,
        _req: TaskPushNotificationConfig,
    ) -> Result<TaskPushNotificationConfig, A2AError> {
        check_version(params)?;
        Err(A2AError::push_notification_not_supported())
    }

    async fn get_push_config(
        &self,
        params: &ServiceParams,
        _req: GetTaskPushNotificationConfigRequest,
    ) -> Result<TaskPushNotificationConfig, A2AError> {
        check_version(params)?;
        Err(A2AError::push_notification_not_supported())
    }

    async fn list_push_configs(
        &self,
        params: &ServiceParams,
        _req: ListTaskPushNotificationConfigsRequest,
    ) -> Result<ListTaskPushNotificationConfigsResponse, A2AError> {
        check_version(params)?;
        Err(A2AError::push_notification_not_supported())
    }

    async fn delete_push_config(
        &self,
        params: &ServiceParams,
        _req: DeleteTaskPushNotificationConfigRequest,
    ) -> Result<(), A2AError> {
        check_version(params)?;
        Err(A2AError::push_notification_not_supported())
    }

    async fn get_extended_agent_card(
        &self,
        params: &ServiceParams,
        _req: GetExtendedAgentCardRequest,
    ) -> Result<AgentCard, A2AError> {
        check_version(params)?;
        Err(A2AError::extended_card_not_configured())
    }
}
