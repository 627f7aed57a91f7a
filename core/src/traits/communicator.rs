use crate::buf::RegHandle;
use crate::comm_state::CommState;
use crate::config::CommConfig;
use crate::error::Result;
use crate::feature::FeatureSet;
use crate::op::CommOp;
use crate::traits::abort::CommAbort;
use crate::traits::device::Device;
use crate::traits::graph::Capture;
use crate::traits::progress::Progress;

/// The priority of a stream made by [`Communicator::new_stream_with`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum StreamPriority {
    /// The device's default priority (what [`Communicator::new_stream`] makes).
    #[default]
    Normal,
    /// The device's greatest priority: its work is scheduled ahead of queued normal work
    /// (c10d's `is_high_priority_stream`).
    High,
}

/// One rank's membership of a communicator.
///
/// Thread-safety contract: a communicator may be moved between threads and shared with them
/// (`Send + Sync`). NCCL forbids overlapping calls on one communicator, so an implementation
/// serializes them itself: [`Communicator::issue`], split, finalize and registration on one
/// communicator take its call lock, and threads sharing a `&Self` take turns (both backends do;
/// safe code can never make two such calls overlap). Abort, state and poll never take that
/// lock: [`Communicator::abort_handle`] gives a handle for them, usable from any thread at any
/// time. Groups are per thread and belong to the
/// [`Backend`](crate::Backend) ([`Backend::group_start`](crate::Backend::group_start)).
pub trait Communicator: Send + Sync + Sized {
    /// The stream type operations are issued on; every backend's streams can capture a graph
    /// (a backend without graphs refuses [`Capture::begin_capture`] with an error), so generic
    /// code captures without a bound of its own.
    type Stream: Capture;

    /// The handle that aborts, watches and polls this communicator from any thread.
    type Abort: CommAbort;

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

    /// A new stream on this communicator's device (a CUDA stream for NCCL; an executor thread
    /// for the mock).
    fn new_stream(&self) -> Result<Self::Stream>;

    /// [`Communicator::new_stream`] with a priority (a process group's communicator stream,
    /// under `OXCCL_HIGH_PRIORITY`). NCCL makes a CUDA stream of that priority; the mock
    /// records it on the stream.
    fn new_stream_with(&self, priority: StreamPriority) -> Result<Self::Stream>;

    /// A handle that allows only abort, state and poll, from any thread, at any time.
    fn abort_handle(&self) -> Self::Abort;

    /// Issues one operation on `stream`. The backend runs [`crate::check::op`] on `op` inside
    /// `issue` (callers need not): an operation it refuses never reaches the library.
    ///
    /// A communicator still [`CommState::Initializing`] (a nonblocking init or split) is waited
    /// for first: `issue` polls it until it is ready, bounded by the communicator's init time
    /// limit, then issues. An init that runs past its limit aborts the communicator (state
    /// [`CommState::Aborted`], with a reason saying so) and `issue` returns
    /// [`crate::Error::Timeout`] naming what timed out.
    ///
    /// # Safety
    /// The buffers of `op` must be valid for the backend (device memory of this communicator's
    /// device for NCCL, host memory for the mock), of the stated lengths, and stay valid and
    /// untouched by others until the work on `stream` has completed.
    unsafe fn issue(&self, op: &CommOp<'_>, stream: &Self::Stream) -> Result<()>;

    /// [`Communicator::issue`], and the operation's end where issuing it made one: an event
    /// (without timing) that completes once the operation has, with its writes visible to
    /// later work of the device, as one recorded after it would. `None` (the default, and
    /// most operations) leaves the caller to record it. On NCCL's backend a small call of
    /// oxccl's kernels writes its own end mark as it ends, which streams wait for and the host
    /// reads, so no event is recorded after it to take the next kernel's early launch away
    /// (docs/BENCHMARKS.md); the mock makes none.
    ///
    /// # Safety
    /// As [`Communicator::issue`], and outside a graph capture on `stream`.
    unsafe fn issue_ended(
        &self,
        op: &CommOp<'_>,
        stream: &Self::Stream,
    ) -> Result<Option<<Self::Stream as crate::traits::stream::Stream>::Event>> {
        // SAFETY: forwarded contract.
        unsafe { self.issue(op, stream) }.map(|()| None)
    }

    /// A new communicator of the ranks that gave the same `color` (`None` = NCCL_SPLIT_NOCOLOR:
    /// this rank joins none and gets `None`), ordered by `key` then by rank. Every rank of this
    /// communicator must call it. A nonblocking split that runs past the time limit aborts the
    /// communicator it was waiting on and returns [`crate::Error::Timeout`].
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
