//! A node being filled by the solver (existing, in flight, or new) and the per-node rules: capacity,
//! hostname-scoped pod affinity, anti-affinity (both directions) and topology spread, and host ports.
//!
//! Counters are per interned selector ([`crate::scheduling::shapes::Selectors`]), so a check costs a
//! few vector reads whatever the number of pods on the node.

use crate::scheduling::input::HostPort;
use crate::scheduling::shapes::{copies_that_fit, Rule, Scope};

/// What a class of pods brings to a node, as far as per-node rules go.
#[derive(Clone, Debug, Default)]
pub struct PodTraits {
    pub demand: Vec<i64>,
    /// Selectors that select these pods.
    pub matched_by: Vec<usize>,
    /// Hostname-scoped rules of these pods.
    pub rules: Vec<Rule>,
    pub host_ports: Vec<HostPort>,
}

impl PodTraits {
    pub fn new(demand: Vec<i64>, matched_by: Vec<usize>, rules: &[Rule], host_ports: Vec<HostPort>) -> Self {
        let rules = rules.iter().copied().filter(|r| r.scope() == Scope::Hostname).collect();
        PodTraits { demand, matched_by, rules, host_ports }
    }

    fn matches(&self, selector: usize) -> bool {
        self.matched_by.binary_search(&selector).is_ok()
    }

    /// The hostname rules that cap how many of these pods share a node because the rule's selector
    /// selects them: `(true, selector, 1)` for an anti-affinity, `(false, selector, maxSkew)` for a
    /// spread. Host ports cap a node at one pod as well (see [`Self::host_ports`]).
    pub fn self_limits(&self) -> impl Iterator<Item = (bool, usize, u64)> + '_ {
        self.rules.iter().filter_map(|rule| match *rule {
            Rule::AntiAffinity { selector, .. } if self.matches(selector) => Some((true, selector, 1)),
            Rule::Spread { selector, max_skew, .. } if self.matches(selector) => {
                Some((false, selector, u64::from(max_skew)))
            }
            _ => None,
        })
    }

    /// At most this many of these pods fit on one node because of their own per-node rules.
    pub fn per_node_limit(&self) -> Option<u64> {
        let ports = (!self.host_ports.is_empty()).then_some(1);
        self.self_limits().map(|(_, _, limit)| limit).chain(ports).min()
    }
}

/// The per-node counters.
#[derive(Clone, Debug)]
pub struct NodeState {
    pub free: Vec<i64>,
    /// Pods on the node matching each selector.
    pub matching: Vec<u32>,
    /// Pods on the node holding a hostname anti-affinity against each selector.
    pub repelling: Vec<u32>,
    /// Pods on the node holding a hostname spread over each selector, and the smallest maxSkew among
    /// them: every pod the selector selects counts toward that spread, whether or not it carries
    /// it, so none may join past the cap.
    pub spreading: Vec<u32>,
    pub spread_cap: Vec<u32>,
    pub host_ports: Vec<HostPort>,
    pub pods: u32,
}

impl NodeState {
    pub fn empty(free: Vec<i64>, selectors: usize) -> Self {
        NodeState {
            free,
            matching: vec![0; selectors],
            repelling: vec![0; selectors],
            spreading: vec![0; selectors],
            spread_cap: vec![u32::MAX; selectors],
            host_ports: vec![],
            pods: 0,
        }
    }

    /// How many pods with these traits (up to `want`) can join. `bootstrap(selector)` says whether
    /// a self-matching pod may start a hostname affinity group here (no matching pod anywhere yet).
    pub fn max_addable(&self, pod: &PodTraits, want: u64, bootstrap: impl Fn(usize) -> bool) -> u64 {
        let fit = if want == 1 {
            // One copy needs no division: it fits when every resource it asks for has room.
            u64::from(pod.demand.iter().zip(&self.free).all(|(need, have)| *need <= 0 || have >= need))
        } else {
            copies_that_fit(&pod.demand, &self.free)
        };
        let mut n = want.min(fit);
        if n == 0 {
            return 0;
        }
        for &s in &pod.matched_by {
            if self.repelling[s] > 0 {
                return 0;
            }
            if self.spreading[s] > 0 {
                n = n.min(u64::from(self.spread_cap[s].saturating_sub(self.matching[s])));
            }
        }
        if n == 0 {
            return 0;
        }
        for rule in &pod.rules {
            match *rule {
                Rule::AntiAffinity { selector, .. } => {
                    if self.matching[selector] > 0 {
                        return 0;
                    }
                    if pod.matches(selector) {
                        n = n.min(1);
                    }
                }
                Rule::Spread { selector, max_skew, .. } => {
                    // On hostname the emptiest domain is a new node with 0 matching pods (upstream
                    // assumes the same), so a node may hold at most max_skew matching pods.
                    if pod.matches(selector) {
                        let room = (max_skew as u64).saturating_sub(self.matching[selector] as u64);
                        n = n.min(room);
                    } else if self.matching[selector] > max_skew {
                        return 0;
                    }
                }
                Rule::Affinity { selector, self_matching, .. } => {
                    if self.matching[selector] == 0 && !(self_matching && bootstrap(selector)) {
                        return 0;
                    }
                }
            }
            if n == 0 {
                return 0;
            }
        }
        if !pod.host_ports.is_empty() {
            if pod.host_ports.iter().any(|p| self.host_ports.iter().any(|q| p.conflicts(q))) {
                return 0;
            }
            // Two copies of the same pod bind the same ports.
            n = n.min(1);
        }
        n
    }

    /// Records `count` pods with these traits on the node.
    pub fn add(&mut self, pod: &PodTraits, count: u64) {
        if count == 0 {
            return;
        }
        for (f, d) in self.free.iter_mut().zip(&pod.demand) {
            *f -= d * count as i64;
        }
        for &s in &pod.matched_by {
            self.matching[s] += count as u32;
        }
        for rule in &pod.rules {
            match *rule {
                Rule::AntiAffinity { selector, .. } => self.repelling[selector] += count as u32,
                Rule::Spread { selector, max_skew, .. } => {
                    self.spreading[selector] += count as u32;
                    self.spread_cap[selector] = self.spread_cap[selector].min(max_skew);
                }
                Rule::Affinity { .. } => {}
            }
        }
        for _ in 0..count {
            self.host_ports.extend(pod.host_ports.iter().cloned());
        }
        self.pods += count as u32;
    }

    /// Undoes [`NodeState::add`].
    pub fn remove(&mut self, pod: &PodTraits, count: u64) {
        if count == 0 {
            return;
        }
        for (f, d) in self.free.iter_mut().zip(&pod.demand) {
            *f += d * count as i64;
        }
        for &s in &pod.matched_by {
            self.matching[s] -= count as u32;
        }
        for rule in &pod.rules {
            match *rule {
                Rule::AntiAffinity { selector, .. } => self.repelling[selector] -= count as u32,
                Rule::Spread { selector, .. } => {
                    self.spreading[selector] -= count as u32;
                    // The cap stays at the smallest skew seen while any spreading pod remains
                    // (conservative); it is lifted with the last one.
                    if self.spreading[selector] == 0 {
                        self.spread_cap[selector] = u32::MAX;
                    }
                }
                Rule::Affinity { .. } => {}
            }
        }
        for port in &pod.host_ports {
            for _ in 0..count {
                if let Some(i) = self.host_ports.iter().position(|p| p == port) {
                    self.host_ports.remove(i);
                }
            }
        }
        self.pods -= count as u32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn traits(demand: Vec<i64>, matched_by: Vec<usize>, rules: Vec<Rule>) -> PodTraits {
        PodTraits::new(demand, matched_by, &rules, vec![])
    }

    #[test]
    fn capacity_bounds_copies() {
        let node = NodeState::empty(vec![1000, 10], 0);
        assert_eq!(node.max_addable(&traits(vec![300, 1], vec![], vec![]), 10, |_| false), 3);
    }

    #[test]
    fn self_anti_affinity_allows_one_per_node() {
        let anti = Rule::AntiAffinity { scope: Scope::Hostname, selector: 0 };
        let pod = traits(vec![1, 1], vec![0], vec![anti]);
        let mut node = NodeState::empty(vec![100, 100], 1);
        assert_eq!(node.max_addable(&pod, 5, |_| false), 1);
        node.add(&pod, 1);
        assert_eq!(node.max_addable(&pod, 5, |_| false), 0);
        // A plain pod matched by the selector is repelled too (the inverse direction).
        let plain = traits(vec![1, 1], vec![0], vec![]);
        assert_eq!(node.max_addable(&plain, 5, |_| false), 0);
        node.remove(&pod, 1);
        assert_eq!(node.max_addable(&plain, 5, |_| false), 5);
    }

    #[test]
    fn hostname_spread_caps_matching_pods() {
        let spread = Rule::Spread { scope: Scope::Hostname, selector: 0, max_skew: 2, min_domains: None };
        let pod = traits(vec![1], vec![0], vec![spread]);
        let mut node = NodeState::empty(vec![100], 1);
        assert_eq!(node.max_addable(&pod, 5, |_| false), 2);
        node.add(&pod, 2);
        assert_eq!(node.max_addable(&pod, 5, |_| false), 0);
    }

    #[test]
    fn affinity_needs_a_match_or_a_bootstrap() {
        let affinity = Rule::Affinity { scope: Scope::Hostname, selector: 0, self_matching: true };
        let pod = traits(vec![1], vec![0], vec![affinity]);
        let node = NodeState::empty(vec![100], 1);
        assert_eq!(node.max_addable(&pod, 5, |_| false), 0);
        assert_eq!(node.max_addable(&pod, 5, |_| true), 5);
    }

    #[test]
    fn host_ports_conflict() {
        let port = HostPort { port: 80, protocol: "TCP".into(), host_ip: String::new() };
        let pod = PodTraits::new(vec![1], vec![], &[], vec![port]);
        let mut node = NodeState::empty(vec![100], 0);
        assert_eq!(node.max_addable(&pod, 5, |_| false), 1);
        node.add(&pod, 1);
        assert_eq!(node.max_addable(&pod, 5, |_| false), 0);
    }
}
