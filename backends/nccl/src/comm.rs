//! One rank's NCCL communicator: its lifecycle, async-error polling, split, abort, finalize.

use crate::abort::NcclAbort;
use crate::comm_inner::{poll_raw, CommInner, Raw, Settings};
use crate::create::{config, create, discard, discard_in_background, query_rank_size, OutHandle};
use crate::graph_refs;
use crate::registry::Window;
use crate::stream::NcclStream;
use crate::wait::Deadline;
use cudarc::driver::CudaContext;
use oxccl_core::peer_kernels::KernelAlgo;
use oxccl_core::state::lifecycle::Lifecycle;
use oxccl_core::{
    text, CheckCtx, CommConfig, CommState, Communicator, ConfigField, Device, Error, Feature,
    FeatureSet, Progress, RegHandle, Result, ResultCode,
};
use oxccl_loader::{Library, RawComm};
use std::sync::Arc;
use std::time::Duration;

impl Drop for NcclComm {
    /// Releases the communicator (destroy after a clean finalize, abort otherwise), even while
    /// abort handles live: they then report the final state. Never waits for live CUDA graphs
    /// holding its operations: the library's release then finishes when the last graph is
    /// dropped.
    fn drop(&mut self) {
        let finalized = self.inner.state() == CommState::Finalized;
        self.inner.release(finalized);
        self.inner.transition(|l| l.destroy());
    }
}

/// One rank of an NCCL communicator.
///
/// Not `Clone`: one handle per rank. Every call that reaches NCCL on it (issue, split, shrink,
/// finalize, registration, windows) takes the communicator's call lock, so threads sharing a
/// `&NcclComm` serialize instead of overlapping (NCCL forbids overlapping calls on one
/// communicator). Abort and poll take no such lock: they go through [`NcclAbort`] from any
/// thread at any time. Dropping it releases the communicator (abort, unless finalized), even
/// while abort handles live.
///
/// Safe code cannot clone it to make calls from two handles:
/// ```compile_fail
/// fn two_handles(c: &oxccl_nccl::NcclComm) -> oxccl_nccl::NcclComm {
///     c.clone()
/// }
/// ```
/// but shares it (`Send + Sync`), and the abort handle is `Clone`:
/// ```
/// fn shares<T: Send + Sync>() {}
/// fn clones<T: Clone + Send + Sync + 'static>() {}
/// shares::<oxccl_nccl::NcclComm>();
/// clones::<oxccl_nccl::NcclAbort>();
/// ```
pub struct NcclComm {
    pub(crate) inner: Arc<CommInner>,
}

impl std::fmt::Debug for NcclComm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NcclComm")
            .field("rank", &self.inner.rank)
            .field("size", &self.inner.size)
            .field("device", &self.inner.device)
            .field("state", &self.state())
            .finish()
    }
}

impl NcclComm {
    /// A handle to a communicator NCCL made (see [`CommInner::new`]).
    pub(crate) fn wrap(
        lib: Arc<Library>,
        ctx: Arc<CudaContext>,
        r: Raw,
        settings: Settings,
    ) -> NcclComm {
        NcclComm {
            inner: Arc::new(CommInner::new(lib, ctx, r, settings)),
        }
    }

    /// The library this communicator was made by.
    pub fn library(&self) -> &Arc<Library> {
        &self.inner.lib
    }

    /// Whether this thread has a group open on this communicator's library (a group spans
    /// every communicator of the library that opened it).
    pub fn group_open(&self) -> bool {
        crate::group_call::is_open(&self.inner.lib)
    }

    /// The CUDA context of its device.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.inner.ctx
    }

    /// The raw `ncclComm_t`, for calls oxccl does not wrap. Do not destroy or abort it; calls
    /// made with it take no call lock, so they must not overlap this communicator's calls.
    pub fn raw(&self) -> RawComm {
        self.inner.raw
    }

    /// Whether init, split, finalize and group end return at once.
    pub fn is_nonblocking(&self) -> bool {
        self.inner.nonblocking
    }

    /// How long nonblocking calls may stay in progress.
    pub fn timeout(&self) -> Duration {
        self.inner.settings.timeout
    }

    /// What this communicator hands its children.
    pub(crate) fn settings(&self) -> Settings {
        self.inner.settings
    }

    /// What the argument checks need of this communicator.
    pub(crate) fn check_ctx(&self) -> CheckCtx<'_> {
        self.inner.check_ctx()
    }

    /// `Ok` when ready; else the lifecycle's refusal of `attempted`.
    pub(crate) fn ensure_ready(&self, attempted: &'static str) -> Result<()> {
        self.inner.ensure_ready(attempted)
    }

    /// The function of a gated feature, `pick`ed from the loaded table: refused when this
    /// communicator may not use `feature` (the release predates it, or the user hid it) or the
    /// library does not export `symbol`.
    pub(crate) fn gated<F>(
        &self,
        feature: Feature,
        pick: impl FnOnce(&oxccl_loader::Api) -> Option<F>,
        symbol: &'static str,
    ) -> Result<F> {
        let f = pick(self.inner.lib.api());
        crate::absent::gated(&self.inner.settings.features, feature, f, symbol)
    }

    /// Runs a lifecycle transition and refreshes the hot-path mirror.
    pub(crate) fn transition<T>(&self, f: impl FnOnce(&mut Lifecycle) -> T) -> T {
        self.inner.transition(f)
    }

    /// Turns an NCCL return code into a result, waiting out InProgress on a nonblocking
    /// communicator and recording fatal failures in the lifecycle.
    pub(crate) fn finish(&self, code: i32, what: &str) -> Result<()> {
        self.inner.finish(code, what)
    }

    /// Polls until no nonblocking call is in progress, bounded by the communicator's timeout
    /// ([`NcclComm::timeout`]); [`Error::Timeout`] naming `what` past it. A communicator still
    /// initializing at the deadline (a nonblocking init that never completed) is aborted, with
    /// a reason saying so, in the background
    /// ([`oxccl_core::CommAbort::abort_in_background`]): the timeout returns at once, the state
    /// is [`CommState::Aborting`] until NCCL's abort returns, then [`CommState::Aborted`]
    /// ([`oxccl_core::pending_aborts`] counts the aborts still running).
    pub fn wait_ready(&self, what: &str) -> Result<()> {
        self.inner.wait_ready(what)
    }

    /// Aborts without waiting for NCCL's release: see
    /// [`oxccl_core::CommAbort::abort_in_background`].
    pub fn abort_in_background(&self, reason: &str) {
        self.inner.abort_in_background(reason);
    }

    /// Stops this communicator from any thread. Equivalent to [`Communicator::abort`].
    ///
    /// Its state is Aborted at once for every handle, and it never waits: while live CUDA
    /// graphs ([`crate::NcclGraph`]) hold operations of this communicator, NCCL's abort waits
    /// until they are destroyed, so it runs on a detached thread named `oxccl-abort`. NCCL sets
    /// its abort flag first (peers blocked on this rank are woken at once); with live graphs
    /// the library's release finishes when the last graph is dropped. Only captures begun with
    /// [`oxccl_core::Capture::begin_capture`] on an [`NcclStream`] are counted.
    pub fn abort(&self, reason: &str) {
        Communicator::abort(self, reason)
    }

    /// Ends the communicator: finalize (when the library has it and it is ready), then destroy.
    /// A communicator that failed or was aborted is released without waiting on peers.
    ///
    /// While live CUDA graphs hold its operations, NCCL's finalize and destroy would wait
    /// until they are destroyed: the finalize is skipped and the destroy runs on a detached
    /// thread (as [`NcclComm::abort`]); the library's release finishes when the last graph is
    /// dropped.
    pub fn destroy(self) -> Result<()> {
        let state = self.state();
        let mut result = Ok(());
        if state == CommState::Ready
            && self.inner.settings.features.has(Feature::Finalize)
            && graph_refs::release_inline(self.inner.graphs.live())
        {
            result = self.finalize().map(|_| ());
        }
        let finalized = self.state() == CommState::Finalized;
        self.inner
            .release(finalized || state == CommState::Ready && result.is_ok());
        self.transition(|l| l.destroy());
        result
    }

    /// Settles this parent after a split (`wait_always`: NCCL fills the child only once the
    /// parent leaves InProgress, NVIDIA/nccl#1472, and may return Success before it does) or a
    /// shrink, then adopts the child it made (`None`: no child, e.g. NCCL_SPLIT_NOCOLOR). A
    /// nonblocking parent that stays in progress past the time limit is aborted in the
    /// background: the timeout returns at once, the parent is `Aborting` until NCCL's abort
    /// returns (see [`oxccl_core::CommAbort::abort_in_background`]).
    pub(crate) fn adopt_child(
        &self,
        what: &'static str,
        code: i32,
        out: &OutHandle,
        wait_always: bool,
        cfg: &CommConfig,
    ) -> Result<Option<NcclComm>> {
        let in_progress = code == ResultCode::IN_PROGRESS.0;
        if !in_progress || !self.is_nonblocking() {
            self.finish(code, what)?;
        }
        if self.is_nonblocking() && (in_progress || wait_always) {
            if let Err(e) = self.wait_ready(what) {
                if let Error::Timeout { after_ms, .. } = &e {
                    // The parent is stuck in the call: nothing else can run on it.
                    self.abort_in_background(&format!(
                        "nonblocking {what} timed out after {after_ms} ms"
                    ));
                }
                return Err(e);
            }
        }
        // NCCL writes the handle during the call, or (nonblocking) by the time the parent
        // left InProgress, which the wait above saw.
        let raw = out.read();
        if raw.is_null() {
            return Ok(None);
        }
        self.child(raw, cfg).map(Some)
    }

    /// Wraps a child NCCL made from this communicator: waits for a nonblocking child to be
    /// ready (bounded by the time limit), reads its rank and size; on failure it is discarded,
    /// in the background when the limit passed (the timeout returns at once; the discard is
    /// counted by [`oxccl_core::pending_aborts`]).
    fn child(&self, raw: RawComm, cfg: &CommConfig) -> Result<NcclComm> {
        let lib = self.library();
        let nonblocking = if cfg.is_set(ConfigField::Blocking) {
            cfg.is_nonblocking()
        } else {
            self.is_nonblocking()
        };
        let ready = if nonblocking {
            Deadline::after(self.timeout()).poll("child communicator", || poll_raw(lib, raw))
        } else {
            Ok(())
        };
        let (rank, size) = match ready.and_then(|()| query_rank_size(lib, raw)) {
            Ok(n) => n,
            Err(e @ Error::Timeout { .. }) => {
                discard_in_background(lib, raw);
                return Err(e);
            }
            Err(e) => {
                discard(lib, raw);
                return Err(e);
            }
        };
        let r = Raw {
            raw,
            rank,
            size,
            device: oxccl_core::Communicator::device(self),
            nonblocking,
            initializing: false,
            // NCCL's child takes the fields its config leaves unset from the parent.
            signals: oxccl_core::one_sided::SignalLimits::from_config(cfg, self.inner.signals),
        };
        Ok(NcclComm::wrap(
            lib.clone(),
            self.context().clone(),
            r,
            self.settings(),
        ))
    }

    /// How many all-reduces oxccl's kernels ran (or captured) on this communicator:
    /// (one-shot, two-shot).
    pub fn peer_kernel_calls(&self) -> (u64, u64) {
        (
            self.peer_kernel_calls_of(KernelAlgo::OneShot),
            self.peer_kernel_calls_of(KernelAlgo::TwoShot),
        )
    }

    /// How many of the kernels' launches on this communicator were numbered for following
    /// (each block then waits only for the same block of the call before, where nothing ran
    /// between): fewer than could be while the kernels report that other grids run between
    /// calls (see `oxccl_core::peer_kernels::follow::backoff`).
    pub fn peer_kernel_numbered(&self) -> u64 {
        self.inner
            .peer
            .read()
            .as_ref()
            .map_or(0, |g| g.order.lock().numbered)
    }

    /// How many of the kernels' launches on this communicator wrote their call's end mark
    /// (a process group's eager calls of fewer than 8 blocks, on compute capability 9.0 and up
    /// where the device waits for 64-bit values: see [`oxccl_core::Communicator::issue_ended`]).
    pub fn peer_kernel_marked(&self) -> u64 {
        self.inner
            .peer
            .read()
            .as_ref()
            .map_or(0, |g| g.order.lock().marked)
    }

    /// How many calls `algo` ran (or captured) on this communicator.
    pub fn peer_kernel_calls_of(&self, algo: KernelAlgo) -> u64 {
        self.inner.peer.read().as_ref().map_or(0, |g| g.calls(algo))
    }

    /// Registers a window over `bytes` at `addr` (NCCL 2.27+; collective: every rank calls it).
    /// On a nonblocking communicator it waits for NCCL to finish, bounded by
    /// [`NcclComm::timeout`]; past it, [`Error::Timeout`], and a window NCCL completes
    /// later is not tracked here: it goes with the communicator (abort or destroy).
    pub fn window_register(&self, addr: usize, bytes: usize, flags: i32) -> Result<Window> {
        let _serial = self.inner.serial();
        self.inner
            .settings
            .features
            .require(Feature::WindowRegistration)?;
        self.ensure_ready("register a window")?;
        self.inner.registry.window_register(
            &self.inner.lib,
            self.inner.raw,
            addr,
            bytes,
            flags,
            |code| self.settle_window(code, "register a window"),
        )
    }

    /// Releases a window made by [`NcclComm::window_register`]. Once NCCL accepted
    /// the call the window is forgotten here even if the wait for it times out (NCCL finishes
    /// it; calling again is refused, never a second release).
    pub fn window_deregister(&self, w: Window) -> Result<()> {
        let _serial = self.inner.serial();
        self.ensure_ready("deregister a window")?;
        self.inner
            .registry
            .window_deregister(&self.inner.lib, self.inner.raw, w, |code| {
                self.settle_window(code, "deregister a window")
            })
    }

    /// The end of a window call: on a nonblocking communicator NCCL runs it on its own thread
    /// even when it returns success, and the communicator refuses every call until it is
    /// done ("Attempt to use communicator before the previous operation returned
    /// ncclSuccess", NCCL 2.28.9), so it is polled to the end.
    fn settle_window(&self, code: i32, what: &str) -> Result<()> {
        if code == 0 && self.inner.nonblocking {
            return self.wait_ready(what);
        }
        self.finish(code, what)
    }
}

impl Communicator for NcclComm {
    type Stream = NcclStream;
    type Abort = NcclAbort;

    fn rank(&self) -> u32 {
        self.inner.rank
    }

    fn size(&self) -> u32 {
        self.inner.size
    }

    fn device(&self) -> Device {
        self.inner.device
    }

    fn features(&self) -> &FeatureSet {
        &self.inner.settings.features
    }

    fn state(&self) -> CommState {
        self.inner.state()
    }

    fn poll(&self) -> Result<Progress> {
        self.inner.poll()
    }

    fn new_stream(&self) -> Result<NcclStream> {
        NcclStream::create(&self.inner.ctx)
    }

    fn new_stream_with(&self, priority: oxccl_core::traits::StreamPriority) -> Result<NcclStream> {
        match priority {
            oxccl_core::traits::StreamPriority::Normal => NcclStream::create(&self.inner.ctx),
            oxccl_core::traits::StreamPriority::High => {
                // Lower numbers are higher priorities; the context says how far they go.
                let ctx = &self.inner.ctx;
                ctx.bind_to_thread()
                    .and_then(|()| cudarc::driver::result::stream::get_priority_range())
                    .and_then(|(_, greatest)| ctx.new_stream_with_priority(greatest))
                    .map(NcclStream::new)
                    .map_err(|e| crate::cuda::cuda_error("creating a high-priority stream", e))
            }
        }
    }

    fn abort_handle(&self) -> NcclAbort {
        NcclAbort {
            inner: self.inner.clone(),
        }
    }

    unsafe fn issue(&self, op: &oxccl_core::CommOp<'_>, stream: &NcclStream) -> Result<()> {
        let _serial = self.inner.serial();
        // SAFETY: forwarded contract; the call lock keeps other calls on this communicator out.
        unsafe { crate::issue::issue_op::issue(&self.inner, op, stream) }
    }

    unsafe fn issue_ended(
        &self,
        op: &oxccl_core::CommOp<'_>,
        stream: &NcclStream,
    ) -> Result<Option<crate::stream::NcclEvent>> {
        let _serial = self.inner.serial();
        // SAFETY: forwarded contract; the call lock keeps other calls on this communicator out.
        unsafe { crate::issue::issue_op::issue_ended(&self.inner, op, stream, true) }
    }

    fn split(&self, color: Option<u32>, key: u32, cfg: &CommConfig) -> Result<Option<NcclComm>> {
        let _serial = self.inner.serial();
        self.gated(Feature::Split, |a| a.comm_split, "ncclCommSplit")?;
        // A revoked communicator splits too (NCCL allows it once quiescent).
        self.transition(|l| l.ensure_reshapable("split"))?;
        let color = match color {
            None => -1,
            Some(c) => i32::try_from(c)
                .map_err(|_| Error::invalid("color", format_args!("0..={}, got {c}", i32::MAX)))?,
        };
        let key = i32::try_from(key)
            .map_err(|_| Error::invalid("key", format_args!("0..={}, got {key}", i32::MAX)))?;
        let mut buf = config(&self.inner.lib, cfg)?;
        let new = OutHandle::new();
        let api = self.inner.lib.api();
        let code = create(&mut buf, &new, |new, cfg_ptr| {
            // SAFETY: live, ready communicator; `create` hands a valid out-pointer and a
            // config null (inherit the parent's) or built for the loaded version, alive for the
            // call.
            unsafe { crate::ffi::comm_split(api, self.inner.raw, color, key, new, cfg_ptr) }
        })?;
        // `new` lives here until `adopt_child` has waited for NCCL to fill it.
        self.adopt_child("split", code, &new, true, cfg)
    }

    fn abort(&self, reason: &str) {
        self.inner.abort(reason);
    }

    /// Refused with [`Error::InvalidState`] while live CUDA graphs hold operations of this
    /// communicator: NCCL's finalize waits until they are destroyed (drop them first, or use
    /// [`NcclComm::destroy`], which then skips the finalize).
    fn finalize(&self) -> Result<Progress> {
        let _serial = self.inner.serial();
        self.gated(Feature::Finalize, |a| a.comm_finalize, "ncclCommFinalize")?;
        let live = self.inner.graphs.live();
        if !graph_refs::release_inline(live) {
            return Err(Error::InvalidState {
                state: self.state(),
                attempted: "finalize",
                reason: text!(
                    "{live} live CUDA graph(s) or open capture(s) hold operations of this \
                     communicator, and NCCL's finalize waits until they are destroyed: drop \
                     them first"
                ),
            });
        }
        self.transition(|l| l.finalize_start())?;
        // SAFETY: live communicator (not released while its handle is held).
        let code = unsafe { crate::ffi::comm_finalize(self.inner.lib.api(), self.inner.raw)? };
        self.finish(code, "finalize")?;
        self.transition(|l| l.finalize_done())?;
        Ok(Progress::Done)
    }

    fn register(&self, addr: usize, bytes: usize) -> Result<RegHandle> {
        let _serial = self.inner.serial();
        self.inner
            .settings
            .features
            .require(Feature::BufferRegistration)?;
        self.ensure_ready("register")?;
        self.inner
            .registry
            .register(&self.inner.lib, self.inner.raw, addr, bytes)
    }

    fn deregister(&self, handle: RegHandle) -> Result<()> {
        let _serial = self.inner.serial();
        self.ensure_ready("deregister")?;
        self.inner
            .registry
            .deregister(&self.inner.lib, self.inner.raw, handle)
    }
}

impl oxccl_core::Reshape for NcclComm {
    /// See [`NcclComm::abort`]: never waits; with live graphs the library's release finishes
    /// when the last graph is dropped.
    fn revoke(&self, reason: &str) -> Result<Progress> {
        let _serial = self.inner.serial();
        self.revoke_comm(reason)
    }

    fn shrink(
        &self,
        exclude: &[u32],
        cfg: &CommConfig,
        mode: oxccl_core::traits::ShrinkMode,
    ) -> Result<NcclComm> {
        let _serial = self.inner.serial();
        self.shrink_comm(exclude, cfg, mode)
    }

    fn grow_id(&self) -> Result<oxccl_core::UniqueId> {
        let _serial = self.inner.serial();
        self.grow_id_comm()
    }

    fn grow(&self, size: u32, id: &oxccl_core::UniqueId, cfg: &CommConfig) -> Result<NcclComm> {
        let _serial = self.inner.serial();
        self.grow_comm(size, id, cfg)
    }
}

impl oxccl_core::Suspend for NcclComm {
    fn suspend(&self, release_memory: bool) -> Result<()> {
        let _serial = self.inner.serial();
        self.suspend_comm(release_memory)
    }

    fn resume(&self) -> Result<()> {
        let _serial = self.inner.serial();
        self.resume_comm()
    }

    fn mem_stats(&self) -> Result<oxccl_core::traits::MemStats> {
        let _serial = self.inner.serial();
        self.mem_stats_comm()
    }
}

impl oxccl_core::OneSided for NcclComm {
    unsafe fn put_signal(
        &self,
        put: &oxccl_core::one_sided::PutSignal,
        stream: &NcclStream,
    ) -> Result<()> {
        let _serial = self.inner.serial();
        // SAFETY: forwarded contract.
        unsafe { self.put_signal_comm(put, stream) }
    }

    fn signal(&self, peer: u32, signal: u32, ctx: u32, stream: &NcclStream) -> Result<()> {
        let _serial = self.inner.serial();
        self.signal_comm(peer, signal, ctx, stream)
    }

    fn wait_signal(
        &self,
        waits: &[oxccl_core::one_sided::SignalWait],
        stream: &NcclStream,
    ) -> Result<()> {
        let _serial = self.inner.serial();
        self.wait_signal_comm(waits, stream)
    }
}

impl oxccl_core::Windows for NcclComm {
    fn register_window(&self, addr: usize, bytes: usize) -> Result<RegHandle> {
        // NCCL_WIN_COLL_SYMMETRIC: every rank registers a buffer of the same size.
        let w = NcclComm::window_register(self, addr, bytes, 1)?;
        Ok(RegHandle {
            raw: w.raw,
            addr: w.addr,
            bytes: w.bytes,
        })
    }

    fn deregister_window(&self, handle: RegHandle) -> Result<()> {
        NcclComm::window_deregister(
            self,
            Window {
                raw: handle.raw,
                addr: handle.addr,
                bytes: handle.bytes,
            },
        )
    }
}

impl oxccl_core::PeerKernels for NcclComm {
    /// Sets up peer memory for oxccl's all-reduce kernels (see
    /// [`oxccl_core::PeerKernels::enable_peer_kernels`]): two small all-gathers on `stream` and, between
    /// them, each rank maps every peer's memory (waited for; bounded by
    /// [`NcclComm::timeout`]). Done once: a later call answers whether the kernels are on.
    fn enable_peer_kernels(
        &self,
        stream: &NcclStream,
        policy: oxccl_core::peer_kernels::PeerPolicy,
        table: &oxccl_core::peer_kernels::PeerTable,
    ) -> Result<bool> {
        let _serial = self.inner.serial();
        self.ensure_ready("set up peer kernels")?;
        if self.inner.peer.read().is_some() {
            return Ok(true);
        }
        let member = crate::peer::Member {
            ctx: &self.inner.ctx,
            rank: self.inner.rank,
            size: self.inner.size,
        };
        let mut gather = |mine: &[u8]| crate::gather_bytes::gather_bytes(&self.inner, stream, mine);
        let group = crate::peer::setup(
            &member,
            stream.cuda(),
            &mut gather,
            policy,
            *table,
            self.timeout(),
        )?;
        let on = group.is_some();
        *self.inner.peer.write() = group;
        Ok(on)
    }

    fn peer_policy(&self) -> Option<oxccl_core::peer_kernels::PeerPolicy> {
        self.inner.peer.read().as_ref().map(|g| g.policy)
    }
}

impl oxccl_core::PerCallConfig for NcclComm {
    unsafe fn issue_configured(
        &self,
        op: &oxccl_core::CommOp<'_>,
        stream: &NcclStream,
        cfg: &oxccl_core::coll_config::CollConfig,
    ) -> Result<()> {
        let _serial = self.inner.serial();
        // SAFETY: forwarded contract; the call lock keeps other calls on this communicator out.
        unsafe { crate::issue::configured::issue(&self.inner, op, stream, cfg) }
    }
}
