use crate::comm_state::CommState;
use crate::error::Result;
use crate::traits::progress::Progress;
use core::sync::atomic::{AtomicUsize, Ordering};

/// A handle that stops a communicator from any thread (a watchdog, a signal-handling thread),
/// made by [`Communicator::abort_handle`](crate::Communicator::abort_handle).
///
/// It allows nothing but [`CommAbort::abort`] (and [`CommAbort::abort_in_background`]),
/// [`CommAbort::state`] and [`CommAbort::poll`]: the calls NCCL allows at any time from any
/// thread, concurrently with an operation on the communicator. It may outlive the
/// communicator; its calls then report the final state.
pub trait CommAbort: Clone + Send + Sync + 'static {
    /// Stops every operation of the communicator; idempotent. Wakes ranks blocked in its
    /// collectives. The reason is kept and reported by later calls.
    fn abort(&self, reason: &str);

    /// [`CommAbort::abort`] without waiting for the library's release of the communicator
    /// (NCCL's abort of a half-made communicator takes a good part of a second): the state is
    /// [`CommState::Aborting`] at once, operations fail fast with the reason, peers blocked on
    /// this rank are woken, and the release runs on a thread named `oxccl-abort`, after which
    /// the state is [`CommState::Aborted`]. Releases in flight are counted by
    /// [`pending_aborts`]. What a limit that expires on an init or split in progress uses, so
    /// its timeout returns at once.
    ///
    /// Idempotent with [`CommAbort::abort`]. By default, a backend whose abort never waits
    /// aborts inline.
    fn abort_in_background(&self, reason: &str) {
        self.abort(reason);
    }

    /// Where the communicator is in its life.
    fn state(&self) -> CommState;

    /// The asynchronous error and the progress of a nonblocking init, split or group, as
    /// [`Communicator::poll`](crate::Communicator::poll).
    fn poll(&self) -> Result<Progress>;
}

/// Releases of aborted communicators running on threads of their own in this process now
/// ([`CommAbort::abort_in_background`], every backend), as counted by [`AbortInFlight`].
pub fn pending_aborts() -> usize {
    PENDING.load(Ordering::Acquire)
}

static PENDING: AtomicUsize = AtomicUsize::new(0);

/// One release counted by [`pending_aborts`] while it lives: a backend makes one before it
/// starts the release's thread and moves it there, so the count drops when the release
/// returns, or when the thread ends any other way (or never starts).
#[derive(Debug)]
#[must_use = "the release is counted only while this lives"]
pub struct AbortInFlight(());

impl AbortInFlight {
    /// Counts one more release in flight.
    pub fn begin() -> AbortInFlight {
        PENDING.fetch_add(1, Ordering::AcqRel);
        AbortInFlight(())
    }
}

impl Drop for AbortInFlight {
    fn drop(&mut self) {
        PENDING.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_flight_releases_are_counted_while_they_live() {
        // Other tests of this process may count their own: compare with the count before.
        let a = AbortInFlight::begin();
        let b = AbortInFlight::begin();
        assert!(pending_aborts() >= 2);
        drop(a);
        drop(b);
    }
}
