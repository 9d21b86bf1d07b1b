//! The Kubernetes API types: the pure ones (types, validation, requirements, hashes) are the core
//! crate's [`karpenter_azure_core::apis`], re-exported here; this module adds what does I/O with them:
//! reading manifests from files (`manifest`) and writing the CRD manifests (`crdgen`).

pub use karpenter_azure_core::apis::*;

pub mod crdgen;
pub mod manifest;
