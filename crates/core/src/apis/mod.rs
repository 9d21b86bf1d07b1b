//! The Kubernetes API types of the project: `NodePool` and `NodeClaim` (karpenter.sh/v1),
//! `AKSNodeClass` (karpenter.azure.com/v1beta1) and `NodeOverlay` (karpenter.sh/v1alpha1), their
//! validation, the conversion of their requirements to the model's requirements algebra, and the stable hashes drift is judged on. (Reading manifests
//! from files and writing the CRD manifests, `karpenter-azure crdgen`, are I/O and live in the main
//! crate's `apis`.)

pub mod aksnodeclass;
pub mod common;
pub mod conditions;
pub mod duration;
pub mod hash;
pub mod nodeclaim;
pub mod nodeoverlay;
pub mod nodepool;
pub mod requirements;
pub mod sysctls;
pub mod validate;
pub mod validation;

pub use aksnodeclass::{AKSNodeClass, AKSNodeClassSpec, AKSNodeClassStatus};
pub use common::{
    NodeClassReference, NodeSelectorRequirementWithMinValues, Operator, Quantity, Taint, TaintEffect,
};
pub use nodeclaim::{NodeClaim, NodeClaimSpec, NodeClaimStatus};
pub use nodeoverlay::{NodeOverlay, NodeOverlaySpec, NodeOverlayStatus};
pub use nodepool::{NodePool, NodePoolSpec, NodePoolStatus};
