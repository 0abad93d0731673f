//! Taking over the remote tasks of a process that died, and following each to its remote end.
//!
//! A task whose turn runs on a remote server (its agent's backend has
//! `Capabilities::reattach`, and the backend recorded the remote task through the ledger)
//! outlives the process that started it. Recovery leaves such a task unfinished, still
//! claimed by the dead runner (`runner::recover`). Every engine looks for them at start and
//! then about once a second ([`Core::adopt_orphans`]), claims each with a compare-and-set on
//! the dead runner's id (`Store::claim_task`: of two processes recovering at once, one wins),
//! and drives `Backend::reattach`: its events are stored and fanned out like a turn's, the
//! local timeout applies with what was left of it, `Engine::cancel` fires the cancel token,
//! and the task ends with the remote outcome. An adopter that dies in turn leaves the task
//! claimed by a dead runner again, and the next engine takes it over the same way.
//!
//! At shutdown an adopted task is released, not canceled: it was another process's work, and
//! the next engine takes it over again. A re-attach the remote refuses as unreachable is
//! tried [`ATTEMPTS`] times in all, a second apart and then two, within the local timeout.
//!
//! This module never ends a task it did not claim, never cancels a remote task unless the
//! caller canceled or the local timeout passed, and never speaks a protocol itself.

use crate::agents::preset_for;
use crate::core::accumulator::Accumulator;
use crate::core::ending::{Ending, TurnResult};
use crate::core::launcher::TurnInputs;
use crate::core::runner;
use crate::core::{Core, Stop, first_intent, lock};
use legate_backend::{EventSink, StopReason, TurnOutcome};
use legate_core::{
    AgentSpec, Boundary, Error, ErrorCode, RemoteRef, Result, Task, TaskId, TaskState,
    WorkspaceKind,
};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// How many times a re-attach refused with `REMOTE_UNREACHABLE` is tried in all.
pub const ATTEMPTS: u32 = 3;

/// Why a re-attached turn was asked to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Why {
    Timeout,
    Cancel,
    /// The remote sent more than twice what the task keeps (`core::output`).
    Output,
}

impl Core {
    /// Claims the unfinished remote tasks of every dead runner and follows each to its end
    /// (see the module). Safe to call at any time from any engine; a task another engine
    /// claimed first is left to it. Nothing is claimed once shutdown began.
    pub(crate) fn adopt_orphans(&self) {
        if *self.inner.shutdown.borrow() {
            return;
        }
        let store = self.store();
        let own = self.runner_id().to_string();
        let run_dir = self.config().paths.run();
        let runners = match store.unfinished_runners() {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "could not list the runners of unfinished tasks");
                return;
            }
        };
        for dead in runners {
            if dead == own || runner::is_alive(&run_dir, &dead) {
                continue;
            }
            let ids = match store.remote_tasks_of(&dead) {
                Ok(ids) => ids,
                Err(e) => {
                    tracing::warn!(runner = %dead, error = %e, "could not list a dead runner's remote tasks");
                    continue;
                }
            };
            for id in ids {
                if let Err(e) = self.adopt(&id, &dead) {
                    tracing::error!(task = %id, runner = %dead, error = %e, "could not take over a remote task");
                }
            }
        }
    }

    /// Claims task `id` from the dead runner `dead`; if this engine won it, follows it (or ends
    /// it `SERVER_RESTARTED` when its agent can no longer follow a remote task).
    fn adopt(&self, id: &TaskId, dead: &str) -> Result<()> {
        let store = self.store();
        if !store.claim_task(id, dead, Some(self.runner_id()))? {
            return Ok(());
        }
        let Some(task) = store.task(id)? else {
            return Ok(());
        };
        let followable = self
            .agents()
            .runnable(&task.agent)
            .ok()
            .filter(|(_, capabilities)| capabilities.reattach);
        let (agent, remote) = match (followable, task.remote.clone()) {
            (Some((agent, _)), Some(remote)) if task.root.is_some() => (agent, remote),
            _ => return self.fail_unfollowable(&task),
        };
        if task.state == TaskState::InputRequired {
            // Nothing runs: the remote task waits for the caller's reply, as the local one
            // does. It is left waiting without a runner, like any task that asks.
            store.claim_task(id, self.runner_id(), None)?;
            return Ok(());
        }
        let (stop_tx, stop_rx) = watch::channel(Stop::None);
        {
            // The order `shutdown` takes them in.
            let mut adopted = lock(&self.inner.adopted);
            let mut stops = lock(&self.inner.stops);
            if *self.inner.shutdown.borrow() {
                stop_tx.send_if_modified(|s| first_intent(s, Stop::Release));
            }
            adopted.insert(id.clone());
            stops.insert(id.clone(), stop_tx.clone());
        }
        // A cancel asked for while no process followed the task reaches the remote now.
        if store.cancel_requested_at(id)?.is_some() {
            stop_tx.send_if_modified(|s| first_intent(s, Stop::Cancel));
        }
        tracing::info!(task = %id, from = %dead, remote_task = %remote.task_id, "took over a remote task whose process stopped");
        // The re-attached turn continues the task's own trace (the one it began in).
        let span = crate::core::spans::task_span(&task, crate::core::spans::TurnEntry::Reattach);
        crate::core::spans::continue_trace(store, id, &span);
        let engine = self.clone();
        self.track(
            async move { engine.follow_adopted(task, agent, remote, stop_rx).await }
                .instrument(span),
        );
        Ok(())
    }

    /// Ends a claimed task that cannot be followed (its agent is gone, or its backend no
    /// longer re-attaches) the way recovery ends a local one: `SERVER_RESTARTED`, its
    /// approvals expired, its copy settled.
    fn fail_unfollowable(&self, task: &Task) -> Result<()> {
        let error = Error::new(
            ErrorCode::ServerRestarted,
            "the legate process running this task stopped before the task ended, and its agent can no longer follow the remote task; it was not re-run",
        );
        // Approvals first: a process that dies between the two leaves the task unfinished,
        // and the next recovery ends it; the other way round, approvals would wait on an
        // ended task that nothing visits again.
        let ids = [task.id.clone()];
        self.store().expire_approvals_of(
            &ids,
            "the Legate process running the task stopped while the approval waited",
        )?;
        self.end(task, Ending::failed(error, Accumulator::default()), |s| {
            !s.is_terminal()
        })?;
        crate::core::leftovers::settle_interrupted(self.store(), &self.config().paths, &ids);
        tracing::warn!(task = %task.id, agent = %task.agent, "a remote task whose agent cannot re-attach was failed");
        Ok(())
    }

    /// Follows an adopted task to its end and stores it, or lets it go when released.
    async fn follow_adopted(
        self,
        task: Task,
        agent: AgentSpec,
        remote: RemoteRef,
        mut stop: watch::Receiver<Stop>,
    ) {
        let id = task.id.clone();
        // One turn at a time per context, as for any turn. A cancel does not wait for it: it
        // only asks the remote to stop and stores the end.
        let context_lock = self.context_lock(&task.context_id);
        let mut release = stop.clone();
        let mut cancel = stop.clone();
        let guards = tokio::select! {
            biased;
            _ = async { drop(release.wait_for(|s| *s == Stop::Release).await) } => {
                self.let_go(&id);
                return;
            }
            _ = async { drop(cancel.wait_for(|s| *s == Stop::Cancel).await) } => None,
            guards = async {
                let ctx = context_lock.lock().await;
                (ctx, self.claim_turn(&task.context_id).await)
            } => Some(guards),
        };
        let ending = match self.reattach_turn(&task, &agent, remote, &mut stop).await {
            Some(ending) => ending,
            None => {
                self.let_go(&id);
                return;
            }
        };
        let ending = self.settle(&task, ending).await;
        // The task's span (this follow runs in it: `adopt`) says how the turn left it.
        let span = tracing::Span::current();
        span.record("legate.task.state", ending.state.as_str());
        if let Some(e) = &ending.error {
            span.record("legate.error.code", e.code.as_str());
            span.record("otel.status_code", "ERROR");
        }
        drop(guards);
        lock(&self.inner.stops).remove(&id);
        if let Err(e) = self.finish(&task, ending) {
            tracing::error!(task = %id, error = %e, "could not store the end of a re-attached task");
        }
        lock(&self.inner.adopted).remove(&id);
    }

    /// Forgets an adopted task without ending it (shutdown released it).
    fn let_go(&self, id: &TaskId) {
        lock(&self.inner.stops).remove(id);
        lock(&self.inner.adopted).remove(id);
        tracing::info!(task = %id, "released a re-attached task for the next process");
    }

    /// Runs `Backend::reattach` for `task` under its remaining timeout and its stop signal.
    /// `None` when released.
    async fn reattach_turn(
        &self,
        task: &Task,
        agent: &AgentSpec,
        remote: RemoteRef,
        stop: &mut watch::Receiver<Stop>,
    ) -> Option<Ending> {
        let (backend, capabilities) = match self.agents().backend(agent) {
            Ok(b) => b,
            Err(e) => return Some(Ending::failed(e, Accumulator::default())),
        };
        let Some(root) = task.root.clone() else {
            return Some(Ending::failed(
                Error::internal("a re-attached task was stored without its workspace"),
                Accumulator::default(),
            ));
        };
        let boundary = Boundary {
            root: root.clone(),
            owned: task.workspace != WorkspaceKind::Shared,
            allow_execute: agent.allow_execute,
        };
        let watch = crate::core::silent::Watch::before(&root, boundary.owned).await;
        let preset = preset_for(agent, &capabilities);
        let request = self.session_request(task, agent, boundary, preset, None);
        let inputs = self.report_inputs(task, agent, TurnInputs::default());
        let structured = inputs.json_schema.is_some();
        let turn = self.turn_of(task, inputs);
        let work = turn.work.clone();
        let deadline = Instant::now() + self.time_left(task);
        let grace = self.config().cancel_grace;
        let token = CancellationToken::new();
        let (sink, stream) = EventSink::channel();
        // A tapped task's frames of the re-attached turn too (`core::tap`).
        let (sink, tap) = self.tap(task, sink);
        let pump = self.spawn_pump(task.id.clone(), stream, tracing::Span::current());

        let mut why = None;
        let mut attempt = 0;
        let outcome: Option<Result<TurnOutcome>> = loop {
            attempt += 1;
            // The attempt's follow lives in this block: dropped at its end, whatever ended it.
            let mut released = false;
            let got = {
                let follow = backend.reattach(
                    request.clone(),
                    turn.clone(),
                    remote.clone(),
                    sink.clone(),
                    token.clone(),
                );
                tokio::pin!(follow);
                let (mut release, mut cancel) = (stop.clone(), stop.clone());
                if why.is_some() {
                    tokio::time::timeout(grace, &mut follow).await.ok()
                } else {
                    tokio::select! {
                        biased;
                        _ = async { drop(release.wait_for(|s| *s == Stop::Release).await) } => {
                            released = true;
                            None
                        }
                        r = &mut follow => Some(r),
                        _ = tokio::time::sleep_until(deadline) => {
                            why = Some(Why::Timeout);
                            token.cancel();
                            tokio::time::timeout(grace, &mut follow).await.ok()
                        }
                        _ = async { drop(cancel.wait_for(|s| *s == Stop::Cancel).await) } => {
                            why = Some(Why::Cancel);
                            token.cancel();
                            tokio::time::timeout(grace, &mut follow).await.ok()
                        }
                        _ = pump.overflow.notified() => {
                            why = Some(Why::Output);
                            token.cancel();
                            tokio::time::timeout(grace, &mut follow).await.ok()
                        }
                    }
                }
            };
            if released {
                // Let go for the next process, but not while the dropped follow still writes in
                // the copy (applying the remote's patch).
                super::turn::settle_work(&work, &task.id).await;
                return None;
            }
            match got {
                Some(Err(e))
                    if why.is_none()
                        && e.code == ErrorCode::RemoteUnreachable
                        && attempt < ATTEMPTS =>
                {
                    tracing::warn!(task = %task.id, attempt, error = %e, "the remote task could not be reached; trying again");
                    let pause = Duration::from_secs(u64::from(attempt));
                    let (mut release, mut cancel) = (stop.clone(), stop.clone());
                    tokio::select! {
                        biased;
                        _ = async { drop(release.wait_for(|s| *s == Stop::Release).await) } => {
                            return None;
                        }
                        _ = tokio::time::sleep(pause) => {}
                        _ = tokio::time::sleep_until(deadline) => {
                            why = Some(Why::Timeout);
                            token.cancel();
                        }
                        _ = async { drop(cancel.wait_for(|s| *s == Stop::Cancel).await) } => {
                            why = Some(Why::Cancel);
                            token.cancel();
                        }
                    }
                }
                other => break other,
            }
        };
        // Each attempt's follow is dropped: what it started in the copy (applying the remote's
        // patch) ends before the copy is read.
        super::turn::settle_work(&work, &task.id).await;
        drop(sink);
        let acc = match pump.handle.await {
            Ok(acc) => acc,
            Err(e) => {
                tracing::error!(task = %task.id, error = %e, "event pump failed");
                Accumulator::default()
            }
        };
        if let Some(tap) = tap {
            tap.finish().await;
        }
        let result = match (why, outcome) {
            (Some(Why::Timeout), _) => TurnResult::Failed(Error::new(
                ErrorCode::TaskTimeout,
                format!(
                    "the task ran longer than its timeout of {} s; the remote task was asked to cancel",
                    task.timeout_secs
                ),
            )),
            (Some(Why::Output), _) => {
                TurnResult::Failed(crate::core::output::ceiling_error(&self.config().output))
            }
            (Some(Why::Cancel), Some(Ok(o))) => TurnResult::Canceled {
                stop_reason: Some(o.stop_reason),
                usage: o.usage,
            },
            (Some(Why::Cancel), _) => TurnResult::Canceled {
                stop_reason: None,
                usage: None,
            },
            (None, Some(Ok(o))) if o.stop_reason == StopReason::Cancelled => TurnResult::Canceled {
                stop_reason: Some(o.stop_reason),
                usage: o.usage,
            },
            (None, Some(Ok(o))) => TurnResult::Completed {
                stop_reason: o.stop_reason,
                usage: o.usage,
            },
            (None, Some(Err(e))) => TurnResult::Failed(crate::core::redaction::hide_error(e)),
            (None, None) => TurnResult::Failed(Error::internal(
                "the re-attached turn ended without an outcome",
            )),
        };
        let ending = result.into_ending(acc, task.workspace != WorkspaceKind::Copy);
        Some(
            self.check_report(task, &root, &watch, structured, ending)
                .await,
        )
    }

    /// What is left of `task`'s timeout: its turn started with its latest `working` status
    /// (its creation, when it has none). Zero when it has passed.
    fn time_left(&self, task: &Task) -> Duration {
        let started = match self.store().last_status_at(&task.id, TaskState::Working) {
            Ok(Some((_, at))) => at,
            Ok(None) => task.created_at,
            Err(e) => {
                tracing::warn!(task = %task.id, error = %e, "could not read when the turn started; counting from the task's creation");
                task.created_at
            }
        };
        let elapsed_ms = legate_core::Timestamp::now()
            .0
            .saturating_sub(started.0)
            .max(0);
        let limit = Duration::from_secs(task.timeout_secs);
        limit.saturating_sub(Duration::from_millis(elapsed_ms.unsigned_abs()))
    }
}
