//! Zone and capacity-type topology: before pods are packed, each pod with a zone- or capacity-type-
//! scoped rule (spread, pod affinity, pod anti-affinity) is given its domain, counting the pods
//! already running and those assigned earlier in the solve. The pod then carries `zone In [z]` (or
//! `capacity-type In [c]`) like any node requirement, and packing never has to reason about
//! topology across nodes.
//!
//! Spread picks the eligible domain with the fewest matching pods (ties by name), as upstream does;
//! with fewer eligible domains than `minDomains` the global minimum counts as 0.
//!
//! A pod without a rule of its own in a scope is still counted by every spread whose selector
//! selects it (upstream's `pkg/controllers/provisioning/scheduling/topology.go` records every
//! scheduled pod in each topology group that selects it): where it lands raises that domain's count
//! for the spread's own pods. Such a *passive member* is therefore given a domain too — the one
//! that keeps each spread selecting it balanced (fewest matching pods first) — instead of landing
//! wherever packing puts it. With every matching pod given a domain this way, the counts of a spread
//! stay within one of each other across its eligible domains as long as every assigned pod is
//! placed, so a spread's own pod is only refused when its rule cannot hold in any eligible domain
//! (anti-affinity, `minDomains`, or a domain short because pods assigned there found no node —
//! limits or capacity — which `crate::scheduling::spread` repairs and reports).

use std::collections::{BTreeMap, BTreeSet};

use crate::scheduling::input::{ExistingNode, SolveInput};
use crate::scheduling::shapes::{Rule, Scope, Selectors};

/// Matching-pod counts per selector and domain, for one scope.
#[derive(Clone, Debug, Default)]
struct ScopeCounts {
    matching: Vec<BTreeMap<String, u32>>,
    repelling: Vec<BTreeMap<String, u32>>,
}

impl ScopeCounts {
    fn new(selectors: usize) -> Self {
        ScopeCounts {
            matching: vec![BTreeMap::new(); selectors],
            repelling: vec![BTreeMap::new(); selectors],
        }
    }

    fn count(&self, selector: usize, domain: &str) -> u32 {
        self.matching[selector].get(domain).copied().unwrap_or(0)
    }

    /// The `candidates` where one more pod keeps every spread of `spreads` within its skew, the
    /// minimum taken over `domains`.
    fn keeping_within<'d, D: AsRef<str>>(
        &self,
        candidates: &[&'d String],
        domains: &[D],
        spreads: &[(usize, u32)],
    ) -> Vec<&'d String> {
        let minimum = |s: usize| domains.iter().map(|d| self.count(s, d.as_ref())).min().unwrap_or(0);
        let minima: Vec<u32> = spreads.iter().map(|&(s, _)| minimum(s)).collect();
        candidates
            .iter()
            .copied()
            .filter(|d| spreads.iter().zip(&minima).all(|(&(s, skew), min)| self.count(s, d) < min + skew))
            .collect()
    }
}

/// Domain counters for every scope but the hostname (the zone, the capacity type and the other
/// label keys rules use).
#[derive(Clone, Debug)]
pub struct Domains {
    counts: BTreeMap<Scope, ScopeCounts>,
    /// Selectors of the spreads in each scope, with their smallest maxSkew: pods they select are
    /// passive members (see the module doc).
    spreads: BTreeMap<Scope, BTreeMap<usize, u32>>,
    /// The key of each scope, for reasons.
    keys: BTreeMap<Scope, String>,
}

/// A pod's assigned domains.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Assignment {
    pub zone: Option<String>,
    pub capacity_type: Option<String>,
    /// The domains of the other label keys the pod was pinned to, by scope.
    pub labels: Vec<(Scope, String)>,
}

impl Assignment {
    pub fn domain(&self, scope: Scope) -> Option<&String> {
        match scope {
            Scope::Zone => self.zone.as_ref(),
            Scope::CapacityType => self.capacity_type.as_ref(),
            _ => self.labels.iter().find(|(s, _)| *s == scope).map(|(_, d)| d),
        }
    }

    /// Every scope the pod was pinned in, with its domain.
    fn pinned(&self) -> impl Iterator<Item = (Scope, &String)> {
        let zone = self.zone.iter().map(|z| (Scope::Zone, z));
        let capacity_type = self.capacity_type.iter().map(|c| (Scope::CapacityType, c));
        zone.chain(capacity_type).chain(self.labels.iter().map(|(s, d)| (*s, d)))
    }
}

impl Domains {
    /// Matching pods counted in a domain (running and assigned).
    pub fn count(&self, scope: Scope, selector: usize, domain: &str) -> u32 {
        self.scope(scope).count(selector, domain)
    }

    /// Counts the running pods by the domains of their nodes in every scope.
    pub fn from_running(input: &SolveInput, selectors: &Selectors) -> Self {
        let mut domains = Domains::empty(selectors);
        let nodes: BTreeMap<&str, &ExistingNode> =
            input.nodes.iter().map(|n| (n.name.as_str(), n.as_ref())).collect();
        let mut matcher = selectors.matcher();
        let scopes = selectors.domain_scopes();
        for pod in &input.running {
            let Some(node) = pod.node_name.as_deref().and_then(|name| nodes.get(name)) else { continue };
            let matched = matcher.matching(pod);
            for &scope in &scopes {
                let Some(domain) = node.labels.get(selectors.key_of(scope)) else { continue };
                let counts = domains.scope_mut(scope);
                for &s in matched {
                    *counts.matching[s].entry(domain.to_string()).or_default() += 1;
                }
                for t in &pod.anti_affinity {
                    if selectors.scope_of(&t.topology_key) == Some(scope) {
                        if let Some(s) = selectors.find(&t.namespaces, &t.selector) {
                            *counts.repelling[s].entry(domain.to_string()).or_default() += 1;
                        }
                    }
                }
            }
        }
        domains
    }

    /// Counts the running pods of one node whose domain in `scope` is `domain`: `matching[s]` of
    /// them match selector `s`, and `repelling` holds `(selector, count)` for their anti-affinity
    /// terms in that scope. The same counts as [`Self::from_running`] gives that node's pods.
    pub(crate) fn add_node(
        &mut self,
        scope: Scope,
        domain: &str,
        matching: &[u32],
        repelling: impl Iterator<Item = (usize, u32)>,
    ) {
        let counts = self.scope_mut(scope);
        let add = |map: &mut BTreeMap<String, u32>, n: u32| match map.get_mut(domain) {
            Some(c) => *c += n,
            None => {
                map.insert(domain.to_string(), n);
            }
        };
        for (s, &n) in matching.iter().enumerate().filter(|(_, n)| **n > 0) {
            add(&mut counts.matching[s], n);
        }
        for (s, n) in repelling {
            add(&mut counts.repelling[s], n);
        }
    }

    pub(crate) fn empty(selectors: &Selectors) -> Self {
        let n = selectors.list.len();
        let scopes = selectors.domain_scopes();
        Domains {
            counts: scopes.iter().map(|&s| (s, ScopeCounts::new(n))).collect(),
            spreads: scopes.iter().map(|&s| (s, BTreeMap::new())).collect(),
            keys: scopes.iter().map(|&s| (s, selectors.key_of(s).to_string())).collect(),
        }
    }

    /// Registers the spread rules among `rules` (in every scope but the hostname), so that pods
    /// their selectors select are given a domain that keeps them balanced.
    pub fn watch_spreads(&mut self, rules: &[Rule]) {
        for rule in rules {
            if let Rule::Spread { scope, selector, max_skew, .. } = *rule {
                let Some(spreads) = self.spreads.get_mut(&scope) else { continue };
                let skew = spreads.entry(selector).or_insert(max_skew);
                *skew = (*skew).min(max_skew);
            }
        }
    }

    /// The spreads in `scope` that count a pod matched by `matched_by`, other than `except` (the
    /// pod's own), with their maxSkew.
    fn spreads_counting(&self, scope: Scope, matched_by: &[usize], except: &[usize]) -> Vec<(usize, u32)> {
        let Some(spreads) = self.spreads.get(&scope) else { return vec![] };
        matched_by
            .iter()
            .filter(|s| !except.contains(s))
            .filter_map(|s| spreads.get(s).map(|skew| (*s, *skew)))
            .collect()
    }

    fn scope_mut(&mut self, scope: Scope) -> &mut ScopeCounts {
        self.counts.get_mut(&scope).expect("every domain scope has counters")
    }

    fn scope(&self, scope: Scope) -> &ScopeCounts {
        self.counts.get(&scope).expect("every domain scope has counters")
    }

    /// Picks the domains for one pod and records it. Zone and capacity type are chosen together:
    /// zones in order of preference, each with the capacity types offered in it, so a pod is never
    /// pinned to a pair no offering or node has (spot in a zone that sells only on-demand). Errors
    /// explain which rule cannot be met.
    pub fn assign(
        &mut self,
        matched_by: &[usize],
        rules: &[Rule],
        eligible: &EligibleDomains,
    ) -> Result<Assignment, String> {
        let zones = self.rank(Scope::Zone, matched_by, rules, &eligible.zones, &eligible.zones)?;
        let mut first_error = None;
        let mut chosen = None;
        for zone in zones {
            let offered = eligible.capacity_types_in(zone.as_deref());
            match self.rank(Scope::CapacityType, matched_by, rules, &eligible.capacity_types, &offered) {
                Ok(ranked) => {
                    chosen = Some((zone, ranked.into_iter().next().flatten()));
                    break;
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        let Some((zone, capacity_type)) = chosen else {
            return Err(first_error.expect("every zone was tried"));
        };
        // The other label keys are chosen on their own: a key a NodePool defines does not depend on
        // the zone or capacity type (a pool that ties them together can leave a pod without a node,
        // and packing reports it).
        let mut labels = vec![];
        for (&scope, domains) in &eligible.labels {
            if let Some(domain) =
                self.rank(scope, matched_by, rules, domains, domains)?.into_iter().next().flatten()
            {
                labels.push((scope, domain));
            }
        }
        let assignment = Assignment { zone, capacity_type, labels };
        for (scope, domain) in assignment.pinned() {
            let counts = self.scope_mut(scope);
            for &s in matched_by {
                *counts.matching[s].entry(domain.clone()).or_default() += 1;
            }
            for rule in rules {
                if let Rule::AntiAffinity { scope: rs, selector } = *rule {
                    if rs == scope {
                        *counts.repelling[selector].entry(domain.clone()).or_default() += 1;
                    }
                }
            }
        }
        Ok(assignment)
    }

    /// Forgets one pod recorded by [`Domains::assign`] (it could not be placed after all).
    pub fn unassign(&mut self, matched_by: &[usize], rules: &[Rule], assignment: &Assignment) {
        for (scope, domain) in assignment.pinned() {
            let counts = self.scope_mut(scope);
            for &s in matched_by {
                if let Some(c) = counts.matching[s].get_mut(domain) {
                    *c = c.saturating_sub(1);
                }
            }
            for rule in rules {
                if let Rule::AntiAffinity { scope: rs, selector } = *rule {
                    if rs == scope {
                        if let Some(c) = counts.repelling[selector].get_mut(domain) {
                            *c = c.saturating_sub(1);
                        }
                    }
                }
            }
        }
    }

    /// The domains a pod may take in `scope`, best first; `[None]` when the pod is not pinned in
    /// this scope. `eligible` are the domains its requirements allow (they define a spread's
    /// minimum, as upstream counts them), `offered` those it may still take given its other domain.
    fn rank(
        &self,
        scope: Scope,
        matched_by: &[usize],
        rules: &[Rule],
        eligible: &[String],
        offered: &[String],
    ) -> Result<Vec<Option<String>>, String> {
        let scoped: Vec<&Rule> = rules.iter().filter(|r| r.scope() == scope).collect();
        let counts = self.scope(scope);
        let repelled =
            |d: &String| matched_by.iter().any(|&s| counts.repelling[s].get(d).is_some_and(|c| *c > 0));
        // Existing pods' anti-affinity matters even for pods without rules of their own, but only
        // pods with rules in this scope, or counted by a spread in it, are pinned to a domain.
        if scoped.is_empty() {
            return Ok(self.rank_passive(scope, matched_by, offered, &repelled));
        }
        let what = &self.keys[&scope];
        if offered.is_empty() && matches!(scope, Scope::Label(_)) {
            return Err(format!(
                "no NodePool, instance type or node the pod may use defines the topology key {what}"
            ));
        }
        let mut candidates: Vec<&String> = offered.iter().filter(|d| !repelled(d)).collect();
        if candidates.is_empty() {
            return Err(format!(
                "every {what} allowed for the pod holds a pod whose anti-affinity excludes it"
            ));
        }
        let mut spread_selectors = vec![];
        for rule in scoped {
            match *rule {
                Rule::AntiAffinity { selector, .. } => {
                    candidates.retain(|d| counts.count(selector, d) == 0);
                    if candidates.is_empty() {
                        return Err(format!("required pod anti-affinity on {what}: every allowed domain already has a matching pod"));
                    }
                }
                Rule::Affinity { selector, self_matching, .. } => {
                    let with: Vec<&String> =
                        candidates.iter().copied().filter(|d| counts.count(selector, d) > 0).collect();
                    let anywhere = counts.matching[selector].values().any(|c| *c > 0);
                    if !with.is_empty() {
                        candidates = with;
                    } else if !self_matching || anywhere {
                        return Err(format!(
                            "required pod affinity on {what}: no allowed domain has a matching pod"
                        ));
                    }
                }
                Rule::Spread { selector, max_skew, min_domains, .. } => {
                    let mut global_min =
                        eligible.iter().map(|d| counts.count(selector, d)).min().unwrap_or(0);
                    if min_domains.is_some_and(|m| (eligible.len() as u32) < m) {
                        global_min = 0;
                    }
                    let own = u32::from(matched_by.binary_search(&selector).is_ok());
                    candidates.retain(|d| counts.count(selector, d) + own <= global_min + max_skew);
                    if candidates.is_empty() {
                        return Err(format!(
                            "topology spread on {what} (maxSkew {max_skew}) cannot be met in the allowed domains"
                        ));
                    }
                    spread_selectors.push(selector);
                }
            }
        }
        // The pod may also be a passive member of other spreads in this scope: among the domains its
        // own rules allow, those that keep those spreads within their skew too come first.
        let passive = self.spreads_counting(scope, matched_by, &spread_selectors);
        let within = counts.keeping_within(&candidates, eligible, &passive);
        let load = |d: &String| {
            spread_selectors.iter().map(|&s| counts.count(s, d)).sum::<u32>()
                + passive.iter().map(|&(s, _)| counts.count(s, d)).sum::<u32>()
        };
        // Stable: ties keep the order of `offered`.
        candidates.sort_by_key(|d| (!within.contains(d), load(d)));
        Ok(candidates.into_iter().map(|d| Some(d.clone())).collect())
    }

    /// The domains for a pod with no rule of its own in `scope` that spreads in that scope count,
    /// best first: those where it keeps every such spread within its skew, least loaded first (ties
    /// by name), then the others. `[None]` when no spread counts the pod.
    fn rank_passive(
        &self,
        scope: Scope,
        matched_by: &[usize],
        offered: &[String],
        repelled: &dyn Fn(&String) -> bool,
    ) -> Vec<Option<String>> {
        let watching = self.spreads_counting(scope, matched_by, &[]);
        if watching.is_empty() {
            return vec![None];
        }
        let counts = self.scope(scope);
        let candidates: Vec<&String> = offered.iter().filter(|d| !repelled(d)).collect();
        let within = counts.keeping_within(&candidates, &candidates, &watching);
        let load = |d: &String| watching.iter().map(|&(s, _)| counts.count(s, d)).sum::<u32>();
        let mut ranked = candidates;
        ranked.sort_by_key(|d| (!within.contains(d), load(d)));
        if ranked.is_empty() {
            // Nowhere to be counted: packing finds the pod no node either and reports why.
            return vec![None];
        }
        ranked.into_iter().map(|d| Some(d.clone())).collect()
    }
}

/// The zones and capacity types a pod's requirements reach through offerings or existing nodes,
/// and which capacity types each zone offers.
#[derive(Clone, Debug, Default)]
pub struct EligibleDomains {
    pub zones: Vec<String>,
    pub capacity_types: Vec<String>,
    /// (zone, capacity type) pairs that some offering or labelled node provides.
    pub pairs: BTreeSet<(String, String)>,
    /// The domains of every [`Scope::Label`] scope (empty when nothing defines its key).
    pub labels: BTreeMap<Scope, Vec<String>>,
}

impl EligibleDomains {
    /// The domains of `scope` (none for the hostname, which packing decides).
    pub fn of(&self, scope: Scope) -> &[String] {
        match scope {
            Scope::Zone => &self.zones,
            Scope::CapacityType => &self.capacity_types,
            Scope::Hostname => &[],
            Scope::Label(_) => self.labels.get(&scope).map_or(&[], Vec::as_slice),
        }
    }

    /// The capacity types offered in `zone` (every eligible one when the pod has no zone), the
    /// scarcest first: the one offered in fewer zones is taken while it can be, so the zones that
    /// offer only the other still find their pods a balanced capacity type (spot is commonly sold in
    /// fewer zones than on-demand).
    fn capacity_types_in(&self, zone: Option<&str>) -> Vec<String> {
        let mut offered: Vec<String> = match zone {
            None => self.capacity_types.clone(),
            Some(z) => self.pairs.iter().filter(|(pz, _)| pz == z).map(|(_, c)| c.clone()).collect(),
        };
        let zones_offering = |c: &String| self.pairs.iter().filter(|(_, pc)| pc == c).count();
        offered.sort_by_key(|c| (zones_offering(c), c.clone()));
        offered
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One selector, and the label key `rack` as [`Scope::Label`]`(0)`.
    fn one_selector() -> Selectors {
        let mut selectors = Selectors::default();
        selectors
            .intern(crate::scheduling::shapes::Selector { namespaces: vec![], labels: Default::default() });
        selectors.intern_key("rack");
        selectors
    }

    fn zones() -> EligibleDomains {
        only_zones(&["z-1", "z-2", "z-3"])
    }

    fn only_zones(zones: &[&str]) -> EligibleDomains {
        EligibleDomains { zones: zones.iter().map(|z| z.to_string()).collect(), ..Default::default() }
    }

    #[test]
    fn spread_round_robins_over_zones() {
        let mut d = Domains::empty(&one_selector());
        let rule = Rule::Spread { scope: Scope::Zone, selector: 0, max_skew: 1, min_domains: None };
        let picks: Vec<String> =
            (0..6).map(|_| d.assign(&[0], &[rule], &zones()).unwrap().zone.unwrap()).collect();
        assert_eq!(picks, ["z-1", "z-2", "z-3", "z-1", "z-2", "z-3"]);
    }

    #[test]
    fn self_affinity_follows_the_first_pod() {
        let mut d = Domains::empty(&one_selector());
        let rule = Rule::Affinity { scope: Scope::Zone, selector: 0, self_matching: true };
        let eligible = only_zones(&["z-2", "z-3"]);
        for _ in 0..3 {
            assert_eq!(d.assign(&[0], &[rule], &eligible).unwrap().zone.as_deref(), Some("z-2"));
        }
    }

    #[test]
    fn anti_affinity_uses_each_zone_once() {
        let mut d = Domains::empty(&one_selector());
        let rule = Rule::AntiAffinity { scope: Scope::Zone, selector: 0 };
        for _ in 0..3 {
            assert!(d.assign(&[0], &[rule], &zones()).is_ok());
        }
        assert!(d.assign(&[0], &[rule], &zones()).is_err());
    }

    #[test]
    fn min_domains_caps_each_domain() {
        let mut d = Domains::empty(&one_selector());
        let rule = Rule::Spread { scope: Scope::Zone, selector: 0, max_skew: 1, min_domains: Some(5) };
        for _ in 0..3 {
            assert!(d.assign(&[0], &[rule], &zones()).is_ok());
        }
        assert!(d.assign(&[0], &[rule], &zones()).is_err());
    }

    #[test]
    fn a_zone_that_does_not_sell_the_needed_capacity_type_is_skipped() {
        // Spot in z-1 and z-2 only, on-demand everywhere; both spreads select the same pods.
        let mut eligible = zones();
        eligible.capacity_types = vec!["on-demand".into(), "spot".into()];
        for z in ["z-1", "z-2", "z-3"] {
            eligible.pairs.insert((z.into(), "on-demand".into()));
        }
        for z in ["z-1", "z-2"] {
            eligible.pairs.insert((z.into(), "spot".into()));
        }
        let mut d = Domains::empty(&one_selector());
        let by_zone = Rule::Spread { scope: Scope::Zone, selector: 0, max_skew: 1, min_domains: None };
        let by_capacity =
            Rule::Spread { scope: Scope::CapacityType, selector: 0, max_skew: 1, min_domains: None };
        let mut picks = vec![];
        for _ in 0..6 {
            let a = d.assign(&[0], &[by_zone, by_capacity], &eligible).unwrap();
            let pair = (a.zone.unwrap(), a.capacity_type.unwrap());
            assert!(eligible.pairs.contains(&pair), "{pair:?} is offered nowhere");
            picks.push(pair);
        }
        let spot = picks.iter().filter(|(_, c)| c == "spot").count();
        assert_eq!(spot, 3, "{picks:?}");
        for z in ["z-1", "z-2", "z-3"] {
            assert_eq!(picks.iter().filter(|(pz, _)| pz == z).count(), 2, "{picks:?}");
        }
    }

    #[test]
    fn a_spread_on_another_label_key_round_robins_over_its_domains() {
        let rack = Scope::Label(0);
        let mut eligible = zones();
        eligible.labels.insert(rack, vec!["r-a".into(), "r-b".into()]);
        let mut d = Domains::empty(&one_selector());
        let rule = Rule::Spread { scope: rack, selector: 0, max_skew: 1, min_domains: None };
        let picks: Vec<String> = (0..4)
            .map(|_| d.assign(&[0], &[rule], &eligible).unwrap().domain(rack).unwrap().clone())
            .collect();
        assert_eq!(picks, ["r-a", "r-b", "r-a", "r-b"]);
        // The pods were not pinned to a zone: no rule of theirs is zonal.
        assert_eq!(d.assign(&[0], &[rule], &eligible).unwrap().zone, None);
    }

    #[test]
    fn a_rule_on_a_key_nothing_defines_names_the_key() {
        let rack = Scope::Label(0);
        let mut eligible = zones();
        eligible.labels.insert(rack, vec![]);
        let mut d = Domains::empty(&one_selector());
        let rule = Rule::AntiAffinity { scope: rack, selector: 0 };
        let why = d.assign(&[0], &[rule], &eligible).unwrap_err();
        assert!(why.contains("defines the topology key rack"), "{why}");
    }
}
