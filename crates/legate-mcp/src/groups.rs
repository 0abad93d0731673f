//! The group tools (issue 16 §6): `group_create`, `group_start`, `group_status`,
//! `group_wait`, `group_cancel`, `groups`, `workflow_result` and `peer_receipts`, each one
//! engine call (`Engine::group_*`, `Engine::peer_receipts`) with its arguments checked here.
//!
//! `group_wait` is bounded (1 to 60 s) and, when the call carries a progress token, sends a
//! notification whenever the nodes' counts change and at least every heartbeat, each naming
//! counts only: never a prompt, an answer or an intermediate result, which stay out of the
//! answer too (the engine's `GroupStatus` carries none; its page of the nodes' messages holds
//! questions and blockers only, and checks the caller's cursors and limit itself). Waiting
//! never changes the group. This module decides nothing about a group; it never logs
//! arguments.

use crate::tools::in_range;
use crate::wait::Progress;
use legate_core::Result;
use legate_engine::{
    Engine, GroupCreated, GroupDefinition, GroupProgress, GroupStarted, GroupStatus, GroupSummary,
    GroupWait, GroupWaitRequest, MAX_RECEIPTS_PAGE, PeerReceiptPage, WorkflowResult,
};
use rmcp::model::ProgressNotificationParam;
use rmcp::schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The longest `group_wait`, in seconds.
pub const GROUP_WAIT_MAX_SECS: u64 = 60;
/// The default `group_wait`, in seconds.
pub const GROUP_WAIT_DEFAULT_SECS: u64 = 30;

/// `group_create`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GroupCreateArgs {
    /// The group: `{workingDirectory, title?, nodes: [{id, role?, agent?, model?, prompt,
    /// dependsOn?, fileSources?, mode?, acceptanceCriteria?, includePaths?, skills?, memory?,
    /// timeoutSeconds?, allowedTools?, mcpServers?, artifactPaths?}], peerRoutes?: [{from,
    /// to}], budget?: {maxTotalTokens}, workflow?: {finalNode, hooks?}}`; every step of a
    /// workflow needs acceptanceCriteria.
    pub definition: GroupDefinition,
    /// A stable id of your choosing (a UUID); repeat it with the same definition to read back
    /// a creation whose answer was lost. A new one when absent.
    pub group_id: Option<String>,
}

/// `group_start`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GroupStartArgs {
    /// The group.
    pub group_id: String,
    /// The `definitionSha256` `group_create` returned.
    pub definition_sha256: String,
}

/// `group_status`, `group_cancel`, `workflow_result`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GroupArgs {
    /// The group.
    pub group_id: String,
}

/// `group_wait`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GroupWaitArgs {
    /// The group.
    pub group_id: String,
    /// How long to wait, 1 to 60 seconds (default 30). A timeout never changes the group.
    /// The wait also ends as soon as a node has a question or blocker after your cursors.
    pub timeout_seconds: Option<u64>,
    /// The `cursors` of the previous `group_wait`'s answer, passed back whole: per task id of
    /// this group, the last message number read. Omit it on the first wait.
    pub cursors: Option<BTreeMap<String, u64>>,
    /// At most this many messages in the answer, 1 to 4 (default 4), at most one per task.
    pub limit: Option<u32>,
}

/// `groups`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GroupsArgs {}

/// `peer_receipts`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PeerReceiptsArgs {
    /// The group.
    pub group_id: String,
    /// Only receipts after this cursor (default 0): the `nextCursor` of the last page.
    pub after: Option<i64>,
    /// At most this many, 1 to 20 (default 20).
    pub limit: Option<u32>,
}

/// `groups`' answer.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct GroupsOut {
    /// Every retained group, newest first.
    pub groups: Vec<GroupSummary>,
}

/// `group_wait`'s answer: the engine's, plus whether this wait timed out.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct GroupWaitOut {
    /// The group's status and counts; no prompt, answer or intermediate result.
    #[serde(flatten)]
    pub wait: GroupWait,
    /// True when the wait ended because its time was up (the group goes on).
    pub timed_out: bool,
}

/// `group_create`.
pub fn create(engine: &Engine, args: GroupCreateArgs) -> Result<GroupCreated> {
    let created = engine.groups().create(args.group_id, args.definition)?;
    tracing::info!(group = %created.group_id, existing = created.existing, "mcp group_create");
    Ok(created)
}

/// `group_start`.
pub async fn start(engine: &Engine, args: GroupStartArgs) -> Result<GroupStarted> {
    let started = engine
        .groups()
        .start(&args.group_id, &args.definition_sha256)
        .await?;
    let status = &started.status;
    tracing::info!(group = %status.group_id, state = %status.state, "mcp group_start");
    Ok(started)
}

/// `group_status`.
pub fn status(engine: &Engine, args: GroupArgs) -> Result<GroupStatus> {
    engine.groups().status(&args.group_id)
}

/// `group_cancel`.
pub fn cancel(engine: &Engine, args: GroupArgs) -> Result<GroupStatus> {
    let status = engine.groups().cancel(&args.group_id)?;
    tracing::info!(group = %status.group_id, state = %status.state, "mcp group_cancel");
    Ok(status)
}

/// `groups`.
pub fn list(engine: &Engine, _args: GroupsArgs) -> Result<GroupsOut> {
    Ok(GroupsOut {
        groups: engine.groups().list()?,
    })
}

/// `workflow_result`.
pub async fn workflow_result(engine: &Engine, args: GroupArgs) -> Result<WorkflowResult> {
    engine.groups().workflow_result(&args.group_id).await
}

/// `peer_receipts`.
pub fn peer_receipts(engine: &Engine, args: PeerReceiptsArgs) -> Result<PeerReceiptPage> {
    let limit = in_range(
        "limit",
        args.limit.unwrap_or(MAX_RECEIPTS_PAGE),
        1,
        MAX_RECEIPTS_PAGE,
    )?;
    engine
        .groups()
        .peer_receipts(&args.group_id, args.after, limit)
}

fn describe(p: &GroupProgress) -> String {
    format!(
        "{} of {} nodes succeeded, {} running, {} pending, {} stopped",
        p.succeeded, p.total, p.running, p.pending, p.stopped
    )
}

fn progress_of(status: &GroupStatus) -> GroupProgress {
    use legate_engine::NodeState as N;
    let mut p = GroupProgress {
        total: status.nodes.len() as u32,
        ..GroupProgress::default()
    };
    for node in &status.nodes {
        match node.state {
            N::Succeeded => p.succeeded += 1,
            N::Admitting | N::Running | N::Held => p.running += 1,
            N::Pending => p.pending += 1,
            _ => p.stopped += 1,
        }
    }
    p
}

/// `group_wait`: the engine's bounded wait, with progress on every change of the counts
/// (checked on each event of the engine's live feed) and at least every heartbeat.
/// `cancelled` ends the wait early; the group goes on either way.
pub async fn wait(
    engine: &Engine,
    args: GroupWaitArgs,
    progress: Option<Progress>,
    cancelled: CancellationToken,
) -> Result<GroupWaitOut> {
    let seconds = in_range(
        "timeoutSeconds",
        args.timeout_seconds.unwrap_or(GROUP_WAIT_DEFAULT_SECS),
        1,
        GROUP_WAIT_MAX_SECS,
    )?;
    let request = GroupWaitRequest {
        cursors: args.cursors.unwrap_or_default(),
        limit: args.limit,
    };
    // Unknown groups, and cursors or limits the engine refuses, fail before anything waits.
    let first = engine.groups().current(&args.group_id, &request)?.status;
    let timeout = Duration::from_secs(seconds);
    let waited = engine.groups().wait_for(&args.group_id, timeout, &request);
    tokio::pin!(waited);
    let Some(p) = progress else {
        return tokio::select! {
            out = &mut waited => out.map(finish),
            _ = cancelled.cancelled() => current(engine, &args.group_id, &request),
        };
    };
    let mut live = engine.live_events();
    let mut last = progress_of(&first);
    let mut counter = 0u64;
    let mut next_beat = Instant::now();
    loop {
        tokio::select! {
            out = &mut waited => return out.map(finish),
            _ = cancelled.cancelled() => return current(engine, &args.group_id, &request),
            _ = live.recv() => {
                let now = progress_of(&engine.groups().status(&args.group_id)?);
                if now == last {
                    continue;
                }
                last = now;
            }
            _ = tokio::time::sleep_until(next_beat) => {}
        }
        counter += 1;
        next_beat = Instant::now() + p.heartbeat;
        let param = ProgressNotificationParam::new(p.token.clone(), counter as f64)
            .with_message(describe(&last));
        if let Err(e) = p.peer.notify_progress(param).await {
            tracing::debug!(error = %e, "could not send a progress notification");
        }
    }
}

fn finish(wait: GroupWait) -> GroupWaitOut {
    GroupWaitOut {
        timed_out: !wait.ready && wait.messages.is_empty(),
        wait,
    }
}

/// The answer of a wait the client gave up on: the group and its messages now.
fn current(engine: &Engine, group_id: &str, request: &GroupWaitRequest) -> Result<GroupWaitOut> {
    Ok(GroupWaitOut {
        wait: engine.groups().current(group_id, request)?,
        timed_out: false,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn progress_messages_name_counts_only() {
        let p = GroupProgress {
            total: 5,
            succeeded: 2,
            running: 1,
            pending: 1,
            stopped: 1,
        };
        assert_eq!(
            describe(&p),
            "2 of 5 nodes succeeded, 1 running, 1 pending, 1 stopped"
        );
    }

    #[test]
    fn arguments_are_strict() {
        let bad: std::result::Result<GroupWaitArgs, _> =
            serde_json::from_value(serde_json::json!({"groupId": "g", "timeout": 5}));
        assert!(bad.is_err());
        let bad: std::result::Result<PeerReceiptsArgs, _> =
            serde_json::from_value(serde_json::json!({"groupId": "g", "limit": -1}));
        assert!(bad.is_err());
    }
}
