use crate::error::Result;
use crate::state::lifecycle::CommState;
use crate::traits::Progress;

/// A handle that stops a communicator from any thread (a watchdog, a signal-handling thread),
/// made by [`Communicator::abort_handle`](crate::Communicator::abort_handle).
///
/// It allows nothing but [`CommAbort::abort`], [`CommAbort::state`] and [`CommAbort::poll`]:
/// the calls NCCL allows at any time from any thread, concurrently with an operation on the
/// communicator. It may outlive the communicator; its calls then report the final state.
pub trait CommAbort: Clone + Send + Sync + 'static {
    /// Stops every operation of the communicator; idempotent. Wakes ranks blocked in its
    /// collectives. The reason is kept and reported by later calls.
    fn abort(&self, reason: &str);

    /// Where the communicator is in its life.
    fn state(&self) -> CommState;

    /// The asynchronous error and the progress of a nonblocking init, split or group, as
    /// [`Communicator::poll`](crate::Communicator::poll).
    fn poll(&self) -> Result<Progress>;
}
