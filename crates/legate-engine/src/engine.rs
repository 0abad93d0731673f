//! The engine: the one API every front calls. It keeps the life of a task (start, submit,
//! reply, resume, send, cancel, wait, subscribe, read, shut down) and hands out a service for
//! everything else: [`Engine::reviews`], [`Groups::list`], [`Approvals::list`],
//! [`Engine::memory`], [`Engine::comparisons`], [`Engine::handoffs`], [`Engine::agents`],
//! [`Artifacts::list`], [`Messages::list`], [`TestCeilings::get`],
//! [`Engine::roles`], [`Engine::records`], [`Engine::call_tasks`] and [`Engine::metrics`].
//!
//! One prompt's path: a front's request becomes a [`SubmitRequest`]; [`Engine::submit`] hands
//! it to the core's launcher (`launcher`: role, checks, memory snapshots, store, queue), whose
//! drive takes a place (`slots`, `admission`), runs the turn on the agent's session (`turn`,
//! through `legate-backend`) and stores its end (`ending`).
//!
//! This module owns no state and no rule: the state is the [`Core`]'s and the rules are the
//! services' and the core's. It never speaks an agent protocol.

use crate::agents::Agents;
use crate::approvals::Approvals;
use crate::artifacts::Artifacts;
use crate::call_tasks::CallTasks;
use crate::compare::Comparisons;
use crate::config::EngineConfig;
use crate::core::Core;
use crate::core::continuation::{ContinueRequest, MessageReceipt, MessageRequest};
use crate::core::fanout::Subscription;
use crate::core::request::SubmitRequest;
use crate::core::slots::SlotCounts;
use crate::group::Groups;
use crate::handoff::Handoffs;
use crate::memory::Memory;
use crate::messages::Messages;
use crate::metrics::Metrics;
use crate::records::Records;
use crate::review::Reviews;
use crate::test_ceiling::TestCeilings;
use legate_core::{Event, Result, Task, TaskId, TaskMode};
use legate_store::TaskFilter;
use legate_supervisor::Supervisor;
use std::sync::Arc;

/// Legate's engine. Cheap to clone; every clone is the same engine.
#[derive(Debug, Clone)]
pub struct Engine {
    core: Core,
    services: Arc<Services>,
}

/// The services an engine hands out, made once at start: each holds the same core.
#[derive(Debug)]
struct Services {
    reviews: Reviews,
    groups: Groups,
    approvals: Approvals,
    memory: Memory,
    comparisons: Comparisons,
    handoffs: Handoffs,
    agents: Agents,
    artifacts: Artifacts,
    messages: Messages,
    test_ceiling: TestCeilings,
    records: Records,
    call_tasks: CallTasks,
    metrics: Metrics,
}

impl Engine {
    /// Opens the store, claims a runner identity, marks tasks of dead runners
    /// `SERVER_RESTARTED` (except the remote tasks it takes over and follows to their end:
    /// `adoption`), prunes old tasks, and starts the background loop. A configured
    /// policy ([`EngineConfig::policy`]) sits above `supervisor`: its first matching rule
    /// decides, else `supervisor` does.
    pub fn start(
        config: EngineConfig,
        backends: impl Into<legate_backend::Registry>,
        supervisor: Arc<dyn Supervisor>,
    ) -> Result<Engine> {
        let core = Core::open(config, backends.into(), supervisor)?;
        let records = Records::of(core.store().clone(), core.config().paths.clone());
        let c = || core.clone();
        let services = Arc::new(Services {
            reviews: Reviews { core: c() },
            groups: Groups { core: c() },
            approvals: Approvals { core: c() },
            memory: Memory { core: c() },
            comparisons: Comparisons { core: c() },
            handoffs: Handoffs { core: c() },
            agents: Agents { core: c() },
            artifacts: Artifacts { core: c() },
            messages: Messages { core: c() },
            test_ceiling: TestCeilings { core: c() },
            records,
            call_tasks: CallTasks {
                core: c(),
                ops: Arc::default(),
            },
            metrics: Metrics {
                core: c(),
                state: Arc::default(),
            },
        });
        Ok(Engine { core, services })
    }

    /// Validates and stores a task, then queues it. Returns it as stored (`submitted`).
    /// Bad input is refused before anything is stored; an empty prompt is bad input.
    pub fn submit(&self, request: SubmitRequest) -> Result<Task> {
        self.core.submit_inner(request, false)
    }

    /// Like [`Engine::submit`], except that an empty prompt is not refused: the task is stored
    /// and put straight in `input-required` with [`crate::EMPTY_PROMPT_MESSAGE`] as its
    /// status message, without starting an agent. [`Engine::reply`] into it resumes it. A
    /// copy workspace still needs a prompt.
    pub fn submit_or_ask(&self, request: SubmitRequest) -> Result<Task> {
        self.core.submit_inner(request, true)
    }

    /// Replies into a task that waits for input (`input-required`): the reply becomes the
    /// task's prompt and the same task is queued and run like a submitted one.
    /// `TASK_NOT_AWAITING_INPUT` when the task is in any other state.
    pub fn reply(&self, id: &str, prompt: impl Into<String>) -> Result<Task> {
        self.core.reply_message(id, prompt, None, None)
    }

    /// [`Engine::reply`] that answers one question: the task's last event must still be
    /// event `question` when the reply is stored (checked in the store's transaction, so of
    /// two answers from any processes one starts a turn); `TASK_NOT_AWAITING_INPUT`, nothing
    /// changed, otherwise.
    pub fn answer_question(
        &self,
        id: &str,
        prompt: impl Into<String>,
        question: u64,
    ) -> Result<Task> {
        self.core.reply_message(id, prompt, None, Some(question))
    }

    /// [`Engine::reply`] with the caller's id for the reply (an A2A `messageId`), which the
    /// agent receives with the prompt.
    pub fn reply_message(
        &self,
        id: &str,
        prompt: impl Into<String>,
        message_id: Option<String>,
    ) -> Result<Task> {
        self.core.reply_message(id, prompt, message_id, None)
    }

    /// Continues a context with a new turn: a new task on the context's agent, session and
    /// workspace (see `continuation`). A context an inbound message started is its caller's
    /// (`INVALID_INPUT`: that caller reads every task of it).
    pub fn resume(&self, request: ContinueRequest) -> Result<Task> {
        self.core.refuse_inbound_context(&request.context_id)?;
        self.core.resume(request)
    }

    /// Continues a task cut by a restart of Legate (`SERVER_RESTARTED`), on the caller's
    /// request: a new task of its context that resumes the agent's session, linked by
    /// `controls.continuedFrom`; the same continuation when it was continued before.
    /// `TASK_NOT_CONTINUABLE`, `CONTINUE_UNSUPPORTED`: nothing started (see `cut_turn`).
    /// `mode` overrides the cut task's mode.
    pub fn continue_task(&self, id: &str, mode: Option<TaskMode>) -> Result<Task> {
        self.core.continue_task(id, mode)
    }

    /// Sends a message into a context: run now, queued behind its running turn, or steered
    /// into it, by the context's delivery mode (see `continuation`).
    pub fn send_message(&self, request: MessageRequest) -> Result<MessageReceipt> {
        self.core.refuse_inbound_context(&request.context_id)?;
        self.core.send_message(request)
    }

    /// Asks a task to stop. A queued task ends `canceled` without touching running ones; a
    /// running one gets `session/cancel`, then is killed after the grace period. A task run
    /// by another `legate` process is flagged in the store for that process to act on.
    pub fn cancel(&self, id: &str) -> Result<Task> {
        self.core.cancel(id)
    }

    /// Waits until the task has ended or waits for input (`input-required`) after its latest
    /// submission (a submit or a reply), and returns it.
    pub async fn wait(&self, task_id: &TaskId) -> Result<Task> {
        self.core.wait(task_id).await
    }

    /// Waits on several loose tasks at once: until the first of them (`WaitMode::First`) or
    /// all of them (`WaitMode::All`) ended or waits for input, or `timeout` passed; then
    /// reads each. 1 to [`MAX_WAIT_MANY`](crate::MAX_WAIT_MANY) ids, each naming a task once
    /// (`INVALID_INPUT`), every one known (`TASK_NOT_FOUND`). Never changes a task.
    pub async fn wait_many(
        &self,
        ids: &[String],
        mode: crate::WaitMode,
        timeout: std::time::Duration,
    ) -> Result<crate::JointWait> {
        self.core.wait_many(ids, mode, timeout).await
    }

    /// Follows a task's events from `after` (exclusive) until its terminal status.
    pub fn subscribe(&self, task_id: &TaskId, after: u64) -> Subscription {
        self.core.subscribe(task_id, after)
    }

    /// Every event this engine stores from now on, of every task it runs, once stored: for a
    /// live view of all tasks (the dashboard's tasks list). A receiver that falls behind gets
    /// `Lagged` and should read the store again; tasks another process runs are not here.
    pub fn live_events(&self) -> tokio::sync::broadcast::Receiver<Event> {
        self.core.live_events()
    }

    /// A task by id or unique prefix.
    pub fn task(&self, id: &str) -> Result<Task> {
        self.core.task(id)
    }

    /// Tasks, newest first.
    pub fn tasks(&self, filter: &TaskFilter) -> Result<Vec<Task>> {
        self.core.tasks(filter)
    }

    /// A page of a task's events.
    pub fn events(&self, task_id: &TaskId, after: u64, limit: usize) -> Result<Vec<Event>> {
        self.core.store().events(task_id, after, limit)
    }

    /// Records a dashboard sign-in id as spent until `expires_at` (Unix milliseconds): a
    /// one-time code's nonce once redeemed, a session's id once signed out. `false` when it
    /// already was (the code was used). Kept in the store, so a restarted server, or another
    /// process on the same home, honours it.
    pub fn spend_sign_in(
        &self,
        kind: legate_store::Spent,
        id: &str,
        expires_at: i64,
    ) -> Result<bool> {
        self.core
            .store()
            .spend(kind, id, expires_at, legate_core::Timestamp::now().0)
    }

    /// Whether a dashboard sign-in id is spent (a session signed out) and not yet expired.
    pub fn sign_in_spent(&self, kind: legate_store::Spent, id: &str) -> Result<bool> {
        self.core
            .store()
            .is_spent(kind, id, legate_core::Timestamp::now().0)
    }

    /// Stops accepting work, cancels running tasks, waits for them to end, and stops every
    /// agent process.
    pub async fn shutdown(&self) {
        self.core.shutdown().await;
    }

    /// The configuration.
    pub fn config(&self) -> &EngineConfig {
        self.core.config()
    }

    /// This engine's runner id.
    pub fn runner_id(&self) -> &str {
        self.core.runner_id()
    }

    /// How many tasks run a turn and how many wait to start, now.
    pub fn slot_counts(&self) -> SlotCounts {
        self.core.slot_counts()
    }

    /// How many warm sessions of `agent` are ready for the next task now
    /// (`[agents.NAME] warm`).
    pub fn warm_ready(&self, agent: &str) -> usize {
        self.core.warm().ready(agent)
    }

    /// How many agent sessions this engine holds now besides running turns' own: the idle
    /// sessions of contexts and the warm sessions, ready or opening (what
    /// `max_idle_sessions` caps).
    pub fn spare_sessions(&self) -> usize {
        self.core.pool().counts().1 + self.core.warm().count()
    }

    /// The roles a request may name: the built-ins and the configured ones.
    pub fn roles(&self) -> &crate::roles::Roles {
        self.core.roles()
    }

    /// The review of copy workspaces (preview, patch, verify, test, integrate, cleanup).
    pub fn reviews(&self) -> &Reviews {
        &self.services.reviews
    }

    /// Groups of tasks run as one workflow.
    pub fn groups(&self) -> &Groups {
        &self.services.groups
    }

    /// The approval queue, for supervisors.
    pub fn approvals(&self) -> &Approvals {
        &self.services.approvals
    }

    /// The numbers a metrics scrape shows (`metrics/`): read from the store and this
    /// process's counters, labels already shaped; a front only renders them.
    pub fn metrics(&self) -> &Metrics {
        &self.services.metrics
    }

    /// The project memory.
    pub fn memory(&self) -> &Memory {
        &self.services.memory
    }

    /// Tool calls answered as MCP tasks, and the ops run for them in the background.
    pub fn call_tasks(&self) -> &CallTasks {
        &self.services.call_tasks
    }

    /// Comparisons of agents on one prompt.
    pub fn comparisons(&self) -> &Comparisons {
        &self.services.comparisons
    }

    /// Handoffs of a copy's work to another agent.
    pub fn handoffs(&self) -> &Handoffs {
        &self.services.handoffs
    }

    /// The configured agents, their models and sessions.
    pub fn agents(&self) -> &Agents {
        &self.services.agents
    }

    /// The artifacts tasks keep.
    pub fn artifacts(&self) -> &Artifacts {
        &self.services.artifacts
    }

    /// A task's messages, their delivery, and inbound deliveries.
    pub fn messages(&self) -> &Messages {
        &self.services.messages
    }

    /// The sandbox policy of test commands.
    pub fn test_ceiling(&self) -> &TestCeilings {
        &self.services.test_ceiling
    }

    /// What the store holds, read without running anything: usage, contexts, event numbers.
    pub fn records(&self) -> &Records {
        &self.services.records
    }
}
