//! Tests that compare our output with upstream's own code run as an oracle: `bootstrap_oracle` renders
//! a node's custom data with upstream's bootstrap generator (built from its Go module by
//! `hack/aks-bootstrap.sh`) and with ours, and compares them variable by variable.

mod bootstrap_oracle;
