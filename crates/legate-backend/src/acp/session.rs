//! One ACP session: the connection actor, prompts, cancel and shutdown.
//!
//! The SDK connection runs in a background task (`connect_with`, whose foreground only hands
//! out its [`ConnectionTo`] and waits to be stopped). Requests are sent from outside the
//! dispatch loop with `block_task()`. Handlers run inside the loop and report events
//! synchronously, and the loop routes the prompt's response only after every notification
//! that came before it was handled; so when `prompt()` sees the response, every event of the
//! turn is already on the sink.

use super::failure::{exited, request_error};
use super::handlers;
use super::models::{self, ModelOption, Selection};
use super::process::{Cleanup, ProcessGroup};
use super::state::HandlerState;
use super::translate;
use super::transport;
use crate::selection::{self, ModelList};
use crate::{AgentSession, Canceller, EventSink, SessionFacts, Turn, TurnOutcome};
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema as acp;
use agent_client_protocol::{Agent, Client};
use async_trait::async_trait;
use legate_core::{Error, ErrorCode, Result};
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;
use tracing::{debug, info, warn};

/// How long a response may still arrive after the agent process exited.
const RESPONSE_GRACE: Duration = Duration::from_millis(500);
/// How long the agent may take to answer `session/set_config_option`.
const MODEL_TIMEOUT: Duration = Duration::from_secs(30);

/// The running SDK connection.
pub(crate) struct Connection {
    pub(crate) cx: ConnectionTo<Agent>,
    stop: Mutex<Option<oneshot::Sender<()>>>,
    failure: Arc<Mutex<Option<String>>>,
    closed: Arc<AtomicBool>,
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection").finish_non_exhaustive()
    }
}

impl Connection {
    /// Starts the connection over the agent's pipes. Fails only when the SDK's driver ends
    /// before it handed out its connection.
    pub(crate) async fn start(
        stdin: impl tokio::io::AsyncWrite + Unpin + Send + 'static,
        stdout: impl tokio::io::AsyncRead + Unpin + Send + 'static,
        shared: Arc<HandlerState>,
    ) -> Result<Self> {
        let transport = transport::lines(stdin, stdout, shared.clone());
        let (cx_tx, cx_rx) = oneshot::channel::<ConnectionTo<Agent>>();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let failure = Arc::new(Mutex::new(None));
        let failure_slot = failure.clone();
        let closed = Arc::new(AtomicBool::new(false));
        let closed_flag = closed.clone();
        // `session/update` never reaches the SDK: the transport reads and handles it
        // (`transport::lines`), once.
        let (s2, s3, s4) = (shared.clone(), shared.clone(), shared);
        tokio::spawn(async move {
            let result = Client
                .v1()
                .name("legate")
                .on_receive_request(
                    async move |req: acp::RequestPermissionRequest, responder, cx| {
                        match handlers::permission(&s2, &req) {
                            handlers::Permission::Now(reply) => responder.respond(reply),
                            handlers::Permission::Ask(pending) => {
                                // Waiting for a supervisor must not hold up the dispatch loop:
                                // updates, cancels and other requests keep flowing.
                                let shared = s2.clone();
                                cx.spawn(async move {
                                    let reply = handlers::wait(&shared, *pending).await;
                                    if let Err(e) = responder.respond(reply) {
                                        debug!(error = %e.message, "a permission reply was not sent");
                                    }
                                    Ok(())
                                })
                            }
                        }
                    },
                    agent_client_protocol::on_receive_request!(),
                )
                .on_receive_request(
                    async move |req: acp::ReadTextFileRequest, responder, _cx| {
                        responder.respond_with_result(handlers::read_text_file(&s3, &req).await)
                    },
                    agent_client_protocol::on_receive_request!(),
                )
                .on_receive_request(
                    async move |req: acp::WriteTextFileRequest, responder, _cx| {
                        responder.respond_with_result(handlers::write_text_file(&s4, &req).await)
                    },
                    agent_client_protocol::on_receive_request!(),
                )
                .connect_with(transport, async move |cx: ConnectionTo<Agent>| {
                    let _ = cx_tx.send(cx.clone());
                    tokio::select! {
                        _ = stop_rx => debug!("acp connection stopped"),
                        () = cx.incoming_closed() => debug!("the agent closed its output"),
                    }
                    Ok(())
                })
                .await;
            if let Err(e) = result {
                warn!(code = %e.code, error = %e.message, "acp connection failed");
                let mut slot = failure_slot.lock().unwrap_or_else(|p| p.into_inner());
                *slot = Some(e.message);
            }
            closed_flag.store(true, Ordering::SeqCst);
        });
        let cx = cx_rx.await.map_err(|_| {
            Error::new(
                ErrorCode::AgentStartFailed,
                "the ACP connection to the agent ended before it started",
            )
        })?;
        Ok(Self {
            cx,
            stop: Mutex::new(Some(stop_tx)),
            failure,
            closed,
        })
    }

    /// Why the connection failed, when it failed on its own (not a clean EOF).
    pub(crate) fn failure(&self) -> Option<String> {
        self.failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Whether the connection still runs.
    pub(crate) fn is_open(&self) -> bool {
        !self.closed.load(Ordering::SeqCst)
    }

    /// Ends the connection. Idempotent.
    pub(crate) fn stop(&self) {
        if let Some(tx) = self.stop.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = tx.send(());
        }
    }
}

/// Clears the route when a turn ends, however it ends (including being dropped).
struct TurnGuard<'a>(&'a HandlerState);

impl Drop for TurnGuard<'_> {
    fn drop(&mut self) {
        self.0.clear();
    }
}

/// A conversation with one ACP agent process.
pub struct AcpSession {
    /// Named when it opens.
    pub(crate) facts: SessionFacts,
    /// What the agent announced of ACP's session lifecycle.
    pub(crate) lifecycle: super::lifecycle::Lifecycle,
    /// Whether `session/close` was sent (once per session).
    pub(crate) closed: AtomicBool,
    pub(crate) shared: Arc<HandlerState>,
    pub(crate) connection: Connection,
    pub(crate) process: ProcessGroup,
    pub(crate) turn: tokio::sync::Mutex<()>,
    /// Where an unverified cleanup blocks its root (`$LEGATE_HOME/blocked`).
    pub(crate) blocked_dir: Option<std::path::PathBuf>,
    /// `$LEGATE_HOME`, where the agent's saved model preference is.
    pub(crate) legate_home: Option<std::path::PathBuf>,
    /// Whether the cleanup was recorded (once per session); held while it is recorded, so
    /// that whoever finds it set knows the event is out.
    pub(crate) cleanup_recorded: Mutex<bool>,
    /// The model option the session offers (category `model`), if any.
    pub(crate) model: Mutex<Option<ModelOption>>,
    /// The agent's name, for messages.
    pub(crate) agent_name: String,
    /// The agent's configured model, used when a turn names none.
    pub(crate) default_model: Option<String>,
    /// The egress proxy of the agent's network namespace, stopped with the session.
    pub(crate) _egress: Option<crate::egress::Egress>,
    /// For an agent in a pod working on a copy: the local copy its workspace comes back to
    /// after each turn.
    pub(crate) pod_copy: Option<super::pod::PodCopy>,
}

impl fmt::Debug for AcpSession {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AcpSession")
            .field("facts", &self.facts)
            .field("pgid", &self.process.pgid())
            .finish_non_exhaustive()
    }
}

impl AcpSession {
    /// The agent's process group id (its pid).
    pub fn pgid(&self) -> i32 {
        self.process.pgid()
    }

    /// The models the session offers (its config option of category `model`); an empty list
    /// when it offers none.
    pub fn models(&self) -> ModelList {
        self.model
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(ModelOption::list)
            .unwrap_or_default()
    }

    /// Applies the turn's model before the prompt, chosen as for every backend
    /// (`crate::selection`: the task's, else the saved preference, else the configured
    /// default, else the agent's own): through the session's model config option
    /// (`session/set_config_option`); ignored with a notice when the agent offers no models;
    /// `MODEL_NOT_AVAILABLE` for an id it does not offer. Returns the model the turn runs
    /// with, when known.
    async fn apply_model(&self, turn: &Turn, sink: &EventSink) -> Result<Option<String>> {
        let option = self.model.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let saved = match &self.legate_home {
            Some(home) => selection::load_preference(home, &self.agent_name)?,
            None => None,
        };
        let choice = selection::choose(turn.model.as_deref(), saved, self.default_model.as_deref());
        match models::select(&self.agent_name, choice.id(), option.as_ref())? {
            Selection::Keep => Ok(option.map(|o| o.current)),
            Selection::Ignored(id) => {
                info!(agent = %self.agent_name, model = %id, "the agent offers no models; model ignored");
                sink.send(legate_core::EventKind::Notice {
                    message: format!(
                        "agent `{}` offers no model selection, so model {id} was ignored",
                        self.agent_name
                    ),
                    detail: serde_json::json!({ "warning": "model", "model": id }),
                });
                Ok(None)
            }
            Selection::Set { config_id, value } => {
                let request = acp::SetSessionConfigOptionRequest::new(
                    self.session_id().to_string(),
                    config_id.clone(),
                    value.as_str(),
                );
                let answer = tokio::time::timeout(
                    MODEL_TIMEOUT,
                    self.connection.cx.send_request(request).block_task(),
                )
                .await;
                let response = match answer {
                    Ok(Ok(r)) => r,
                    Ok(Err(e)) => {
                        return Err(Error::new(
                            ErrorCode::ModelNotAvailable,
                            format!(
                                "agent `{}` refused model {value}: {}",
                                self.agent_name,
                                translate::truncate(&e.message, 300)
                            ),
                        ));
                    }
                    Err(_) => {
                        return Err(Error::new(
                            ErrorCode::AgentFailed,
                            format!(
                                "agent `{}` did not answer `session/set_config_option` within {} s",
                                self.agent_name,
                                MODEL_TIMEOUT.as_secs()
                            ),
                        ));
                    }
                };
                let initial = option.as_ref().map(|o| o.initial.clone());
                let mut updated =
                    models::model_option(&response.config_options).unwrap_or(ModelOption {
                        config_id,
                        current: value.clone(),
                        initial: value.clone(),
                        values: option.map(|o| o.values).unwrap_or_default(),
                    });
                // The agent's own choice stays the one it made when the session opened.
                if let Some(initial) = initial {
                    updated.initial = initial;
                }
                let current = updated.current.clone();
                let config_id = updated.config_id.clone();
                *self.model.lock().unwrap_or_else(|p| p.into_inner()) = Some(updated);
                info!(agent = %self.agent_name, model = %current, "model selected");
                sink.send(legate_core::EventKind::Notice {
                    message: format!("model {current} selected"),
                    detail: serde_json::json!({ "model": current, "configId": config_id }),
                });
                Ok(Some(current))
            }
        }
    }

    /// Stops the process group (a no-op when already stopped) and records the cleanup once:
    /// a `workspace` event on the running turn's sink, when there is one, and a mark that
    /// blocks the root when the group could not be shown gone.
    async fn stop_and_record(&self) -> Cleanup {
        let cleanup = self.process.stop().await;
        let mut recorded = self
            .cleanup_recorded
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if !*recorded {
            record_cleanup(
                &cleanup,
                &self.process,
                |e| {
                    self.shared.emit(e);
                },
                self.blocked_dir.as_deref(),
                self.shared.root(),
            );
            *recorded = true;
        }
        cleanup
    }
}

/// Reports `cleanup` through `emit` and, when it is unverified, blocks `root` in
/// `blocked_dir` (`PROCESS_CLEANUP_UNVERIFIED` for every later session or review there until
/// the agent's processes are gone).
pub(crate) fn record_cleanup(
    cleanup: &Cleanup,
    process: &ProcessGroup,
    emit: impl FnOnce(legate_core::EventKind),
    blocked_dir: Option<&std::path::Path>,
    root: &std::path::Path,
) {
    if let Some(pod) = process.pod() {
        // Nothing of a pod runs on this machine: there is no root to block.
        tracing::info!(
            pod = pod.name(),
            verified = cleanup.verified,
            "agent pod cleanup"
        );
        emit(legate_core::EventKind::Notice {
            message: if cleanup.verified {
                format!("agent pod {} deleted: it is gone", pod.name())
            } else {
                format!(
                    "agent pod {} was deleted but still there after 30 s; the next engine's sweep or its deadline ends it",
                    pod.name()
                )
            },
            detail: serde_json::json!({
                "podCleanup": {
                    "verified": cleanup.verified,
                    "pod": pod.name(),
                    "namespace": pod.namespace(),
                }
            }),
        });
        return;
    }
    crate::cleanup::record(
        "agent",
        cleanup,
        process.processes(),
        emit,
        blocked_dir,
        root,
    );
}

/// Sends `session/cancel` for one session.
pub struct AcpCanceller {
    cx: ConnectionTo<Agent>,
    session_id: String,
    shared: Arc<HandlerState>,
}

impl fmt::Debug for AcpCanceller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AcpCanceller")
            .field("session_id", &self.session_id)
            .finish_non_exhaustive()
    }
}

impl Canceller for AcpCanceller {
    fn cancel(&self) {
        // ACP: every pending permission request of a canceled turn is answered `cancelled`.
        self.shared
            .abort_asks("the task was canceled while the approval waited");
        match self
            .cx
            .send_notification(acp::CancelNotification::new(self.session_id.clone()))
        {
            Ok(()) => info!(session_id = %self.session_id, "session/cancel sent"),
            Err(e) => {
                debug!(session_id = %self.session_id, error = %e.message, "session/cancel not sent")
            }
        }
    }
}

#[async_trait]
impl AgentSession for AcpSession {
    fn facts(&self) -> &SessionFacts {
        &self.facts
    }

    async fn prompt(&self, turn: Turn, sink: EventSink) -> Result<TurnOutcome> {
        let _one_at_a_time = self.turn.lock().await;
        if let Some(status) = self.process.exit_status() {
            return Err(exited(
                "the turn",
                &status,
                &self.process,
                &self.shared,
                ErrorCode::AgentExited,
            )
            .await);
        }
        if turn.json_schema.is_some() {
            return Err(Error::invalid_input(format!(
                "agent `{}` speaks ACP, which has no structured output; a JSON Schema needs an agent of kind agy",
                self.agent_name
            )));
        }
        if let Some(dir) = &self.blocked_dir {
            // Another agent's run in this root may have left processes since this opened.
            crate::cleanup::check(dir, self.shared.root())?;
        }
        // Routed before the model is set: `session/set_config_option` and its answer are the
        // task's frames (its wire tap records them) like the prompt's.
        let turn_sink = sink.clone();
        self.shared.route_to(sink, Some(turn.mode));
        self.shared.route_task(turn.task_id.clone());
        self.shared.route_work(turn.work.clone());
        let _clear = TurnGuard(&self.shared);
        let model = self.apply_model(&turn, &turn_sink).await?;
        let work = turn.work.clone();
        let mut result = self.run_turn(turn, model).await;
        // An agent in a pod: what it did comes back to the local copy before the turn ends.
        if let (Ok(_), Some(copy), Some(pod)) = (&result, &self.pod_copy, self.process.pod())
            && let Err(e) = copy.bring_back(pod, &turn_sink, &work).await
        {
            result = Err(e);
        }
        // The agent exited, or is being stopped (shutdown during the turn): what is left of
        // its group is stopped, and the cleanup recorded on this turn, before the route closes.
        if self.process.exit_status().is_some() || self.process.is_stopping() {
            self.stop_and_record().await;
        }
        result
    }

    fn canceller(&self) -> Arc<dyn Canceller> {
        Arc::new(AcpCanceller {
            cx: self.connection.cx.clone(),
            session_id: self.session_id().to_string(),
            shared: self.shared.clone(),
        })
    }

    fn is_alive(&self) -> bool {
        self.process.exit_status().is_none()
            && !self.process.is_stopping()
            && self.connection.is_open()
    }

    async fn shutdown(&self) {
        self.close().await;
        self.stop_and_record().await;
        self.connection.stop();
    }
}

impl AcpSession {
    /// Closes the session with `session/close` before its processes are stopped, when the
    /// agent announced it, is alive, and no turn runs (a running turn is being stopped, not
    /// closed, and is never waited for here). Sent once; bounded by
    /// [`super::lifecycle::CLOSE_TIMEOUT`].
    async fn close(&self) {
        if !self.lifecycle.close || !self.is_alive() {
            return;
        }
        let Ok(_no_turn) = self.turn.try_lock() else {
            return;
        };
        if self.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        super::lifecycle::close(&self.connection.cx, self.session_id()).await;
    }
}

impl AcpSession {
    /// Sends the prompt and waits for its end, the agent's exit, or a broken connection.
    async fn run_turn(&self, turn: Turn, model: Option<String>) -> Result<TurnOutcome> {
        info!(
            task_id = %turn.task_id,
            session_id = %self.session_id(),
            prompt_bytes = turn.prompt.len(),
            mode = turn.mode.as_str(),
            "prompt sent"
        );
        let request = acp::PromptRequest::new(
            self.session_id().to_string(),
            vec![acp::ContentBlock::Text(acp::TextContent::new(turn.prompt))],
        )
        .meta(super::ext::with_trace(
            super::ext::prompt_meta(turn.message_id.as_deref()),
            legate_trace::TraceContext::current().as_ref(),
        ));
        let response = self.connection.cx.send_request(request).block_task();
        tokio::pin!(response);
        let result = tokio::select! {
            r = &mut response => r,
            status = self.process.exited() => {
                match tokio::time::timeout(RESPONSE_GRACE, &mut response).await {
                    Ok(r) => r,
                    Err(_) => {
                        let err = match status {
                            Some(status) => exited("the turn", &status, &self.process, &self.shared, ErrorCode::AgentExited).await,
                            None => Error::new(ErrorCode::AgentExited, "the agent exited during the turn"),
                        };
                        return Err(err);
                    }
                }
            }
        };
        match result {
            Ok(resp) => {
                let usage = resp.usage.as_ref().map(|u| {
                    let mut usage = translate::prompt_usage(u);
                    if usage.model.is_none() {
                        usage.model.clone_from(&model);
                    }
                    usage
                });
                let asks = super::ext::input_required(resp.meta.as_ref());
                let direct = super::ext::direct_message(resp.meta.as_ref());
                let outcome = TurnOutcome {
                    stop_reason: translate::stop_reason(resp.stop_reason, asks, direct),
                    usage,
                };
                info!(
                    task_id = %turn.task_id,
                    session_id = %self.session_id(),
                    stop_reason = %outcome.stop_reason,
                    "turn ended"
                );
                Ok(outcome)
            }
            Err(e) => {
                let err = request_error(
                    "the turn",
                    &e,
                    &self.process,
                    &self.connection,
                    &self.shared,
                    ErrorCode::AgentExited,
                )
                .await;
                warn!(task_id = %turn.task_id, session_id = %self.session_id(), code = %err.code, error = %err.message, "turn failed");
                Err(err)
            }
        }
    }
}
