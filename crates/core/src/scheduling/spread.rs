//! Repairing zone and capacity-type topology spread after placement.
//!
//! Domains are assigned pod by pod before packing ([`crate::scheduling::topology`]), assuming every
//! pod will be placed. When some cannot be (limits, capacity), their domains end up short; the
//! repair takes placed pods back out of the fullest domain until every skew holds again, which is
//! what upstream's pod-by-pod scheduling would have produced.

use std::collections::BTreeMap;

use crate::scheduling::shapes::{Rule, Scope};
use crate::scheduling::working::Solver;

/// Zone and capacity-type spread was decided pod by pod, assuming every pod would be placed.
/// When some could not be (limits, capacity), their domains are left short: take placed pods
/// of the spread back out of the fullest domain until the skew holds again, as upstream would
/// never have placed them. `ids` are the classes to consider, `remaining` their unplaced pods.
/// Returns whether any pod was taken back.
pub(crate) fn enforce_spread(
    solver: &mut Solver,
    ids: &[usize],
    remaining: &mut [u64],
    reasons: &mut BTreeMap<usize, String>,
) -> bool {
    let mut changed = false;
    let mut rules: Vec<(Scope, usize, u32, Option<u32>)> = vec![];
    for &c in ids {
        for rule in &solver.classes()[c].rules {
            if let Rule::Spread { scope, selector, max_skew, min_domains } = *rule {
                if scope != Scope::Hostname && !rules.contains(&(scope, selector, max_skew, min_domains)) {
                    rules.push((scope, selector, max_skew, min_domains));
                }
            }
        }
    }
    for (scope, selector, max_skew, min_domains) in rules {
        let members: Vec<usize> = ids
            .iter()
            .copied()
            .filter(|&c| {
                solver.classes()[c].rules.iter().any(|r| {
                    matches!(*r, Rule::Spread { scope: s, selector: x, .. } if s == scope && x == selector)
                })
            })
            .collect();
        let mut eligible: Vec<String> =
            members.iter().flat_map(|&c| solver.classes()[c].eligible.of(scope).iter().cloned()).collect();
        eligible.sort();
        eligible.dedup();
        loop {
            let count = |d: &String| solver.domain_count(scope, selector, d);
            let mut low = eligible.iter().map(count).min().unwrap_or(0);
            if min_domains.is_some_and(|m| (eligible.len() as u32) < m) {
                low = 0;
            }
            // A placed pod of the spread breaks it when its own domain holds more than the
            // minimum plus maxSkew (the kube-scheduler's check, made on the final counts). Take
            // one back from the fullest such domain; pods that only count toward the spread
            // (passive members, running pods) stay where they are.
            let over = members
                .iter()
                .filter(|&&c| (solver.classes()[c].pods.len() as u64) > remaining[c])
                .filter_map(|&c| solver.classes()[c].assignment.domain(scope))
                .filter(|d| count(d) > low + max_skew)
                .max_by(|a, b| count(a).cmp(&count(b)).then_with(|| b.cmp(a)))
                .cloned();
            let Some(fullest) = over else { break };
            let emptiest = eligible
                .iter()
                .min_by(|a, b| count(a).cmp(&count(b)).then_with(|| a.cmp(b)))
                .cloned()
                .unwrap_or_default();
            let c = members
                .iter()
                .copied()
                .rev()
                .find(|&c| {
                    let class = &solver.classes()[c];
                    (class.pods.len() as u64) > remaining[c]
                        && class.assignment.domain(scope) == Some(&fullest)
                })
                .expect("the fullest domain was found among these classes");
            solver.take_back(c);
            remaining[c] += 1;
            solver.release_domain(c);
            reasons.entry(c).or_insert_with(|| {
                format!(
                    "topology spread on {} (maxSkew {max_skew}) cannot be met: {emptiest} cannot take more matching pods",
                    solver.selectors().key_of(scope)
                )
            });
            changed = true;
        }
    }
    changed
}
