//! The durable approval queue: the engine's [`ApprovalChannel`].
//!
//! An `ask` ruling becomes, in order: an earlier allow-for-task in the same scope (allowed at
//! once), or a pending approval stored first and only then announced (`awaiting supervision`,
//! a `notice` with `detail.event = "awaiting_supervision"`); then the supervising agent
//! ([`judge`](super::judge)), then an answer from any process on the same home (the store is
//! polled every [`POLL`], and an answer given in this process wakes the wait at once), until
//! the deadline. A cancel, the turn's end or the wait being dropped expires the approval;
//! nothing is left pending by this process.
//!
//! It never blocks the protocol's dispatch loop (the backend awaits it in a task of its own)
//! and holds no lock across a wait. Every decision sent to an agent is one audit insert
//! ([`ApprovalChannel::record`]).

use super::summary::{scope, summarize};
use super::{Answer, Approval, ApprovalAnswer, ApprovalState, AuditEntry};
use crate::core::WeakCore;
use async_trait::async_trait;
use legate_backend::{Answered, ApprovalChannel, Ask, Sent};
use legate_core::{Decider, Decision, Result, Ruling, Timestamp};
use legate_store::Store;
use legate_supervisor::{Supervision, pick_allow, pick_reject};
use std::time::Duration;
use tokio::sync::watch;
use tracing::{info, warn};

/// How often a waiting approval re-reads the store for an answer from another process.
pub(crate) const POLL: Duration = Duration::from_millis(200);

/// The queue of one engine.
#[derive(Debug)]
pub(crate) struct Queue {
    store: Store,
    deadline: Duration,
    judge: Option<String>,
    /// Bumped whenever this process answers an approval, to wake its waits at once.
    answered: watch::Sender<u64>,
    /// Bumped whenever an approval of this process is stored or closed (answered, expired):
    /// what a live view of the queue follows ([`Approvals::changes`]).
    changed: watch::Sender<u64>,
    /// The engine's core, held weakly: the queue lives inside it.
    core: WeakCore,
}

impl Queue {
    pub(crate) fn new(
        store: Store,
        config: &crate::config::ApprovalsConfig,
        core: WeakCore,
    ) -> Self {
        Self {
            store,
            deadline: config.deadline,
            judge: config.agent.clone(),
            answered: watch::channel(0).0,
            changed: watch::channel(0).0,
            core,
        }
    }

    /// Answers approval `id` (compare-and-set: `APPROVAL_CLOSED` if it was not pending) and
    /// wakes this process's waits.
    pub(crate) fn answer(&self, id: &str, answer: &ApprovalAnswer) -> Result<Approval> {
        let approval = self.store.answer_approval(id, answer)?;
        self.answered.send_modify(|n| *n = n.wrapping_add(1));
        self.bump();
        info!(approval_id = %id, answer = answer.answer.as_str(), channel = %answer.channel, "approval answered");
        Ok(approval)
    }

    /// Tells the followers of [`Approvals::changes`] that the queue changed.
    fn bump(&self) {
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// A receiver that changes whenever an approval of this process is stored or closed.
    pub(crate) fn changes(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    fn deadline_secs(&self) -> u64 {
        self.deadline.as_secs().max(1)
    }

    /// Waits for `id` to leave `pending`, or for the deadline or the abort signal; returns the
    /// ruling to send.
    async fn wait(
        &self,
        ask: &mut Ask,
        approval: &Approval,
        deadline: tokio::time::Instant,
    ) -> Answered {
        let mut woken = self.answered.subscribe();
        loop {
            match self.store.approval(&approval.id) {
                Ok(Some(a)) if a.state != ApprovalState::Pending => {
                    return answered(
                        &a,
                        &ask.supervision,
                        ask.ruling.rule_id.clone(),
                        self.deadline_secs(),
                    );
                }
                Ok(_) => {}
                Err(e) => {
                    warn!(approval_id = %approval.id, error = %e.message, "an approval could not be read; waiting on")
                }
            }
            tokio::select! {
                () = tokio::time::sleep_until(deadline) => {
                    let reason = format!("no supervisor answered within {} s", self.deadline_secs());
                    if self.expire(&approval.id, &reason) {
                        return refusal(approval, &ask.supervision, &ask.ruling, reason, true);
                    }
                }
                reason = ask.abort.raised() => {
                    if self.expire(&approval.id, &reason) {
                        return refusal(approval, &ask.supervision, &ask.ruling, reason, false);
                    }
                }
                _ = woken.changed() => {}
                () = tokio::time::sleep(POLL) => {}
            }
        }
    }

    /// Expires `id`; whether this call did (else someone answered first: read the answer).
    fn expire(&self, id: &str, reason: &str) -> bool {
        match self.store.expire_approval(id, reason) {
            Ok(done) => done,
            Err(e) => {
                // The store failed: refuse anyway, nothing may hang.
                warn!(approval_id = %id, error = %e.message, "an approval could not be expired");
                true
            }
        }
    }

    /// The supervising agent's answer, written as any answer is (it may lose the race).
    async fn ask_judge(&self, approval: &Approval) {
        let (Some(name), Some(core)) = (&self.judge, self.core.upgrade()) else {
            return;
        };
        let Some((decision, reason)) = super::judge::ask(&core, approval).await else {
            return;
        };
        let answer = match decision {
            Decision::Allow => Answer::Allow,
            Decision::Deny => Answer::Deny,
            Decision::Ask => return,
        };
        let answer = ApprovalAnswer {
            answer,
            reason: Some(reason),
            channel: format!("agent:{name}"),
        };
        if let Err(e) = self.answer(&approval.id, &answer) {
            info!(approval_id = %approval.id, code = %e.code, "the supervising agent's answer came too late");
        }
    }
}

/// Expires the approval if the wait is dropped before it was closed.
struct Pending<'a> {
    store: &'a Store,
    changed: &'a watch::Sender<u64>,
    id: String,
    armed: bool,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if self.armed {
            let _ = self.store.expire_approval(
                &self.id,
                "the request stopped waiting (its connection ended)",
            );
            self.changed.send_modify(|n| *n = n.wrapping_add(1));
        }
    }
}

#[async_trait]
impl ApprovalChannel for Queue {
    async fn ask(&self, mut ask: Ask) -> Answered {
        let tool = summarize(&ask.request);
        let id = uuid::Uuid::new_v4().to_string();
        let scope = match scope(ask.ruling.rule_id.as_deref(), &tool) {
            Some(scope) => {
                match self.store.allowed_for_task(&ask.task_id, &scope) {
                    Ok(Some(earlier)) => return scoped_allow(&ask, &earlier, &scope),
                    Ok(None) => {}
                    Err(e) => {
                        warn!(task_id = %ask.task_id, error = %e.message, "allow-for-task answers could not be read")
                    }
                }
                scope
            }
            // A call no earlier answer may cover: its key is its own id, so an
            // allow-for-task answer to it covers only itself.
            None => serde_json::json!(["only", id]).to_string(),
        };
        let now = Timestamp::now();
        let mut answerers = vec!["human".to_string()];
        if let Some(judge) = &self.judge {
            answerers.insert(0, format!("agent:{judge}"));
        }
        let approval = Approval {
            id,
            task_id: ask.task_id.clone(),
            agent: ask.supervision.agent.clone(),
            role: ask.supervision.role.clone(),
            tool,
            options: ask.request.options.clone(),
            rule_id: ask.ruling.rule_id.clone(),
            reason: ask.ruling.reason.clone(),
            answerers,
            created_at: now,
            deadline: Timestamp(
                now.0
                    .saturating_add(i64::try_from(self.deadline.as_millis()).unwrap_or(i64::MAX)),
            ),
            state: ApprovalState::Pending,
            answer: None,
            closed_reason: None,
            decided: None,
        };
        if let Err(e) = self.store.insert_approval(&approval, &scope) {
            warn!(task_id = %ask.task_id, error = %e.message, "an approval could not be stored; refused");
            let reason = format!("the approval could not be stored ({})", e.message);
            return refusal(&approval, &ask.supervision, &ask.ruling, reason, false);
        }
        self.bump();
        let mut guard = Pending {
            store: &self.store,
            changed: &self.changed,
            id: approval.id.clone(),
            armed: true,
        };
        // Durable before told: the row exists before anyone hears of it.
        ask.sink.send(crate::review::notice_event(
            "awaiting_supervision",
            format!(
                "awaiting supervision: {} ({})",
                approval.tool.title, approval.reason
            ),
            serde_json::json!({
                "approvalId": approval.id,
                "deadline": approval.deadline,
                "title": approval.tool.title,
                "ruleId": approval.rule_id,
            }),
        ));
        info!(task_id = %ask.task_id, approval_id = %approval.id, rule_id = ?approval.rule_id, "awaiting supervision");
        let deadline = tokio::time::Instant::now() + self.deadline;
        let mut abort = ask.abort.clone();
        tokio::select! {
            () = self.ask_judge(&approval) => {}
            () = tokio::time::sleep_until(deadline) => {}
            _ = abort.raised() => {}
        }
        let out = self.wait(&mut ask, &approval, deadline).await;
        guard.armed = false;
        // Closed (answered here or elsewhere, or expired): a live view redraws the queue.
        self.bump();
        out
    }

    fn record(&self, sent: Sent<'_>) {
        let entry = AuditEntry {
            id: 0,
            task_id: sent.task_id.clone(),
            agent: sent.supervision.agent.clone(),
            tool: summarize(sent.request),
            decider: sent.ruling.decider,
            rule_id: sent.ruling.rule_id.clone(),
            channel: sent.channel.map(str::to_owned),
            decision: sent.ruling.decision,
            option_id: sent.ruling.option_id.clone(),
            reason: sent.ruling.reason.clone(),
            approval_id: sent.approval_id.map(str::to_owned),
            at: Timestamp::now(),
        };
        if let Err(e) = self.store.record_decision(&entry) {
            warn!(task_id = %sent.task_id, error = %e.message, "a permission decision could not be audited");
        }
    }
}

/// Allowed without queueing: an earlier allow-for-task answer covers this scope.
fn scoped_allow(ask: &Ask, earlier: &str, scope: &str) -> Answered {
    let option = pick_allow(&ask.request.options, &ask.supervision.preset).map(|o| o.id.clone());
    Answered {
        ruling: Ruling {
            decision: if option.is_some() {
                Decision::Allow
            } else {
                Decision::Deny
            },
            reason: format!(
                "allowed for the rest of the task by approval {earlier} (scope {scope})"
            ),
            option_id: option,
            decider: Decider::Human,
            rule_id: ask.ruling.rule_id.clone(),
        },
        approval_id: None,
        channel: Some(format!("allow-for-task:{earlier}")),
    }
}

/// The ruling for a closed approval.
fn answered(
    approval: &Approval,
    supervision: &Supervision,
    rule_id: Option<String>,
    secs: u64,
) -> Answered {
    let Some(answer) = &approval.answer else {
        let reason = approval
            .closed_reason
            .clone()
            .unwrap_or_else(|| format!("no supervisor answered within {secs} s"));
        let ruling = Ruling {
            decision: Decision::Ask,
            option_id: None,
            reason: String::new(),
            decider: Decider::Deadline,
            rule_id,
        };
        return refusal(approval, supervision, &ruling, reason, true);
    };
    let decider = if answer.channel.starts_with("agent:") {
        Decider::Agent
    } else {
        Decider::Human
    };
    let (decision, option) = if answer.answer.is_allow() {
        match pick_allow(&approval.options, &supervision.preset) {
            Some(o) => (Decision::Allow, Some(o.id.clone())),
            None => (Decision::Deny, None),
        }
    } else {
        (
            Decision::Deny,
            pick_reject(&approval.options, &supervision.preset).map(|o| o.id.clone()),
        )
    };
    let reason = match (&answer.reason, decision) {
        (Some(r), _) => format!("{} by {}: {r}", verb(answer.answer), answer.channel),
        (None, _) => format!("{} by {}", verb(answer.answer), answer.channel),
    };
    Answered {
        ruling: Ruling {
            decision,
            option_id: option,
            reason,
            decider,
            rule_id,
        },
        approval_id: Some(approval.id.clone()),
        channel: Some(answer.channel.clone()),
    }
}

fn verb(answer: Answer) -> &'static str {
    match answer {
        Answer::Allow => "allowed",
        Answer::AllowForTask => "allowed for the rest of the task",
        Answer::Deny => "denied",
    }
}

/// A refusal nobody decided: at the deadline with the refusal preference, or `cancelled`
/// when the wait was aborted (ACP answers a canceled turn's requests `cancelled`).
fn refusal(
    approval: &Approval,
    supervision: &Supervision,
    ask: &Ruling,
    reason: String,
    prefer: bool,
) -> Answered {
    let option = if prefer {
        pick_reject(&approval.options, &supervision.preset).map(|o| o.id.clone())
    } else {
        None
    };
    let because = if ask.reason.is_empty() {
        String::new()
    } else {
        format!(" ({})", ask.reason)
    };
    Answered {
        ruling: Ruling {
            decision: Decision::Deny,
            option_id: option,
            reason: format!("refused: {reason}{because}"),
            decider: Decider::Deadline,
            rule_id: ask.rule_id.clone(),
        },
        approval_id: Some(approval.id.clone()),
        channel: None,
    }
}
