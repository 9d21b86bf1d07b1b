//! Node repair (feature gate `NodeRepair`; upstream core `pkg/controllers/node/health`): which
//! unhealthy managed nodes to replace now, and which are held back because too much of their NodePool
//! is unhealthy at once. Pure: the controller passes the nodes and `now`.
//!
//! A node is unhealthy while its `Ready` condition is False or Unknown (the Azure provider's
//! `RepairPolicies`, which give both a 10-minute toleration). Once that has lasted the toleration, counted
//! from the condition's `lastTransitionTime`, its NodeClaim is deleted forcefully — unless more than 20 %
//! of the nodes of its NodePool (rounded up, as a PDB's `maxUnavailable` rounds, so one of three may be)
//! are unhealthy: then a wider failure is more likely than a broken machine, replacing nodes would not
//! help, and nothing in that pool is repaired. A NodeClaim without a NodePool is judged against the whole
//! cluster instead, as upstream does.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// How long a node may stay unhealthy before it is replaced (Azure provider `RepairPolicies`).
pub const TOLERATION: Duration = Duration::from_secs(10 * 60);
/// Above this share of unhealthy nodes in a NodePool nothing in it is repaired (upstream
/// `allowedUnhealthyPercent`).
pub const MAX_UNHEALTHY_PERCENT: usize = 20;

/// One Node as repair sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeHealth {
    pub node: String,
    /// The NodeClaim behind it; `None` for a node Karpenter does not manage, which only counts towards
    /// the cluster-wide share.
    pub nodeclaim: Option<String>,
    /// The `karpenter.sh/nodepool` label.
    pub nodepool: Option<String>,
    /// `Ready=True`.
    pub ready: bool,
    /// The Ready condition's `lastTransitionTime`; `None` when the node reports no Ready condition (a
    /// node that never said anything is not judged).
    pub ready_since: Option<Timestamp>,
    /// Its NodeClaim is already being deleted.
    pub deleting: bool,
}

impl NodeHealth {
    pub fn unhealthy(&self) -> bool {
        !self.ready && self.ready_since.is_some()
    }
}

/// Where the unhealthy share is counted.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    NodePool(String),
    /// NodeClaims without a NodePool: every node of the cluster.
    Cluster,
}

/// A node to repair now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Repair {
    pub node: String,
    pub nodeclaim: String,
    pub nodepool: Option<String>,
    /// When it became unhealthy.
    pub since: Timestamp,
}

/// Nodes past their toleration that are not repaired, because too much of their scope is unhealthy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Blocked {
    pub scope: Scope,
    pub unhealthy: usize,
    pub total: usize,
    /// How many unhealthy nodes the scope tolerates.
    pub allowed: usize,
    /// (node, nodeclaim) of the nodes held back.
    pub nodes: Vec<(String, String)>,
}

impl Blocked {
    /// Why, for events and logs.
    pub fn reason(&self) -> String {
        let scope = match &self.scope {
            Scope::NodePool(pool) => format!("NodePool {pool}"),
            Scope::Cluster => "the cluster".to_string(),
        };
        format!(
            "more than {MAX_UNHEALTHY_PERCENT}% of the nodes of {scope} are unhealthy ({} of {}; at most {} may be)",
            self.unhealthy, self.total, self.allowed
        )
    }
}

/// What one repair pass does.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RepairPlan {
    pub repair: Vec<Repair>,
    pub blocked: Vec<Blocked>,
    /// The earliest time an unhealthy node not yet due reaches its toleration.
    pub next_due: Option<Timestamp>,
}

/// How many unhealthy nodes of `total` are tolerated: 20 %, rounded up.
pub fn allowed_unhealthy(total: usize) -> usize {
    (total * MAX_UNHEALTHY_PERCENT).div_ceil(100)
}

/// Which of `nodes` to repair at `now`, given the `toleration`.
pub fn decide(nodes: &[NodeHealth], toleration: Duration, now: Timestamp) -> RepairPlan {
    let toleration = SignedDuration::try_from(toleration).unwrap_or(SignedDuration::MAX);
    let mut plan = RepairPlan::default();
    let mut due: BTreeMap<Scope, Vec<Repair>> = BTreeMap::new();
    for node in nodes.iter().filter(|n| n.unhealthy() && !n.deleting) {
        let (Some(claim), Some(since)) = (&node.nodeclaim, node.ready_since) else { continue };
        let at = since.checked_add(toleration).unwrap_or(Timestamp::MAX);
        if now < at {
            plan.next_due = Some(plan.next_due.map_or(at, |t| t.min(at)));
            continue;
        }
        let scope = node.nodepool.clone().map_or(Scope::Cluster, Scope::NodePool);
        let repair = Repair {
            node: node.node.clone(),
            nodeclaim: claim.clone(),
            nodepool: node.nodepool.clone(),
            since,
        };
        due.entry(scope).or_default().push(repair);
    }
    for (scope, mut repairs) in due {
        repairs.sort_by(|a, b| a.node.cmp(&b.node));
        let members: Vec<&NodeHealth> = match &scope {
            Scope::NodePool(pool) => nodes.iter().filter(|n| n.nodepool.as_ref() == Some(pool)).collect(),
            Scope::Cluster => nodes.iter().collect(),
        };
        let unhealthy = members.iter().filter(|n| n.unhealthy()).count();
        let allowed = allowed_unhealthy(members.len());
        if unhealthy <= allowed {
            plan.repair.extend(repairs);
        } else {
            let nodes = repairs.into_iter().map(|r| (r.node, r.nodeclaim)).collect();
            plan.blocked.push(Blocked { scope, unhealthy, total: members.len(), allowed, nodes });
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEN_MIN: Duration = TOLERATION;

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + secs).unwrap()
    }

    fn healthy(name: &str, pool: &str) -> NodeHealth {
        NodeHealth {
            node: name.into(),
            nodeclaim: Some(format!("claim-{name}")),
            nodepool: Some(pool.into()),
            ready: true,
            ready_since: Some(t(-86_400)),
            deleting: false,
        }
    }

    fn sick(name: &str, pool: &str, since: i64) -> NodeHealth {
        NodeHealth { ready: false, ready_since: Some(t(since)), ..healthy(name, pool) }
    }

    fn repaired(plan: &RepairPlan) -> Vec<&str> {
        plan.repair.iter().map(|r| r.node.as_str()).collect()
    }

    #[test]
    fn the_share_tolerated_rounds_up() {
        let cases = [(0, 0), (1, 1), (3, 1), (5, 1), (6, 2), (10, 2), (11, 3), (100, 20)];
        for (total, allowed) in cases {
            assert_eq!(allowed_unhealthy(total), allowed, "{total} nodes");
        }
    }

    #[test]
    fn table() {
        // (name, nodes, now, repaired, blocked scopes, next due)
        type Case = (&'static str, Vec<NodeHealth>, i64, Vec<&'static str>, Vec<Scope>, Option<i64>);
        let pool = |p: &str| Scope::NodePool(p.into());
        let cases: Vec<Case> = vec![
            ("all healthy", vec![healthy("a", "p"), healthy("b", "p")], 0, vec![], vec![], None),
            (
                "not yet past the toleration",
                vec![sick("a", "p", -599), healthy("b", "p")],
                0,
                vec![],
                vec![],
                Some(1),
            ),
            (
                "exactly at the toleration",
                vec![sick("a", "p", -600), healthy("b", "p")],
                0,
                vec!["a"],
                vec![],
                None,
            ),
            (
                "one of three",
                vec![sick("a", "p", -700), healthy("b", "p"), healthy("c", "p")],
                0,
                vec!["a"],
                vec![],
                None,
            ),
            (
                "two of three: nothing in the pool",
                vec![sick("a", "p", -700), sick("b", "p", -10), healthy("c", "p")],
                0,
                vec![],
                vec![pool("p")],
                Some(590),
            ),
            (
                "a sick pool does not hold back another",
                vec![
                    sick("a", "p", -700),
                    sick("b", "p", -700),
                    healthy("c", "p"),
                    sick("x", "q", -700),
                    healthy("y", "q"),
                    healthy("z", "q"),
                ],
                0,
                vec!["x"],
                vec![pool("p")],
                None,
            ),
            (
                "two of ten are tolerated",
                {
                    let mut nodes: Vec<NodeHealth> = (0..8).map(|i| healthy(&format!("h{i}"), "p")).collect();
                    nodes.extend([sick("s1", "p", -900), sick("s0", "p", -700)]);
                    nodes
                },
                0,
                vec!["s0", "s1"],
                vec![],
                None,
            ),
            (
                "deleting and unmanaged nodes are not repaired but count",
                vec![
                    NodeHealth { deleting: true, ..sick("a", "p", -700) },
                    NodeHealth { nodeclaim: None, ..sick("b", "p", -700) },
                    healthy("c", "p"),
                ],
                0,
                vec![],
                vec![],
                None,
            ),
            (
                "no Ready condition is not unhealthy",
                vec![NodeHealth { ready_since: None, ..sick("a", "p", 0) }],
                1_000,
                vec![],
                vec![],
                None,
            ),
            (
                "a claim without a pool is judged against the cluster",
                vec![
                    NodeHealth { nodepool: None, ..sick("a", "", -700) },
                    NodeHealth { nodeclaim: None, nodepool: None, ..healthy("b", "") },
                    healthy("c", "p"),
                ],
                0,
                vec!["a"],
                vec![],
                None,
            ),
        ];
        for (name, nodes, now, expected, blocked, next_due) in cases {
            let plan = decide(&nodes, TEN_MIN, t(now));
            assert_eq!(repaired(&plan), expected, "{name}: {plan:?}");
            let scopes: Vec<Scope> = plan.blocked.iter().map(|b| b.scope.clone()).collect();
            assert_eq!(scopes, blocked, "{name}");
            assert_eq!(plan.next_due, next_due.map(t), "{name}");
        }
    }

    #[test]
    fn blocked_pools_say_why_and_which_nodes() {
        let nodes = vec![sick("a", "p", -700), sick("b", "p", -700), healthy("c", "p")];
        let plan = decide(&nodes, TEN_MIN, t(0));
        let blocked = &plan.blocked[0];
        assert_eq!((blocked.unhealthy, blocked.total, blocked.allowed), (2, 3, 1));
        assert_eq!(blocked.nodes, [("a".to_string(), "claim-a".to_string()), ("b".into(), "claim-b".into())]);
        assert_eq!(
            blocked.reason(),
            "more than 20% of the nodes of NodePool p are unhealthy (2 of 3; at most 1 may be)"
        );
    }

    #[test]
    fn the_toleration_is_a_parameter() {
        let nodes = vec![sick("a", "p", -5), healthy("b", "p"), healthy("c", "p")];
        assert_eq!(repaired(&decide(&nodes, Duration::from_secs(5), t(0))), ["a"]);
        assert!(decide(&nodes, TEN_MIN, t(0)).repair.is_empty());
    }
}
