//! Node repair (feature gate `NodeRepair`; upstream core `pkg/controllers/node/health`): which
//! unhealthy managed nodes to replace now, and which are held back because too much of their NodePool
//! is unhealthy at once. Pure: the controller passes the nodes and `now`.
//!
//! A node is unhealthy while one of its conditions matches a repair policy (the cloud provider's
//! `RepairPolicies`: for Azure, `Ready` False or Unknown for 10 minutes, `kubernetes.azure.com/NodeHealthy`
//! False and a spot VM's `PreemptionScheduled` True at once). Once that has lasted the policy's toleration,
//! counted from the condition's `lastTransitionTime`, its NodeClaim is deleted forcefully — unless more than 20 %
//! of the nodes of its NodePool (rounded up, as a PDB's `maxUnavailable` rounds, so one of three may be)
//! are unhealthy: then a wider failure is more likely than a broken machine, replacing nodes would not
//! help, and nothing in that pool is repaired. A NodeClaim without a NodePool is judged against the whole
//! cluster instead, as upstream does.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// How long a node may stay NotReady before it is replaced (Azure provider `RepairPolicies`).
pub const TOLERATION: Duration = Duration::from_secs(10 * 60);

/// A node condition that makes a node unhealthy, and for how long it is tolerated (upstream core
/// `cloudprovider.RepairPolicy`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RepairPolicy {
    pub condition: String,
    pub status: String,
    pub toleration: Duration,
}

impl RepairPolicy {
    pub fn new(condition: &str, status: &str, toleration: Duration) -> RepairPolicy {
        RepairPolicy { condition: condition.into(), status: status.into(), toleration }
    }
}

/// `Ready` False or Unknown for `toleration`: every cloud provider's first policies.
pub fn not_ready_policies(toleration: Duration) -> Vec<RepairPolicy> {
    vec![RepairPolicy::new("Ready", "False", toleration), RepairPolicy::new("Ready", "Unknown", toleration)]
}

/// One condition of a Node: type, status and `lastTransitionTime` (`None` when the node did not give
/// one: such a condition is not judged).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeCondition {
    pub type_: String,
    pub status: String,
    pub since: Option<Timestamp>,
    /// The condition's reason, as the kubelet (or a node-problem detector) wrote it.
    pub reason: String,
}
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
    /// The Node's conditions.
    pub conditions: Vec<NodeCondition>,
    /// Its NodeClaim is already being deleted.
    pub deleting: bool,
}

impl NodeHealth {
    /// The policy the node breaks that falls due first, with its condition's transition time.
    pub fn broken<'p>(&self, policies: &'p [RepairPolicy]) -> Option<(&'p RepairPolicy, Timestamp)> {
        policies
            .iter()
            .filter_map(|p| {
                let c = self.conditions.iter().find(|c| c.type_ == p.condition && c.status == p.status)?;
                Some((p, c.since?))
            })
            .min_by_key(|(p, since)| due(*since, p.toleration))
    }

    pub fn unhealthy(&self, policies: &[RepairPolicy]) -> bool {
        self.broken(policies).is_some()
    }
}

fn due(since: Timestamp, toleration: Duration) -> Timestamp {
    let toleration = SignedDuration::try_from(toleration).unwrap_or(SignedDuration::MAX);
    since.checked_add(toleration).unwrap_or(Timestamp::MAX)
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
    /// The condition that made it so, as `Type=Status`.
    pub condition: String,
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

/// Which of `nodes` to repair at `now` under `policies`.
pub fn decide(nodes: &[NodeHealth], policies: &[RepairPolicy], now: Timestamp) -> RepairPlan {
    let mut plan = RepairPlan::default();
    let mut due_now: BTreeMap<Scope, Vec<Repair>> = BTreeMap::new();
    for node in nodes.iter().filter(|n| !n.deleting) {
        let Some((policy, since)) = node.broken(policies) else { continue };
        let Some(claim) = &node.nodeclaim else { continue };
        let at = due(since, policy.toleration);
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
            condition: format!("{}={}", policy.condition, policy.status),
        };
        due_now.entry(scope).or_default().push(repair);
    }
    for (scope, mut repairs) in due_now {
        repairs.sort_by(|a, b| a.node.cmp(&b.node));
        let members: Vec<&NodeHealth> = match &scope {
            Scope::NodePool(pool) => nodes.iter().filter(|n| n.nodepool.as_ref() == Some(pool)).collect(),
            Scope::Cluster => nodes.iter().collect(),
        };
        let unhealthy = members.iter().filter(|n| n.unhealthy(policies)).count();
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

    fn ten_min() -> Vec<RepairPolicy> {
        not_ready_policies(TOLERATION)
    }

    fn condition(type_: &str, status: &str, since: Option<i64>) -> NodeCondition {
        NodeCondition {
            type_: type_.into(),
            status: status.into(),
            since: since.map(t),
            reason: String::new(),
        }
    }

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + secs).unwrap()
    }

    fn healthy(name: &str, pool: &str) -> NodeHealth {
        NodeHealth {
            node: name.into(),
            nodeclaim: Some(format!("claim-{name}")),
            nodepool: Some(pool.into()),
            conditions: vec![condition("Ready", "True", Some(-86_400))],
            deleting: false,
        }
    }

    fn sick(name: &str, pool: &str, since: i64) -> NodeHealth {
        NodeHealth { conditions: vec![condition("Ready", "False", Some(since))], ..healthy(name, pool) }
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
                vec![NodeHealth { conditions: vec![condition("Ready", "False", None)], ..sick("a", "p", 0) }],
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
            let plan = decide(&nodes, &ten_min(), t(now));
            assert_eq!(repaired(&plan), expected, "{name}: {plan:?}");
            let scopes: Vec<Scope> = plan.blocked.iter().map(|b| b.scope.clone()).collect();
            assert_eq!(scopes, blocked, "{name}");
            assert_eq!(plan.next_due, next_due.map(t), "{name}");
        }
    }

    #[test]
    fn blocked_pools_say_why_and_which_nodes() {
        let nodes = vec![sick("a", "p", -700), sick("b", "p", -700), healthy("c", "p")];
        let plan = decide(&nodes, &ten_min(), t(0));
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
        assert_eq!(repaired(&decide(&nodes, &not_ready_policies(Duration::from_secs(5)), t(0))), ["a"]);
        assert!(decide(&nodes, &ten_min(), t(0)).repair.is_empty());
    }

    #[test]
    fn a_policy_without_toleration_repairs_at_once_and_names_its_condition() {
        let mut policies = ten_min();
        policies.push(RepairPolicy::new("kubernetes.azure.com/NodeHealthy", "False", Duration::ZERO));
        policies.push(RepairPolicy::new("PreemptionScheduled", "True", Duration::ZERO));
        let mut broken = healthy("a", "p");
        broken.conditions.push(condition("kubernetes.azure.com/NodeHealthy", "False", Some(-1)));
        let mut evicted = healthy("b", "p");
        evicted.conditions.push(condition("PreemptionScheduled", "True", Some(0)));
        let mut fine = healthy("c", "p");
        fine.conditions.push(condition("kubernetes.azure.com/NodeHealthy", "True", Some(-1)));
        let others = (0..7).map(|i| healthy(&format!("h{i}"), "p"));
        let nodes: Vec<NodeHealth> = [broken, evicted, fine].into_iter().chain(others).collect();
        let plan = decide(&nodes, &policies, t(0));
        assert_eq!(repaired(&plan), ["a", "b"]);
        assert_eq!(plan.repair[0].condition, "kubernetes.azure.com/NodeHealthy=False");
        assert_eq!(plan.repair[1].condition, "PreemptionScheduled=True");
        assert!(decide(&nodes, &ten_min(), t(0)).repair.is_empty(), "Ready alone does not see them");
    }
}
