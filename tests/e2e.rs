//! End-to-end tests against a real Kubernetes control plane: etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler and kwok, built from pinned Go modules by
//! `hack/e2e-cluster.sh build` (run `make e2e`, which builds them first) and started once for this test
//! binary. Nothing on the Kubernetes side is mocked; Azure is the fake ARM of `tests/support/fake_arm`.
//!
//! Without the built binaries every test fails and says to run `hack/e2e-cluster.sh build`.

#[path = "support/fake_arm/mod.rs"]
mod fake_arm;
#[path = "support/fake_retail.rs"]
mod fake_retail;

#[path = "e2e/mod.rs"]
mod e2e;
