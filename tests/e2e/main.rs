//! End-to-end tests against a real Kubernetes control plane: etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler and kwok, built from pinned Go modules by
//! `hack/e2e-cluster.sh build` (run `make e2e`, which builds them first) and started once for this test
//! binary. Nothing on the Kubernetes side is mocked; Azure is the fake ARM of the `fake-azure`
//! crate (`crates/fake-azure`).
//!
//! Without the built binaries every test fails and says to run `hack/e2e-cluster.sh build`.
//!
//! Harness: `cluster` (start/stop, one cluster per test binary), `objects` (apply/create manifests),
//! `wait` (polling with deadlines), `crds` (install `crds/` once), `kwok` (nodes and pods),
//! `controller` (the `karpenter-azure controller` binary against the cluster and a fake ARM, its VMs joining
//! through the kwok registrar or a TLS-bootstrapping kubelet), `helm` (the
//! helm runner), `identity` (the chart's ServiceAccount token the controller runs with), `prometheus` (its
//! metrics read over HTTP, by promtool and by a real Prometheus server), `health` (what the drain,
//! repair and interruption tests share, including a Node made NotReady), `setup` (what a controller test
//! does first: CRDs, namespace and controller in one call, its AKSNodeClass and NodePool made Ready, and
//! waiting for N pods Running), `lookups` (reads the tests share), `manifests` (the objects they apply),
//! `cleanup` (removing them).

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
pub mod setup;
pub mod tracker;
pub mod wait;

mod burst;
mod chart;
mod chart_monitoring;
mod chart_settings;
mod chart_upstream_values;
mod configure_values;
mod dashboards;
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
mod maintenance_window;
mod metrics;
mod min_values_policy;
mod nodeclass;
mod operators;
mod overlays;
mod playground;
mod pricing;
mod provisioning;
mod rbac;
mod repair;
mod resilience;
mod scale;
mod scheduling;
mod simulate_from_cluster;
mod soak;
mod static_pools;
mod termination;
mod topology_keys;
mod upstream_examples;
mod validation;
mod validation_cases;
