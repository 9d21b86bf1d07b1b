//! Fakes of the Azure APIs karpenter-azure calls, for its integration and end-to-end tests (and any
//! program that wants to run the controller without Azure):
//! - [`arm`]: Azure Resource Manager and AAD's token endpoint in the real wire format (long-running
//!   operations, error bodies, throttling), with injected faults and VMs that boot into Nodes;
//! - [`retail`]: the Azure Retail Prices API.
//!
//! It is a crate of its own so that every test binary links one compiled copy.

pub mod arm;
pub mod retail;
