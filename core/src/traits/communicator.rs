use crate::config::CommConfig;
use crate::error::Result;
use crate::feature::FeatureSet;
use crate::op::CommOp;
use crate::state::lifecycle::CommState;
use crate::traits::{Device, Reducer, Stream};

/// Whether a nonblocking call has finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// Finished successfully.
    Done,
    /// Still running (NCCL's `ncclInProgress`): poll again.
    InProgress,
}

/// A registered buffer, as returned by [`Communicator::register`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RegHandle {
    /// The backend's handle value.
    pub raw: usize,
    /// The registered address.
    pub addr: usize,
    /// The registered length in bytes.
    pub bytes: usize,
}

/// One rank's membership of a communicator.
///
/// Thread-safety contract: a communicator may be moved between threads and shared with them
/// (`Send + Sync`) so that [`Communicator::abort`] and [`Communicator::poll`] can be called from
/// any thread, but NCCL forbids concurrent operations on one communicator: callers of
/// [`Communicator::issue`], the group calls, split, finalize and registration must not overlap
/// on one communicator. The safe `Comm` of the `oxccl` crate enforces this with `&mut self`.
pub trait Communicator: Reducer + Send + Sync + Sized {
    /// The stream type operations are issued on.
    type Stream: Stream;

    /// This rank, `0..size`.
    fn rank(&self) -> u32;

    /// Number of ranks.
    fn size(&self) -> u32;

    /// The device this rank uses.
    fn device(&self) -> Device;

    /// What the library behind this communicator can do.
    fn features(&self) -> &FeatureSet;

    /// Where the communicator is in its life.
    fn state(&self) -> CommState;

    /// Polls an asynchronous condition: `InProgress` while a nonblocking init, split or group is
    /// still running; an error once the communicator failed (NCCL's `ncclCommGetAsyncError`).
    fn poll(&self) -> Result<Progress>;

    /// Issues one operation on `stream`, after [`crate::check::op`] has accepted it.
    ///
    /// # Safety
    /// The buffers of `op` must be valid for the backend (device memory of this communicator's
    /// device for NCCL, host memory for the mock), of the stated lengths, and stay valid and
    /// untouched by others until the work on `stream` has completed. No other thread may issue
    /// on this communicator at the same time.
    unsafe fn issue(&self, op: &CommOp<'_>, stream: &Self::Stream) -> Result<()>;

    /// Opens a group on the calling thread: operations until the matching [`Communicator::group_end`]
    /// are issued together (NCCL groups are per thread and may span communicators of one library).
    fn group_start(&self) -> Result<()>;

    /// Closes the innermost group; the outermost close issues the queued operations. `InProgress`
    /// for a nonblocking communicator whose group is still being launched.
    fn group_end(&self) -> Result<Progress>;

    /// A new communicator of the ranks that gave the same `color` (`None` = NCCL_SPLIT_NOCOLOR:
    /// this rank joins none and gets `None`), ordered by `key` then by rank. Every rank of this
    /// communicator must call it.
    fn split(&self, color: Option<u32>, key: u32, cfg: &CommConfig) -> Result<Option<Self>>;

    /// Stops every operation of this communicator, from any thread, at any time; idempotent.
    /// Wakes ranks blocked in its collectives. The reason is kept and reported by later calls.
    fn abort(&self, reason: &str);

    /// Flushes outstanding work and ends the communicator cleanly (before it is dropped).
    fn finalize(&self) -> Result<Progress>;

    /// Registers `bytes` at `addr` with the communicator for faster transfers.
    fn register(&self, addr: usize, bytes: usize) -> Result<RegHandle>;

    /// Releases a registration made by [`Communicator::register`].
    fn deregister(&self, handle: RegHandle) -> Result<()>;
}
