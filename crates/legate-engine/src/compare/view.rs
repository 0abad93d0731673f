//! Reading a comparison back: every review as it stands, the checks that say whether what
//! was compared is still what is there, and the grouped findings.
//!
//! Each review's copy is re-hashed (its lock taken, the same selection a handoff carries) and
//! compared with the tree the comparison was made of; the source's context is read again
//! and compared with the compared `contextSha256`. A copy or source that cannot be read (gone,
//! discarded, busy past the lock's grace) does not match: `contextStale` covers "changed",
//! "unavailable" and "could not be checked" alike. A review whose task is gone from the store
//! stays in the answer with no state, never hidden.
//!
//! It never changes a task, a copy or the stored comparison.

use super::Comparisons;
use super::grouping::{GroupedFinding, group};
use super::{ComparisonRecord, StartError, StoredTarget};
use crate::core::Core;
use crate::review::blocking;
use legate_core::{
    Error, ReportBody, Result, ReviewReport, TaskId, TaskState, Timestamp, Usage, WorkspaceKind,
};
use legate_workspace::Baseline;
use serde::{Deserialize, Serialize};

/// One review of a comparison.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ComparedReview {
    /// The review task.
    pub task_id: TaskId,
    /// The target's agent.
    pub agent: String,
    /// The model asked for (`None`: the agent's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The task's state now; `None` when the task is gone from the store (retention).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<TaskState>,
    /// Why it failed, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(with = "Option<super::ErrorShape>"))]
    pub error: Option<Error>,
    /// The tokens the agent reported for it; `None` when it reported none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// Whether its copy still holds exactly the compared files (re-hashed now).
    pub context_matches: bool,
    /// Its review report's summary, once accepted (agent-reported).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// How many findings its accepted report has.
    pub findings: usize,
    /// Whether Legate found every cited file, line and quote in its copy (citations, not
    /// judgement).
    pub citations_checked: bool,
}

/// A comparison as it stands.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Comparison {
    /// Its id.
    pub comparison_id: String,
    /// The copy task compared.
    pub source_task_id: TaskId,
    /// The source's context when compared.
    pub context_sha256: String,
    /// The tree every copy was made of.
    pub tree_sha256: String,
    /// Every target started, its review `completed` with a review report, the source's
    /// context unchanged and every copy still matching.
    pub complete: bool,
    /// The source's context or some copy changed, is gone, or could not be checked.
    pub context_stale: bool,
    /// Whether the source's context is still the compared one.
    pub source_matches: bool,
    /// Every review, in the order of the targets.
    pub reviews: Vec<ComparedReview>,
    /// The targets that never started.
    pub start_errors: Vec<StartError>,
    /// How many reviews the grouping spans (those `completed` with a checked review report).
    pub reviews_grouped: usize,
    /// The findings of those reviews grouped by file and line, literally (no voting).
    pub findings: Vec<GroupedFinding>,
    /// When it was made.
    pub created_at: Timestamp,
}

impl Core {
    /// The comparison `id` as it stands (see the module docs). `COMPARISON_NOT_FOUND` when
    /// there is none.
    pub(crate) async fn comparison(&self, id: &str) -> Result<Comparison> {
        let record = self.comparison_record(id)?;
        let source_matches = match self.context(record.source_task_id.as_str()).await {
            Ok(pack) => pack.context_sha256 == record.context_sha256,
            Err(e) => {
                tracing::info!(comparison = %record.id, code = %e.code, "the compared source could not be checked");
                false
            }
        };
        let mut reviews = Vec::new();
        let mut reports: Vec<(TaskId, ReviewReport)> = Vec::new();
        for target in &record.targets {
            let (review, report) = self.compared_review(&record, target).await;
            if let Some(r) = report {
                reports.push((review.task_id.clone(), r));
            }
            reviews.push(review);
        }
        let grouped: Vec<(TaskId, &ReviewReport)> =
            reports.iter().map(|(id, r)| (id.clone(), r)).collect();
        let findings = group(&grouped);
        let all_match = reviews.iter().all(|r| r.context_matches);
        let all_done = reviews.len() == reports.len();
        let context_stale = !source_matches || !all_match;
        Ok(Comparison {
            comparison_id: record.id.clone(),
            source_task_id: record.source_task_id.clone(),
            context_sha256: record.context_sha256.clone(),
            tree_sha256: record.tree_sha256.clone(),
            complete: record.start_errors.is_empty() && all_done && !context_stale,
            context_stale,
            source_matches,
            reviews,
            start_errors: record.start_errors,
            reviews_grouped: reports.len(),
            findings,
            created_at: record.created_at,
        })
    }

    /// One review and, when it finished with a checked review report, that report.
    async fn compared_review(
        &self,
        record: &ComparisonRecord,
        target: &StoredTarget,
    ) -> (ComparedReview, Option<ReviewReport>) {
        let mut review = ComparedReview {
            task_id: target.task_id.clone(),
            agent: target.agent.clone(),
            model: target.model.clone(),
            state: None,
            error: None,
            usage: None,
            context_matches: false,
            summary: None,
            findings: 0,
            citations_checked: false,
        };
        let Ok(task) = self.task(target.task_id.as_str()) else {
            return (review, None);
        };
        // A task the comparison did not make (its id reused by hand) is not one of its reviews.
        if task.workspace != WorkspaceKind::Copy
            || task.controls.comparison_id.as_deref() != Some(record.id.as_str())
        {
            return (review, None);
        }
        review.state = Some(task.state);
        review.error = task.error.clone();
        review.usage = task.usage.clone();
        review.context_matches = self
            .copy_matches(&task.id, &record.tree_sha256)
            .await
            .unwrap_or_else(|e| {
                tracing::info!(task = %task.id, code = %e.code, "a compared copy could not be checked");
                false
            });
        let report = task
            .result
            .as_ref()
            .and_then(|r| r.report.clone())
            .filter(|r| r.citations_checked);
        let report = match report.map(|r| r.body) {
            Some(ReportBody::Review(r)) if task.state == TaskState::Completed => Some(r),
            _ => None,
        };
        if let Some(r) = &report {
            review.summary = Some(r.summary.clone());
            review.findings = r.findings.len();
            review.citations_checked = true;
        }
        (review, report)
    }

    /// Whether the copy of review task `id` holds exactly `tree` now.
    async fn copy_matches(&self, id: &TaskId, tree: &str) -> Result<bool> {
        let record = self.record(id)?;
        if record.discarded_at.is_some() || record.copy.is_none() {
            return Ok(false);
        }
        let baseline = Baseline::open(&record.baseline_directory, &record.copy_directory)?;
        let cfg = self.config().review.clone();
        let now = blocking(move || {
            let _lock = baseline.lock()?;
            let sel = legate_workspace::copy_selection(&baseline, &cfg.secrets, &cfg.limits)?;
            legate_workspace::tree_sha256(&sel, &cfg.limits)
        })
        .await?;
        Ok(now == tree)
    }
}

impl Comparisons {
    /// The comparison `id` as it stands (see the module docs). `COMPARISON_NOT_FOUND` when
    /// there is none.
    pub async fn comparison(&self, id: &str) -> Result<Comparison> {
        self.core.comparison(id).await
    }
}
