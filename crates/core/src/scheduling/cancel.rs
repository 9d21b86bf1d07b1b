//! Cancelling a solve: the hook the solver asks at its safe points, the error it stops with, and the
//! latch that keeps it stopped.
//!
//! Pure code cannot read the clock, so a caller that needs a deadline (disruption runs many solves
//! per pass) passes a hook that reads it; the solver only asks.

use std::cell::Cell;

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

/// The caller's hook and whether it has said stop. Latched: once the hook has said stop, every later
/// safe point stops too, even if the hook would now say go on. A cell, so that asking needs only
/// shared access to the solver (asking changes no answer of the solve).
pub(crate) struct CancelLatch<'a> {
    hook: &'a dyn ShouldCancel,
    stopped: Cell<bool>,
}

impl<'a> CancelLatch<'a> {
    pub fn new(hook: &'a dyn ShouldCancel) -> Self {
        CancelLatch { hook, stopped: Cell::new(false) }
    }

    /// Whether to stop at this safe point: asks the hook until it once says yes.
    pub fn requested(&self) -> bool {
        if !self.stopped.get() && self.hook.should_cancel() {
            self.stopped.set(true);
        }
        self.stopped.get()
    }

    /// [`Self::requested`] as an error, for `?` at the safe points of the driver.
    pub fn check(&self) -> Result<(), Cancelled> {
        if self.requested() {
            Err(Cancelled)
        } else {
            Ok(())
        }
    }
}
