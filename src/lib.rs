//! karpenter-azure: a Kubernetes node autoscaler for Azure.
//!
//! The crate is laid out as in the design document: `apis` holds the CRD types, `scheduling` the pure
//! decision code, `catalog` the Azure VM sizes with their allocatable resources and prices.

pub mod apis;
pub mod bench;
pub mod catalog;
pub mod cloud;
pub mod controllers;
pub mod model;
pub mod operator;
pub mod scheduling;
pub mod sim;
pub mod state;
