//! What owns NodeClaims: the objects built from a plan and the launch requests built from them
//! (`build`, pure) and created (`create`), their lifecycle (`lifecycle`: launch, registration, initialization, liveness,
//! termination), their disruption conditions (`disruption`: drift, consolidatable), garbage collection
//! of claims whose VM is gone and of VMs without a claim (`gc`), and in-place updates of their VMs'
//! tags (`inplace`).

pub mod build;
pub mod create;
pub mod disruption;
pub mod gc;
pub mod inplace;
pub mod lifecycle;

pub use build::*;
pub use create::{create, CreateError};
