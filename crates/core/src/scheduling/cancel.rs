//! Cancelling a solve: the hook the solver asks at its safe points, and the error it stops with.
//!
//! Pure code cannot read the clock, so a caller that needs a deadline (disruption runs many solves
//! per pass) passes a hook that reads it; the solver only asks.

/// Asked at the solver's safe points whether to stop. Any `Fn() -> bool` is one.
pub trait ShouldCancel {
    fn should_cancel(&self) -> bool;
}

impl<F: Fn() -> bool> ShouldCancel for F {
    fn should_cancel(&self) -> bool {
        self()
    }
}

/// The cancel hook stopped the solve; there is no partial plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the solve was cancelled")]
pub struct Cancelled;
