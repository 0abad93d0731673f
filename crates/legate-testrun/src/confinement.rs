//! A test's confinement selection as the runner applies it: the roots it may read and write
//! besides the copy and scratch directory, whether it may reach the network and start child
//! processes, and how much of its output is kept (in characters).
//!
//! This module owns translating a selection the engine already checked against the sandbox
//! policy into a [`Confinement`], and stating what the kernel holds of it. It never checks a
//! selection against the policy (the engine's `test_ceiling` does) and never widens what an
//! unselected test gets: without a selection, a test runs as `run` describes.

use crate::run::Confined;
use legate_confine::{Children, Confinement, EgressHandoff, Requirement};
use legate_core::Error;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A checked selection: canonical roots outside the source project and Legate's home.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestConfinement {
    /// Directories (or files) the command may read and execute beneath, besides the system
    /// directories, the copy and the scratch directory. Reads anywhere else are refused.
    pub read: Vec<PathBuf>,
    /// Directories (or files) it may write (and read) beneath, besides the copy and the
    /// scratch directory.
    pub write: Vec<PathBuf>,
    /// Whether TCP `bind` and `connect` are allowed (Legate's own ports stay refused). In a
    /// network namespace of its own the command reaches only its loopback and, when the
    /// runner is given a [`crate::TestEgress`], Legate's proxy under the network policy.
    pub network: bool,
    /// Whether it may start child processes.
    pub children: bool,
    /// How many characters of each stream are kept.
    pub max_output_chars: usize,
}

/// Registers on `cmd` the confinement a selected test runs under (see the module docs) and
/// returns what will hold; `CONFINEMENT_UNAVAILABLE` as [`crate::confine`] says. With
/// `egress` (and a selection granting the network), the command's network namespace holds a
/// listener on its `127.0.0.1:`[`legate_egress::PROXY_PORT`], handed back here: Legate's
/// proxy is then its one way out (`network: proxy`). Without a network namespace of its own
/// there is no listener and the granted network is the host's (`network: allowed`).
pub(crate) fn confine_selected(
    cmd: &mut Command,
    copy: &Path,
    scratch: &Path,
    requirement: Requirement,
    hidden: &[PathBuf],
    selected: &TestConfinement,
    egress: bool,
) -> Result<
    (
        Confined,
        Option<EgressHandoff>,
        Option<legate_confine::LimitGroup>,
    ),
    Error,
> {
    let mut c = hidden
        .iter()
        .fold(Confinement::new(), |c, p| c.hide(p))
        .allow_write(copy)
        .allow_write(scratch)
        .without_terminals()
        .restrict_reads();
    for w in &selected.write {
        c = c.allow_write_strict(w);
    }
    for r in &selected.read {
        c = c.allow_read(r);
    }
    if !selected.network {
        c = c.deny_network();
    } else if egress {
        c = c.egress(legate_egress::PROXY_PORT);
    }
    if !selected.children {
        c = c.deny_children();
    }
    let mut prepared = c
        .limit(legate_core::ProcessLimits::default())
        .prepare(requirement)?;
    let handoff = prepared.take_egress();
    let limits = prepared.take_limits();
    let network = match (selected.network, handoff.is_some()) {
        (true, true) => PROXY,
        (true, false) => "allowed",
        (false, _) => prepared.network().as_str(),
    };
    let confined = Confined {
        confinement: prepared.enforcement().as_str(),
        network,
        isolation: prepared.isolation(),
        reads: if prepared.reads_restricted() {
            "restricted"
        } else {
            "open"
        },
        children: prepared.children().as_str(),
        landlock_abi: Confinement::landlock_abi(),
    };
    tracing::debug!(
        reads = confined.reads,
        children = confined.children,
        network = confined.network,
        read_roots = selected.read.len(),
        write_roots = selected.write.len(),
        "selected test sandbox prepared"
    );
    legate_confine::confine_command(cmd, prepared);
    Ok((confined, handoff, limits))
}

/// What the evidence's `network` says of a test whose only way out is Legate's proxy.
pub(crate) const PROXY: &str = "proxy";

/// What an unselected test's children field says.
pub(crate) fn children_allowed() -> &'static str {
    Children::Allowed.as_str()
}

/// Cuts `s` to at most `max` characters; whether anything was cut.
pub(crate) fn truncate_chars(s: &mut String, max: usize) -> bool {
    match s.char_indices().nth(max) {
        Some((end, _)) => {
            s.truncate(end);
            true
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn truncation_keeps_at_most_max_chars_on_a_boundary(s in "\\PC{0,64}", max in 0usize..80) {
            let mut t = s.clone();
            let cut = truncate_chars(&mut t, max);
            prop_assert!(t.chars().count() <= max);
            prop_assert!(s.starts_with(&t));
            prop_assert_eq!(cut, s.chars().count() > max);
        }
    }
}
