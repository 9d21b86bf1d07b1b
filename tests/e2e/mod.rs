//! The e2e suite's harness and its tests, against a real control plane (etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler, kwok) started by `hack/e2e-cluster.sh`.
//!
//! Harness: `cluster` (start/stop, one cluster per test binary), `objects` (apply/create manifests),
//! `wait` (polling with deadlines), `crds` (install `crds/` once), `kwok` (nodes and pods),
//! `controller` (the `karpenter-azure controller` binary against the cluster and a fake ARM, its VMs joining
//! through the kwok registrar or a TLS-bootstrapping kubelet), `helm` (the
//! helm runner), `identity` (the chart's ServiceAccount token the controller runs with), `prometheus` (its
//! metrics read over HTTP, by promtool and by a real Prometheus server), `health` (what the drain,
//! repair and interruption tests share, including a Node made NotReady).

pub mod cleanup;
pub mod cluster;
pub mod controller;
pub mod crds;
pub mod disruption_watch;
pub mod health;
pub mod helm;
pub mod identity;
pub mod kwok;
pub mod lookups;
pub mod manifests;
pub mod objects;
pub mod prometheus;
pub mod wait;

mod burst;
mod chart;
mod chart_settings;
mod disruption;
mod disruption_lifecycle;
mod disruption_scale;
mod drain;
mod drift;
mod events;
mod eviction;
mod inputs;
mod interruption;
mod join;
mod leader;
mod metrics;
mod nodeclass;
mod pricing;
mod provisioning;
mod rbac;
mod repair;
mod resilience;
mod scheduling;
mod termination;
mod validation;
mod validation_cases;
