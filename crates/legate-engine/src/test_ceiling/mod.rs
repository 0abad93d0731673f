//! The test ceiling (the "sandbox policy" of `get_sandbox_policy`): the one global bound on
//! what a test's `sandbox` selection may grant (extra read roots, extra write roots, network,
//! child processes, output size),
//! stored in the store under one sha256, replaced only by compare-and-set, and in approval
//! mode `ask` only after a person confirms it ([`CeilingConfirmer`]).
//!
//! This module owns the ceiling's shape, its default (no roots, no network, children allowed,
//! 4,000 characters: the seed's initial configuration), its normalization and sha256, the
//! validation of every root (module `roots`), and resolving a selection against the ceiling
//! into what the test runner enforces. It never runs a test, never widens a selection, and
//! never lets text an agent wrote (or a task's prompt) change the ceiling: only the engine's
//! callers do, through [`TestCeilings::set`].

mod roots;

use crate::core::Core;
use crate::review::Confirmation;
use async_trait::async_trait;
use legate_core::{Error, ErrorCode, Result};
use legate_store::CeilingReplace;
use legate_testrun::TestConfinement as TestSandbox;
use roots::{Protected, check_root};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The store's name for this ceiling.
pub const CEILING_NAME: &str = "sandbox";
/// At most this many roots in each list of the ceiling, and of a selection.
pub const MAX_ROOTS: usize = 32;
/// The default bound on each stream of a selected test's output, in characters.
pub const DEFAULT_MAX_OUTPUT_CHARS: u32 = 4_000;
/// The largest `maxOutputChars` a ceiling may allow.
pub const MAX_OUTPUT_CHARS_CAP: u32 = 1_000_000;

/// The global ceiling on a test's sandbox selection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schema", schemars(rename = "SandboxPolicy"))]
pub struct TestCeiling {
    /// Directories a selection may let a test read (and execute) beneath, besides the system
    /// directories, its copy and scratch directory. Absolute, canonical, existing, no links.
    #[serde(default)]
    pub read_roots: Vec<PathBuf>,
    /// Directories a selection may let a test write (and read) beneath, besides its copy.
    #[serde(default)]
    pub write_roots: Vec<PathBuf>,
    /// Whether a selection may grant TCP `bind` and `connect`.
    #[serde(default)]
    pub network: bool,
    /// Whether a selection may let a test start child processes.
    #[serde(default = "yes")]
    pub child_processes: bool,
    /// The most characters of each output stream a selection may keep (1 to 1,000,000).
    #[serde(default = "default_chars")]
    pub max_output_chars: u32,
}

fn yes() -> bool {
    true
}

fn default_chars() -> u32 {
    DEFAULT_MAX_OUTPUT_CHARS
}

impl Default for TestCeiling {
    fn default() -> Self {
        Self {
            read_roots: Vec::new(),
            write_roots: Vec::new(),
            network: false,
            child_processes: true,
            max_output_chars: DEFAULT_MAX_OUTPUT_CHARS,
        }
    }
}

impl TestCeiling {
    /// The sha256 of the ceiling's JSON as stored (normalized: roots sorted, each once).
    pub fn sha256(&self) -> String {
        // Serializing a struct of paths, booleans and an integer cannot fail; the empty
        // fallback would only change the hash, never accept a ceiling.
        legate_workspace::sha256_hex(&serde_json::to_vec(self).unwrap_or_default())
    }
}

/// The current policy and its sha256 (`get_sandbox_policy`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schema", schemars(rename = "SandboxPolicyView"))]
pub struct TestCeilingView {
    /// The policy.
    pub policy: TestCeiling,
    /// Its sha256: what `set_sandbox_policy` must name as `expectedSha256`, and what a
    /// selected test's evidence is bound to.
    pub sha256: String,
}

/// A test's selection within the ceiling; what is omitted is the narrowest but for
/// `childProcesses` and `maxOutputChars`, which default to the ceiling's.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SandboxSelection {
    /// Directories to read beneath, each within a read or write root of the policy.
    #[serde(default)]
    pub read_paths: Vec<PathBuf>,
    /// Directories to write beneath, each within a write root of the policy.
    #[serde(default)]
    pub write_paths: Vec<PathBuf>,
    /// TCP `bind` and `connect` (default false; needs the policy's `network`).
    #[serde(default)]
    pub network: Option<bool>,
    /// Child processes (default: the policy's).
    #[serde(default)]
    pub child_processes: Option<bool>,
    /// Characters kept of each stream (default: the policy's; at most the policy's).
    #[serde(default)]
    pub max_output_chars: Option<u32>,
}

/// A selection as it was enforced, every field given, paths canonical.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ResolvedSelection {
    /// Read roots granted.
    pub read_paths: Vec<PathBuf>,
    /// Write roots granted.
    pub write_paths: Vec<PathBuf>,
    /// Network granted.
    pub network: bool,
    /// Child processes granted.
    pub child_processes: bool,
    /// Characters kept of each stream.
    pub max_output_chars: u32,
}

/// What a Legate-run test's sandbox was, as the evidence states it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SandboxEvidence {
    /// The selection enforced; `None`: the test named none and ran as unselected tests do
    /// (reads open, no network, children allowed, the configured byte bound).
    pub selection: Option<ResolvedSelection>,
    /// The sha256 of the policy the selection was checked against.
    pub policy_sha256: String,
    /// The kernel's Landlock ABI version (0: none).
    pub landlock_abi: u8,
    /// `restricted` (Landlock allowed reads only beneath the system directories, the copy,
    /// the scratch directory and the selected roots) or `open`.
    pub reads: String,
    /// `denied` (Landlock TCP rules, ABI 4), `not-enforced` (not kernel-denied: no network
    /// rules in this kernel), `proxy` (granted: through Legate's egress proxy only, under
    /// `[network]`) or `allowed` (granted, without a network namespace of its own).
    pub network: String,
    /// Whether Landlock network rules were applied (`network: denied`).
    pub network_rules: bool,
    /// `allowed`, `denied-seccomp` (a seccomp filter refused `fork`, `vfork`, `clone3` and
    /// `clone` without `CLONE_THREAD`) or `not-enforced`.
    pub child_processes: String,
}

/// A proposed change of the ceiling, for a person to confirm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CeilingChange {
    /// The ceiling now.
    pub current: TestCeilingView,
    /// The ceiling proposed, normalized.
    pub proposed: TestCeilingView,
}

/// Asks a person whether a ceiling change may proceed (approval mode `ask`). Only
/// `Accept { confirm: true }` lets it.
#[async_trait]
pub trait CeilingConfirmer: Send + Sync {
    /// Shows `change` and returns the answer.
    async fn confirm_ceiling(&self, change: &CeilingChange) -> Confirmation;
}

fn invalid(message: String) -> Error {
    Error::invalid_input(message)
}

/// The test ceiling of test commands (`engine.test_ceiling()`): read it, check a proposal, and set it.
/// Handed out by [`TestCeilings::get`](crate::TestCeilings::get).
#[derive(Debug, Clone)]
pub struct TestCeilings {
    pub(crate) core: Core,
}

impl Core {
    /// What no sandbox root may touch: Legate's home and hidden files, the configuration's
    /// `forbidden_directories`, credentials beneath the user's home, the pseudo-filesystems.
    fn protected_roots(&self) -> Protected {
        // `HOME`, or the password database's entry when it is unset: credentials are
        // protected even for a process started with an empty environment.
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .or_else(std::env::home_dir);
        let config = self.config();
        Protected::new(
            &config.hidden_paths(),
            &config.forbidden_directories,
            home.as_deref(),
        )
    }

    /// The current ceiling (the default until one is set) and its sha256.
    pub(crate) fn test_ceiling(&self) -> Result<TestCeilingView> {
        let Some(stored) = self.store().ceiling(CEILING_NAME)? else {
            let policy = TestCeiling::default();
            let sha256 = policy.sha256();
            return Ok(TestCeilingView { policy, sha256 });
        };
        let policy: TestCeiling = serde_json::from_value(stored.document).map_err(|e| {
            Error::caused_by(
                ErrorCode::StoreError,
                "the stored sandbox policy is not a policy this build reads",
                e,
            )
        })?;
        Ok(TestCeilingView {
            policy,
            sha256: stored.sha256,
        })
    }

    /// Validates and normalizes a proposed ceiling (roots checked and canonical, sorted, each
    /// once; bounds): `INVALID_INPUT`, or `FORBIDDEN_DIRECTORY`, naming the first problem.
    pub(crate) fn check_test_ceiling(&self, proposal: TestCeiling) -> Result<TestCeiling> {
        let readable = self.protected_roots();
        let writable = readable.clone().for_writes();
        let norm = |list: &[PathBuf], name: &str, protected: &Protected| -> Result<Vec<PathBuf>> {
            if list.len() > MAX_ROOTS {
                return Err(invalid(format!(
                    "{name} has {} roots; at most {MAX_ROOTS}",
                    list.len()
                )));
            }
            let mut out = list
                .iter()
                .enumerate()
                .map(|(i, r)| {
                    check_root(
                        r,
                        &format!("{name}[{i}]"),
                        protected,
                        ErrorCode::InvalidInput,
                    )
                })
                .collect::<Result<Vec<_>>>()?;
            out.sort();
            out.dedup();
            Ok(out)
        };
        if !(1..=MAX_OUTPUT_CHARS_CAP).contains(&proposal.max_output_chars) {
            return Err(invalid(format!(
                "maxOutputChars must be between 1 and {MAX_OUTPUT_CHARS_CAP} (got {})",
                proposal.max_output_chars
            )));
        }
        Ok(TestCeiling {
            read_roots: norm(&proposal.read_roots, "readRoots", &readable)?,
            write_roots: norm(&proposal.write_roots, "writeRoots", &writable)?,
            ..proposal
        })
    }

    /// Resolves a test's selection against the current ceiling, for a copy of `source`:
    /// every path checked like a ceiling root (and clear of `source`), within the ceiling.
    /// `SANDBOX_SELECTION_DENIED` (or `FORBIDDEN_DIRECTORY`) naming the first problem.
    pub(crate) fn resolve_selection(
        &self,
        selection: &SandboxSelection,
        source: &Path,
    ) -> Result<(TestSandbox, ResolvedSelection, String)> {
        let view = self.test_ceiling()?;
        let ceiling = &view.policy;
        let denied = |m: String| Error::new(ErrorCode::SandboxSelectionDenied, m);
        let protected = self.protected_roots().with_source(source);
        let protected_writes = protected.clone().for_writes();
        let check = |list: &[PathBuf], name: &str, within: &[&PathBuf]| -> Result<Vec<PathBuf>> {
            let protected = if name == "writePaths" {
                &protected_writes
            } else {
                &protected
            };
            if list.len() > MAX_ROOTS {
                return Err(denied(format!(
                    "{name} has {} paths; at most {MAX_ROOTS}",
                    list.len()
                )));
            }
            let mut out = Vec::new();
            for (i, raw) in list.iter().enumerate() {
                let field = format!("sandbox.{name}[{i}]");
                let real = check_root(raw, &field, protected, ErrorCode::SandboxSelectionDenied)?;
                if !within.iter().any(|root| real.starts_with(root)) {
                    return Err(denied(format!(
                        "{field} is outside the sandbox policy's {} (policy sha256 {})",
                        if name == "writePaths" {
                            "writeRoots"
                        } else {
                            "readRoots and writeRoots"
                        },
                        view.sha256
                    )));
                }
                if !out.contains(&real) {
                    out.push(real);
                }
            }
            Ok(out)
        };
        let readable: Vec<&PathBuf> = ceiling
            .read_roots
            .iter()
            .chain(&ceiling.write_roots)
            .collect();
        let writable: Vec<&PathBuf> = ceiling.write_roots.iter().collect();
        let read_paths = check(&selection.read_paths, "readPaths", &readable)?;
        let write_paths = check(&selection.write_paths, "writePaths", &writable)?;
        let network = selection.network.unwrap_or(false);
        if network && !ceiling.network {
            return Err(denied(format!(
                "sandbox.network is true, but the sandbox policy allows no network (policy sha256 {})",
                view.sha256
            )));
        }
        let child_processes = selection.child_processes.unwrap_or(ceiling.child_processes);
        if child_processes && !ceiling.child_processes {
            return Err(denied(format!(
                "sandbox.childProcesses is true, but the sandbox policy allows none (policy sha256 {})",
                view.sha256
            )));
        }
        let max_output_chars = selection
            .max_output_chars
            .unwrap_or(ceiling.max_output_chars);
        if max_output_chars == 0 || max_output_chars > ceiling.max_output_chars {
            return Err(denied(format!(
                "sandbox.maxOutputChars must be between 1 and the policy's {} (got {max_output_chars})",
                ceiling.max_output_chars
            )));
        }
        let resolved = ResolvedSelection {
            read_paths: read_paths.clone(),
            write_paths: write_paths.clone(),
            network,
            child_processes,
            max_output_chars,
        };
        let sandbox = TestSandbox {
            read: read_paths,
            write: write_paths,
            network,
            children: child_processes,
            max_output_chars: max_output_chars as usize,
        };
        Ok((sandbox, resolved, view.sha256))
    }
}

impl TestCeilings {
    /// The current ceiling (the default until one is set) and its sha256.
    pub fn get(&self) -> Result<TestCeilingView> {
        self.core.test_ceiling()
    }

    /// Validates and normalizes a proposed ceiling (roots checked and canonical, sorted, each
    /// once; bounds): `INVALID_INPUT`, or `FORBIDDEN_DIRECTORY`, naming the first problem.
    pub fn check(&self, proposal: TestCeiling) -> Result<TestCeiling> {
        self.core.check_test_ceiling(proposal)
    }

    /// Replaces the ceiling with `proposal` if the current one's sha256 is `expected_sha256`
    /// (`SANDBOX_POLICY_CHANGED` otherwise, before and after any confirmation). In approval
    /// mode `ask`, `confirmer` must answer `Accept { confirm: true }`
    /// (`SANDBOX_POLICY_DECLINED` otherwise, or without a confirmer); in `auto`, validation
    /// alone. Tests started after it returns are checked against the new ceiling.
    pub async fn set(
        &self,
        expected_sha256: &str,
        proposal: TestCeiling,
        confirmer: Option<&dyn CeilingConfirmer>,
    ) -> Result<TestCeilingView> {
        let policy = self.core.check_test_ceiling(proposal)?;
        let proposed = TestCeilingView {
            sha256: policy.sha256(),
            policy,
        };
        let current = self.core.test_ceiling()?;
        if current.sha256 != expected_sha256 {
            return Err(changed(expected_sha256, &current.sha256));
        }
        let approval = self.core.config().review.approval;
        if approval == crate::ApprovalMode::Ask {
            let change = CeilingChange {
                current: current.clone(),
                proposed: proposed.clone(),
            };
            let answer = match confirmer {
                Some(c) => c.confirm_ceiling(&change).await,
                None => Confirmation::Cancel,
            };
            tracing::info!(answer = ?answer, proposed = %proposed.sha256, "sandbox policy change answered");
            if answer != (Confirmation::Accept { confirm: true }) {
                return Err(Error::new(
                    ErrorCode::SandboxPolicyDeclined,
                    format!(
                        "approval mode is ask and the sandbox policy change was not confirmed ({answer:?}); the policy is unchanged (sha256 {})",
                        current.sha256
                    ),
                ));
            }
        }
        let document = serde_json::to_value(&proposed.policy).map_err(|e| {
            Error::caused_by(ErrorCode::Internal, "the policy could not be serialized", e)
        })?;
        let absent = TestCeiling::default().sha256();
        match self.core.store().replace_ceiling(
            CEILING_NAME,
            expected_sha256,
            &absent,
            &document,
            &proposed.sha256,
        )? {
            CeilingReplace::Replaced => {
                tracing::info!(from = %current.sha256, to = %proposed.sha256, approval = ?approval, "sandbox policy replaced");
                Ok(proposed)
            }
            CeilingReplace::Changed { current_sha256 } => {
                Err(changed(expected_sha256, &current_sha256))
            }
        }
    }
}

fn changed(expected: &str, current: &str) -> Error {
    let shown: String = expected
        .chars()
        .take(80)
        .flat_map(char::escape_debug)
        .collect();
    Error::new(
        ErrorCode::SandboxPolicyChanged,
        format!(
            "the sandbox policy is at sha256 {current}, not `{shown}`; read it again with get_sandbox_policy"
        ),
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_the_seeds_initial_configuration_and_its_sha256_is_stable() {
        let d = TestCeiling::default();
        assert!(d.read_roots.is_empty() && d.write_roots.is_empty());
        assert!(!d.network && d.child_processes);
        assert_eq!(d.max_output_chars, 4_000);
        // Omitted fields read as the default.
        let parsed: TestCeiling = serde_json::from_str("{}").unwrap();
        assert_eq!(parsed, d);
        assert_eq!(parsed.sha256(), d.sha256());
        assert_eq!(d.sha256().len(), 64);
        let other = TestCeiling {
            network: true,
            ..TestCeiling::default()
        };
        assert_ne!(other.sha256(), d.sha256());
        assert!(serde_json::from_str::<TestCeiling>(r#"{"readPaths": []}"#).is_err());
    }
}
