//! The integration tests: the crate's public API and the `karpenter-azure` binary, without a cluster.
//! One test binary, so the crate and its dependencies link once; run one group with
//! `cargo test --test integration <module>::` (for example `solver_feasibility::`).
//!
//! - the solver on synthetic and embedded catalogs: `solver_constraints`, `solver_eastus`,
//!   `solver_feasibility` (property tests), `solver_oracle` (a brute-force optimum on small inputs),
//!   `solver_overlapping`;
//! - disruption decisions: `disruption_consolidation`, `disruption_rules`;
//! - the catalog: `catalog_cli`, `catalog_instance_types`, `catalog_retail`;
//! - the Azure provider against the fake ARM of `crates/fake-azure`: `azure_images`, `azure_launcher`,
//!   `azure_security`, `fake_arm` (the fake against the real SDK clients), `launch_priced`,
//!   `workload_identity` (a rotated service-account token keeps ARM calls working);
//! - the CLI's simulator: `simulate_cli`, `simulate_disruption`, `simulate_overlay`, `simulate_timeline`,
//!   `timeline_report_browser` (the HTML report in headless Chromium);
//! - `upstream_disruption_bench`: `bench-upstream-disruption` on a committed upstream run;
//! - the repository: `crds_and_examples` (generated files are fresh, examples parse), `layering` (the
//!   module layers and the pure modules), `property_tests` (every property test runs from the fixed
//!   seed and is listed for `make proptest-random`).

mod support;

mod azure_images;
mod azure_launcher;
mod azure_security;
mod catalog_cli;
mod catalog_instance_types;
mod catalog_retail;
mod crds_and_examples;
mod disruption_consolidation;
mod disruption_replacement;
mod disruption_rules;
mod disruption_shapes;
mod disruption_static;
mod fake_arm;
mod launch_priced;
mod layering;
mod property_tests;
mod simulate_cli;
mod simulate_disruption;
mod simulate_overlay;
mod simulate_timeline;
mod solver_constraints;
mod solver_eastus;
mod solver_feasibility;
mod solver_oracle;
mod solver_overlapping;
mod timeline_report_browser;
mod upstream_disruption_bench;
mod workload_identity;
