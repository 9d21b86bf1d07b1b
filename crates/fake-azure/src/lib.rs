//! Fakes of the Azure APIs karpenter-azure calls, for its integration and end-to-end tests (and any
//! program that wants to run the controller without Azure):
//! - [`arm`]: Azure Resource Manager and AAD's token endpoint in the real wire format (long-running
//!   operations, error bodies, throttling), with injected faults and VMs that boot into Nodes;
//! - [`retail`]: the Azure Retail Prices API.
//!
//! It is a crate of its own so that every test binary links one compiled copy. The `fake-arm` binary
//! (`src/bin/fake-arm.rs`) serves the fake ARM as a program of its own, for `make playground`.

pub mod arm;
pub mod retail;
