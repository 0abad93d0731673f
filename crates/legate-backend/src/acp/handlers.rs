//! The client side of ACP: what Legate does when the agent notifies or asks.
//!
//! None of them waits for the agent. Session updates run in the transport's reader, before
//! the next line is read (`transport::lines`), and become events synchronously (which is
//! what puts every event of a turn on the sink before the prompt's response is routed); the
//! rest run inside the SDK's dispatch loop: permission requests are decided by the
//! (synchronous) supervisor, after the task's tool controls (`legate_supervisor::tools`,
//! which also bound `fs/*`: no read without `read`, no write without `edit`), and `fs/*`
//! touch only the local disk. An `ask` ruling is the one
//! exception: it is handed to the supervision channel and awaited in a task of its own
//! ([`wait`]), so the loop keeps dispatching while a supervisor decides. No lock is held
//! across that wait.

use super::fs;
use super::state::HandlerState;
use super::translate;
use crate::approvals::{ApprovalChannel, Ask, Sent};
use agent_client_protocol::v1::schema as acp;
use legate_core::{Decision, EventKind, Ruling, TaskId, ToolKind};
use tracing::{debug, error, info};

/// A `session/update`: one event, sent now.
pub(crate) fn session_update(shared: &HandlerState, notification: &acp::SessionNotification) {
    if shared.is_replaying() {
        debug!(session_id = %notification.session_id, "history replayed by session/load skipped");
        return;
    }
    let update = &notification.update;
    let tool_id = match update {
        acp::SessionUpdate::ToolCall(c) => Some((c.tool_call_id.0.to_string(), true)),
        acp::SessionUpdate::ToolCallUpdate(u) => Some((
            u.tool_call_id.0.to_string(),
            u.fields.title.is_some()
                || u.fields.locations.is_some()
                || u.fields.raw_input.is_some(),
        )),
        _ => None,
    };
    // Outside a turn nothing is stored, and nothing is remembered either: an idle agent's
    // flood of tool calls must not grow Legate's memory.
    if let Some((id, heavy)) = tool_id
        && shared.routed()
    {
        shared.remember_tool(&id, heavy, |known| translate::learn_tool(known, update));
    }
    match translate::update_event(update) {
        Some(event) => {
            shared.emit(event);
        }
        None => debug!(session_id = %notification.session_id, "session update not recorded"),
    }
    let ended = match update {
        acp::SessionUpdate::ToolCall(c) => Some((c.tool_call_id.0.to_string(), c.status)),
        acp::SessionUpdate::ToolCallUpdate(u) => u
            .fields
            .status
            .map(|status| (u.tool_call_id.0.to_string(), status)),
        _ => None,
    };
    if let Some((id, status)) = ended {
        shared.note_if_unasked(&id, translate::tool_status(status));
    }
}

/// A `session/update` that is a plan, read straight into its entries: what
/// [`session_update`] does with a plan (one event; nothing about tools).
pub(crate) fn session_plan(shared: &HandlerState, entries: Vec<legate_core::PlanEntry>) {
    if shared.is_replaying() {
        debug!("history replayed by session/load skipped");
        return;
    }
    shared.emit(legate_core::EventKind::Plan { entries });
}

/// How a `session/request_permission` is answered: now, or after a supervisor's answer.
pub(crate) enum Permission {
    /// Decided at once (the table, a policy rule, or a refused `ask`).
    Now(acp::RequestPermissionResponse),
    /// Sent to the supervision channel: [`wait`] answers it, off the dispatch loop.
    Ask(Box<PendingAsk>),
}

/// An `ask` to hand to the supervision channel.
pub(crate) struct PendingAsk {
    channel: std::sync::Arc<dyn ApprovalChannel>,
    ask: Ask,
    _place: super::state::AskPlace,
}

/// A `session/request_permission`: the supervisor decides; an `ask` goes to the supervision
/// channel when the session has one (else it is refused). The answer is an offered option id
/// or `cancelled`, never anything else.
pub(crate) fn permission(shared: &HandlerState, req: &acp::RequestPermissionRequest) -> Permission {
    shared.asked_about(&req.tool_call.tool_call_id.0);
    let request =
        translate::permission_request(req, shared.known_tool(&req.tool_call.tool_call_id.0));
    let supervision = shared.supervision();
    // The task's tool controls come first: a kind or MCP tool outside them is refused before
    // any rule, policy or supervisor is asked (and never reaches the approval queue).
    let mut verdict = match supervision.tools.refusal(&request, &supervision.preset) {
        Some(refused) => refused,
        None => shared.supervisor().decide(&supervision, &request),
    };
    let turn = shared.turn();
    if verdict.decision == Decision::Ask {
        let place = shared.take_ask_place();
        if let (Some(channel), Some((task_id, sink, abort)), Some(place)) =
            (shared.channel(), turn.clone(), place)
        {
            return Permission::Ask(Box::new(PendingAsk {
                _place: place,
                channel,
                ask: Ask {
                    task_id,
                    supervision,
                    request,
                    ruling: verdict,
                    sink,
                    abort,
                },
            }));
        }
        // No supervision channel is connected to this session (or no task's turn runs, or
        // too many of its requests wait already): an `ask` is refused, never allowed by default.
        let why = if shared.channel().is_some() && turn.is_some() {
            "too many of this agent's requests already wait for one"
        } else {
            "no supervision channel is connected"
        };
        verdict = refused_ask(&request, &supervision, verdict, why);
    }
    let sent = Sent {
        task_id: &TaskId(String::new()),
        supervision: &supervision,
        request: &request,
        ruling: &verdict,
        approval_id: None,
        channel: None,
    };
    let task = turn.map(|(task_id, _, _)| task_id);
    let channel = shared.channel();
    Permission::Now(finish(
        sent,
        task.as_ref().zip(channel.as_deref()),
        |event| {
            shared.emit(event);
        },
    ))
}

/// Waits for the supervision channel's answer to `pending`, then answers as [`permission`]
/// does (the events go to the sink of the turn that asked).
pub(crate) async fn wait(
    _shared: &HandlerState,
    pending: PendingAsk,
) -> acp::RequestPermissionResponse {
    // The place stays taken until the answer is sent.
    let PendingAsk {
        channel,
        ask,
        _place,
    } = pending;
    let task_id = ask.task_id.clone();
    let supervision = ask.supervision.clone();
    let request = ask.request.clone();
    let sink = ask.sink.clone();
    let answered = channel.ask(ask).await;
    let mut verdict = answered.ruling;
    if verdict.decision == Decision::Ask {
        verdict = refused_ask(
            &request,
            &supervision,
            verdict,
            "the supervision channel gave no answer",
        );
    }
    let sent = Sent {
        task_id: &task_id,
        supervision: &supervision,
        request: &request,
        ruling: &verdict,
        approval_id: answered.approval_id.as_deref(),
        channel: answered.channel.as_deref(),
    };
    finish(sent, Some((&task_id, channel.as_ref())), |event| {
        sink.send(event)
    })
}

/// An `ask` nobody can answer, as a refusal with the seed's refusal preference.
fn refused_ask(
    request: &legate_core::PermissionRequest,
    supervision: &legate_supervisor::Supervision,
    verdict: Ruling,
    why: &str,
) -> Ruling {
    Ruling {
        decision: Decision::Deny,
        option_id: legate_supervisor::pick_reject(&request.options, &supervision.preset)
            .map(|o| o.id.clone()),
        reason: format!(
            "refused: a supervisor must decide ({}), and {why}",
            verdict.reason
        ),
        ..verdict
    }
}

/// Keeps `sent.ruling` honest (an offered option or `cancelled`; a refusal never an allowing
/// option), records it through the channel when a task is known, emits the permission event
/// and builds the reply.
fn finish(
    sent: Sent<'_>,
    audit: Option<(&TaskId, &dyn ApprovalChannel)>,
    emit: impl FnOnce(EventKind),
) -> acp::RequestPermissionResponse {
    let request = sent.request;
    let mut verdict = sent.ruling.clone();
    let chosen = verdict
        .option_id
        .as_deref()
        .map(|id| request.options.iter().find(|o| o.id == id));
    match chosen {
        Some(None) => {
            error!(
                tool_call_id = %request.tool_call_id,
                option_id = ?verdict.option_id,
                "the supervisor chose an option the agent did not offer; answering cancelled"
            );
            verdict = Ruling {
                decision: Decision::Deny,
                option_id: None,
                reason: format!(
                    "refused: the supervisor chose an option that was not offered ({})",
                    verdict.reason
                ),
                ..verdict
            };
        }
        Some(Some(option)) if verdict.decision == Decision::Deny && option.kind.is_allow() => {
            error!(
                tool_call_id = %request.tool_call_id,
                option_id = %option.id,
                "the supervisor denied with an allowing option; answering cancelled"
            );
            verdict.option_id = None;
        }
        _ => {}
    }
    info!(
        tool_call_id = %request.tool_call_id,
        tool_kind = request.tool_kind.as_str(),
        decision = ?verdict.decision,
        decider = verdict.decider.as_str(),
        rule_id = ?verdict.rule_id,
        option_id = ?verdict.option_id,
        reason = %verdict.reason,
        "permission decided"
    );
    if let Some((task_id, channel)) = audit {
        // Durable before the agent is told.
        channel.record(Sent {
            task_id,
            ruling: &verdict,
            ..sent
        });
    }
    let outcome = match &verdict.option_id {
        Some(id) => {
            acp::RequestPermissionOutcome::Selected(acp::SelectedPermissionOutcome::new(id.clone()))
        }
        None => acp::RequestPermissionOutcome::Cancelled,
    };
    emit(EventKind::Permission {
        tool_call_id: request.tool_call_id.clone(),
        title: request.title.clone(),
        tool_kind: request.tool_kind,
        offered: request.options.iter().map(|o| o.id.clone()).collect(),
        verdict,
    });
    acp::RequestPermissionResponse::new(outcome)
}

/// An `fs/read_text_file`.
pub(crate) async fn read_text_file(
    shared: &HandlerState,
    req: &acp::ReadTextFileRequest,
) -> Result<acp::ReadTextFileResponse, agent_client_protocol::Error> {
    let result = match shared.beneath() {
        _ if !shared.serves_files() => Err(fs::no_file_service(&req.path)),
        _ if !shared.supervision().tools.allows_kind(ToolKind::Read) => {
            Err(fs::not_allowed("read", &req.path, ToolKind::Read))
        }
        Ok(root) => {
            // Room for the answer first: an agent that never reads its stdin waits here.
            let room = shared.unwritten().reserve().await;
            let read = fs::read(root, &shared.covered(), req).await;
            if let Ok(answer) = &read {
                room.keep(super::unwritten::escaped_len(&answer.content));
            }
            read
        }
        Err(e) => Err(fs::unusable_root(&req.path, &e)),
    };
    report_fs(shared, "read", &req.path, result.as_ref().err());
    result.map_err(|r| *r.error)
}

/// An `fs/write_text_file`.
pub(crate) async fn write_text_file(
    shared: &HandlerState,
    req: &acp::WriteTextFileRequest,
) -> Result<acp::WriteTextFileResponse, agent_client_protocol::Error> {
    let supervision = shared.supervision();
    let mode = supervision.mode;
    let result = match shared.beneath() {
        _ if !shared.serves_files() => Err(fs::no_file_service(&req.path)),
        // An agent that skips the permission request and writes through the client is held
        // to the same allowed kinds.
        _ if !supervision.tools.allows_kind(ToolKind::Edit) => {
            Err(fs::not_allowed("write", &req.path, ToolKind::Edit))
        }
        Ok(root) => {
            fs::write(root, &shared.covered(), mode, req, &|job| {
                shared.spawn_in_turn(job)
            })
            .await
        }
        Err(e) => Err(fs::unusable_root(&req.path, &e)),
    };
    report_fs(shared, "write", &req.path, result.as_ref().err());
    result.map_err(|r| *r.error)
}

fn report_fs(
    shared: &HandlerState,
    op: &str,
    path: &std::path::Path,
    refused: Option<&fs::Refused>,
) {
    match refused {
        None => debug!(op, path = %path.display(), "fs access served"),
        Some(r) => info!(op, path = %path.display(), reason = %r.reason, "fs access refused"),
    }
    shared.emit(EventKind::FsAccess {
        op: op.to_string(),
        path: path.to_path_buf(),
        allowed: refused.is_none(),
        reason: refused.map(|r| r.reason.clone()),
    });
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::EventSink;
    use legate_core::{Boundary, PermissionRequest, TaskMode};
    use legate_supervisor::{Preset, Supervision, Supervisor};
    use proptest::prelude::*;
    use serde_json::json;
    use std::sync::Arc;

    /// A supervisor that answers whatever it was given, offered or not: the handler is what
    /// must keep the reply honest.
    #[derive(Debug)]
    struct Answers(Ruling);

    impl Supervisor for Answers {
        fn decide(&self, _: &Supervision, _: &PermissionRequest) -> Ruling {
            self.0.clone()
        }
    }

    const KINDS: [&str; 4] = ["allow_once", "allow_always", "reject_once", "reject_always"];

    fn any_id() -> impl Strategy<Value = String> {
        prop_oneof![
            prop::sample::select(vec![
                "allow",
                "reject",
                "approved",
                "abort",
                "proceed_once",
                "cancel",
                "default",
                "plan",
                "implement_plan",
            ])
            .prop_map(String::from),
            "[a-z_-]{0,8}",
        ]
    }

    fn any_verdict() -> impl Strategy<Value = Ruling> {
        (any::<bool>(), prop::option::of(any_id()), "[a-z ]{0,12}").prop_map(
            |(allow, option_id, reason)| {
                let decision = if allow {
                    Decision::Allow
                } else {
                    Decision::Deny
                };
                Ruling::new(decision, option_id, reason)
            },
        )
    }

    fn any_tool_kind() -> impl Strategy<Value = &'static str> {
        prop::sample::select(vec!["edit", "execute", "switch_mode", "other", "read"])
    }

    /// A write session's handler state in the temporary directory, asking `supervisor`.
    fn state(supervisor: Arc<dyn Supervisor>) -> HandlerState {
        let root = std::env::temp_dir();
        let boundary = Boundary {
            root: root.clone(),
            owned: true,
            allow_execute: false,
        };
        HandlerState::new(
            supervisor,
            Supervision::new(boundary, TaskMode::Write, Preset::claude()),
            root,
        )
    }

    /// An idle agent's tool calls (no turn routed) are neither stored nor remembered: a flood
    /// of them between turns must not grow Legate's memory. In a turn they are.
    #[test]
    fn tool_calls_outside_a_turn_are_not_remembered() {
        let shared = state(Arc::new(Answers(Ruling {
            decision: Decision::Deny,
            option_id: None,
            reason: String::new(),
            decider: legate_core::Decider::Table,
            rule_id: None,
        })));
        let call: acp::SessionNotification = serde_json::from_value(json!({
            "sessionId": "s-1",
            "update": {"sessionUpdate": "tool_call", "toolCallId": "call-1", "title": "t",
                       "rawInput": {"content": "x".repeat(4096)}},
        }))
        .unwrap();
        session_update(&shared, &call);
        assert!(shared.known_tool("call-1").is_none());
        let (sink, _events) = EventSink::channel();
        shared.route_to(sink, Some(TaskMode::Write));
        session_update(&shared, &call);
        assert!(shared.known_tool("call-1").unwrap().raw_input.is_some());
    }

    /// A write the agent asks Legate for while no turn runs (as its session opens, between
    /// turns) is refused and writes nothing: no turn's end would wait for it, so it could land
    /// in a copy whose patch is being read. In a turn it is the turn's work.
    #[tokio::test]
    async fn a_write_outside_a_turn_is_refused_and_one_in_a_turn_is_its_work() {
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap();
        let boundary = Boundary {
            root: root.clone(),
            owned: true,
            allow_execute: false,
        };
        let shared = HandlerState::new(
            Arc::new(Answers(Ruling {
                decision: Decision::Deny,
                option_id: None,
                reason: String::new(),
                decider: legate_core::Decider::Table,
                rule_id: None,
            })),
            Supervision::new(boundary, TaskMode::Write, Preset::claude()),
            root.clone(),
        );
        let req = |name: &str| acp::WriteTextFileRequest::new("s-1", root.join(name), "words\n");
        let (sink, _opening) = EventSink::channel();
        shared.route_to(sink, None);
        let err = write_text_file(&shared, &req("opening.txt"))
            .await
            .unwrap_err();
        assert!(err.message.contains("no turn is running"), "{err:?}");
        let (sink, _turn) = EventSink::channel();
        shared.route_to(sink, Some(TaskMode::Write));
        let work = crate::WorkspaceWork::new();
        shared.route_work(work.clone());
        write_text_file(&shared, &req("turn.txt")).await.unwrap();
        work.finished().await;
        shared.clear();
        assert!(write_text_file(&shared, &req("between.txt")).await.is_err());
        assert_eq!(
            std::fs::read_to_string(root.join("turn.txt")).unwrap(),
            "words\n"
        );
        let mut names: Vec<_> = std::fs::read_dir(&root)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        assert_eq!(names, ["turn.txt"]);
    }

    /// Answers one `session/request_permission` with `verdict`; the reply and the one event
    /// it made.
    fn answer(
        verdict: Ruling,
        options: &[(String, &str)],
        tool_kind: &str,
    ) -> (acp::RequestPermissionResponse, Vec<EventKind>) {
        let shared = state(Arc::new(Answers(verdict)));
        let (sink, mut events) = EventSink::channel();
        shared.route_to(sink, Some(TaskMode::Write));
        let options: Vec<_> = options
            .iter()
            .map(|(id, kind)| json!({"optionId": id, "name": id, "kind": kind}))
            .collect();
        let req: acp::RequestPermissionRequest = serde_json::from_value(json!({
            "sessionId": "s-1",
            "toolCall": {"toolCallId": "call-1", "title": "a tool", "kind": tool_kind},
            "options": options,
        }))
        .unwrap();
        let Permission::Now(reply) = permission(&shared, &req) else {
            panic!("a table ruling is answered at once");
        };
        shared.clear();
        let mut emitted = Vec::new();
        while let Ok(e) = events.try_recv() {
            emitted.push(e);
        }
        (reply, emitted)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Whatever the supervisor answers, the agent gets an id it offered or `cancelled`; a
        /// refusal never goes out as an allowing option; and the one permission event says
        /// exactly what was answered.
        #[test]
        fn the_reply_is_an_offered_id_or_cancelled(
            verdict in any_verdict(),
            options in prop::collection::vec((any_id(), prop::sample::select(KINDS.to_vec())), 0..5),
            tool_kind in any_tool_kind(),
        ) {
            let (reply, events) = answer(verdict.clone(), &options, tool_kind);
            let sent = match &reply.outcome {
                acp::RequestPermissionOutcome::Selected(s) => Some(s.option_id.0.to_string()),
                acp::RequestPermissionOutcome::Cancelled => None,
                other => panic!("unexpected outcome {other:?}"),
            };
            if let Some(id) = &sent {
                let offered = options.iter().find(|(o, _)| o == id);
                prop_assert!(offered.is_some(), "{id} was not offered: {options:?}");
                // The supervisor's choice goes out unchanged when it was offered.
                prop_assert_eq!(Some(id), verdict.option_id.as_ref());
                if verdict.decision == Decision::Deny {
                    let first = options.iter().find(|(o, _)| o == id).map(|(_, k)| *k);
                    prop_assert!(
                        matches!(first, Some("reject_once" | "reject_always")),
                        "a refusal answered with {id} ({first:?})"
                    );
                }
            }
            prop_assert_eq!(events.len(), 1, "{:?}", events);
            match &events[0] {
                EventKind::Permission { verdict: recorded, offered, .. } => {
                    prop_assert_eq!(&recorded.option_id, &sent);
                    let ids: Vec<String> = options.iter().map(|(o, _)| o.clone()).collect();
                    prop_assert_eq!(offered, &ids);
                    if sent.is_none() && verdict.decision == Decision::Allow && verdict.option_id.is_some() {
                        // An allow whose option was dropped is recorded as the refusal it became.
                        prop_assert_eq!(recorded.decision, Decision::Deny);
                    }
                }
                other => prop_assert!(false, "not a permission event: {:?}", other),
            }
        }
    }

    /// A channel whose answers never come: the requests handed to it stay waiting.
    #[derive(Debug)]
    struct Silent;

    #[async_trait::async_trait]
    impl ApprovalChannel for Silent {
        async fn ask(&self, _: Ask) -> crate::Answered {
            std::future::pending().await
        }
        fn record(&self, _: Sent<'_>) {}
    }

    #[derive(Debug)]
    struct AlwaysAsk;

    impl Supervisor for AlwaysAsk {
        fn decide(&self, _: &Supervision, _: &PermissionRequest) -> Ruling {
            Ruling {
                decision: Decision::Ask,
                ..Ruling::new(Decision::Ask, None, "ask")
            }
        }
    }

    /// An agent that floods the queue gets a refusal beyond the session's places, and a place
    /// is free again once a waiting request is dropped.
    #[test]
    fn a_flood_of_asks_is_refused_beyond_the_sessions_places() {
        let shared = state(Arc::new(AlwaysAsk)).with_channel(Some(Arc::new(Silent)));
        let (sink, _events) = EventSink::channel();
        shared.route_to(sink, Some(TaskMode::Write));
        shared.route_task(TaskId("t".into()));
        let req: acp::RequestPermissionRequest = serde_json::from_value(json!({
            "sessionId": "s-1",
            "toolCall": {"toolCallId": "call-1", "title": "touch x", "kind": "execute"},
            "options": [
                {"optionId": "allow", "name": "allow", "kind": "allow_once"},
                {"optionId": "reject", "name": "reject", "kind": "reject_once"},
            ],
        }))
        .unwrap();
        let mut waiting: Vec<_> = (0..super::super::state::MAX_PENDING_ASKS)
            .map(|_| match permission(&shared, &req) {
                Permission::Ask(p) => p,
                Permission::Now(r) => panic!("refused too early: {r:?}"),
            })
            .collect();
        let Permission::Now(refused) = permission(&shared, &req) else {
            panic!("one request too many was queued");
        };
        match refused.outcome {
            acp::RequestPermissionOutcome::Selected(s) => {
                assert_eq!(s.option_id.0.as_ref(), "reject")
            }
            other => panic!("{other:?}"),
        }
        waiting.pop();
        assert!(matches!(permission(&shared, &req), Permission::Ask(_)));
    }
}
