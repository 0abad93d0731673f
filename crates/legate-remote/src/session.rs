//! [`A2aBackend`] and [`A2aSession`]: a remote A2A agent driven as a Legate backend.
//!
//! `open` connects (card, interface, token check) and describes the remote (its card's name,
//! version and skills, for `legate agents` and `health`). Each `prompt` checks supervision,
//! sends the turn's message (streaming when the card says so, else send + `GetTask`
//! polling), and follows the remote task to the end of the turn. A conversation continues
//! remotely: the next turn of the same context carries the remote context id, and a reply to
//! a question carries the remote task id too. After a local restart, [`Backend::reattach`]
//! follows the recorded remote task to its end.
//!
//! This module never touches the store and never decides the local task's state.

use crate::connect::{Remote, timed};
use crate::errors::excerpt;
use crate::follow::Follow;
use crate::translate::{Bounds, Finish, Relay};
use a2a::{
    GetTaskRequest, Message, Part, Role, SendMessageRequest, SendMessageResponse,
    SubscribeToTaskRequest,
};
use async_trait::async_trait;
use legate_backend::{
    AgentInfo, AgentSession, Backend, Canceller, Capabilities, Continuation, EventSink,
    RemoteLedger, SessionFacts, SessionRequest, StopReason, Turn, TurnGate, TurnOutcome,
};
use legate_core::remote::PLAN_CHANGES_EXTENSION;
use legate_core::{
    AgentKind, Error, ErrorCode, EventKind, RemoteRef, Result, TaskMode, WorkspaceKind,
};
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// The kind name of remote A2A agents.
pub const KIND: &str = "a2a";

/// The kind of remote A2A agents (`kind = "a2a"`).
pub fn kind() -> AgentKind {
    // A constant that is a valid kind name (checked by a test).
    AgentKind::new(KIND).unwrap_or(AgentKind::ACP)
}

/// The remote A2A backend.
#[derive(Debug, Clone, Default)]
pub struct A2aBackend {
    /// What one turn may bring back.
    pub bounds: Bounds,
}

/// A conversation with a remote agent: a connection, the remote context, and the remote task
/// that waits for an answer, if one does.
#[derive(Debug)]
pub struct A2aSession {
    remote: Arc<Remote>,
    /// Named by the resumed context, else by the remote's first.
    facts: SessionFacts,
    bounds: Bounds,
    workspace: WorkspaceKind,
    /// The local workspace root (a copy task's copy, which the remote's patch is applied to).
    root: std::path::PathBuf,
    ledger: Option<Arc<dyn RemoteLedger>>,
    context: Mutex<Option<String>>,
    waiting_task: Mutex<Option<String>>,
    cancel: Arc<Mutex<CancellationToken>>,
    /// One turn at a time, none after shutdown.
    turns: TurnGate,
}

/// Cancels the running turn of an [`A2aSession`] (`CancelTask` to the remote).
#[derive(Debug)]
pub struct A2aCanceller {
    cancel: Arc<Mutex<CancellationToken>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Canceller for A2aCanceller {
    fn cancel(&self) {
        lock(&self.cancel).cancel();
    }
}

/// At most this many skills are listed, each name at most 64 characters.
const MAX_SKILLS: usize = 16;

/// What a remote says about itself, for listings: its card's name and version, and as
/// capabilities the binding, streaming, supervision, the workspace extension and its skills.
fn info(remote: &Remote) -> AgentInfo {
    let f = &remote.found;
    let mut capabilities = vec![
        format!("a2a {}", excerpt(&f.interface.protocol_binding)),
        if f.supervised {
            "supervised"
        } else {
            "unsupervised"
        }
        .to_string(),
    ];
    if f.streaming {
        capabilities.push("streaming".into());
    }
    if f.copy_workspace {
        capabilities.push("copy-workspace".into());
    }
    for s in f.card.skills.iter().take(MAX_SKILLS) {
        let name: String = excerpt(&s.name).chars().take(64).collect();
        capabilities.push(format!("skill: {name}"));
    }
    AgentInfo {
        name: Some(excerpt(&f.card.name).chars().take(128).collect()),
        version: Some(excerpt(&f.card.version).chars().take(64).collect()),
        load_session: true,
        capabilities,
    }
}

/// How the remote turn's end maps to a turn outcome.
fn outcome(relay: Relay, agent: &str) -> Result<TurnOutcome> {
    let usage = relay.usage.clone();
    let stop_reason = match relay.finish {
        Some(Finish::Completed) => StopReason::EndTurn,
        Some(Finish::InputRequired) => StopReason::InputRequired,
        Some(Finish::Canceled) => StopReason::Cancelled,
        Some(Finish::Failed(said)) => {
            return Err(Error::new(
                ErrorCode::AgentFailed,
                format!("the remote task of agent `{agent}` failed: {said}"),
            ));
        }
        Some(Finish::Rejected(said)) => {
            return Err(Error::new(
                ErrorCode::AgentFailed,
                format!("the remote agent `{agent}` rejected the task: {said}"),
            ));
        }
        Some(Finish::AuthRequired) => {
            return Err(Error::new(
                ErrorCode::RemoteUnauthenticated,
                format!(
                    "the remote task of agent `{agent}` asks for authentication Legate cannot give (auth-required)"
                ),
            ));
        }
        None => {
            return Err(crate::errors::protocol(format!(
                "the remote agent `{agent}` ended its answer before its task ended"
            )));
        }
    };
    Ok(TurnOutcome { stop_reason, usage })
}

#[async_trait]
impl Backend for A2aBackend {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            structured_output: false,
            effort: false,
            model_listing: false,
            local_process: false,
            // A session is a connection and a remote context; a new session continues the
            // stored remote context id like an ACP agent's `session/load`.
            continuation: Continuation::LiveSession,
            default_preset: legate_supervisor::Preset::generic(),
            reattach: true,
            tool_controls: false,
            copy_tool_controls: false,
        }
    }

    async fn open(
        &self,
        request: SessionRequest,
        sink: EventSink,
    ) -> Result<Arc<dyn AgentSession>> {
        let remote = Arc::new(Remote::connect(&request.agent, &sink).await?);
        let info = info(&remote);
        sink.send(EventKind::Notice {
            message: format!(
                "remote agent {} at {} over {} ({})",
                info.name.as_deref().unwrap_or("?"),
                remote.url(),
                remote.binding(),
                if remote.found.supervised {
                    "its permissions are decided by the remote's supervisor"
                } else {
                    "unsupervised: the remote decides its own permissions"
                }
            ),
            detail: serde_json::json!({
                "event": "remote_session",
                "url": remote.url(),
                "binding": remote.binding(),
                "supervised": remote.found.supervised,
                "streaming": remote.found.streaming,
            }),
        });
        let session = A2aSession {
            facts: SessionFacts::new(info, request.resume_session_id.is_some()),
            bounds: self.bounds,
            workspace: request.supervision.workspace,
            root: request.boundary.root.clone(),
            ledger: request.ledger.clone(),
            context: Mutex::new(request.resume_session_id.clone()),
            waiting_task: Mutex::new(None),
            cancel: Arc::new(Mutex::new(CancellationToken::new())),
            turns: TurnGate::default(),
            remote,
        };
        if let Some(id) = &request.resume_session_id {
            let _ = session.facts.name(id.clone());
            sink.send(EventKind::Session {
                session_id: id.clone(),
                resumed: true,
            });
        }
        Ok(Arc::new(session))
    }

    async fn reattach(
        &self,
        request: SessionRequest,
        turn: Turn,
        remote_ref: RemoteRef,
        sink: EventSink,
        cancel: CancellationToken,
    ) -> Result<TurnOutcome> {
        let remote = Remote::connect(&request.agent, &sink).await?;
        let _tap = remote.tap.route(&sink);
        let mut follow = Follow {
            remote: &remote,
            task: &turn.task_id,
            ledger: None,
            sink: &sink,
            cancel: &cancel,
            relay: Relay::new(self.bounds)
                .with_legate_events(remote.found.supervised)
                .for_copy(request.supervision.workspace == WorkspaceKind::Copy),
            recorded: true,
            cancel_sent: false,
        };
        follow.relay.task_id = Some(remote_ref.task_id.clone());
        follow.relay.context_id = remote_ref.context_id.clone();
        sink.send(EventKind::Notice {
            message: format!(
                "re-attached to remote task {} at {}",
                excerpt(&remote_ref.task_id),
                remote.url()
            ),
            detail: serde_json::json!({"event": "remote_reattached", "url": remote.url(), "remoteTaskId": remote_ref.task_id}),
        });
        if cancel.is_cancelled() {
            follow.send_cancel().await;
        }
        // Where the task is now: it may have ended while no one followed it.
        let req = GetTaskRequest {
            id: remote_ref.task_id.clone(),
            history_length: Some(0),
            tenant: None,
        };
        let now = timed(remote.url(), "GetTask", remote.client.get_task(&req)).await?;
        for e in follow.relay.polled(&now)? {
            sink.send(e);
        }
        if !follow.relay.done() {
            if remote.found.streaming {
                let req = SubscribeToTaskRequest {
                    id: remote_ref.task_id.clone(),
                    tenant: None,
                };
                let stream = timed(
                    remote.url(),
                    "SubscribeToTask",
                    remote.client.subscribe_to_task(&req),
                )
                .await?;
                follow.stream(stream, "SubscribeToTask").await?;
            }
            if !follow.relay.done() {
                follow.poll().await?;
            }
        }
        if request.supervision.workspace == WorkspaceKind::Copy
            && follow.relay.finish == Some(Finish::Completed)
        {
            bring_back(
                &remote,
                &follow.relay,
                &request.boundary.root,
                &sink,
                &turn.work,
            )
            .await?;
        }
        outcome(follow.relay, &request.agent.name)
    }
}

impl A2aSession {
    /// Refuses what the remote cannot be trusted with: a write task on a remote that does not
    /// supervise its agent (unless the configuration allows it), and a copy task on a remote
    /// that does not declare the copy-workspace extension.
    fn check(&self, turn: &Turn) -> Result<()> {
        let r = &self.remote;
        if turn.mode == TaskMode::Write && !r.found.supervised && !r.endpoint.allow_unsupervised {
            return Err(Error::new(
                ErrorCode::AgentUnsupervised,
                format!(
                    "the remote agent `{}` ({}) does not declare Legate's supervision extension, so no supervisor Legate knows of decides its permissions; run it read-only, or set allow_unsupervised = true for it",
                    r.agent,
                    r.url()
                ),
            ));
        }
        if self.workspace == WorkspaceKind::Copy {
            crate::copy::require_extension(&r.found.card)?;
        }
        if turn.json_schema.is_some() {
            return Err(Error::invalid_input(format!(
                "the remote agent `{}` cannot be held to a JSON Schema",
                r.agent
            )));
        }
        Ok(())
    }

    /// The turn's message. A copy task's first turn in its context carries the copy's files
    /// (bounded by `max_transfer_bytes`: past it `COPY_TOO_LARGE`, before anything is sent);
    /// later turns continue in the remote's copy.
    fn message(&self, turn: &Turn) -> Result<SendMessageRequest> {
        let mut m = Message::new(Role::User, vec![Part::text(turn.prompt.clone())]);
        if let Some(id) = &turn.message_id {
            m.message_id = id.clone();
        }
        m.context_id = lock(&self.context).clone();
        m.task_id = lock(&self.waiting_task).clone();
        if self.workspace == WorkspaceKind::Copy && m.context_id.is_none() {
            let max = self.remote.endpoint.max_transfer_bytes();
            crate::copy::outbound(&self.root, max)?.attach(&mut m);
        }
        if self.remote.found.plan_changes && self.remote.found.supervised {
            // A remote Legate: its plans may come as what changed, rebuilt by the relay.
            m.extensions
                .get_or_insert_with(Vec::new)
                .push(PLAN_CHANGES_EXTENSION.to_string());
        }
        Ok(SendMessageRequest {
            message: m,
            configuration: None,
            metadata: None,
            tenant: None,
        })
    }

    /// Runs one turn to the remote task's end of it.
    async fn run(
        &self,
        turn: &Turn,
        sink: &EventSink,
        cancel: &CancellationToken,
    ) -> Result<Relay> {
        let remote = &self.remote;
        let req = self.message(turn)?;
        let mut follow = Follow {
            remote,
            task: &turn.task_id,
            ledger: self.ledger.as_ref(),
            sink,
            cancel,
            relay: Relay::new(self.bounds)
                .with_legate_events(remote.found.supervised)
                .for_copy(self.workspace == WorkspaceKind::Copy),
            recorded: false,
            cancel_sent: false,
        };
        if remote.found.streaming {
            let stream = tokio::select! {
                s = timed(remote.url(), "SendStreamingMessage", remote.client.send_streaming_message(&req)) => s?,
                () = given_up(cancel) => return Ok(canceled(follow.relay)),
            };
            follow.stream(stream, "SendStreamingMessage").await?;
            if !follow.relay.done() && follow.relay.task_id.is_some() {
                // The stream ended (or was cut) before the task did: ask where it is.
                follow.poll().await?;
            }
        } else {
            let answer = tokio::select! {
                a = timed(remote.url(), "SendMessage", remote.client.send_message(&req)) => a?,
                () = given_up(cancel) => return Ok(canceled(follow.relay)),
            };
            match answer {
                SendMessageResponse::Message(m) => {
                    follow.relay_update(&a2a::StreamResponse::Message(m))?
                }
                SendMessageResponse::Task(t) => {
                    follow.relay_update(&a2a::StreamResponse::Task(t))?
                }
            }
            if !follow.relay.done() {
                follow.poll().await?;
            }
        }
        if cancel.is_cancelled() && !follow.relay.done() {
            return Ok(canceled(follow.relay));
        }
        Ok(follow.relay)
    }
}

/// A completed copy task's patch, read from the remote task (`GetTask`, with its `patch`
/// artifact) and applied to the local copy at `root`, both sides' sha256 checked. The apply is
/// the turn's `work`, which the engine waits for before it reads the copy, even when it gave
/// up on the turn.
async fn bring_back(
    remote: &Remote,
    relay: &Relay,
    root: &std::path::Path,
    sink: &EventSink,
    work: &legate_backend::WorkspaceWork,
) -> Result<()> {
    let Some(id) = relay.task_id.clone() else {
        return Err(crate::errors::protocol(
            "the remote answered a copy task without a task to return its patch in".into(),
        ));
    };
    let req = GetTaskRequest {
        id,
        history_length: Some(0),
        tenant: None,
    };
    let task = timed(remote.url(), "GetTask", remote.transfer.get_task(&req)).await?;
    let max = remote.endpoint.max_transfer_bytes();
    // git runs (and may take its own time limit) on a blocking thread: on a runtime worker it
    // would hold the worker, and the turn's timeout could not fire.
    let root = root.to_path_buf();
    let applied = work
        .run_blocking("applying the remote's patch", move || {
            crate::copy::apply_returned_bounded(&root, &task, max)
        })
        .await??;
    sink.send(EventKind::Notice {
        message: format!(
            "the remote's patch ({} bytes, {} file(s)) was applied to the local copy",
            applied.patch_length,
            applied.post_state.len()
        ),
        detail: serde_json::json!({
            "event": "remote_patch_applied",
            "patchSha256": applied.patch_sha256,
            "patchLength": applied.patch_length,
        }),
    });
    Ok(())
}

/// Fires [`crate::follow::CANCEL_NAME_WAIT`] after `cancel`: a send still unanswered then is
/// given up (its remote task, if any, is not known and cannot be canceled).
async fn given_up(cancel: &CancellationToken) {
    cancel.cancelled().await;
    tokio::time::sleep(crate::follow::CANCEL_NAME_WAIT).await;
}

/// A turn canceled before the remote named anything to cancel.
fn canceled(mut relay: Relay) -> Relay {
    relay.finish = Some(Finish::Canceled);
    relay
}

#[async_trait]
impl AgentSession for A2aSession {
    fn facts(&self) -> &SessionFacts {
        &self.facts
    }

    async fn prompt(&self, turn: Turn, sink: EventSink) -> Result<TurnOutcome> {
        let _one_at_a_time = self.turns.enter("the remote agent's session").await?;
        self.check(&turn)?;
        // A tapped task's requests and answers, for as long as its turn runs.
        let _tap = self.remote.tap.route(&sink);
        let cancel = CancellationToken::new();
        *lock(&self.cancel) = cancel.clone();
        tracing::info!(task_id = %turn.task_id, agent = %self.remote.agent, url = %self.remote.url(), prompt_bytes = turn.prompt.len(), "remote turn started");
        let relay = self.run(&turn, &sink, &cancel).await?;
        if self.workspace == WorkspaceKind::Copy && relay.finish == Some(Finish::Completed) {
            bring_back(&self.remote, &relay, &self.root, &sink, &turn.work).await?;
        }
        if let Some(c) = &relay.context_id {
            *lock(&self.context) = Some(c.clone());
            if self.facts.name(c.clone()) {
                sink.send(EventKind::Session {
                    session_id: c.clone(),
                    resumed: self.facts.resumed,
                });
            }
        }
        *lock(&self.waiting_task) = match relay.finish {
            Some(Finish::InputRequired) => relay.task_id.clone(),
            _ => None,
        };
        outcome(relay, &self.remote.agent)
    }

    fn canceller(&self) -> Arc<dyn Canceller> {
        Arc::new(A2aCanceller {
            cancel: self.cancel.clone(),
        })
    }

    fn is_alive(&self) -> bool {
        !self.turns.is_closed()
    }

    async fn shutdown(&self) {
        self.turns.close();
        lock(&self.cancel).cancel();
    }
}
