//! Tests that compare our output with upstream's own code run as an oracle: `bootstrap_oracle` renders
//! a node's custom data with upstream's bootstrap generator (built from its Go module by
//! `hack/aks-bootstrap.sh`) and with ours, and compares them variable by variable;
//! `requirements_oracle` and `overlay_oracle` put generated cases to upstream core's requirements
//! algebra and NodeOverlay controller (built by `hack/upstream-oracle.sh`, see `upstream_core`) and to
//! ours, and compare the answers case by case.

mod bootstrap_oracle;
mod overlay_oracle;
mod requirements_oracle;
mod upstream_core;
