//! One turn of a task, from the queue to its end: the context's turn lock, room for the
//! agent, a running place ([`Core::drive`]); the workspace, the `working` status and the
//! event pump ([`Core::run`]); the context's session, continued or opened, and the prompt
//! with its timeout and cancel ([`Core::run_turn`], [`Core::session_for`]).
//!
//! This module owns the order in which a turn takes what it needs (see `drive`) and the
//! context's live session while a turn uses it. It never stores a task's end itself: every
//! exit of `drive` hands an `Ending` to `ending`, and every place it took is given back by a
//! guard, whatever way the turn ends.

use crate::agents::preset_for;
use crate::core::accumulator::Accumulator;
use crate::core::cut_turn;
use crate::core::ending::{Ending, TurnResult};
use crate::core::launcher::TurnInputs;
use crate::core::slots::QueuedSlot;
use crate::core::{Core, Stop, lock};
use legate_backend::{AgentSession, EventSink, StopReason, Turn};
use legate_core::{
    AgentSpec, Boundary, Error, ErrorCode, EventKind, Result, Task, TaskState, Timestamp,
    WorkspaceKind,
};
use legate_store::ContextRecord;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tracing::Instrument;

impl Core {
    pub(crate) fn context_lock(&self, context_id: &str) -> Arc<tokio::sync::Mutex<()>> {
        lock(&self.inner.contexts)
            .entry(context_id.to_string())
            .or_default()
            .clone()
    }

    /// Runs one task from queue to terminal state. Every exit path ends the task.
    pub(crate) async fn drive(
        self,
        task: Task,
        agent: AgentSpec,
        mut stop: watch::Receiver<Stop>,
        inputs: TurnInputs,
        queued: QueuedSlot,
    ) {
        let inner = &self.inner;
        let id = task.id.clone();
        // One turn at a time per context (in this process, then across processes), then room
        // for the agent (fds, processes), then one of the running places. Room comes before
        // the place: a task waiting for room must not hold a place that a task needing no new
        // agent (a reply to a waiting task) could run in, and whose end would free the room.
        // The wait for all three is the admission span (closed once the turn runs).
        let admission = tracing::info_span!(
            "legate.admission",
            legate.task.id = %task.id,
            legate.context.id = %task.context_id,
        );
        let context_lock = self.context_lock(&task.context_id);
        let claimed = async {
            tokio::select! {
                biased;
                _ = stop.wait_for(|s| *s != Stop::None) => None,
                guards = async {
                    let ctx = context_lock.lock().await;
                    let turn = self.claim_turn(&task.context_id).await;
                    (ctx, turn)
                } => Some(guards),
            }
        }
        .instrument(admission.clone())
        .await;
        // The context's turn is held until the end is stored: the context's next turn must
        // not start (nor write in a copy this turn's patch is still read from) before then.
        let mut held = None;
        // The queued place is given back once the task has a running place or ends first.
        let outcome = match claimed {
            None => {
                drop(queued);
                Ending::canceled(None, Accumulator::default())
            }
            Some((_ctx, Err(e))) => {
                drop(queued);
                Ending::failed(e, Accumulator::default())
            }
            // Room for the agent, or the task keeps waiting (still `submitted`).
            Some((ctx, Ok(turn))) => {
                held = Some((ctx, turn));
                match self
                    .admit(&task, &agent, &mut stop)
                    .instrument(admission.clone())
                    .await
                {
                    None => {
                        drop(queued);
                        Ending::canceled(None, Accumulator::default())
                    }
                    Some(room) => {
                        let place = async {
                            tokio::select! {
                                biased;
                                _ = stop.wait_for(|s| *s != Stop::None) => None,
                                place = inner.slots.run() => Some(place),
                            }
                        }
                        .instrument(admission.clone())
                        .await;
                        if matches!(place, Some(Ok(_))) {
                            queued.started();
                        } else {
                            drop(queued);
                        }
                        drop(admission);
                        match place {
                            None => Ending::canceled(None, Accumulator::default()),
                            Some(Ok(_running)) => {
                                self.run(task.clone(), agent, &mut stop, inputs, room).await
                            }
                            Some(Err(e)) => Ending::failed(e, Accumulator::default()),
                        }
                    }
                }
            }
        };
        let outcome = self.settle(&task, outcome).await;
        // The task's span (the drive runs in it: `launcher`) says how this turn left it.
        let span = tracing::Span::current();
        span.record("legate.task.state", outcome.state.as_str());
        if let Some(e) = &outcome.error {
            span.record("legate.error.code", e.code.as_str());
            span.record("otel.status_code", "ERROR");
        }
        // The stop signal goes before the end is stored: once `input-required` is stored, a
        // reply may register the same task's next stop signal, which a later removal would
        // take away (its turn could then not be canceled). A cancel from here on is recorded
        // in the store, and `finish` honours it.
        lock(&inner.stops).remove(&id);
        if let Err(e) = self.finish(&task, outcome) {
            tracing::error!(task = %id, error = %e, "could not store the end of a task");
        }
        drop(held);
        inner.budget.freed();
    }

    /// The admitted part of a task: workspace, session, turn.
    async fn run(
        &self,
        mut task: Task,
        agent: AgentSpec,
        stop: &mut watch::Receiver<Stop>,
        inputs: TurnInputs,
        mut room: crate::core::budget::Reservation,
    ) -> Ending {
        let inner = &self.inner;
        let confinement = match self.confinement(&agent.name) {
            Ok(c) => c,
            Err(e) => return Ending::failed(e, Accumulator::default()),
        };
        let mut copy_ready = None;
        // A turn continuing its context's copy holds the copy's lock until it ends.
        let mut _copy_lock = None;
        // A session kept for a conversation retention pruned is not this one's.
        self.drop_pruned_session(&task).await;
        // A warm session that fits the task exactly: its sandbox becomes the context's.
        let mut handed = self.take_warm(&task, &agent);
        // The replacement waits for this turn's end (or a moment: `warm::Hold`).
        let _replace_later = handed.as_mut().and_then(|h| h.hold.take());
        let mut attempt = 0;
        let prepared = loop {
            let prepared = if task.workspace == WorkspaceKind::Copy {
                // A new copy: a live session of the context works elsewhere. A turn that
                // continues the copy keeps it, unless its mode differs (the session's
                // supervision was set up for the earlier mode).
                if !self.keeps_copy_session(&task)
                    && let Some(old) = inner.pool.remove(&task.context_id)
                {
                    old.shutdown().await;
                }
                let copying = tracing::info_span!("legate.copy", legate.task.id = %task.id);
                self.prepare_copy(&task)
                    .instrument(copying)
                    .await
                    .map(|(b, ready, lock)| {
                        copy_ready = Some(ready);
                        _copy_lock = lock;
                        b
                    })
            } else if let Some(h) = &handed {
                self.record_sandbox(&task, &h.boundary)
            } else {
                self.prepare_workspace(&task, &agent)
            };
            // Out of descriptors or processes: wait for room (still `submitted`), try again.
            match prepared {
                Err(e)
                    if crate::core::budget::is_exhaustion(&e)
                        && attempt < crate::core::budget::START_RETRIES =>
                {
                    attempt += 1;
                    tracing::warn!(task = %task.id, attempt, error = %e, "the workspace could not be prepared for want of descriptors; waiting to try again");
                    let need = self.start_need(&task, &agent);
                    drop(room);
                    match self.wait_for_room(need, stop, true, |_| {}).await {
                        Some(r) => room = r,
                        None => return Ending::canceled(None, Accumulator::default()),
                    }
                }
                other => break other,
            }
        };
        let boundary = match prepared {
            Ok(b) => b,
            Err(e) => {
                if let Some(h) = handed.take() {
                    self.discard_handed(h).await;
                }
                return Ending::failed(e, Accumulator::default());
            }
        };
        task.root = Some(boundary.root.clone());
        task.state = TaskState::Working;
        task.updated_at = Timestamp::now();
        let working = EventKind::Status {
            state: TaskState::Working,
            message: None,
            error: None,
        };
        let ws_event = EventKind::Notice {
            message: format!(
                "{} workspace at {}",
                task.workspace.as_str(),
                boundary.root.display()
            ),
            detail: serde_json::json!({
                "kind": task.workspace.as_str(),
                "root": boundary.root,
                "owned": boundary.owned,
                "allowExecute": boundary.allow_execute,
                "confinement": confinement.as_str(),
            }),
        };
        let mut events = vec![working, ws_event];
        events.extend(copy_ready);
        match inner.store.update_task(&task, &events) {
            Ok(events) => inner.fanout.publish(&events),
            Err(e) => return Ending::failed(e, Accumulator::default()),
        }

        let root = boundary.root.clone();
        let watch = crate::core::silent::Watch::before(&root, boundary.owned).await;
        let inputs = self.report_inputs(&task, &agent, inputs);
        let structured = inputs.json_schema.is_some();
        let (sink, stream) = crate::core::pump::channel();
        let (sink, tap) = self.tap(&task, sink);
        let turn_span = tracing::info_span!(
            "legate.turn",
            legate.task.id = %task.id,
            legate.agent = %agent.name,
            legate.agent.kind = agent.kind.as_str(),
            legate.prompt.bytes = task.prompt.len(),
            legate.turn.outcome = tracing::field::Empty,
            legate.stop_reason = tracing::field::Empty,
            legate.error.code = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        );
        let pump = self.spawn_pump(task.id.clone(), stream, turn_span.clone());
        let overflow = pump.overflow.clone();
        let result = match self
            .run_turn(
                &task,
                &agent,
                boundary,
                sink,
                stop,
                TurnStart {
                    inputs,
                    room,
                    overflow,
                    handed,
                },
            )
            .instrument(turn_span.clone())
            .await
        {
            // The agent's words (its stderr, its error) may be in it.
            TurnResult::Failed(e) => TurnResult::Failed(crate::core::redaction::hide_error(e)),
            other => other,
        };
        record_turn(&turn_span, &result);
        drop(turn_span);
        let mut acc = match pump.handle.await {
            Ok(acc) => acc,
            Err(e) => {
                tracing::error!(task = %task.id, error = %e, "event pump failed");
                Accumulator::default()
            }
        };
        // The turn's sinks are gone with the pump's end: the tap's last frames are stored.
        if let Some(tap) = tap {
            tap.finish().await;
        }
        if matches!(result, TurnResult::Completed { .. }) {
            self.notice_silent_turn(&task, &watch, &root, &mut acc)
                .await;
        }
        // Backends that learn their session id during the turn (agy's conversation id) report
        // it with a session event; keep the latest so the next task of the context resumes it.
        // Not the new session a continuation refused: the context keeps its earlier one.
        if let Some(session_id) = acc.session_id()
            && !cut_turn::refused_new_session(&result)
            && let Err(e) = self.record_session(&task, session_id, None)
        {
            tracing::warn!(task = %task.id, error = %e, "could not record the session id");
        }
        // A copy is made afresh for each turn, so a copy task cannot wait for a reply.
        let ending = result.into_ending(acc, task.workspace != WorkspaceKind::Copy);
        let ending = self
            .check_report(&task, &root, &watch, structured, ending)
            .await;
        // Kept durably before the end is stored and told.
        self.collect_artifacts(&task, &root).await;
        ending
    }

    /// Gives a completed turn whose answer claims tool work Legate never saw its notice
    /// (`crate::core::silent`): on the result, and as an event before the final status.
    async fn notice_silent_turn(
        &self,
        task: &Task,
        watch: &crate::core::silent::Watch,
        root: &std::path::Path,
        acc: &mut Accumulator,
    ) {
        let Some(notice) = watch.notice(root, acc.text(), acc.seen()).await else {
            return;
        };
        tracing::warn!(task = %task.id, notice = %notice.code, "the answer claims tool work Legate did not see");
        let event = EventKind::Notice {
            message: notice.message.clone(),
            detail: serde_json::json!({ "event": "turn.silent", "code": notice.code }),
        };
        match self.inner.store.append_events(&task.id, &[event]) {
            Ok(stored) => self.inner.fanout.publish(&stored),
            Err(e) => tracing::error!(task = %task.id, error = %e, "could not store the notice"),
        }
        acc.notice(notice);
    }

    /// Records a warm session's sandbox as the context's (a context that has none yet: `warm`
    /// hands a session only to a context's first turn).
    fn record_sandbox(&self, task: &Task, boundary: &Boundary) -> Result<Boundary> {
        let store = &self.inner.store;
        let mut record = store
            .context(&task.context_id)?
            .unwrap_or_else(|| ContextRecord::new(task.context_id.clone(), task.agent.clone()));
        record.sandbox_root = Some(boundary.root.clone());
        record.updated_at = Timestamp::now();
        store.put_context(&record)?;
        Ok(boundary.clone())
    }

    fn prepare_workspace(&self, task: &Task, agent: &AgentSpec) -> Result<Boundary> {
        let inner = &self.inner;
        match task.workspace {
            WorkspaceKind::Shared => {
                let root = task.root.clone().ok_or_else(|| {
                    Error::internal("a shared task was stored without its directory")
                })?;
                legate_workspace::shared(&root, agent.allow_execute)
            }
            WorkspaceKind::Copy => Err(Error::internal(
                "a copy workspace is prepared by prepare_copy",
            )),
            WorkspaceKind::Sandbox => {
                let record = inner.store.context(&task.context_id)?;
                let existing = record.as_ref().and_then(|r| r.sandbox_root.clone());
                let mut boundary = legate_workspace::sandbox(
                    &inner.config.paths.sandboxes(),
                    &task.context_id,
                    existing.as_deref(),
                )?;
                boundary.allow_execute = agent.allow_execute;
                let mut record = record.unwrap_or_else(|| {
                    ContextRecord::new(task.context_id.clone(), task.agent.clone())
                });
                record.sandbox_root = Some(boundary.root.clone());
                record.updated_at = Timestamp::now();
                inner.store.put_context(&record)?;
                Ok(boundary)
            }
        }
    }

    async fn run_turn(
        &self,
        task: &Task,
        agent: &AgentSpec,
        boundary: Boundary,
        sink: EventSink,
        stop: &mut watch::Receiver<Stop>,
        start: TurnStart,
    ) -> TurnResult {
        let inner = &self.inner;
        let TurnStart {
            inputs,
            room,
            overflow,
            handed,
        } = start;
        let timeout = Duration::from_secs(task.timeout_secs);
        // One deadline for opening the session and for the turn: an agent that never ends
        // opening (a remote that drips its card) is stopped by the timeout too.
        let deadline = tokio::time::Instant::now() + timeout;
        let opening = self.session_for(task, agent, boundary, &sink, stop, (room, handed));
        let Ok(opened) = tokio::time::timeout_at(deadline, opening).await else {
            return TurnResult::Failed(Error::new(
                ErrorCode::TaskTimeout,
                format!(
                    "the task ran longer than its timeout of {} s; its agent's session was still opening",
                    task.timeout_secs
                ),
            ));
        };
        let session = match opened {
            Ok(Some(s)) => s,
            Ok(None) => {
                return TurnResult::Canceled {
                    stop_reason: None,
                    usage: None,
                };
            }
            Err(e) => return TurnResult::Failed(e),
        };
        let turn = self.turn_of(task, inputs);
        let work = turn.work.clone();
        let canceller = session.canceller();
        let prompt = session.prompt(turn, sink);
        // Whether the prompt was dropped unfinished (after a shutdown and its grace).
        let mut given_up = false;
        let result = {
            tokio::pin!(prompt);
            let mut cancel_wait = stop.clone();
            tokio::select! {
                r = &mut prompt => match r {
                    Ok(o) if is_canceled(stop) || o.stop_reason == StopReason::Cancelled => {
                        TurnResult::Canceled { stop_reason: Some(o.stop_reason), usage: o.usage }
                    }
                    Ok(o) => TurnResult::Completed { stop_reason: o.stop_reason, usage: o.usage },
                    Err(e) if is_canceled(stop) => {
                        tracing::debug!(error = %crate::core::redaction::hide_error(e).detail(), "turn failed after cancel");
                        TurnResult::Canceled { stop_reason: None, usage: None }
                    }
                    Err(e) => TurnResult::Failed(e),
                },
                _ = tokio::time::sleep_until(deadline) => {
                    session.shutdown().await;
                    given_up = wait_bounded(&mut prompt, inner.config.cancel_grace, &task.id).await.is_none();
                    TurnResult::Failed(Error::new(
                        ErrorCode::TaskTimeout,
                        format!("the task ran longer than its timeout of {} s; the agent was stopped", task.timeout_secs),
                    ))
                }
                // The agent sent more than twice what the task keeps (`core::output`).
                _ = overflow.notified() => {
                    session.shutdown().await;
                    let _ = (&mut prompt).await;
                    TurnResult::Failed(crate::core::output::ceiling_error(&inner.config.output))
                }
                _ = async { drop(cancel_wait.wait_for(|s| *s == Stop::Cancel).await) } => {
                    canceller.cancel();
                    match tokio::time::timeout(inner.config.cancel_grace, &mut prompt).await {
                        Ok(Ok(o)) => TurnResult::Canceled { stop_reason: Some(o.stop_reason), usage: o.usage },
                        Ok(Err(_)) => TurnResult::Canceled { stop_reason: None, usage: None },
                        Err(_) => {
                            session.shutdown().await;
                            given_up = wait_bounded(&mut prompt, inner.config.cancel_grace, &task.id).await.is_none();
                            TurnResult::Canceled { stop_reason: None, usage: None }
                        }
                    }
                }
            }
        };
        // A prompt given up on may have gone on preparing after the shutdown: shut the session
        // down again, now that nothing of the prompt runs, so that what it started stops.
        if given_up {
            session.shutdown().await;
        }
        // The prompt is dropped (a turn given up on too): what it started in the workspace on
        // threads of its own ends before anything reads the workspace or lets the turn go.
        settle_work(&work, &task.id).await;
        if session.is_alive() {
            let asks = task.workspace != WorkspaceKind::Copy
                && matches!(&result, TurnResult::Completed { stop_reason, .. }
                    if *stop_reason == StopReason::InputRequired);
            let waiting = asks || self.waits_for_input(&task.context_id);
            self.release_session(&task.context_id, waiting);
        } else {
            inner.pool.remove(&task.context_id);
        }
        result
    }

    /// The turn the agent runs for `task`: the caller's prompt, framed with the task's role,
    /// its report contract and, for a handoff, the context it was handed, then the memory it
    /// was given (`memory::block`). A re-attached turn
    /// (`adoption`) is described the same way.
    pub(crate) fn turn_of(&self, task: &Task, inputs: TurnInputs) -> Turn {
        // A planner or reviewer is told its report contract in the prompt, unless its backend
        // is given the report's JSON Schema as structured output (agy).
        let contract = match &inputs.json_schema {
            Some(_) => None,
            None => task
                .role
                .as_ref()
                .and_then(|r| crate::report::contract(r.base)),
        };
        Turn {
            task_id: task.id.clone(),
            prompt: crate::memory::block::append(
                crate::core::framing::frame(
                    &task.prompt,
                    task.role.as_ref(),
                    contract.as_deref(),
                    self.handoff_block(task).as_deref(),
                    &task.controls.skills,
                ),
                self.memory_block(task),
            ),
            mode: task.mode,
            model: task.model.clone(),
            timeout: Some(Duration::from_secs(task.timeout_secs)),
            message_id: inputs.message_id,
            json_schema: inputs.json_schema,
            effort: inputs.effort,
            work: legate_backend::WorkspaceWork::new(),
        }
    }

    /// The context's live session, or a new one (continuing the stored session id when the
    /// agent can). `Ok(None)` when the task was canceled while the agent started.
    async fn session_for(
        &self,
        task: &Task,
        agent: &AgentSpec,
        boundary: Boundary,
        sink: &EventSink,
        stop: &mut watch::Receiver<Stop>,
        (room, handed): (
            crate::core::budget::Reservation,
            Option<crate::core::warm::Handed>,
        ),
    ) -> Result<Option<Arc<dyn AgentSession>>> {
        let inner = &self.inner;
        if let Some(notice) = cut_turn::continuing_notice(task) {
            sink.send(notice);
        }
        if let Some(handed) = handed {
            // Opened before the task, for exactly this task's configuration (`warm`): what
            // the backend said while opening it (its confinement, its session) is the task's.
            drop(room);
            sink.send(Self::warm_notice(&agent.name, &handed));
            for event in handed.opening {
                sink.send(event);
            }
            return self.keep_new_session(task, agent, handed.session).await;
        }
        if let Some(session) = inner.pool.checkout(&task.context_id, &agent.name) {
            drop(room);
            sink.send(EventKind::Session {
                session_id: session.session_id().to_string(),
                resumed: true,
            });
            self.record_session(task, session.session_id(), None)?;
            return Ok(Some(session));
        }
        let (backend, capabilities) = inner.agents.backend(agent)?;
        let preset = preset_for(agent, &capabilities);
        let resume = inner
            .store
            .context(&task.context_id)?
            .and_then(|r| r.session_id);
        let request = self.session_request(task, agent, boundary, preset, resume);
        let Some(opened) = self
            .open_with_retries(&backend, request, sink, stop, room)
            .await?
        else {
            return Ok(None);
        };
        // The backend reported the new session (and whether it was continued) on `sink`.
        // Before it is recorded: a continuation's refused new session is not the context's.
        if let Err(e) = cut_turn::check_resumed(task, opened.as_ref()) {
            opened.shutdown().await;
            return Err(e);
        }
        self.keep_new_session(task, agent, opened).await
    }

    /// Records a session new to `task`'s context (opened for the turn, or a warm one) as the
    /// context's, in the store and the pool; the session it replaces is shut down.
    async fn keep_new_session(
        &self,
        task: &Task,
        agent: &AgentSpec,
        session: Arc<dyn AgentSession>,
    ) -> Result<Option<Arc<dyn AgentSession>>> {
        self.record_session(
            task,
            session.session_id(),
            Some(cut_turn::resumable(session.as_ref())),
        )?;
        if let Some(old) = self
            .inner
            .pool
            .insert(&task.context_id, &agent.name, session.clone())
        {
            old.shutdown().await;
        }
        Ok(Some(session))
    }
}

/// What a turn starts with besides its task: its inputs, the room promised at admission
/// (given back once the agent's session is open), and the pump's signal that the agent sent
/// past the output ceiling.
struct TurnStart {
    inputs: TurnInputs,
    room: crate::core::budget::Reservation,
    overflow: Arc<tokio::sync::Notify>,
    /// A warm session the task took (`warm`), its sandbox already the context's.
    handed: Option<crate::core::warm::Handed>,
}

/// How the turn ended, on its span: outcome, stop reason, and for a failure its error code.
fn record_turn(span: &tracing::Span, result: &TurnResult) {
    match result {
        TurnResult::Completed { stop_reason, .. } => {
            span.record("legate.turn.outcome", "completed");
            span.record("legate.stop_reason", stop_reason.to_string());
        }
        TurnResult::Canceled { .. } => {
            span.record("legate.turn.outcome", "canceled");
        }
        TurnResult::Failed(e) => {
            span.record("legate.turn.outcome", "failed");
            span.record("legate.error.code", e.code.as_str());
            span.record("otel.status_code", "ERROR");
        }
    }
}

/// Waits for the turn's work in its workspace (`legate_backend::WorkspaceWork`): as long as
/// that work (a file's write, an apply's git commands under git's time limit, an agy
/// process's stop once the session is shut down), logged every 30 s while it lasts.
pub(crate) async fn settle_work(work: &legate_backend::WorkspaceWork, task: &legate_core::TaskId) {
    let running = work.running();
    if running > 0 {
        tracing::info!(task = %task, running, "the turn ended while it still wrote in its workspace; waiting for that to end");
    }
    let mut waited = Duration::ZERO;
    while tokio::time::timeout(SETTLE_NOTICE, work.finished())
        .await
        .is_err()
    {
        waited += SETTLE_NOTICE;
        tracing::warn!(task = %task, waited_secs = waited.as_secs(), running = work.running(), "the turn's work in its workspace has not ended yet; still waiting");
    }
}

/// How often a long wait for a turn's work in its workspace is logged.
const SETTLE_NOTICE: Duration = Duration::from_secs(30);

fn is_canceled(stop: &watch::Receiver<Stop>) -> bool {
    *stop.borrow() == Stop::Cancel
}
/// Waits at most `grace` for a turn that was shut down to end: a backend that does not end
/// it (a remote that ignores the cancel, drips or never ends its answer) is dropped then, so
/// the timeout and cancel end the local task whatever the agent does.
async fn wait_bounded<F: std::future::Future + Unpin>(
    prompt: &mut F,
    grace: Duration,
    task: &legate_core::TaskId,
) -> Option<F::Output> {
    let ended = tokio::time::timeout(grace, prompt).await.ok();
    if ended.is_none() {
        tracing::warn!(task = %task, grace_ms = grace.as_millis() as u64, "the agent's turn did not end after shutdown; it is dropped");
    }
    ended
}
