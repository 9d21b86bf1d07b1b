//! Pure scheduling code: requirement sets and resource vectors. No I/O, no clock; deterministic.

pub mod requirements;
pub mod resources;
