//! An inbound message, whatever front received it: [`Messages::deliver`](crate::Messages::deliver) routes it to the one
//! task it becomes, with the conversation rules every front shares.
//!
//! The rules, in the order they are checked:
//!
//! - A message naming a task is a reply into that task. It names no workspace
//!   (`INVALID_WORKSPACE`), the task must be one of the addressed agent's (`TASK_NOT_FOUND`
//!   otherwise: another agent's task is not disclosed), the message's context, when given,
//!   must be the task's (`INVALID_INPUT`), and the reply must have text (`INVALID_INPUT`: an
//!   empty reply cannot say what to do). The task itself must be waiting for input (the engine's reply
//!   rule, `TASK_NOT_AWAITING_INPUT`).
//! - A message into a known context is that context's next turn. The context keeps its
//!   workspace (a message naming one is `INVALID_WORKSPACE`) and belongs to the agent of its
//!   tasks (`INVALID_INPUT` for another agent). An empty text puts the turn in
//!   `input-required`.
//! - Any other message starts a conversation (with the message's context id, when it names
//!   one) with the addressed agent, in the workspace it names or the context's sandbox. An
//!   empty text gives a task in `input-required`.
//!
//! - A message asking to continue a task cut by a restart (`continues`) becomes that task's
//!   continuation ([`Engine::continue_task`](crate::Engine::continue_task), whose rules apply). It names no task to reply into
//!   (`INVALID_INPUT`) and no workspace (`INVALID_WORKSPACE`), has no text (`INVALID_INPUT`:
//!   Legate tells the agent what to do), the task must be one of the addressed agent's
//!   (`TASK_NOT_FOUND` otherwise), and the message's context, when given, must be the task's.
//! - A message may name a role: the one that starts a conversation chooses it (an unknown
//!   name is `ROLE_NOT_FOUND`); any other may only repeat the role its conversation has
//!   (`INVALID_INPUT`: a conversation keeps its role; hand off instead).
//!
//! A message id is the caller's: it makes a next turn idempotent, and the agent receives it
//! with the prompt; a blank one is none. On every route it is 1 to `MAX_MESSAGE_ID_BYTES`
//! bytes without control characters (`INVALID_INPUT`, checked before anything else). This module decides routing only; it never runs a
//! turn and never speaks a front's protocol (a front translates its wire shape to
//! [`Inbound`] and the [`Delivered`] task back).

use crate::core::Core;
use crate::{SubmitRequest, WorkspaceRequest};
use legate_core::{Error, ErrorCode, Result, Task, TaskId};
use legate_store::TaskFilter;

/// A message a front received for one agent.
#[derive(Debug, Clone, Default)]
pub struct Inbound {
    /// The agent the front addressed (a configured agent name).
    pub agent: String,
    /// The conversation the message names, if any.
    pub context_id: Option<String>,
    /// The task the message replies into, if any.
    pub task_id: Option<String>,
    /// The caller's id for the message; blank is none.
    pub message_id: Option<String>,
    /// What it says; may be empty (see the module's rules).
    pub text: String,
    /// The workspace the message asks for; only a message that starts a conversation may.
    pub workspace: Option<WorkspaceRequest>,
    /// The role the message asks for (a role name). A message that starts a conversation
    /// chooses it; any other may only name the role the conversation already has.
    pub role: Option<String>,
    /// The task cut by a restart (`SERVER_RESTARTED`) the message asks to continue, if any.
    pub continues: Option<String>,
}

/// How [`Messages::deliver`](crate::Messages::deliver) routed a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// A new conversation (or a context id the engine had not seen).
    Started,
    /// The next turn of a known context.
    NextTurn,
    /// A reply resuming a task that waited for input.
    Reply,
    /// The continuation of a task cut by a restart.
    Continued,
}

/// The task a message became.
#[derive(Debug, Clone)]
pub struct Delivered {
    /// The task, as stored when the message was accepted.
    pub task: Task,
    /// The event number after which this message's part of the task's events begins (for a
    /// reply, the events already stored; otherwise 0).
    pub after: u64,
    /// How it was routed.
    pub route: Route,
}

/// `INVALID_WORKSPACE` for a workspace named by a message that does not start a conversation.
fn keeps_workspace() -> Error {
    Error::new(
        ErrorCode::InvalidWorkspace,
        "a conversation keeps the workspace it started with; name a workspace only on the message that starts a new context",
    )
}

/// A message into an existing conversation may name only the role it already has.
fn keeps_role(task: &Task, asked: Option<&str>) -> Result<()> {
    let kept = task
        .role
        .as_ref()
        .map_or("implementer", |r| r.name.as_str());
    match asked {
        Some(asked) if asked != kept => Err(Error::invalid_input(format!(
            "context {} is a {kept} and the message asks for {:?}: a conversation keeps its role; hand off to another role instead",
            task.context_id,
            asked.chars().take(40).collect::<String>()
        ))),
        _ => Ok(()),
    }
}

impl Core {
    /// Routes an inbound message to the task it becomes, by the rules of this module.
    /// Refusals change nothing.
    pub(crate) fn deliver(&self, inbound: Inbound) -> Result<Delivered> {
        let Inbound {
            agent,
            context_id,
            task_id,
            message_id,
            text,
            workspace,
            role,
            continues,
        } = inbound;
        let message_id = message_id.filter(|m| !m.trim().is_empty());
        if let Some(id) = &message_id {
            crate::core::continuation::check_message_id(id)?;
        }
        if let Some(cut) = continues {
            if task_id.is_some() {
                return Err(Error::invalid_input(
                    "a message either continues a task cut by a restart or replies into a task, not both",
                ));
            }
            if workspace.is_some() {
                return Err(keeps_workspace());
            }
            let cut = self.task_of(&agent, &cut)?;
            keeps_role(&cut, role.as_deref())?;
            return self.deliver_continue(&cut, context_id, &text);
        }
        if let Some(task_id) = task_id {
            if role.is_some() {
                keeps_role(&self.task_of(&agent, &task_id)?, role.as_deref())?;
            }
            return self.deliver_reply(&agent, &task_id, context_id, message_id, text, workspace);
        }
        let latest = match &context_id {
            Some(ctx) => self
                .tasks(&TaskFilter {
                    context_id: Some(ctx.clone()),
                    limit: 1,
                    ..TaskFilter::default()
                })?
                .into_iter()
                .next(),
            None => None,
        };
        if let Some(latest) = latest {
            if workspace.is_some() {
                return Err(keeps_workspace());
            }
            if latest.agent != agent {
                return Err(Error::invalid_input(format!(
                    "context {} belongs to agent {:?}, not {agent:?}",
                    latest.context_id, latest.agent
                )));
            }
            if !latest.controls.inbound {
                return Err(not_inbound(&latest.context_id));
            }
            keeps_role(&latest, role.as_deref())?;
            let task = self.next_turn(
                crate::ContinueRequest {
                    context_id: latest.context_id,
                    prompt: text,
                    mode: None,
                    timeout: None,
                },
                message_id,
            )?;
            return Ok(Delivered {
                task,
                after: 0,
                route: Route::NextTurn,
            });
        }
        let mut request = SubmitRequest::new(text);
        request.agent = Some(agent);
        request.context_id = context_id;
        request.message_id = message_id;
        request.role = role;
        request.inbound = true;
        if let Some(w) = workspace {
            request.workspace = w;
        }
        let task = self.submit_inner(request, true)?;
        Ok(Delivered {
            task,
            after: 0,
            route: Route::Started,
        })
    }

    /// The task `id` (exactly, no prefix) when an inbound caller of `agent` may reach it: a
    /// task belongs to the agent it was sent to, and to inbound callers only when an inbound
    /// message started its context (`TaskControls::inbound`). Any other is `TASK_NOT_FOUND`,
    /// as for an unknown id, so that one agent's callers learn nothing of another's tasks,
    /// and an inbound caller nothing of the tasks other fronts started.
    pub(crate) fn task_of(&self, agent: &str, id: &str) -> Result<Task> {
        match self.store().task(&TaskId(id.to_string()))? {
            Some(t) if t.agent == agent && t.controls.inbound => Ok(t),
            _ => Err(Error::new(
                ErrorCode::TaskNotFound,
                format!("task {id} not found"),
            )),
        }
    }

    fn deliver_continue(
        &self,
        cut: &Task,
        context_id: Option<String>,
        text: &str,
    ) -> Result<Delivered> {
        if let Some(ctx) = context_id
            && ctx != cut.context_id
        {
            return Err(Error::invalid_input(format!(
                "task {} belongs to context {}, not {ctx}; continue it without a context or with the task's",
                cut.id, cut.context_id
            )));
        }
        if !text.trim().is_empty() {
            return Err(Error::invalid_input(format!(
                "a continue of task {} carries no text: Legate tells the agent its turn was cut; send a new message into the context to ask something else",
                cut.id
            )));
        }
        let task = self.continue_task(cut.id.as_str(), None)?;
        Ok(Delivered {
            task,
            after: 0,
            route: Route::Continued,
        })
    }

    fn deliver_reply(
        &self,
        agent: &str,
        task_id: &str,
        context_id: Option<String>,
        message_id: Option<String>,
        text: String,
        workspace: Option<WorkspaceRequest>,
    ) -> Result<Delivered> {
        if workspace.is_some() {
            return Err(keeps_workspace());
        }
        let task = self.task_of(agent, task_id)?;
        if let Some(ctx) = context_id
            && ctx != task.context_id
        {
            return Err(Error::invalid_input(format!(
                "task {} belongs to context {}, not {ctx}; send the reply without a context or with the task's",
                task.id, task.context_id
            )));
        }
        if text.trim().is_empty() {
            return Err(Error::invalid_input(format!(
                "the reply into task {} has no text; say what the agent should do",
                task.id
            )));
        }
        let after = self.store().last_seq(&task.id)?;
        let task = self.reply_message(task.id.as_str(), text, message_id, None)?;
        Ok(Delivered {
            task,
            after,
            route: Route::Reply,
        })
    }
}

impl Core {
    /// `INVALID_INPUT` when an inbound message started `context_id` ([`inbound_only`]): for
    /// the fronts' own next turns, which an inbound caller must not receive. An unknown
    /// context passes (the call itself says so).
    pub(crate) fn refuse_inbound_context(&self, context_id: &str) -> Result<()> {
        match self.latest_task(context_id) {
            Ok(last) if last.controls.inbound => Err(inbound_only(context_id)),
            Ok(_) => Ok(()),
            Err(e) if e.code == legate_core::ErrorCode::ContextNotFound => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// A context an inbound message started, named by a task of another front: the inbound
/// caller reads every task of it, so none of another front's may join it.
pub(crate) fn inbound_only(context_id: &str) -> Error {
    Error::invalid_input(format!(
        "context {context_id} was started by an inbound (A2A) message, and its caller reads every task of it; another front's task may not continue it: choose another context id, or answer its tasks with reply"
    ))
}

/// A known context that an inbound message did not start: not one an inbound caller may
/// continue (its workspace may be a shared directory or a copy outside the A2A roots).
pub(crate) fn not_inbound(context_id: &str) -> Error {
    Error::invalid_input(format!(
        "context {context_id} was not started by an inbound message, so none may continue it; send without a contextId to start a new conversation"
    ))
}
