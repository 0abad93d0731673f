//! Plan updates as what changed: the hunks that turn one plan into the next
//! ([`plan_diff`]), their exact, bounds-checked application ([`plan_apply`]), and the
//! keyframe policy that keeps a log of plans linear in its changes ([`PlanTrail`]).
//!
//! An ACP plan update replaces the whole plan, so a task whose plan grows by one step per
//! update costs the square of its plan when each update is kept whole. Kept as hunks, with a
//! whole plan (a keyframe) whenever the hunks since the last one outgrow the plan itself,
//! the bytes stay linear in what changed and any plan rebuilds from at most one keyframe and
//! changes no bigger than it. This module never decides where plans are kept or sent (the
//! store and the federation relay do), and never trusts a hunk: one that does not fit its
//! plan is refused, never applied in part.

use crate::PlanEntry;
use serde::{Deserialize, Serialize};

/// One change to a plan: at entry `at` of the plan as the hunks before it left it, `del`
/// entries are removed and `ins` put in their place.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanHunk {
    /// Where the change starts.
    pub at: usize,
    /// How many entries it removes.
    #[serde(default, skip_serializing_if = "crate::wire_skip::is_zero")]
    pub del: usize,
    /// The entries it puts there.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ins: Vec<PlanEntry>,
}

/// A hunk that does not fit the plan it is applied to (a corrupt record or a hostile peer).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a plan change at entry {at} removing {del} does not fit a plan of {len} entries")]
pub struct PlanMisfit {
    /// Where the hunk started.
    pub at: usize,
    /// How many entries it removed.
    pub del: usize,
    /// How long the plan was.
    pub len: usize,
}

/// The hunks that turn `old` into `new`: nothing when they are equal; the entries that
/// differ, run by run, when both are as long (a step's status changed); otherwise one hunk
/// between their common beginning and end (steps added, removed or replaced).
pub fn plan_diff(old: &[PlanEntry], new: &[PlanEntry]) -> Vec<PlanHunk> {
    let prefix = old.iter().zip(new).take_while(|(a, b)| a == b).count();
    let (old_rest, new_rest) = (&old[prefix..], &new[prefix..]);
    let suffix = old_rest
        .iter()
        .rev()
        .zip(new_rest.iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    let old_mid = &old_rest[..old_rest.len() - suffix];
    let new_mid = &new_rest[..new_rest.len() - suffix];
    if old_mid.is_empty() && new_mid.is_empty() {
        return Vec::new();
    }
    if old_mid.len() != new_mid.len() {
        return vec![PlanHunk {
            at: prefix,
            del: old_mid.len(),
            ins: new_mid.to_vec(),
        }];
    }
    let mut hunks: Vec<PlanHunk> = Vec::new();
    for (i, (a, b)) in old_mid.iter().zip(new_mid).enumerate() {
        if a == b {
            continue;
        }
        let at = prefix + i;
        match hunks.last_mut() {
            Some(h) if h.at + h.del == at => {
                h.del += 1;
                h.ins.push(b.clone());
            }
            _ => hunks.push(PlanHunk {
                at,
                del: 1,
                ins: vec![b.clone()],
            }),
        }
    }
    hunks
}

/// Applies `hunks` to `plan` in order, in one pass (linear in the plan and the hunks,
/// whatever a hostile peer sends): each hunk must start at or after where the one before it
/// ended, as [`plan_diff`] makes them. A hunk that does not fit leaves `plan` as it was.
pub fn plan_apply(plan: &mut Vec<PlanEntry>, hunks: &[PlanHunk]) -> Result<(), PlanMisfit> {
    if hunks.is_empty() {
        return Ok(());
    }
    let mut out: Vec<PlanEntry> = Vec::with_capacity(plan.len());
    // `out` followed by `plan[taken..]` is the plan as the hunks so far left it.
    let mut taken = 0;
    for h in hunks {
        let len = out.len() + (plan.len() - taken);
        let misfit = PlanMisfit {
            at: h.at,
            del: h.del,
            len,
        };
        let Some(keep) = h.at.checked_sub(out.len()) else {
            return Err(misfit);
        };
        let fits = keep
            .checked_add(h.del)
            .is_some_and(|n| n <= plan.len() - taken);
        if !fits {
            return Err(misfit);
        }
        out.extend_from_slice(&plan[taken..taken + keep]);
        taken += keep + h.del;
        out.extend_from_slice(&h.ins);
    }
    out.extend_from_slice(&plan[taken..]);
    *plan = out;
    Ok(())
}

/// The bytes `value` takes as JSON, counted without building it.
pub fn json_size<T: Serialize + ?Sized>(value: &T) -> u64 {
    struct Count(u64);
    impl std::io::Write for Count {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0 += b.len() as u64;
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing to a counter cannot fail; a value that cannot be encoded counts what it wrote.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// How one plan of a log is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanStep {
    /// Whole: a keyframe (the first plan, or changes that would outgrow the plan).
    Whole,
    /// As the hunks from the plan before it; `bytes` is their size as JSON.
    Changes {
        /// The hunks.
        hunks: Vec<PlanHunk>,
        /// Their size as JSON.
        bytes: u64,
    },
}

/// A log of plans as its writer sees it: the last plan, and the bytes of changes kept since
/// the last keyframe.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlanTrail {
    /// The last plan of the log.
    plan: Vec<PlanEntry>,
    /// The bytes of changes kept since the last keyframe (0 right after one).
    pub since: u64,
    /// Whether the log holds a plan yet (the first is always whole).
    pub started: bool,
    /// The size of `plan` as JSON, when known (kept up to date from the changes, so that a
    /// step costs what changed, not another encoding of the whole plan).
    plan_bytes: Option<u64>,
}

/// The bytes plan `entry` adds to its plan as JSON: its own, and the comma before it but for
/// the first (an empty plan is `[]`, 2 bytes).
fn entry_bytes(entry: &PlanEntry) -> u64 {
    json_size(entry) + 1
}

impl PlanTrail {
    /// A log that goes on from `plan`, kept with `since` bytes of changes after its keyframe
    /// (a log rebuilt from where it was stored).
    pub fn resumed(plan: Vec<PlanEntry>, since: u64) -> Self {
        Self {
            plan,
            since,
            started: true,
            plan_bytes: None,
        }
    }

    /// The last plan of the log.
    pub fn plan(&self) -> &[PlanEntry] {
        &self.plan
    }

    /// The size of the log's last plan as JSON.
    pub fn plan_bytes(&mut self) -> u64 {
        match self.plan_bytes {
            Some(b) => b,
            None => {
                let b = json_size(&self.plan);
                self.plan_bytes = Some(b);
                b
            }
        }
    }

    /// How to keep `next` after the log's last plan, and the log moved on to it. Changes are
    /// kept while those since the last keyframe, with these, stay within the size of `next`
    /// whole; past that `next` is a keyframe. So keyframes cost at most what the changes
    /// before them did, and a plan rebuilds from changes no bigger than its keyframe.
    ///
    /// Costs a comparison of the two plans and the work of what changed: the log's plan is
    /// moved on by the hunks in place, and its size as JSON from theirs.
    pub fn step(&mut self, next: &[PlanEntry]) -> PlanStep {
        if !self.started {
            self.started = true;
            self.since = 0;
            self.plan.clear();
            self.plan.extend_from_slice(next);
            self.plan_bytes = None;
            return PlanStep::Whole;
        }
        let hunks = plan_diff(&self.plan, next);
        let old_bytes = self.plan_bytes();
        let next_bytes = self.move_on(&hunks, next, old_bytes);
        let bytes = json_size(&hunks);
        if self.since.saturating_add(bytes) <= next_bytes {
            self.since += bytes;
            PlanStep::Changes { hunks, bytes }
        } else {
            self.since = 0;
            PlanStep::Whole
        }
    }

    /// The log's plan moved on to `next` by `hunks` (its diff from the plan), in place; the
    /// size of `next` as JSON, from `old_bytes`, the plan's.
    fn move_on(&mut self, hunks: &[PlanHunk], next: &[PlanEntry], old_bytes: u64) -> u64 {
        let mut bytes = old_bytes;
        let (old_len, new_len) = (self.plan.len() as u64, next.len() as u64);
        // Every entry counts a comma before it; the first has none (`[]` and `[x]`).
        if old_len > 0 {
            bytes += 1;
        }
        for h in hunks {
            let gone: u64 = self.plan[h.at..h.at + h.del].iter().map(entry_bytes).sum();
            let come: u64 = h.ins.iter().map(entry_bytes).sum();
            bytes = bytes - gone + come;
            self.plan.splice(h.at..h.at + h.del, h.ins.iter().cloned());
        }
        if new_len > 0 {
            bytes -= 1;
        }
        debug_assert_eq!(self.plan, next);
        self.plan_bytes = Some(bytes);
        bytes
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn entry(content: &str, status: &str) -> PlanEntry {
        PlanEntry {
            content: content.into(),
            priority: "medium".into(),
            status: status.into(),
        }
    }

    fn arb_plan() -> impl Strategy<Value = Vec<PlanEntry>> {
        // Few distinct values, so that plans share entries and runs as real ones do.
        let e = ("[abc]{0,2}", prop::sample::select(vec!["pending", "done"]))
            .prop_map(|(c, s)| entry(&c, s));
        prop::collection::vec(e, 0..12)
    }

    #[test]
    fn a_status_change_is_one_entry_and_a_growing_plan_only_its_new_steps() {
        let a = vec![entry("x", "pending"), entry("y", "pending")];
        let b = vec![entry("x", "done"), entry("y", "pending")];
        assert_eq!(
            plan_diff(&a, &b),
            [PlanHunk {
                at: 0,
                del: 1,
                ins: vec![entry("x", "done")]
            }]
        );
        let mut c = b.clone();
        c.push(entry("z", "pending"));
        assert_eq!(
            plan_diff(&b, &c),
            [PlanHunk {
                at: 2,
                del: 0,
                ins: vec![entry("z", "pending")]
            }]
        );
        assert!(plan_diff(&c, &c).is_empty());
    }

    #[test]
    fn a_hunk_that_does_not_fit_is_refused_and_changes_nothing() {
        let mut plan = vec![entry("x", "pending")];
        let hunks = [
            PlanHunk {
                at: 0,
                del: 1,
                ins: vec![],
            },
            PlanHunk {
                at: 0,
                del: 1,
                ins: vec![],
            },
        ];
        assert_eq!(
            plan_apply(&mut plan, &hunks),
            Err(PlanMisfit {
                at: 0,
                del: 1,
                len: 0
            })
        );
        assert_eq!(plan, [entry("x", "pending")]);
        let huge = PlanHunk {
            at: usize::MAX,
            del: usize::MAX,
            ins: vec![],
        };
        assert!(plan_apply(&mut plan, &[huge]).is_err());
        // Hunks out of order are refused (a peer cannot make the work quadratic).
        let mut plan: Vec<PlanEntry> = (0..4).map(|i| entry(&i.to_string(), "x")).collect();
        let back = [
            PlanHunk {
                at: 2,
                del: 1,
                ins: vec![],
            },
            PlanHunk {
                at: 0,
                del: 1,
                ins: vec![],
            },
        ];
        assert!(plan_apply(&mut plan, &back).is_err());
        assert_eq!(plan.len(), 4);
    }

    #[test]
    fn a_growing_plan_kept_as_a_trail_costs_linear_bytes() {
        // The revisor's shape: n steps, each set in progress then completed, plan whole each time.
        let bytes = |n: usize| {
            let mut plan: Vec<PlanEntry> = (0..n)
                .map(|i| entry(&format!("step {i}"), "pending"))
                .collect();
            let mut trail = PlanTrail::default();
            let mut total = 0;
            for i in 0..n {
                for s in ["in_progress", "completed"] {
                    plan[i].status = s.into();
                    total += match trail.step(&plan) {
                        PlanStep::Whole => json_size(&plan),
                        PlanStep::Changes { bytes, .. } => bytes,
                    };
                }
            }
            total
        };
        let (small, large) = (bytes(400), bytes(800));
        assert!(large <= small * 5 / 2, "{small} then {large}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn any_sequence_of_plans_rebuilds_exactly(plans in prop::collection::vec(arb_plan(), 1..16)) {
            let mut trail = PlanTrail::default();
            let mut rebuilt: Vec<PlanEntry> = Vec::new();
            for plan in &plans {
                match trail.step(plan) {
                    PlanStep::Whole => rebuilt = plan.clone(),
                    PlanStep::Changes { hunks, bytes } => {
                        prop_assert_eq!(bytes, json_size(&hunks));
                        plan_apply(&mut rebuilt, &hunks).unwrap();
                    }
                }
                prop_assert_eq!(&rebuilt, plan);
                prop_assert!(trail.since <= json_size(plan));
                // The size kept from the hunks is the plan's, as a whole encoding counts it.
                prop_assert_eq!(trail.plan(), plan.as_slice());
                prop_assert_eq!(trail.plan_bytes(), json_size(plan));
            }
        }

        #[test]
        fn a_diff_applies_to_its_old_plan_and_gives_the_new(old in arb_plan(), new in arb_plan()) {
            let hunks = plan_diff(&old, &new);
            let mut plan = old.clone();
            plan_apply(&mut plan, &hunks).unwrap();
            prop_assert_eq!(plan, new);
        }
    }
}
