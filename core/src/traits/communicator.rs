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

/// How [`Communicator::shrink`] treats the operations of the communicator it shrinks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ShrinkMode {
    /// Nothing is in flight (a healthy or a revoked communicator): NCCL_SHRINK_DEFAULT.
    #[default]
    Default,
    /// Stop the operations in flight first (a peer died while they waited for it; the
    /// communicator need not be revoked): NCCL_SHRINK_ABORT.
    AbortInFlight,
}

/// What a communicator holds of device memory ([`Communicator::mem_stats`], NCCL 2.29.7+:
/// `ncclCommMemStats`), in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct MemStats {
    /// Memory a suspend with `release_memory` frees.
    pub suspendable: u64,
    /// Memory kept while suspended.
    pub persistent: u64,
    /// Every byte the library tracks for the communicator.
    pub total: u64,
    /// Whether the suspendable memory is released now.
    pub suspended: bool,
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

    /// [`Communicator::issue`] with a configuration for this call alone (NCCL 2.31+: the
    /// `nccl…Config` entry points): all_reduce, broadcast, reduce, all_gather,
    /// reduce_scatter, all-to-all, gather and scatter; other operations are refused
    /// (`op`). `cfg` is checked first ([`crate::coll_config::CollConfig::check`]); the
    /// library's own kernels stand aside (the call asks NCCL for its resources). A library
    /// without it refuses with [`crate::Error::Unsupported`].
    ///
    /// # Safety
    /// As [`Communicator::issue`].
    unsafe fn issue_configured(
        &self,
        op: &CommOp<'_>,
        stream: &Self::Stream,
        cfg: &crate::coll_config::CollConfig,
    ) -> Result<()> {
        let _ = (op, stream, cfg);
        self.features()
            .require(crate::feature::Feature::CollConfig)?;
        Err(crate::error::Error::Unsupported {
            feature: crate::feature::Feature::CollConfig,
            missing: crate::feature::Missing::Disabled,
        })
    }

    /// A new communicator of the ranks that gave the same `color` (`None` = NCCL_SPLIT_NOCOLOR:
    /// this rank joins none and gets `None`), ordered by `key` then by rank. Every rank of this
    /// communicator must call it. A nonblocking split that runs past the time limit aborts the
    /// communicator it was waiting on and returns [`crate::Error::Timeout`].
    fn split(&self, color: Option<u32>, key: u32, cfg: &CommConfig) -> Result<Option<Self>>;

    /// Stops every operation of this communicator, from any thread, at any time; idempotent.
    /// Wakes ranks blocked in its collectives. The reason is kept and reported by later calls.
    fn abort(&self, reason: &str);

    /// Stops every operation in flight and refuses new ones, keeping the communicator for a
    /// split or a [`Communicator::shrink`] (NCCL 2.28.7+: `ncclCommRevoke`): state
    /// [`CommState::Revoking`], then [`CommState::Revoked`] once quiescent (`Done`; waited
    /// for, bounded by the communicator's time limit). Allowed on a ready or a failed
    /// communicator (a survivor of a lost peer revokes before it shrinks); again, nothing
    /// changes. Operations it stopped leave their outputs undefined; a revoked communicator is
    /// not finalized, only destroyed (or aborted). Not collective: each rank revokes its own.
    /// A library without it refuses with [`crate::Error::Unsupported`].
    fn revoke(&self, reason: &str) -> Result<Progress> {
        let _ = reason;
        self.features().require(crate::feature::Feature::Revoke)?;
        Err(crate::error::Error::Unsupported {
            feature: crate::feature::Feature::Revoke,
            missing: crate::feature::Missing::Disabled,
        })
    }

    /// A communicator of this one's ranks without `exclude` (NCCL 2.27+: `ncclCommShrink`),
    /// the remaining ranks renumbered in their order (rank `r` becomes `r` minus the excluded
    /// ranks below it). Collective over the ranks that remain, which all give the same
    /// `exclude`; the excluded ranks do not call it. `exclude` is checked first
    /// ([`crate::check::shrink`]: ranks of this communicator, each once, not the caller's).
    /// With [`ShrinkMode::Default`] the communicator must be ready or revoked; with
    /// [`ShrinkMode::AbortInFlight`] it may also have failed, and this rank's operations in
    /// flight are stopped first. The communicator shrunk stays as it was otherwise: the caller
    /// destroys (or aborts) it. A library without it refuses with
    /// [`crate::Error::Unsupported`].
    fn shrink(&self, exclude: &[u32], cfg: &CommConfig, mode: ShrinkMode) -> Result<Self> {
        let _ = (exclude, cfg, mode);
        self.features().require(crate::feature::Feature::Shrink)?;
        Err(crate::error::Error::Unsupported {
            feature: crate::feature::Feature::Shrink,
            missing: crate::feature::Missing::Disabled,
        })
    }

    /// The id of a grow of this communicator (NCCL 2.29+: `ncclCommGetUniqueId`): one running
    /// rank, the grow's root, makes it and gives it to the ranks that join
    /// ([`crate::Backend::join_grown`]). One at a time: a second before the grow completes is
    /// refused by the library.
    fn grow_id(&self) -> Result<crate::id::UniqueId> {
        self.features().require(crate::feature::Feature::Grow)?;
        Err(crate::error::Error::Unsupported {
            feature: crate::feature::Feature::Grow,
            missing: crate::feature::Missing::Disabled,
        })
    }

    /// A communicator of `size` ranks (NCCL 2.29+: `ncclCommGrow`): this one's ranks, each
    /// keeping its rank, and `size - self.size()` new ones joining through
    /// [`crate::Backend::join_grown`]. Collective over the running ranks and the joiners, every
    /// one of them passing the grow's `id` (the running rank that made it with
    /// [`Communicator::grow_id`] is the grow's root; NCCL's other running ranks get it from
    /// their communicator and are given none, which the backend does for them). `size`
    /// above the current size and within `i32` is checked first ([`crate::check::grow`]). The
    /// communicator grown stays as it was: the caller destroys it. A library without it
    /// refuses with [`crate::Error::Unsupported`].
    fn grow(&self, size: u32, id: &crate::id::UniqueId, cfg: &CommConfig) -> Result<Self> {
        let _ = (size, id, cfg);
        self.features().require(crate::feature::Feature::Grow)?;
        Err(crate::error::Error::Unsupported {
            feature: crate::feature::Feature::Grow,
            missing: crate::feature::Missing::Disabled,
        })
    }

    /// Suspends the communicator (NCCL 2.29.7+: `ncclCommSuspend`), releasing its dynamic
    /// device memory with `release_memory`: [`CommState::Suspended`], every operation refused
    /// until [`Communicator::resume`]. Only a ready communicator with nothing in flight is
    /// suspended (the caller synchronizes its streams first).
    fn suspend(&self, release_memory: bool) -> Result<()> {
        let _ = release_memory;
        self.features()
            .require(crate::feature::Feature::SuspendResume)?;
        Err(crate::error::Error::Unsupported {
            feature: crate::feature::Feature::SuspendResume,
            missing: crate::feature::Missing::Disabled,
        })
    }

    /// Resumes a suspended communicator (NCCL 2.29.7+: `ncclCommResume`): ready again.
    fn resume(&self) -> Result<()> {
        self.features()
            .require(crate::feature::Feature::SuspendResume)?;
        Err(crate::error::Error::Unsupported {
            feature: crate::feature::Feature::SuspendResume,
            missing: crate::feature::Missing::Disabled,
        })
    }

    /// The device memory the library holds for this communicator (NCCL 2.29.7+).
    fn mem_stats(&self) -> Result<MemStats> {
        self.features().require(crate::feature::Feature::MemStats)?;
        Err(crate::error::Error::Unsupported {
            feature: crate::feature::Feature::MemStats,
            missing: crate::feature::Missing::Disabled,
        })
    }

    /// Writes `put.send` into rank `put.peer`'s part of a symmetric window and raises a signal
    /// there (NCCL 2.29.2+: `ncclPutSignal`), on `stream`; the peer takes no part until it
    /// waits for the signal ([`Communicator::wait_signal`]), which orders the data before it.
    /// Checked first ([`crate::check::put_signal`]: the window one of this communicator's,
    /// the data within it, the peer a rank). A library without it refuses with
    /// [`crate::Error::Unsupported`].
    ///
    /// # Safety
    /// `put.send` must be valid memory of this communicator's device (host memory for the
    /// mock) of the stated length, untouched by others until the work on `stream` completed.
    unsafe fn put_signal(
        &self,
        put: &crate::signal::PutSignal,
        stream: &Self::Stream,
    ) -> Result<()> {
        let _ = (put, stream);
        self.features().require(crate::feature::Feature::Signals)?;
        Err(crate::error::Error::Unsupported {
            feature: crate::feature::Feature::Signals,
            missing: crate::feature::Missing::Disabled,
        })
    }

    /// Raises signal `signal` of context `ctx` on rank `peer` without data (NCCL 2.29.2+:
    /// `ncclSignal`), on `stream`.
    fn signal(&self, peer: u32, signal: u32, ctx: u32, stream: &Self::Stream) -> Result<()> {
        let _ = (peer, signal, ctx, stream);
        self.features().require(crate::feature::Feature::Signals)?;
        Err(crate::error::Error::Unsupported {
            feature: crate::feature::Feature::Signals,
            missing: crate::feature::Missing::Disabled,
        })
    }

    /// Holds `stream` until every wait of `waits` has its signals, and consumes them (NCCL
    /// 2.29.2+: `ncclWaitSignal`).
    fn wait_signal(
        &self,
        waits: &[crate::signal::SignalWait],
        stream: &Self::Stream,
    ) -> Result<()> {
        let _ = (waits, stream);
        self.features().require(crate::feature::Feature::Signals)?;
        Err(crate::error::Error::Unsupported {
            feature: crate::feature::Feature::Signals,
            missing: crate::feature::Missing::Disabled,
        })
    }

    /// Flushes outstanding work and ends the communicator cleanly (before it is dropped).
    fn finalize(&self) -> Result<Progress>;

    /// Registers `bytes` at `addr` with the communicator for faster transfers.
    fn register(&self, addr: usize, bytes: usize) -> Result<RegHandle>;

    /// Releases a registration made by [`Communicator::register`].
    fn deregister(&self, handle: RegHandle) -> Result<()>;

    /// Puts `bytes` at `addr` in a symmetric window (NCCL 2.27+: `ncclCommWindowRegister`
    /// with `NCCL_WIN_COLL_SYMMETRIC`). The memory must come from the library's allocator
    /// (`ncclMemAlloc`). Collective: every rank of the communicator registers a buffer of the
    /// same size, in the same order relative to its other collectives, or the ranks hang.
    /// A backend without windows refuses with [`crate::error::Error::Unsupported`].
    fn register_window(&self, addr: usize, bytes: usize) -> Result<RegHandle> {
        let _ = (addr, bytes);
        self.features()
            .require(crate::feature::Feature::WindowRegistration)?;
        Err(crate::error::Error::Unsupported {
            feature: crate::feature::Feature::WindowRegistration,
            missing: crate::feature::Missing::Disabled,
        })
    }

    /// Makes the peer memory of oxccl's own all-reduce kernels
    /// ([`crate::peer_kernels`]) under `policy` and `table`, when every rank of the group
    /// can map every other's memory (one node, peer access); returns whether the kernels are
    /// on. From then on each all-reduce runs on the kernel the policy picks, or on NCCL.
    /// Collective: every rank calls it at the same point among its collectives. A backend
    /// without the kernels (the mock world) answers `false`, as NCCL's path does for a group
    /// spanning nodes, and every call keeps its results.
    fn enable_peer_kernels(
        &self,
        stream: &Self::Stream,
        policy: crate::peer_kernels::PeerPolicy,
        table: &crate::peer_kernels::PeerTable,
    ) -> Result<bool> {
        let _ = (stream, policy, table);
        Ok(false)
    }

    /// The policy oxccl's all-reduce kernels run under on this communicator, once
    /// [`Communicator::enable_peer_kernels`] turned them on; `None` (NCCL runs every
    /// all-reduce) otherwise, and always on a backend without them.
    fn peer_policy(&self) -> Option<crate::peer_kernels::PeerPolicy> {
        None
    }

    /// Releases a window made by [`Communicator::register_window`] (collective too, on NCCL).
    fn deregister_window(&self, handle: RegHandle) -> Result<()> {
        let _ = handle;
        self.features()
            .require(crate::feature::Feature::WindowRegistration)?;
        Err(crate::error::Error::Unsupported {
            feature: crate::feature::Feature::WindowRegistration,
            missing: crate::feature::Missing::Disabled,
        })
    }
}
