//! What the works issued on one communicator share: its group's watch, its abort handle, the
//! hook of an elastic group, and the newest of their places (see `ring`'s `next_place`) seen
//! complete on the communicator's stream.

use crate::watchdog::group_watch::GroupWatch;
use oxccl_core::Error;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// What every work of a communicator shares, behind one reference count.
pub(crate) struct WorkHome<A> {
    pub watch: Arc<GroupWatch>,
    /// The communicator's abort handle (none for captured works).
    pub abort: Option<A>,
    /// Asked when a wait fails (an elastic group: see `recovery`).
    pub on_failure: Option<Arc<dyn OnFailure>>,
    /// The place of the newest work seen complete: it and every earlier work of the stream
    /// are done (written by whoever looks, read by every look first).
    done: Padded,
}

/// A counter alone on its cache line (and the next, which the hardware may fetch with it).
#[repr(align(128))]
#[derive(Default)]
struct Padded(AtomicU64);

/// What an elastic group answers when a wait of its work fails: the error to report instead
/// ([`Error::MembersLost`] once the survivors decided), after the decision is made.
pub(crate) trait OnFailure: Send + Sync {
    /// The error a wait that failed with `cause` reports.
    fn settle(&self, cause: &Error) -> Error;
}

impl<A> WorkHome<A> {
    pub fn new(
        watch: Arc<GroupWatch>,
        abort: Option<A>,
        on_failure: Option<Arc<dyn OnFailure>>,
    ) -> WorkHome<A> {
        WorkHome {
            watch,
            abort,
            on_failure,
            done: Padded::default(),
        }
    }

    /// The work at `place` was seen complete (so every earlier one is done too).
    pub fn saw_done(&self, place: u64) {
        self.done.0.fetch_max(place, Ordering::Release);
    }

    /// The place of the newest work seen complete (0: none yet).
    pub fn done_upto(&self) -> u64 {
        self.done.0.load(Ordering::Acquire)
    }
}
