//! What every solve of one disruption pass shares: the running pods, read once.
//!
//! A consolidation pass asks the solver a few dozen times where pods would go if some nodes left.
//! Each of those inputs holds the same running pods, less those of the nodes leaving (which become
//! pods to place), and on a large cluster reading them is most of a small solve's cost: interning
//! the selectors of their rules, matching every pod against every selector, and counting the
//! matches per node and per topology domain. [`RunningBase`] does that once over the whole cluster;
//! a solve built on it ([`crate::scheduling::placement_with_base`]) takes its input's nodes and adds up
//! the counts of each, so its cost grows with the nodes, not the pods.
//!
//! The counts are those [`crate::scheduling::solve`] makes from the input's running pods: a solve
//! on the base places pods exactly where a solve of the same input with its running pods would,
//! up to the order selectors are numbered in (which only breaks ties).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use crate::model::labels::LABEL_HOSTNAME;
use crate::model::resources::Resources;
use crate::model::LabelLookup;
use crate::scheduling::input::SolveInput;
use crate::scheduling::node::{NodeState, PodTraits};
use crate::scheduling::shapes::{intern_rules, relevant_label_keys, Rule, Scope, Selectors};
use crate::scheduling::topology::Domains;

/// The running pods of a cluster, counted per node, for the solves of one pass.
#[derive(Debug)]
pub struct RunningBase {
    selectors: Selectors,
    /// Label keys some selector looks at.
    relevant: BTreeSet<String>,
    nodes: HashMap<String, NodeBase>,
}

/// The running pods of one node.
#[derive(Debug)]
pub(crate) struct NodeBase {
    /// What they request.
    pub used: Resources,
    /// Their per-node counters; `free` is left empty (it depends on the solve's dimensions).
    pub state: NodeState,
    /// The node's domain in each scope it has a label for.
    domains: Vec<(Scope, String)>,
    /// Their anti-affinity terms in each domain scope: `(scope, selector, count)`.
    repelling: Vec<(Scope, usize, u32)>,
}

impl RunningBase {
    /// Reads `full`: every pod any solve of the pass may place (`pods`) and every running pod on
    /// `nodes`. A solve on the base must place only pods of `full` and keep only nodes of `full`.
    pub fn new(full: &SolveInput) -> Self {
        let mut selectors = Selectors::default();
        intern_rules(full.pods.iter().chain(&full.running).map(Arc::as_ref), &mut selectors);
        let relevant = relevant_label_keys(full.pods.iter().chain(&full.running).map(Arc::as_ref));
        let nsel = selectors.list.len();
        let scopes = selectors.domain_scopes();
        let mut nodes: HashMap<String, NodeBase> = full
            .nodes
            .iter()
            .map(|n| {
                let domains = scopes
                    .iter()
                    .filter_map(|&s| n.labels.label(selectors.key_of(s)).map(|d| (s, d.to_string())))
                    .collect();
                let base = NodeBase {
                    used: Resources::new(),
                    state: NodeState::empty(vec![], nsel),
                    domains,
                    repelling: vec![],
                };
                (n.name.clone(), base)
            })
            .collect();
        let mut matcher = selectors.matcher();
        for pod in &full.running {
            let Some(node) = pod.node_name.as_deref().and_then(|n| nodes.get_mut(n)) else { continue };
            let matched = matcher.matching(pod).to_vec();
            let mut hostname = vec![];
            for t in &pod.anti_affinity {
                let Some(scope) = selectors.scope_of(&t.topology_key) else { continue };
                let Some(selector) = selectors.find(&t.namespaces, &t.selector) else { continue };
                if t.topology_key == LABEL_HOSTNAME {
                    hostname.push(Rule::AntiAffinity { scope: Scope::Hostname, selector });
                } else if node.domains.iter().any(|(s, _)| *s == scope) {
                    match node.repelling.iter_mut().find(|(s, sel, _)| *s == scope && *sel == selector) {
                        Some((_, _, count)) => *count += 1,
                        None => node.repelling.push((scope, selector, 1)),
                    }
                }
            }
            let traits = PodTraits::new(vec![], matched, &hostname, pod.host_ports.clone());
            node.state.add(&traits, 1);
            node.used.add_assign(&pod.requests);
        }
        RunningBase { selectors, relevant, nodes }
    }

    pub(crate) fn selectors(&self) -> &Selectors {
        &self.selectors
    }

    pub(crate) fn relevant(&self) -> &BTreeSet<String> {
        &self.relevant
    }

    /// The running pods of the node named `name`; `None` for a node the base does not know.
    pub(crate) fn node(&self, name: &str) -> Option<&NodeBase> {
        self.nodes.get(name)
    }

    /// The domain counts of the running pods on `input`'s nodes.
    pub(crate) fn domains(&self, input: &SolveInput, selectors: &Selectors) -> Domains {
        let mut domains = Domains::empty(selectors);
        for node in input.nodes.iter().filter_map(|n| self.nodes.get(&n.name)) {
            for (scope, domain) in &node.domains {
                let repelling = node
                    .repelling
                    .iter()
                    .filter(|(s, _, _)| s == scope)
                    .map(|&(_, selector, n)| (selector, n));
                domains.add_node(*scope, domain, &node.state.matching, repelling);
            }
        }
        domains
    }
}
