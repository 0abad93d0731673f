//! Admitting nodes: which pending ones a step admits (dependencies succeeded, the group
//! running, the budget's gate open, room in the queue), and for each one: its
//! predecessors' results and checkpoints framed into its prompt
//! (`prompt`), its admission recorded before its task is submitted and the task bound
//! after, the task a copy of the project or, with `fileSources`, a handoff from that
//! dependency's checked copy, in `messages` delivery with the group in its controls.
//!
//! It never submits a node that is not `pending`, and never leaves a node `admitting` when
//! the submit was refused (nothing was stored then).

use super::checkpoint::node_result;
use super::load::{Loaded, checkpoint, group_state, node_state};
use super::prompt::{Passed, framed};
use super::scheduler::moved;
use super::status::{GroupState, NodeState};
use super::tokens::{Gate, gate};
use crate::HandoffRequest;
use crate::core::Core;
use crate::core::request::{SubmitRequest, WorkspaceRequest};
use legate_core::{DeliveryMode, Error, ErrorCode, GroupNode, Result, Task};
use legate_store::NodeRecord;

impl Core {
    /// Whether the queue, found full a moment ago, will have room: once something of this
    /// engine moves on (a task of it runs or waits), or now (a task ended since, freeing a
    /// place: the refusal was a moment's, and calling it lasting would pause a group that
    /// only had to try again). (A queue that can take no task while nothing runs or waits,
    /// which the slots never allow, would not.)
    pub(super) fn will_have_room(&self) -> bool {
        let c = self.slot_counts();
        c.running + c.queued > 0 || self.slots().has_room()
    }

    /// Admits every pending node whose dependencies all succeeded (one, under a budget),
    /// while the engine's queue has room: a node the queue cannot take yet stays `pending`
    /// and is admitted by a later step (a task ending, or the next tick), so a group wider
    /// than `max_running + max_queued` waits for places instead of pausing. A queue that can
    /// take no task while nothing of this engine runs or waits (which the slots never allow:
    /// a free running place always takes one) would pause it. Returns whether it stored
    /// anything (an admission, a pause) or found the group's state changed since `g`.
    pub(super) async fn admit_ready(&self, g: &Loaded) -> Result<bool> {
        let group = g.record.group_id.as_str();
        // Whether anything was stored (an admission, a pause) or seen changed since `g`.
        let mut changed = false;
        for def in &g.definition.nodes {
            let Some(rec) = g.node(&def.id) else { continue };
            if node_state(rec)? != NodeState::Pending {
                continue;
            }
            let ready = def.depends_on.iter().all(|d| {
                g.node(d)
                    .is_some_and(|n| node_state(n).is_ok_and(|s| s == NodeState::Succeeded))
            });
            if !ready {
                continue;
            }
            // A cancel or a pause since `g` was read stops admitting. Only a budget needs the
            // group's tasks read again (the turn just admitted counts); otherwise `g` serves,
            // since each admission moves its node from `pending` by compare-and-set and the
            // dependencies' checkpoints it reads do not change.
            let record = self
                .store()
                .group(group)?
                .ok_or_else(|| super::load::not_found(group))?;
            if group_state(&record)? != GroupState::Running {
                return Ok(true);
            }
            let reread;
            let fresh = if g.definition.budget.is_some() {
                reread = self.load_group(group)?;
                &reread
            } else {
                g
            };
            match gate(fresh.definition.budget, &fresh.tasks) {
                Gate::Open => {}
                Gate::Wait => return Ok(changed),
                Gate::Pause(e) => return self.pause_group(group, &e).map(|()| true),
            }
            // A queue that will have room once something of this engine moves on is waited
            // for: not asked again (nor the source's checkpoint read again) while full, and a
            // submit that lost the last place to another caller waits too.
            if !self.slots().has_room() && self.will_have_room() {
                return Ok(changed);
            }
            if let Some(profile) = self.profile_changed(group, &fresh.definition)? {
                return self.pause_group(group, &profile).map(|()| true);
            }
            changed = true;
            if let Err(e) = self.admit_node(fresh, rec).await {
                if e.code == ErrorCode::QueueFull && self.will_have_room() {
                    tracing::debug!(group, node = %def.id, "the queue is full; the node waits for a place");
                    return Ok(true);
                }
                tracing::warn!(group, node = %def.id, error = %e, "a group node could not be admitted");
                return self.pause_group(group, &e).map(|()| true);
            }
        }
        Ok(changed)
    }

    /// The finished nodes node `id` is given: its direct dependencies, or for the
    /// workflow's final node every succeeded node.
    fn passed_to(&self, g: &Loaded, id: &str) -> Result<Vec<Passed>> {
        let def = g.definition.nodes.iter().find(|n| n.id == id);
        let is_final = g
            .definition
            .workflow
            .as_ref()
            .is_some_and(|w| w.final_node == id);
        let mut out = Vec::new();
        for n in &g.definition.nodes {
            let included = if is_final {
                n.id != id
            } else {
                def.is_some_and(|d| d.depends_on.contains(&n.id))
            };
            if !included {
                continue;
            }
            let Some(rec) = g.node(&n.id) else { continue };
            let Some(cp) = checkpoint(rec)? else { continue };
            let task = self.task(cp.task_id.as_str())?;
            out.push(Passed {
                node: n.id.clone(),
                task_id: task.id.clone(),
                role: task
                    .role
                    .as_ref()
                    .map_or_else(|| "implementer".to_string(), |r| r.name.clone()),
                agent: task.agent.clone(),
                result: node_result(&task),
                checkpoint: cp,
            });
        }
        Ok(out)
    }

    /// Admits node `rec`: its admission recorded, its task submitted, then bound.
    pub(crate) async fn admit_node(&self, g: &Loaded, rec: &NodeRecord) -> Result<()> {
        let group = g.record.group_id.as_str();
        let Some(def) = g.definition.nodes.iter().find(|n| n.id == rec.node_id) else {
            return Err(Error::internal("a stored node is not in its definition"));
        };
        let passed = self.passed_to(g, &def.id)?;
        let prompt = framed(&def.prompt, group, &def.id, &passed)?;
        // The source's checkpoint is checked before anything is recorded.
        let source = match &def.file_sources {
            Some(src) => {
                let cp = g
                    .node(src)
                    .map(checkpoint)
                    .transpose()?
                    .flatten()
                    .ok_or_else(|| Error::internal("a file source has no checkpoint"))?;
                self.recheck(src, &cp, g.hook(src)).await?;
                Some(cp.task_id)
            }
            None => None,
        };
        if !self.put_node(
            group,
            &[NodeState::Pending],
            &moved(rec, NodeState::Admitting),
        )? {
            return Ok(());
        }
        let node = GroupNode {
            group_id: group.to_string(),
            node_id: def.id.clone(),
        };
        let submitted = match source {
            Some(from) => {
                let pack = self.context(from.as_str()).await;
                match pack {
                    Ok(pack) => {
                        let req = HandoffRequest {
                            source_task_id: from.to_string(),
                            expected_context_sha256: pack.context_sha256,
                            role: def
                                .role
                                .clone()
                                .unwrap_or_else(|| "implementer".to_string()),
                            prompt,
                            agent: def.agent.clone(),
                            model: def.model.clone(),
                            decisions: Vec::new(),
                            mode: def.mode,
                            memory: def.memory.clone(),
                            // The node's own, set by `node_options`.
                            allowed_tools: None,
                            mcp_servers: None,
                        };
                        let node = node.clone();
                        self.handoff_with(
                            req,
                            |r| node_options(r, def),
                            move |c| {
                                c.controls.group = Some(node);
                                c.controls.delivery_mode = DeliveryMode::Messages;
                            },
                        )
                        .await
                    }
                    Err(e) => Err(e),
                }
            }
            None => self.submit_node(g, def, prompt, node),
        };
        match submitted {
            Ok(task) => {
                let bound = NodeRecord {
                    task_id: Some(task.id.clone()),
                    ..moved(rec, NodeState::Running)
                };
                self.put_node(group, &[NodeState::Admitting], &bound)?;
                tracing::info!(group, node = %def.id, task = %task.id, "group node admitted");
                Ok(())
            }
            Err(e) => {
                // Nothing was stored: the node may be admitted again once resumed.
                self.put_node(group, &[NodeState::Admitting], rec)?;
                Err(e)
            }
        }
    }

    /// Submits a node's task in a fresh copy of the group's project.
    fn submit_node(
        &self,
        g: &Loaded,
        def: &super::NodeDef,
        prompt: String,
        node: GroupNode,
    ) -> Result<Task> {
        let mut req = SubmitRequest::new(prompt);
        req.agent = def.agent.clone();
        req.model = def.model.clone();
        req.role = def.role.clone();
        req.mode = def.mode;
        req.workspace = WorkspaceRequest::Copy {
            source: g.definition.working_directory.clone(),
            include_paths: def.include_paths.clone(),
            criteria: def.criteria.clone(),
        };
        req.skills = def.skills.clone();
        req.memory = def.memory.clone();
        node_options(&mut req, def);
        let role = self.apply_role(&mut req)?;
        let mut checked = self.check_submit(&req, false)?;
        crate::core::request::check_framed(
            &req.prompt,
            role.as_ref(),
            self.config().max_prompt_chars,
        )?;
        checked.controls.group = Some(node);
        checked.controls.delivery_mode = DeliveryMode::Messages;
        self.submit_checked(req, checked, role)
    }
}

/// The options a node gives its task whether it starts from the project or from a
/// dependency's copy: its timeout, tool controls and artifacts, and (from a dependency's copy,
/// which otherwise keeps its source's) its own acceptance criteria. What the node leaves out
/// its role's defaults may fill in.
fn node_options(req: &mut SubmitRequest, def: &super::NodeDef) {
    req.timeout = def.timeout_seconds.map(std::time::Duration::from_secs);
    req.allowed_tools = def.allowed_tools.clone();
    req.mcp_servers = def.mcp_servers.clone();
    req.artifact_paths = def.artifact_paths.clone();
    if !def.criteria.is_empty()
        && let WorkspaceRequest::Copy { criteria, .. } = &mut req.workspace
    {
        *criteria = def.criteria.clone();
    }
}
