//! Admitting one node: its predecessors' results and checkpoints framed into its prompt
//! (`prompt`), its admission recorded before its task is submitted and the task bound
//! after, the task a copy of the project or, with `fileSources`, a handoff from that
//! dependency's checked copy, in `messages` delivery with the group in its controls.
//!
//! It never submits a node that is not `pending`, and never leaves a node `admitting` when
//! the submit was refused (nothing was stored then).

use super::checkpoint::node_result;
use super::load::{Loaded, checkpoint};
use super::prompt::{Passed, framed};
use super::scheduler::moved;
use super::status::NodeState;
use crate::HandoffRequest;
use crate::core::Core;
use crate::core::request::{SubmitRequest, WorkspaceRequest};
use legate_core::{DeliveryMode, Error, GroupNode, Result, Task};
use legate_store::NodeRecord;

impl Core {
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
