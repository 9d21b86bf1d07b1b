//! The status-condition metrics of operatorpkg's status controller (`github.com/awslabs/operatorpkg`
//! `status/metrics.go`, `status/controller.go`), as Karpenter core registers them for NodeClaims,
//! NodePools and Nodes (`pkg/controllers/controllers.go`) and the Azure provider for AKSNodeClasses
//! (`pkg/controllers/controllers.go`); NodeOverlays get the same here.
//!
//! Per kind, named `operator_<kind>_...`: `status_condition_count` and
//! `status_condition_current_status_seconds` (1 and the seconds since the last transition, per object
//! and condition: labels namespace, name, type, status, reason), `status_condition_transitions_total`
//! (type, status, reason), `status_condition_transition_seconds` (how long the condition had its
//! previous status: type, status), `termination_current_time_seconds` (namespace, name, while
//! deleting) and `termination_duration_seconds` (deletion to removal). Each kind adds its labels from
//! object labels (`karpenter.sh/nodepool` as `karpenter_sh_nodepool`, ...). For NodeClaims and NodePools
//! upstream also emits the deprecated kind-less `operator_status_condition_*` and
//! `operator_termination_*`, labelled with group and kind; so does this.

use std::collections::BTreeMap;

use prometheus::{HistogramVec, IntCounterVec};

use super::metrics_rebuilt::RebuiltGauge;
use super::metrics_registry::{exponential_buckets, Origin, Registrar, DEFAULT_BUCKETS};
use crate::model::labels::{LABEL_AKS_NODE_CLASS, LABEL_INITIALIZED, LABEL_NODEPOOL};

/// One kind the status metrics cover.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Kind {
    /// The lower-cased kind in the metric names.
    pub name: &'static str,
    pub kind: &'static str,
    pub group: &'static str,
    /// Object label keys carried as metric labels (upstream `status.WithLabels`).
    pub labels: &'static [&'static str],
    /// Karpenter core passes `ExponentialBuckets(0.5, 2, 15)`; the Azure provider the default buckets.
    pub core_buckets: bool,
    /// Upstream `status.EmitDeprecatedMetrics`.
    pub deprecated: bool,
}

pub const NODECLAIM: Kind = Kind {
    name: "nodeclaim",
    kind: "NodeClaim",
    group: "karpenter.sh",
    labels: &[LABEL_AKS_NODE_CLASS, LABEL_NODEPOOL],
    core_buckets: true,
    deprecated: true,
};
pub const NODEPOOL: Kind = Kind {
    name: "nodepool",
    kind: "NodePool",
    group: "karpenter.sh",
    labels: &[],
    core_buckets: true,
    deprecated: true,
};
pub const NODE: Kind = Kind {
    name: "node",
    kind: "Node",
    group: "",
    labels: &[LABEL_AKS_NODE_CLASS, LABEL_NODEPOOL, LABEL_INITIALIZED],
    core_buckets: true,
    deprecated: false,
};
pub const AKSNODECLASS: Kind = Kind {
    name: "aksnodeclass",
    kind: "AKSNodeClass",
    group: "karpenter.azure.com",
    labels: &[],
    core_buckets: false,
    deprecated: false,
};
pub const NODEOVERLAY: Kind = Kind {
    name: "nodeoverlay",
    kind: "NodeOverlay",
    group: "karpenter.sh",
    labels: &[],
    core_buckets: true,
    deprecated: false,
};
pub const KINDS: [Kind; 5] = [NODECLAIM, NODEPOOL, NODE, AKSNODECLASS, NODEOVERLAY];

/// operatorpkg `toPrometheusLabel`: `/`, `.` and `-` become `_`.
pub fn prometheus_label(key: &str) -> String {
    key.replace(['/', '.', '-'], "_")
}

/// The six metrics of one kind (or the deprecated kind-less set). The three gauges have a series per
/// object and are rebuilt whole at each refresh ([`RebuiltGauge`]).
pub struct Family {
    pub count: RebuiltGauge,
    pub current_status: RebuiltGauge,
    pub transitions: IntCounterVec,
    pub transition_seconds: HistogramVec,
    pub termination_current: RebuiltGauge,
    pub termination_duration: HistogramVec,
}

impl Family {
    /// Registers `operator_<prefix>...` with `extra` labels after operatorpkg's.
    fn register(r: &Registrar, prefix: &str, extra: &[String], buckets: &[f64], origin: Origin) -> Family {
        fn with<'a>(base: &[&'a str], extra: &'a [String]) -> Vec<&'a str> {
            base.iter().copied().chain(extra.iter().map(String::as_str)).collect()
        }
        let gauge = ["namespace", "name", "type", "status", "reason"];
        let by: &'static [&'static str] = &["status_conditions"];
        let name = |suffix: &str| format!("operator_{prefix}{suffix}");
        let per_object = "on the leader, per object and condition, from the index at each refresh";
        Family {
            count: r
                .def(
                    &name("status_condition_count"),
                    "The number of a condition for a given object, type and status. e.g. Alarm := Available=False > 0",
                    &with(&gauge, extra),
                )
                .origin(origin)
                .recorded(per_object, by)
                .leader_only()
                .rebuilt_gauge(),
            current_status: r
                .def(
                    &name("status_condition_current_status_seconds"),
                    "The current amount of time in seconds that a status condition has been in a specific state. Alarm := P99(Updated=Unknown) > 5 minutes",
                    &with(&gauge, extra),
                )
                .origin(origin)
                .recorded(per_object, by)
                .leader_only()
                .rebuilt_gauge(),
            transitions: r
                .def(
                    &name("status_condition_transitions_total"),
                    "The count of transitions of a given object, type and status.",
                    &with(&["type", "status", "reason"], extra),
                )
                .origin(origin)
                .recorded("on the leader, per condition seen with a new status (or for the first time)", by)
                .counter(),
            transition_seconds: r
                .def(
                    &name("status_condition_transition_seconds"),
                    "The amount of time a condition was in a given state before transitioning. e.g. Alarm := P99(Updated=False) > 5 minutes",
                    &with(&["type", "status"], extra),
                )
                .origin(origin)
                .recorded("on the leader, per transition seen: how long the previous status lasted", by)
                .histogram(buckets),
            termination_current: r
                .def(
                    &name("termination_current_time_seconds"),
                    "The current amount of time in seconds that an object has been in terminating state.",
                    &with(&["namespace", "name"], extra),
                )
                .origin(origin)
                .recorded("on the leader, per object being deleted: seconds since its deletionTimestamp", by)
                .leader_only()
                .rebuilt_gauge(),
            termination_duration: r
                .def(
                    &name("termination_duration_seconds"),
                    "The amount of time taken by an object to terminate completely.",
                    &with(&[], extra),
                )
                .origin(origin)
                .recorded("on the leader, per object seen deleting and then gone", by)
                .histogram(buckets),
        }
    }
}

pub struct StatusMetrics {
    /// Per kind, by [`Kind::name`].
    pub kinds: BTreeMap<&'static str, Family>,
    /// The kind-less set, labelled with group and kind.
    pub deprecated: Family,
}

impl StatusMetrics {
    pub fn register(r: &Registrar) -> StatusMetrics {
        let deprecated = Family::register(
            r,
            "",
            &["group".to_string(), "kind".to_string()],
            DEFAULT_BUCKETS,
            Origin::OperatorPkg,
        );
        let core_buckets = exponential_buckets(0.5, 2.0, 15);
        let kinds = KINDS
            .iter()
            .map(|kind| {
                let extra: Vec<String> = kind.labels.iter().map(|l| prometheus_label(l)).collect();
                let buckets = if kind.core_buckets { core_buckets.as_slice() } else { DEFAULT_BUCKETS };
                let origin = if *kind == NODEOVERLAY { Origin::Ours } else { Origin::OperatorPkg };
                let family = Family::register(r, &format!("{}_", kind.name), &extra, buckets, origin);
                (kind.name, family)
            })
            .collect();
        StatusMetrics { kinds, deprecated }
    }
}
