//! What is done to Nodes: draining and termination of a deleted claim's Node (`termination`, with its
//! decisions in `drain`, pure), and replacing Nodes that stay unhealthy (`repair`).

pub mod drain;
pub mod repair;
pub mod termination;
