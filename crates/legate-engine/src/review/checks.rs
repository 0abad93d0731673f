//! The checks integration rests on: verifying the caller's reviews against the task's
//! criteria, running the configured test command in the copy (confined), and recording a
//! test a client ran itself (kept apart: it never satisfies `require_tests`).
//!
//! Every check names the patch sha256 it is for and is refused while cleanup is unverified.

use super::Reviews;
use super::records::*;
use super::{Opened, blocking, notice_event};
use crate::core::Core;
use legate_core::{Error, ErrorCode, Result, Timestamp};
use legate_review::{Review, Verification};
use legate_testrun::TestCommand;
use std::sync::Arc;
use std::time::Duration;

impl Core {
    /// Verifies the caller's reviews against the task's criteria on the copy's real files,
    /// for the patch `expected_sha256`. The result is stored and announced (`copy.verified`);
    /// a verification whose criteria did not all pass is returned, not an error.
    pub(crate) async fn verify(
        &self,
        id: &str,
        expected_sha256: &str,
        reviews: Vec<Review>,
    ) -> Result<Verification> {
        let mut o = self.open_copy(id).await?;
        self.check_cleanup(&o)?;
        let preview = self.current_preview(&o.baseline).await?;
        Core::expect_sha(&preview, expected_sha256)?;
        let (copy, criteria, sha, max) = (
            o.record.copy_directory.clone(),
            o.record.criteria.clone(),
            preview.sha256.clone(),
            self.review_config().limits.max_bytes,
        );
        let v =
            blocking(move || legate_review::verify(&copy, &criteria, &reviews, &sha, max)).await?;
        o.record.verification = Some(v.clone());
        o.record.touched_at = Timestamp::now();
        self.put_record(&o.task.id, &o.record)?;
        let passed = v.criteria.iter().filter(|c| c.passed).count();
        self.announce(
            &o.task.id,
            notice_event(
                "copy.verified",
                format!(
                    "verification {}: {passed} of {} criteria passed (sha256 {})",
                    if v.passed { "passed" } else { "did not pass" },
                    v.criteria.len(),
                    v.sha256
                ),
                serde_json::json!({"sha256": v.sha256, "passed": v.passed, "criteria": v.criteria}),
            ),
        );
        Ok(v)
    }

    async fn store_test(&self, o: &mut Opened, evidence: TestEvidence) -> Result<TestEvidence> {
        o.record.tests.push(evidence.clone());
        o.record.touched_at = Timestamp::now();
        self.put_record(&o.task.id, &o.record)?;
        self.announce(
            &o.task.id,
            notice_event(
                "copy.tested",
                format!(
                    "test #{} ({}) {}: {} {}",
                    evidence.id,
                    match evidence.source {
                        TestSource::LegateExecutor => "legate-executor",
                        TestSource::ClientReported => "client-reported",
                    },
                    if evidence.passed { "passed" } else { "failed" },
                    evidence.command.executable,
                    evidence.command.args.join(" ")
                ),
                serde_json::to_value(&evidence).unwrap_or_default(),
            ),
        );
        Ok(evidence)
    }
}

impl Reviews {
    /// Verifies the caller's reviews against the task's criteria on the copy's real files,
    /// for the patch `expected_sha256`. The result is stored and announced (`copy.verified`);
    /// a verification whose criteria did not all pass is returned, not an error.
    #[tracing::instrument(name = "legate.verify", skip_all, fields(legate.task.id = %id, legate.reviews = reviews.len()))]
    pub async fn verify(
        &self,
        id: &str,
        expected_sha256: &str,
        reviews: Vec<Review>,
    ) -> Result<Verification> {
        self.core.verify(id, expected_sha256, reviews).await
    }

    /// Runs `command` (no shell) in the copy with a timeout, and records the evidence. The
    /// evidence is returned whether the command passed or not; its `error` says
    /// `TEST_FAILED` or `TEST_CHANGED_PATCH`. A timeout under a second or over
    /// `fronts.test_timeout_max` is `INVALID_INPUT`, whichever front passed it.
    pub async fn test(
        &self,
        id: &str,
        expected_sha256: &str,
        command: TestCommand,
        timeout: Option<Duration>,
    ) -> Result<TestEvidence> {
        self.test_in(id, expected_sha256, command, timeout, None, false)
            .await
    }

    /// [`Reviews::test`] under a sandbox `selection`, checked against the current sandbox
    /// policy (and clear of the copy's source project) before anything runs:
    /// `SANDBOX_SELECTION_DENIED` (or `FORBIDDEN_DIRECTORY`) otherwise. The evidence names
    /// the selection enforced and the policy's sha256, without a selection too.
    ///
    /// With `fresh`, the command runs in a fresh tree of the patch instead of the copy
    /// (`legate_workspace::fresh_tree`: the tree the preview staged, checked out beside the
    /// baseline, nothing the copy ignores), removed when it ends; the evidence says so
    /// (`fresh`). An agent's planted build output or cache cannot pass it.
    #[tracing::instrument(name = "legate.test", skip_all, fields(legate.task.id = %id))]
    pub async fn test_in(
        &self,
        id: &str,
        expected_sha256: &str,
        command: TestCommand,
        timeout: Option<Duration>,
        selection: Option<crate::SandboxSelection>,
        fresh: bool,
    ) -> Result<TestEvidence> {
        // The command and timeout checked, then the selection against the policy, before
        // anything runs.
        let core = &self.core;
        legate_testrun::validate_test_command(&command)?;
        let max = core.config().fronts.test_timeout_max;
        if let Some(t) = timeout
            && (t < Duration::from_secs(1) || t > max)
        {
            return Err(Error::invalid_input(format!(
                "the test timeout must be between 1 and {} seconds (got {} s)",
                max.as_secs(),
                t.as_secs_f64()
            )));
        }
        let mut o = core.open_copy(id).await?;
        core.check_cleanup(&o)?;
        core.check_not_forbidden("the test root", &o.record.copy_directory)?;
        core.check_not_forbidden("the copy's source", &o.record.source)?;
        let before = core.current_preview(&o.baseline).await?;
        Core::expect_sha(&before, expected_sha256)?;
        let (sandbox, resolved, policy_sha256) = match &selection {
            Some(sel) => {
                let (sb, resolved, sha) = core.resolve_selection(sel, &o.record.source)?;
                (Some(sb), Some(resolved), sha)
            }
            None => (None, None, core.test_ceiling()?.sha256),
        };
        let cfg = core.review_config().clone();
        let timeout = timeout.unwrap_or(cfg.test_timeout);
        let (b, cmd) = (o.baseline.clone(), command.clone());
        let copy = o.record.copy_directory.clone();
        let requirement = core.config().confinement;
        let hidden = core.config().hidden_paths();
        // A selection granting the network reaches it through Legate's proxy only, under
        // `[network]`, rules only (see `test_gate`).
        let egress = sandbox
            .as_ref()
            .filter(|s| s.network)
            .map(|_| super::test_gate::TestGate::egress(Arc::new(core.config().network.clone())));
        // The command keeps the copy's lock until it ends, even if no one waits for it any more.
        let held = o.held();
        let tree = before.tree.clone();
        let run = blocking(move || {
            let _held = held;
            let scratch = b.scratch()?;
            let fresh_tree = match fresh {
                true => Some(legate_workspace::fresh_tree(&b, &tree)?),
                false => None,
            };
            let root = fresh_tree
                .as_ref()
                .map_or(copy.clone(), |t| t.path().to_path_buf());
            let run = legate_testrun::run_test_in(
                &root,
                &scratch,
                &cmd,
                timeout,
                cfg.max_test_output,
                requirement,
                &hidden,
                sandbox.as_ref(),
                egress.as_ref(),
            );
            // What the command changed in its fresh tree, judged before the tree goes (a
            // tree that cannot be judged counts as changed); the tree removed either way.
            let changed = match fresh_tree {
                Some(t) => {
                    let changed = t.changed(&b).unwrap_or(true);
                    if let Err(e) = t.remove() {
                        tracing::warn!(error = %e, "a fresh tree was not removed; the next fresh test removes it");
                    }
                    changed
                }
                None => false,
            };
            run.map(|run| (run, changed))
        })
        .await?;
        let (run, fresh_changed) = run;
        let after = core.current_preview(&o.baseline).await;
        let sha_after = match &after {
            Ok(p) => p.sha256.clone(),
            Err(e) => format!("unavailable: {}", e.code),
        };
        let error = if sha_after != before.sha256 {
            Some(Error::new(
                ErrorCode::TestChangedPatch,
                format!(
                    "the command changed the copy's patch ({} -> {}); this evidence cannot stand",
                    before.sha256, sha_after
                ),
            ))
        } else if fresh_changed {
            Some(Error::new(
                ErrorCode::TestChangedPatch,
                "the command changed the patch's files in its fresh tree (a tracked file written or removed, or a file added that the tree does not ignore); this evidence cannot stand",
            ))
        } else if run.timed_out {
            Some(Error::new(
                ErrorCode::TestFailed,
                format!(
                    "the command ran past its timeout of {} s and was killed",
                    timeout.as_secs()
                ),
            ))
        } else if !run.passed() {
            Some(Error::new(
                ErrorCode::TestFailed,
                match run.exit_code {
                    Some(c) => format!("the command exited with {c}"),
                    None => format!(
                        "the command was killed by signal {}",
                        run.signal.unwrap_or(0)
                    ),
                },
            ))
        } else {
            None
        };
        let evidence = TestEvidence {
            id: o.record.tests.len() as u32 + 1,
            source: TestSource::LegateExecutor,
            command,
            exit_code: run.exit_code,
            signal: run.signal,
            timed_out: run.timed_out,
            passed: error.is_none(),
            stdout: run.stdout,
            stderr: run.stderr,
            output_truncated: run.output_truncated,
            sha256_before: before.sha256.clone(),
            sha256_after: sha_after,
            duration_ms: Some(run.duration_ms),
            sandbox: Some(crate::SandboxEvidence {
                selection: resolved,
                policy_sha256,
                landlock_abi: run.landlock_abi,
                reads: run.reads,
                network_rules: run.network == legate_confine::Network::Denied.as_str(),
                network: run.network.clone(),
                child_processes: run.children,
            }),
            confinement: run.confinement,
            network: run.network,
            connections: run.connections,
            connections_not_kept: run.connections_not_kept,
            isolation: Some(run.isolation),
            fresh,
            recorded_at: Timestamp::now(),
            error,
        };
        core.store_test(&mut o, evidence).await
    }

    /// Stores a test run the client reports, marked `client-reported`; it never counts as
    /// observed evidence for integration.
    pub async fn record_test(
        &self,
        id: &str,
        expected_sha256: &str,
        reported: ReportedTest,
    ) -> Result<TestEvidence> {
        legate_testrun::validate_test_command(&reported.command)?;
        let mut o = self.core.open_copy(id).await?;
        self.core.check_cleanup(&o)?;
        let preview = self.core.current_preview(&o.baseline).await?;
        Core::expect_sha(&preview, expected_sha256)?;
        let max = self.core.review_config().max_test_output;
        let mut output = reported.output;
        let truncated = output.len() > max;
        if truncated {
            let mut end = max;
            while !output.is_char_boundary(end) {
                end -= 1;
            }
            output.truncate(end);
        }
        let error = (reported.exit_code != 0).then(|| {
            Error::new(
                ErrorCode::TestFailed,
                format!("the client reports exit code {}", reported.exit_code),
            )
        });
        let evidence = TestEvidence {
            id: o.record.tests.len() as u32 + 1,
            source: TestSource::ClientReported,
            command: reported.command,
            exit_code: Some(reported.exit_code),
            signal: None,
            timed_out: false,
            passed: error.is_none(),
            stdout: output,
            stderr: String::new(),
            output_truncated: truncated,
            sha256_before: preview.sha256.clone(),
            sha256_after: preview.sha256.clone(),
            duration_ms: None,
            confinement: "client".to_string(),
            network: not_enforced(),
            connections: Vec::new(),
            connections_not_kept: 0,
            isolation: None,
            sandbox: None,
            fresh: false,
            recorded_at: Timestamp::now(),
            error,
        };
        self.core.store_test(&mut o, evidence).await
    }
}
