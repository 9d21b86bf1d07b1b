//! The topology rules of the feasibility checker: topology spread and required pod affinity and
//! anti-affinity in both directions, on any topology key, checked on the plan's final state.

use std::collections::HashMap;

use super::*;

/// Every pod with a node (running on an existing node, or placed by the plan), for topology rules.
pub(super) struct World<'a> {
    input: &'a SolveInput,
    nodes: &'a [NodeView<'a>],
    /// (pod, node index); running pods first, then placed ones.
    pods: Vec<(&'a Pod, usize)>,
    first_placed: usize,
}

impl<'a> World<'a> {
    pub(super) fn new(input: &'a SolveInput, nodes: &'a [NodeView<'a>]) -> Self {
        let running =
            nodes.iter().enumerate().flat_map(|(n, node)| node.running.iter().map(move |p| (*p, n)));
        let mut pods: Vec<(&Pod, usize)> = running.collect();
        let first_placed = pods.len();
        pods.extend(nodes.iter().enumerate().flat_map(|(n, node)| node.placed.iter().map(move |p| (*p, n))));
        World { input, nodes, pods, first_placed }
    }

    fn is_placed(&self, index: usize) -> bool {
        index >= self.first_placed
    }

    fn placed(&self) -> impl Iterator<Item = (&'a Pod, usize)> + '_ {
        self.pods[self.first_placed..].iter().copied()
    }

    fn domain(&self, node: usize, key: &str) -> Option<&'a str> {
        self.nodes[node].labels.get(key).map(String::as_str)
    }

    /// Domains of `key` the pod could be placed in: those of the nodes it may use, and those a new
    /// node could be in (an offering's zone or capacity type; for any other key, what the NodePool's
    /// requirements and labels or the instance type's labels define).
    fn eligible_domains(&self, pod: &Pod, key: &str) -> BTreeSet<String> {
        let usable = |n: &NodeView| {
            terms_match(&pod.required_terms, &n.labels) && tolerates_all(&pod.tolerations, &n.taints)
        };
        let mut out: BTreeSet<String> =
            self.nodes.iter().filter(|n| usable(n)).filter_map(|n| n.labels.get(key).cloned()).collect();
        if key == LABEL_HOSTNAME {
            return out;
        }
        let unconstrained = [Requirements::new()];
        let terms = if pod.required_terms.is_empty() { &unconstrained[..] } else { &pod.required_terms[..] };
        for pool in self.input.nodepools.iter().filter(|p| tolerates_all(&pod.tolerations, &p.taints)) {
            for term in terms {
                let requirements = pool.requirements.intersect(term);
                if requirements.first_empty().is_some() {
                    continue;
                }
                let types = pool
                    .instance_types
                    .iter()
                    .filter(|t| type_allowed(t, &requirements) && pod.requests.fits(&t.allocatable));
                for t in types {
                    let mut offerings =
                        allowed_offerings(t, &requirements).filter(|o| o.available).peekable();
                    if offerings.peek().is_none() {
                        continue;
                    }
                    if !is_offering_domain(key) {
                        out.extend(crate::model::selection::label_domains(key, t, &requirements));
                        continue;
                    }
                    for o in offerings {
                        let value = offering_labels(o).into_iter().find(|(k, _)| *k == key).map(|(_, v)| v);
                        out.extend(value.map(str::to_string));
                    }
                }
            }
        }
        out
    }
}

impl<'a> Checker<'a> {
    pub(super) fn check_topology_spread(&mut self, world: &World<'a>) {
        // Counts per domain for each (namespace, selector, key), and eligible domains for each pod
        // shape: computed once, not per constrained pod, so large plans check in n log n.
        let mut counts_memo: HashMap<String, BTreeMap<&'a str, usize>> = HashMap::new();
        let mut eligible_memo: HashMap<String, BTreeSet<String>> = HashMap::new();
        for (pod, node) in world.placed() {
            for c in pod
                .topology_spread
                .iter()
                .filter(|c| c.when_unsatisfiable == WhenUnsatisfiable::DoNotSchedule)
            {
                let Some(domain) = world.domain(node, &c.topology_key) else {
                    self.fail(
                        Rule::TopologySpread,
                        format!(
                            "pod {} on {}: the node has no {} label",
                            pod.id(),
                            world.nodes[node].name,
                            c.topology_key
                        ),
                    );
                    continue;
                };
                let shape =
                    format!("{:?}", (&pod.required_terms, &pod.tolerations, &pod.requests, &c.topology_key));
                let eligible = eligible_memo
                    .entry(shape)
                    .or_insert_with(|| world.eligible_domains(pod, &c.topology_key))
                    .clone();
                let group = format!("{:?}", (&pod.namespace, &c.selector, &c.topology_key));
                let per_domain = counts_memo.entry(group).or_insert_with(|| {
                    let mut per_domain: BTreeMap<&'a str, usize> = BTreeMap::new();
                    for (p, n) in &world.pods {
                        if p.namespace == pod.namespace && c.selector.matches(&p.labels) {
                            if let Some(d) = world.domain(*n, &c.topology_key) {
                                *per_domain.entry(d).or_default() += 1;
                            }
                        }
                    }
                    per_domain
                });
                let count = |d: &str| per_domain.get(d).copied().unwrap_or(0);
                let too_few = c.min_domains.is_some_and(|m| (eligible.len() as u32) < m);
                let min = if too_few { 0 } else { eligible.iter().map(|d| count(d)).min().unwrap_or(0) };
                let here = count(domain);
                if here > min + c.max_skew as usize {
                    self.fail(
                        Rule::TopologySpread,
                        format!("pod {}: {} domain {domain} holds {here} matching pods, min over {} eligible domains is {min}, maxSkew {}", pod.id(), c.topology_key, eligible.len(), c.max_skew),
                    );
                }
            }
        }
    }

    /// Required anti-affinity in both directions: no pod shares a domain with a pod its terms select,
    /// for every pair where at least one pod is placed by this plan.
    pub(super) fn check_anti_affinity(&mut self, world: &World<'a>) {
        for (i, (a, a_node)) in world.pods.iter().enumerate() {
            for term in &a.anti_affinity {
                let Some(domain) = world.domain(*a_node, &term.topology_key) else { continue };
                for (j, (b, b_node)) in world.pods.iter().enumerate() {
                    let involves_plan = world.is_placed(i) || world.is_placed(j);
                    if i != j
                        && involves_plan
                        && term.selects(b)
                        && world.domain(*b_node, &term.topology_key) == Some(domain)
                    {
                        self.fail(
                            Rule::PodAntiAffinity,
                            format!(
                                "pod {} shares {} {domain} with pod {}, which its anti-affinity selects",
                                a.id(),
                                term.topology_key,
                                b.id()
                            ),
                        );
                    }
                }
            }
        }
    }

    pub(super) fn check_affinity(&mut self, world: &World<'a>) {
        for (i, (pod, node)) in world.pods.iter().enumerate().filter(|(i, _)| world.is_placed(*i)) {
            for term in &pod.affinity {
                let domain = world.domain(*node, &term.topology_key);
                let others =
                    || world.pods.iter().enumerate().filter(|(j, (q, _))| *j != i && term.selects(q));
                let in_domain = others()
                    .any(|(_, (_, n))| domain.is_some() && world.domain(*n, &term.topology_key) == domain);
                let first_of_group = term.selects(pod) && others().next().is_none();
                if !in_domain && !first_of_group {
                    self.fail(
                        Rule::PodAffinity,
                        format!(
                            "pod {}: no pod its affinity selects in {} {domain:?}",
                            pod.id(),
                            term.topology_key
                        ),
                    );
                }
            }
        }
    }
}

/// Whether new nodes get their domain of `key` from the offering they launch as.
fn is_offering_domain(key: &str) -> bool {
    [LABEL_ZONE, LABEL_CAPACITY_TYPE].contains(&key)
}
