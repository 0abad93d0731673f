//! Where the events of the running turn go, and what the handlers share.
//!
//! The connection's handlers run in the SDK's dispatch loop and send events synchronously to
//! the sink of the turn in progress (or of `open()` while the handshake runs). Outside a turn
//! there is no sink and events are dropped (logged at debug).

use super::known_tools::{KnownTools, MAX_KNOWN_TOOLS};
use super::launch::SessionTmp;
use super::translate::{self, KnownTool};
use super::transport::MAX_STDOUT_NOTICES;
use super::unasked;
use super::unwritten::Unwritten;
use crate::approvals::{Abort, AbortHandle, ApprovalChannel};
use crate::{EventSink, WorkspaceWork};
use legate_core::{EventKind, TapDirection, TapProtocol, TaskId, TaskMode, ToolStatus};
use legate_supervisor::{Supervision, Supervisor};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::watch;
use tracing::debug;

/// At most this many stderr events per turn; then one notice.
pub(crate) const MAX_STDERR_EVENTS: usize = 1_000;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[derive(Debug, Default)]
struct Route {
    sink: Option<EventSink>,
    turn_mode: Option<TaskMode>,
    stderr_sent: usize,
    /// Stdout notices sent this turn (non-JSON lines and malformed messages).
    notices_sent: usize,
    /// Malformed JSON-RPC messages this turn.
    malformed: usize,
    /// `ranWithoutAsking` notices sent this turn.
    unasked_sent: usize,
    /// Whether this turn's notice that tool calls went untracked was sent.
    untracked_noted: bool,
    replaying: bool,
    /// The task whose turn this is (`None` while opening).
    task_id: Option<TaskId>,
    /// Ends this turn's waits for a supervisor (raised by a cancel and when the turn ends).
    abort: Option<AbortHandle>,
    /// The turn's blocking work in its workspace (`None` while opening and between turns).
    work: Option<WorkspaceWork>,
}

/// State shared by the session and its handlers.
#[derive(Debug)]
pub(crate) struct HandlerState {
    route: Mutex<Route>,
    last_stderr: Mutex<Option<String>>,
    /// Why the transport ended the connection, when the agent broke the protocol.
    protocol_failure: Mutex<Option<String>>,
    stderr_done: watch::Sender<bool>,
    tools: Mutex<KnownTools>,
    supervisor: Arc<dyn Supervisor>,
    supervision: Supervision,
    /// Where `ask` rulings go and decisions are recorded.
    channel: Option<Arc<dyn ApprovalChannel>>,
    /// Permission requests of this session waiting for a supervisor now.
    asks: Arc<std::sync::atomic::AtomicUsize>,
    root: PathBuf,
    /// The root held open for the file service, once it was first needed.
    beneath: Mutex<Option<Arc<legate_beneath::Root>>>,
    /// Whether `fs/read_text_file` and `fs/write_text_file` are served (not for an agent in
    /// a pod, whose files are not on this machine).
    files: bool,
    /// What the agent's mount namespace covers beneath the root (a home inside a shared
    /// workspace): never served.
    covered: Arc<legate_confine::Covered>,
    /// File contents read for the agent and not yet written to its stdin.
    unwritten: Arc<Unwritten>,
    /// The session's temp directory inside its root, if it has one: removed (when empty) as
    /// the last handle on this state goes, that is when the session and its connection end.
    _session_tmp: Option<SessionTmp>,
}

impl HandlerState {
    pub(crate) fn new(
        supervisor: Arc<dyn Supervisor>,
        supervision: Supervision,
        root: PathBuf,
    ) -> Self {
        Self {
            route: Mutex::new(Route::default()),
            last_stderr: Mutex::new(None),
            protocol_failure: Mutex::new(None),
            stderr_done: watch::channel(false).0,
            tools: Mutex::new(KnownTools::default()),
            supervisor,
            supervision,
            channel: None,
            asks: Arc::default(),
            root,
            beneath: Mutex::new(None),
            files: true,
            covered: Arc::default(),
            unwritten: Arc::default(),
            _session_tmp: None,
        }
    }

    /// The same state, serving no file requests: its root is the agent's view in a pod.
    pub(crate) fn without_files(mut self) -> Self {
        self.files = false;
        self
    }

    /// The same state, refusing file requests for what `covered` covers beneath the root.
    pub(crate) fn covering(mut self, covered: legate_confine::Covered) -> Self {
        self.covered = Arc::new(covered);
        self
    }

    /// File contents read for the agent and not yet written to it (`unwritten`).
    pub(crate) fn unwritten(&self) -> &Arc<Unwritten> {
        &self.unwritten
    }

    /// What the file service never serves beneath the root.
    pub(crate) fn covered(&self) -> Arc<legate_confine::Covered> {
        Arc::clone(&self.covered)
    }

    /// Whether the client file service is on.
    pub(crate) fn serves_files(&self) -> bool {
        self.files
    }

    /// The same state, keeping `session_tmp` for as long as it lives.
    pub(crate) fn keeping(mut self, session_tmp: Option<SessionTmp>) -> Self {
        self._session_tmp = session_tmp;
        self
    }

    /// The same state, sending `ask` rulings to `channel`.
    pub(crate) fn with_channel(mut self, channel: Option<Arc<dyn ApprovalChannel>>) -> Self {
        self.channel = channel;
        self
    }

    /// The supervision channel, if the session has one.
    pub(crate) fn channel(&self) -> Option<Arc<dyn ApprovalChannel>> {
        self.channel.clone()
    }

    /// Takes one of the [`MAX_PENDING_ASKS`] places of requests waiting for a supervisor;
    /// `None` when all are taken. The place is freed when the guard drops.
    pub(crate) fn take_ask_place(&self) -> Option<AskPlace> {
        use std::sync::atomic::Ordering;
        let taken = self
            .asks
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < MAX_PENDING_ASKS).then_some(n + 1)
            })
            .is_ok();
        taken.then(|| AskPlace(self.asks.clone()))
    }

    /// Names the task whose turn the current route carries.
    pub(crate) fn route_task(&self, task_id: TaskId) {
        lock(&self.route).task_id = Some(task_id);
    }

    /// The current turn's task, sink and abort signal, when a turn of a known task runs.
    pub(crate) fn turn(&self) -> Option<(TaskId, EventSink, Abort)> {
        let r = lock(&self.route);
        match (&r.task_id, &r.sink, &r.abort) {
            (Some(task), Some(sink), Some(abort)) => {
                Some((task.clone(), sink.clone(), abort.subscribe()))
            }
            _ => None,
        }
    }

    /// Ends the current turn's waits for a supervisor with `reason` (the first reason stands).
    pub(crate) fn abort_asks(&self, reason: &str) {
        if let Some(abort) = &lock(&self.route).abort {
            abort.raise(reason);
        }
    }

    /// The workspace root (canonical).
    pub(crate) fn root(&self) -> &PathBuf {
        &self.root
    }

    /// The root held open (`O_DIRECTORY`) for the file service: opened on first use and kept
    /// for the session's life, so every later access resolves beneath the same directory.
    pub(crate) fn beneath(
        &self,
    ) -> Result<Arc<legate_beneath::Root>, legate_beneath::BeneathError> {
        let mut held = lock(&self.beneath);
        if let Some(root) = held.as_ref() {
            return Ok(root.clone());
        }
        let root = Arc::new(legate_beneath::Root::open(&self.root)?);
        *held = Some(root.clone());
        Ok(root)
    }

    /// Routes events to `sink` until [`HandlerState::clear`]. `mode` is the running task's mode
    /// (`None` while opening).
    pub(crate) fn route_to(&self, sink: EventSink, mode: Option<TaskMode>) {
        let mut r = lock(&self.route);
        if let Some(old) = &r.abort {
            old.raise("the turn ended while the approval waited");
        }
        *r = Route {
            sink: Some(sink),
            turn_mode: mode,
            abort: Some(Abort::pair().0),
            ..Route::default()
        };
        lock(&self.tools).clear();
    }

    /// Runs the current turn's writes in the workspace through `work`, until
    /// [`HandlerState::clear`].
    pub(crate) fn route_work(&self, work: WorkspaceWork) {
        lock(&self.route).work = Some(work);
    }

    /// Starts `f` as the current turn's work in its workspace, under the route's lock, so that
    /// it is either started before the turn lets go (and the engine waits for it) or not at
    /// all; `None` when no turn runs.
    pub(crate) fn spawn_in_turn<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Option<tokio::task::JoinHandle<T>> {
        let r = lock(&self.route);
        r.work.as_ref().map(|w| w.spawn_blocking(f))
    }

    /// Stops routing: later events are dropped. The session keeps no clone of the sink.
    pub(crate) fn clear(&self) {
        let mut r = lock(&self.route);
        r.sink = None;
        r.work = None;
        r.turn_mode = None;
        r.replaying = false;
        r.task_id = None;
        if let Some(abort) = r.abort.take() {
            abort.raise("the turn ended while the approval waited");
        }
        // Nothing of the turn's tool calls is kept between turns (the route's lock is held,
        // as in `route_to`).
        lock(&self.tools).clear();
    }

    /// While `session/load` replays history, session updates are not the task's events.
    pub(crate) fn set_replaying(&self, replaying: bool) {
        lock(&self.route).replaying = replaying;
    }

    /// Whether history is being replayed.
    pub(crate) fn is_replaying(&self) -> bool {
        lock(&self.route).replaying
    }

    /// Sends one event to the current sink. Returns whether there was one.
    pub(crate) fn emit(&self, event: EventKind) -> bool {
        let r = lock(&self.route);
        match &r.sink {
            Some(sink) => {
                sink.send(event);
                true
            }
            None => {
                debug!(event = event.type_name(), "event outside a turn dropped");
                false
            }
        }
    }

    /// Records one raw ACP line on the current route's wire tap, when its task is tapped
    /// (nothing outside a turn or `open`: such a line belongs to no task).
    pub(crate) fn tap(&self, direction: TapDirection, line: &str) {
        let sink = match &lock(&self.route).sink {
            Some(sink) if sink.taps() => sink.clone(),
            _ => return,
        };
        sink.tap(direction, TapProtocol::Acp, line);
    }

    /// Waits until the current turn's sink has room for more of the agent's output (at
    /// once outside a turn, or for a sink with no bound).
    pub(crate) async fn room(&self) {
        let sink = lock(&self.route).sink.clone();
        if let Some(sink) = sink {
            sink.room().await;
        }
    }

    /// Reports one stderr line (already bounded), at most [`MAX_STDERR_EVENTS`] per turn.
    pub(crate) fn stderr_line(&self, line: String) {
        if !line.trim().is_empty() {
            *lock(&self.last_stderr) = Some(line.clone());
        }
        let mut r = lock(&self.route);
        let Some(sink) = r.sink.clone() else {
            debug!(line = %legate_credentials::redact(&line), "agent stderr outside a turn");
            return;
        };
        r.stderr_sent += 1;
        if r.stderr_sent <= MAX_STDERR_EVENTS {
            sink.send(EventKind::Stderr { line });
        } else if r.stderr_sent == MAX_STDERR_EVENTS + 1 {
            sink.send(EventKind::Notice {
                message: format!(
                    "the agent wrote more than {MAX_STDERR_EVENTS} lines on stderr in this turn; the rest were dropped"
                ),
                detail: serde_json::json!({ "stream": "stderr", "limit": MAX_STDERR_EVENTS }),
            });
        }
    }

    /// Reports a stdout line Legate did not take as it came: `problem` says what is wrong
    /// with it (at most [`MAX_STDOUT_NOTICES`] notices per turn). A `counted` problem is a
    /// malformed JSON-RPC message; returns how many the turn has had (0 outside a turn,
    /// where nothing is reported or counted).
    pub(crate) fn stdout_notice(&self, problem: &str, line: &str, counted: bool) -> usize {
        let mut r = lock(&self.route);
        let Some(sink) = r.sink.clone() else {
            debug!(
                problem,
                "unexpected stdout line from the agent outside a turn"
            );
            return 0;
        };
        r.malformed += usize::from(counted);
        r.notices_sent += 1;
        if r.notices_sent <= MAX_STDOUT_NOTICES {
            sink.send(EventKind::Notice {
                message: format!(
                    "a line the agent wrote on stdout is not JSON-RPC Legate can use: {problem}"
                ),
                detail: serde_json::json!({
                    "stream": "stdout",
                    "malformed": problem,
                    "line": translate::truncate(line, 256),
                }),
            });
        }
        r.malformed
    }

    /// Records why the connection is being ended for a protocol violation.
    pub(crate) fn fail_protocol(&self, reason: String) {
        lock(&self.protocol_failure).get_or_insert(reason);
    }

    /// Why the connection was ended for a protocol violation, if it was.
    pub(crate) fn protocol_failure(&self) -> Option<String> {
        lock(&self.protocol_failure).clone()
    }

    /// The last non-empty stderr line, if any.
    pub(crate) fn last_stderr(&self) -> Option<String> {
        lock(&self.last_stderr).clone()
    }

    /// Marks stderr as closed.
    pub(crate) fn stderr_closed(&self) {
        let _ = self.stderr_done.send(true);
    }

    /// Waits until stderr is closed.
    pub(crate) async fn wait_stderr_closed(&self) {
        let mut rx = self.stderr_done.subscribe();
        let _ = rx.wait_for(|done| *done).await;
    }

    /// Remembers what a tool call said about itself, within `known_tools`' bounds (`heavy`:
    /// the update carries a title, locations or a raw input).
    pub(crate) fn remember_tool(&self, id: &str, heavy: bool, update: impl FnOnce(&mut KnownTool)) {
        lock(&self.tools).remember(id, heavy, update);
    }

    /// Whether a turn (or the session's opening) is routed: outside one, what the agent
    /// says is neither stored nor remembered.
    pub(crate) fn routed(&self) -> bool {
        lock(&self.route).sink.is_some()
    }

    /// Notes that a permission request named tool call `id`.
    pub(crate) fn asked_about(&self, id: &str) {
        self.remember_tool(id, false, |known| known.asked = true);
    }

    /// When tool call `id` just ended with `status` and no permission request ever named it:
    /// a `ranWithoutAsking` notice, once per call, at most
    /// [`unasked::MAX_UNASKED_NOTICES`] per turn (then one saying the rest are left out).
    pub(crate) fn note_if_unasked(&self, id: &str, status: ToolStatus) {
        // The tools lock is released before the route's is taken (`route_to` takes them the
        // other way round).
        let known = {
            let mut tools = lock(&self.tools);
            let Some(known) = tools.get_mut(id) else {
                // A call Legate could not remember (more than MAX_KNOWN_TOOLS this turn, a
                // flood): whether it was asked about is unknown, and it must not pass
                // unseen. One notice per turn says so.
                let full = tools.is_full();
                drop(tools);
                if full && status_ended(status) {
                    let first = {
                        let mut r = lock(&self.route);
                        !std::mem::replace(&mut r.untracked_noted, true)
                    };
                    if first {
                        self.emit(unasked::untracked(MAX_KNOWN_TOOLS));
                    }
                }
                return;
            };
            if known.asked || known.unasked_noted || !unasked::worth_a_notice(known.kind, status) {
                return;
            }
            known.unasked_noted = true;
            known.clone()
        };
        let sent = {
            let mut r = lock(&self.route);
            r.unasked_sent += 1;
            r.unasked_sent
        };
        let notice = match sent {
            n if n <= unasked::MAX_UNASKED_NOTICES => unasked::notice(id, &known, status),
            n if n == unasked::MAX_UNASKED_NOTICES + 1 => unasked::more(),
            _ => return,
        };
        self.emit(notice);
    }

    /// What is known about a tool call.
    pub(crate) fn known_tool(&self, id: &str) -> Option<KnownTool> {
        lock(&self.tools).get(id).cloned()
    }

    /// The supervisor.
    pub(crate) fn supervisor(&self) -> &dyn Supervisor {
        self.supervisor.as_ref()
    }

    /// The supervision inputs for a decision made now: the running task's mode wins over the
    /// mode the session was opened with.
    pub(crate) fn supervision(&self) -> Supervision {
        let mut s = self.supervision.clone();
        if let Some(mode) = lock(&self.route).turn_mode {
            s.mode = mode;
        }
        s
    }
}

impl crate::egress::Turns for HandlerState {
    fn turn(&self) -> Option<(TaskId, EventSink, Abort)> {
        HandlerState::turn(self)
    }

    fn supervision(&self) -> Supervision {
        HandlerState::supervision(self)
    }

    fn channel(&self) -> Option<Arc<dyn ApprovalChannel>> {
        HandlerState::channel(self)
    }

    fn ask_place(&self) -> Option<Box<dyn Send + Sync>> {
        self.take_ask_place()
            .map(|p| Box::new(p) as Box<dyn Send + Sync>)
    }

    fn emit(&self, event: EventKind) -> bool {
        HandlerState::emit(self, event)
    }
}

/// At most this many permission requests of one session wait for a supervisor at once; an
/// agent that asks more is refused at once (a flood must not fill the queue).
pub(crate) const MAX_PENDING_ASKS: usize = 8;

/// One place of a request waiting for a supervisor, freed on drop.
#[derive(Debug)]
pub(crate) struct AskPlace(Arc<std::sync::atomic::AtomicUsize>);

impl Drop for AskPlace {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Whether a tool call's status is an end.
fn status_ended(status: ToolStatus) -> bool {
    matches!(status, ToolStatus::Completed | ToolStatus::Failed)
}
