//! One rank's NCCL communicator: its lifecycle, async-error polling, split, abort, finalize.

use crate::abort::NcclAbort;
use crate::create::{config, create, none_made, OutHandle};
use crate::graph_refs::{self, Counted, GraphCount};
use crate::registry::Registry;
use crate::stream::NcclStream;
use crate::wait::Deadline;
use cudarc::driver::{CudaContext, CudaSlice};
use oxccl_core::state::lifecycle::Lifecycle;
use oxccl_core::{
    text, CheckCtx, CommConfig, CommState, Communicator, Device, Error, Feature, FeatureSet,
    Progress, RegHandle, Result, ResultCode,
};
use oxccl_loader::{Library, RawComm};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// What every handle to one NCCL communicator shares. The raw communicator is released exactly
/// once: by abort, by destroy, or when the last handle drops.
pub(crate) struct CommInner {
    pub(crate) lib: Arc<Library>,
    pub(crate) raw: RawComm,
    pub(crate) rank: u32,
    pub(crate) size: u32,
    pub(crate) device: Device,
    pub(crate) ctx: Arc<CudaContext>,
    pub(crate) life: spin::Mutex<Lifecycle>,
    /// Mirrors `life.state() == Ready` so the hot path checks one atomic instead of a lock.
    pub(crate) ready: AtomicBool,
    pub(crate) registry: Registry,
    pub(crate) nonblocking: bool,
    pub(crate) settings: Settings,
    pub(crate) scratch: OnceLock<CudaSlice<f32>>,
    /// Set once by whichever path releases the raw communicator (see `release`).
    pub(crate) released: AtomicBool,
    /// Serializes every call that reaches NCCL on this communicator except abort and poll
    /// (NCCL forbids overlapping calls on one communicator): issue, split, shrink, finalize,
    /// registration, windows. Uncontended it costs one atomic exchange each way.
    calls: std::sync::Mutex<()>,
    /// Held shared by the calls that may run during an abort from another thread (poll, a
    /// premul-sum op's destroy) and exclusively by [`CommInner::release`], so the raw
    /// communicator is never freed while one of them uses it.
    pub(crate) raw_use: spin::RwLock<()>,
    /// The live graphs (and open captures) holding operations of this communicator: while
    /// any does, NCCL's release waits for them, so it runs on a detached thread.
    pub(crate) graphs: GraphCount,
}

impl Counted for CommInner {
    fn graph_count(&self) -> &GraphCount {
        &self.graphs
    }
}

// SAFETY: `raw` is an opaque NCCL handle. NCCL allows a communicator to be used from any thread
// (one at a time for operations, which the unsafe `issue` contract and the safe `Comm` enforce),
// and `ncclCommAbort` / `ncclCommGetAsyncError` from any thread at any time.
unsafe impl Send for CommInner {}
// SAFETY: as above; every mutable field is behind a lock or an atomic.
unsafe impl Sync for CommInner {}

impl CommInner {
    pub(crate) fn is_released(&self) -> bool {
        self.released.load(Ordering::Acquire)
    }

    /// Held while the raw communicator is used by a call that an abort may race with: while
    /// it is held and [`CommInner::is_released`] is false, the communicator stays live.
    pub(crate) fn use_raw(&self) -> spin::RwLockReadGuard<'_, ()> {
        self.raw_use.read()
    }

    /// The call lock (see `calls`); a poisoned lock only means another call panicked, and
    /// guards no data.
    pub(crate) fn serial(&self) -> std::sync::MutexGuard<'_, ()> {
        self.calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Runs a lifecycle transition and refreshes the hot-path mirror.
    pub(crate) fn transition<T>(&self, f: impl FnOnce(&mut Lifecycle) -> T) -> T {
        let mut life = self.life.lock();
        let out = f(&mut life);
        self.ready
            .store(life.state() == CommState::Ready, Ordering::Release);
        out
    }

    pub(crate) fn state(&self) -> CommState {
        self.life.lock().state()
    }

    /// The asynchronous error, and the end of a nonblocking init (see [`Communicator::poll`]).
    pub(crate) fn poll(&self) -> Result<Progress> {
        let polled = {
            let _live = self.use_raw();
            {
                let life = self.life.lock();
                if life.state().is_dead() || self.is_released() {
                    return life.ensure_ready("poll").map(|_| Progress::Done);
                }
            }
            poll_raw(&self.lib, self.raw)
        };
        match polled {
            Ok(Progress::Done) => {
                self.transition(|l| {
                    if l.state() == CommState::Initializing {
                        l.init_done()
                    } else {
                        Ok(())
                    }
                })?;
                Ok(Progress::Done)
            }
            Ok(Progress::InProgress) => Ok(Progress::InProgress),
            Err(e) => {
                self.transition(|l| l.fail(&text!("{e}")));
                Err(e)
            }
        }
    }
}

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

impl Drop for CommInner {
    /// The last handle: no graph references the communicator any more (each holds a handle),
    /// so the release runs here and never waits for one.
    fn drop(&mut self) {
        let finalized = self.life.lock().state() == CommState::Finalized;
        if !self.released.swap(true, Ordering::AcqRel) {
            self.release_raw(finalized);
        }
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

/// What a backend hands every communicator it makes (and a parent hands its children).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    /// How long nonblocking calls may stay in progress.
    pub(crate) timeout: Duration,
    /// The features communicators may use: the library's, less any the user hid.
    pub(crate) features: FeatureSet,
}

/// Parameters of a communicator about to be wrapped.
pub(crate) struct Raw {
    pub(crate) raw: RawComm,
    pub(crate) rank: u32,
    pub(crate) size: u32,
    pub(crate) device: Device,
    pub(crate) nonblocking: bool,
    pub(crate) initializing: bool,
}

impl NcclComm {
    pub(crate) fn wrap(
        lib: Arc<Library>,
        ctx: Arc<CudaContext>,
        r: Raw,
        settings: Settings,
    ) -> NcclComm {
        let life = if r.initializing {
            Lifecycle::initializing()
        } else {
            Lifecycle::ready()
        };
        NcclComm {
            inner: Arc::new(CommInner {
                lib,
                raw: r.raw,
                rank: r.rank,
                size: r.size,
                device: r.device,
                ctx,
                ready: AtomicBool::new(life.state() == CommState::Ready),
                life: spin::Mutex::new(life),
                registry: Registry::default(),
                nonblocking: r.nonblocking,
                settings,
                scratch: OnceLock::new(),
                released: AtomicBool::new(false),
                calls: std::sync::Mutex::new(()),
                raw_use: spin::RwLock::new(()),
                graphs: GraphCount::default(),
            }),
        }
    }

    /// The library this communicator was made by.
    pub fn library(&self) -> &Arc<Library> {
        &self.inner.lib
    }

    /// The CUDA context of its device.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.inner.ctx
    }

    /// A backend for this communicator's library with its settings (timeout, hidden
    /// features): for the groups of the thread ([`oxccl_core::Backend::group_start`]).
    pub fn backend(&self) -> crate::NcclBackend {
        crate::NcclBackend::from_parts(self.inner.lib.clone(), self.inner.settings)
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

    pub(crate) fn check_ctx(&self) -> CheckCtx<'_> {
        CheckCtx {
            rank: self.inner.rank,
            size: self.inner.size,
            features: &self.inner.settings.features,
        }
    }

    pub(crate) fn ensure_ready(&self, attempted: &'static str) -> Result<()> {
        if self.inner.ready.load(Ordering::Acquire) {
            return Ok(());
        }
        self.inner.life.lock().ensure_ready(attempted)
    }

    /// Runs a lifecycle transition and refreshes the hot-path mirror.
    pub(crate) fn transition<T>(&self, f: impl FnOnce(&mut Lifecycle) -> T) -> T {
        self.inner.transition(f)
    }

    /// Ready for an operation: the hot path reads one atomic; a communicator still
    /// initializing (nonblocking init) is waited for first (see [`NcclComm::wait_ready`]).
    pub(crate) fn ready_for(&self, attempted: &'static str) -> Result<()> {
        if self.inner.ready.load(Ordering::Acquire) {
            return Ok(());
        }
        if self.state() == CommState::Initializing {
            self.wait_ready("nonblocking init")?;
        }
        self.inner.life.lock().ensure_ready(attempted)
    }

    /// Turns an NCCL return code into a result, waiting out InProgress on a nonblocking
    /// communicator and recording fatal failures in the lifecycle.
    pub(crate) fn finish(&self, code: i32, what: &str) -> Result<()> {
        if code == ResultCode::IN_PROGRESS.0 && self.inner.nonblocking {
            return self.wait_ready(what);
        }
        if code != 0 && self.state().is_aborted() {
            // Cut short by an abort from another thread: NCCL says only "internal error" (and
            // its last-error text belongs to a freed communicator), so say why it stopped.
            let reason = self.inner.life.lock().reason().to_string();
            return Err(Error::Aborted {
                reason: text!("{what} cut short: {reason} (NCCL returned code {code})"),
            });
        }
        let r = self.inner.lib.check(code, self.inner.raw);
        if let Err(e) = &r {
            if !matches!(code, 4 | 5) {
                self.transition(|l| l.fail(&text!("{what}: {e}")));
            }
        }
        r
    }

    /// Polls until no nonblocking call is in progress, bounded by the communicator's timeout
    /// ([`NcclComm::timeout`]); [`Error::Timeout`] naming `what` past it. A communicator still
    /// initializing at the deadline (a nonblocking init that never completed) is aborted, with
    /// a reason saying so, in the background
    /// ([`oxccl_core::CommAbort::abort_in_background`]): the timeout returns at once, the state
    /// is [`CommState::Aborting`] until NCCL's abort returns, then [`CommState::Aborted`]
    /// ([`oxccl_core::pending_aborts`] counts the aborts still running).
    pub fn wait_ready(&self, what: &str) -> Result<()> {
        let r = Deadline::after(self.inner.settings.timeout).poll(what, || self.poll());
        if let Err(Error::Timeout { after_ms, .. }) = &r {
            if self.state() == CommState::Initializing {
                self.inner
                    .abort_in_background(&format!("{what} timed out after {after_ms} ms"));
            }
        }
        r
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

    /// A communicator of this one's ranks minus `exclude` (NCCL 2.27+), e.g. after a peer died.
    /// With `abort_parent`, ongoing operations of this communicator are stopped first.
    pub fn shrink(
        &self,
        exclude: &[u32],
        cfg: &CommConfig,
        abort_parent: bool,
    ) -> Result<NcclComm> {
        let _serial = self.inner.serial();
        self.inner.settings.features.require(Feature::Shrink)?;
        if !abort_parent {
            self.ensure_ready("shrink")?;
        }
        let mut list = Vec::with_capacity(exclude.len());
        for &r in exclude {
            oxccl_core::check::rank_arg(&self.check_ctx(), "exclude", r)?;
            list.push(r as i32);
        }
        if list.len() >= self.inner.size as usize {
            return Err(Error::invalid(
                "exclude",
                format_args!(
                    "fewer ranks than the communicator has ({})",
                    self.inner.size
                ),
            ));
        }
        let f = self
            .inner
            .lib
            .api()
            .comm_shrink
            .ok_or(crate::absent::feature_symbol(
                Feature::Shrink,
                "ncclCommShrink",
            ))?;
        let mut buf = config(&self.inner.lib, cfg)?;
        let new = OutHandle::new();
        let code = create(&mut buf, &new, |new, cfg_ptr| {
            // SAFETY: live communicator; `list` outlives the call; `cfg_ptr` is null or points
            // to a config built for the loaded version, alive for the call.
            Ok(unsafe {
                f(
                    self.inner.raw,
                    list.as_mut_ptr(),
                    list.len() as i32,
                    new,
                    cfg_ptr,
                    i32::from(abort_parent),
                )
            })
        })?;
        self.adopt_child("shrink", code, &new, false, cfg)?
            .ok_or_else(|| none_made("shrink"))
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
        unsafe { crate::issue::issue(self, op, stream) }
    }

    fn split(&self, color: Option<u32>, key: u32, cfg: &CommConfig) -> Result<Option<NcclComm>> {
        let _serial = self.inner.serial();
        self.inner.settings.features.require(Feature::Split)?;
        self.ensure_ready("split")?;
        let color = match color {
            None => -1,
            Some(c) => i32::try_from(c)
                .map_err(|_| Error::invalid("color", format_args!("0..={}, got {c}", i32::MAX)))?,
        };
        let key = i32::try_from(key)
            .map_err(|_| Error::invalid("key", format_args!("0..={}, got {key}", i32::MAX)))?;
        let f = self
            .inner
            .lib
            .api()
            .comm_split
            .ok_or(crate::absent::feature_symbol(
                Feature::Split,
                "ncclCommSplit",
            ))?;
        let mut buf = config(&self.inner.lib, cfg)?;
        let new = OutHandle::new();
        let code = create(&mut buf, &new, |new, cfg_ptr| {
            // SAFETY: live, ready communicator; `cfg_ptr` is null (inherit the parent's config)
            // or a config built for the loaded version and alive for the call.
            Ok(unsafe { f(self.inner.raw, color, key, new, cfg_ptr) })
        })?;
        // `new` lives here until `adopt_child` has waited for NCCL to fill it.
        self.adopt_child("split", code, &new, true, cfg)
    }

    /// See [`NcclComm::abort`]: never waits; with live graphs the library's release finishes
    /// when the last graph is dropped.
    fn abort(&self, reason: &str) {
        self.inner.abort(reason);
    }

    /// Refused with [`Error::InvalidState`] while live CUDA graphs hold operations of this
    /// communicator: NCCL's finalize waits until they are destroyed (drop them first, or use
    /// [`NcclComm::destroy`], which then skips the finalize).
    fn finalize(&self) -> Result<Progress> {
        let _serial = self.inner.serial();
        self.inner.settings.features.require(Feature::Finalize)?;
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
        let f = self
            .inner
            .lib
            .api()
            .comm_finalize
            .ok_or(crate::absent::feature_symbol(
                Feature::Finalize,
                "ncclCommFinalize",
            ))?;
        // SAFETY: live communicator; finalize flushes its outstanding work.
        let code = unsafe { f(self.inner.raw) };
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

    fn register_window(&self, addr: usize, bytes: usize) -> Result<RegHandle> {
        // NCCL_WIN_COLL_SYMMETRIC: every rank registers a buffer of the same size.
        let w = crate::NcclComm::window_register(self, addr, bytes, 1)?;
        Ok(RegHandle {
            raw: w.raw,
            addr: w.addr,
            bytes: w.bytes,
        })
    }

    fn deregister_window(&self, handle: RegHandle) -> Result<()> {
        crate::NcclComm::window_deregister(
            self,
            crate::registry::Window {
                raw: handle.raw,
                addr: handle.addr,
                bytes: handle.bytes,
            },
        )
    }
}

/// `ncclCommGetAsyncError` as progress: Done, InProgress, or the communicator's error.
pub(crate) fn poll_raw(lib: &Library, raw: RawComm) -> Result<Progress> {
    let f = lib
        .api()
        .comm_get_async_error
        .ok_or(crate::absent::base_symbol("ncclCommGetAsyncError"))?;
    let mut async_code = 0i32;
    // SAFETY: callers pass a live communicator; the out-pointer is a valid local.
    let code = unsafe { f(raw, &mut async_code) };
    lib.check(code, raw)?;
    lib.progress(async_code, raw)
}
