//! Repairing zone and capacity-type topology spread after placement.
//!
//! Domains are assigned pod by pod before packing ([`crate::scheduling::topology`]), assuming every
//! pod will be placed. When some cannot be (limits, capacity), their domains end up short; the
//! repair takes placed pods back out of the fullest domain until every skew holds again, which is
//! what upstream's pod-by-pod scheduling would have produced.

use std::collections::BTreeMap;

use crate::scheduling::shapes::{Rule, Scope};
use crate::scheduling::working::Solver;

impl Solver<'_> {
    /// Zone and capacity-type spread was decided pod by pod, assuming every pod would be placed.
    /// When some could not be (limits, capacity), their domains are left short: take placed pods
    /// back out of the fullest domain until the skew holds again, as upstream would never have
    /// placed them.
    pub(crate) fn enforce_spread(
        &mut self,
        ids: &[usize],
        remaining: &mut [u64],
        reasons: &mut BTreeMap<usize, String>,
    ) {
        let mut rules: Vec<(Scope, usize, u32, Option<u32>)> = vec![];
        for &c in ids {
            for rule in &self.classes()[c].rules {
                if let Rule::Spread { scope, selector, max_skew, min_domains } = *rule {
                    if scope != Scope::Hostname && !rules.contains(&(scope, selector, max_skew, min_domains))
                    {
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
                    self.classes()[c].rules.iter().any(|r| {
                        matches!(*r, Rule::Spread { scope: s, selector: x, .. } if s == scope && x == selector)
                    })
                })
                .collect();
            let mut eligible: Vec<String> =
                members.iter().flat_map(|&c| self.classes()[c].eligible(scope).iter().cloned()).collect();
            eligible.sort();
            eligible.dedup();
            loop {
                let counts: Vec<(u32, &String)> =
                    eligible.iter().map(|d| (self.domain_count(scope, selector, d), d)).collect();
                let Some(&(high, fullest)) =
                    counts.iter().max_by(|a, b| a.0.cmp(&b.0).then_with(|| b.1.cmp(a.1)))
                else {
                    break;
                };
                let (mut low, emptiest) = *counts
                    .iter()
                    .min_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(b.1)))
                    .expect("non-empty");
                if min_domains.is_some_and(|m| (eligible.len() as u32) < m) {
                    low = 0;
                }
                if high <= low + max_skew {
                    break;
                }
                let fullest = fullest.clone();
                let emptiest = emptiest.clone();
                let Some(c) = members.iter().copied().rev().find(|&c| {
                    let class = &self.classes()[c];
                    (class.pods.len() as u64) > remaining[c]
                        && class.assignment.domain(scope) == Some(&fullest)
                }) else {
                    break; // the excess comes from running pods; nothing of ours to take back
                };
                self.take_back(c);
                remaining[c] += 1;
                self.release_domain(c);
                reasons.entry(c).or_insert_with(|| {
                    format!(
                        "topology spread on {} (maxSkew {max_skew}) cannot be met: {emptiest} cannot take more matching pods",
                        scope.label()
                    )
                });
            }
        }
    }
}
