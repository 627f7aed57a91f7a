//! One rank's communicator of a mock world.

use crate::binding::{Binding, MockAbort, PendingSplit};
use crate::calls::CallLock;
use crate::exec;
use crate::fault::FaultKind;
use crate::fault::FaultPlan;
use crate::group_call;
use crate::job::Job;
use crate::op_desc::OpDesc;
use crate::shared::CommShared;
use crate::stream::MockStream;
use crate::sync::lock;
use oxccl_core::state::lifecycle::Lifecycle;
use oxccl_core::text::text_str;
use oxccl_core::RegHandle;
use oxccl_core::{
    check, text, CheckCtx, CommConfig, CommOp, CommState, Communicator, DataType, Device, Error,
    Feature, FeatureSet, Progress, ReduceOp, Result,
};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// One rank of a mock communicator: real collective semantics on host memory.
///
/// Buffers given to [`oxccl_core::Communicator::issue`] are host addresses; they are read
/// and written by the stream's worker thread when the op runs. Move each rank to its own thread
/// (or drive them all from one thread inside a group).
///
/// Like the NCCL backend's communicators it has a call lock: issue, split, finalize,
/// registration and `create_op` on one `MockComm` never overlap (threads sharing a `&MockComm`
/// take turns; [`MockComm::max_calls_in_flight`] observes it), while abort and poll, also
/// through [`MockComm::abort_handle`](oxccl_core::Communicator::abort_handle), never wait.
///
/// A split with a nonblocking config returns at once (NOCOLOR: `None`); the child is
/// `Initializing` and its `poll` completes the rendezvous: `InProgress` until every rank of the
/// parent has called split and for the configured polls, then `Done`. Until its `poll` has
/// returned `Done`, the child's `rank()` and `size()` are placeholders (0 and 1); `issue` waits
/// for the child to be ready (see [`MockComm::wait_ready`]) and the other calls are refused, as
/// NCCL refuses calls on a communicator still in progress.
/// Aborting or dropping a pending child aborts its rank in the child communicator once that
/// exists, so its peers get `Remote` instead of hanging.
pub struct MockComm {
    /// The communicator and rank, shared with the abort handles.
    b: Arc<Binding>,
    pub(crate) device: Device,
    /// How long an operation waits for a nonblocking init or split before aborting it.
    pub(crate) init_timeout: Duration,
    /// Serializes the calls NCCL would see on this communicator (see `calls`).
    calls: CallLock,
    /// The signal indices and contexts one-sided calls may name, as its config gave them.
    pub(crate) signals: oxccl_core::one_sided::SignalLimits,
}

impl std::fmt::Debug for MockComm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockComm")
            .field("rank", &self.rk())
            .field("size", &self.sh().size)
            .field("state", &oxccl_core::Communicator::state(self))
            .finish()
    }
}

/// A reduction handle of the mock: nothing to release, so dropping it does nothing.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MockRedOp {
    /// The reduction.
    pub op: ReduceOp,
    /// The element type it was created for.
    pub dtype: DataType,
}

impl MockComm {
    pub(crate) fn from_shared(
        shared: Arc<CommShared>,
        rank: u32,
        device: Device,
        init_timeout: Duration,
    ) -> MockComm {
        MockComm {
            b: Arc::new(Binding::bound(shared, rank)),
            device,
            init_timeout,
            calls: CallLock::default(),
            signals: Default::default(),
        }
    }

    /// This communicator with the signal limits `signals` (its config's, or its parent's).
    pub(crate) fn with_signals(mut self, signals: oxccl_core::one_sided::SignalLimits) -> MockComm {
        self.signals = signals;
        self
    }

    /// Calls (issue, split, finalize, registration, `create_op`) inside this communicator
    /// now: 0 or 1, since they take its call lock. A test observable of the rule that calls on
    /// one communicator never overlap.
    pub fn calls_in_flight(&self) -> u32 {
        self.calls.inside()
    }

    /// The most calls ever inside this communicator at once: 1 once a call was made, never
    /// more (two threads sharing a `&MockComm` serialize).
    pub fn max_calls_in_flight(&self) -> u32 {
        self.calls.max_inside()
    }

    /// Calls that found another call of this communicator in progress and waited for it.
    pub fn calls_that_waited(&self) -> u64 {
        self.calls.waited()
    }

    /// The communicator this handle is bound to now.
    pub(crate) fn sh(&self) -> &Arc<CommShared> {
        self.b.sh()
    }

    pub(crate) fn rk(&self) -> u32 {
        self.b.rk()
    }

    /// Polls until a nonblocking init or split has completed, bounded by the init time limit
    /// (the backend's, or [`crate::DEFAULT_INIT_TIMEOUT`] for a world): past it the
    /// communicator is aborted with a reason saying so, in the background
    /// ([`oxccl_core::CommAbort::abort_in_background`]: `Aborting` while a planned slow abort
    /// runs, then `Aborted`), and the error is [`Error::Timeout`] at once. Returns at once
    /// when the communicator is not initializing.
    pub fn wait_ready(&self) -> Result<()> {
        let start = Instant::now();
        let mut spins = 0u32;
        while self.b.state() == CommState::Initializing {
            if self.b.poll()? == Progress::Done {
                break;
            }
            let waited = start.elapsed();
            if waited >= self.init_timeout {
                let after_ms = u64::try_from(waited.as_millis()).unwrap_or(u64::MAX);
                self.b.abort_in_background(&format!(
                    "nonblocking init timed out after {after_ms} ms (limit {} ms)",
                    self.init_timeout.as_millis()
                ));
                return Err(Error::Timeout {
                    what: text!("nonblocking init of rank {}", self.rk()),
                    after_ms,
                });
            }
            spins = spins.saturating_add(1);
            if spins < 100 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        Ok(())
    }

    /// Operations issued on this rank so far (the numbering the fault plan uses).
    pub fn ops_issued(&self) -> u64 {
        self.rs().ops.load(Ordering::Relaxed)
    }

    /// Why the communicator left `Ready` (empty while it has not).
    pub fn reason(&self) -> String {
        lock(&self.rs().life).cycle.reason().to_string()
    }

    fn rs(&self) -> &crate::shared::RankState {
        self.b.rs()
    }

    /// This rank's state (for `window.rs`).
    pub(crate) fn rank_state(&self) -> &crate::shared::RankState {
        self.b.rs()
    }

    /// The features of this communicator's world (for `window.rs`).
    pub(crate) fn shared_features(&self) -> &oxccl_core::FeatureSet {
        &self.sh().features
    }

    pub(crate) fn ctx(&self) -> CheckCtx<'_> {
        CheckCtx {
            rank: self.rk(),
            size: self.sh().size,
            features: &self.sh().features,
        }
    }

    /// Ready, and not inside a nonblocking group end or finalize still reporting `InProgress`
    /// (NCCL refuses such calls: "Attempt to use communicator before the previous operation
    /// returned ncclSuccess").
    fn ensure_ready(&self, attempted: &'static str) -> Result<()> {
        let life = lock(&self.rs().life);
        life.cycle.ensure_ready(attempted)?;
        if life.op_polls > 0 {
            return Err(Error::InvalidState {
                state: life.cycle.state(),
                attempted,
                reason: text!(
                    "the previous nonblocking group end is still in progress: poll until Done"
                ),
            });
        }
        Ok(())
    }

    /// The next sequence number for `op`: per communicator for collectives, per pair for p2p.
    fn next_seq(&self, op: &CommOp<'_>) -> u64 {
        crate::graph::next_seq(self.rs(), op.kind(), op.peer())
    }
}

impl MockComm {
    /// The child of a nonblocking split `seq` still in progress: a placeholder bound when
    /// polled, by the parent's split slot or (across processes) by `task`.
    fn pending_child(
        &self,
        seq: u64,
        task: Option<Arc<crate::mirror::split_task::Task>>,
    ) -> MockComm {
        let sh = self.sh();
        let placeholder = CommShared::new(1, sh.features, FaultPlan::new(), 0, true);
        MockComm {
            b: Arc::new(Binding {
                shared: placeholder,
                rank: 0,
                resolved: OnceLock::new(),
                pending: Some(PendingSplit {
                    parent: sh.clone(),
                    parent_rank: self.rk(),
                    seq,
                    polls: AtomicU32::new(sh.nb_polls),
                    bind: Mutex::new(()),
                    task,
                }),
            }),
            device: self.device,
            init_timeout: self.init_timeout,
            calls: CallLock::default(),
            signals: self.signals,
        }
    }

    /// Split `seq` of a communicator spanning processes (see `procs::split`): the children
    /// span processes too. Waits are bounded by this communicator's init limit.
    fn split_across(
        &self,
        seq: u64,
        color: Option<u32>,
        key: u32,
        cfg: &CommConfig,
    ) -> Result<Option<MockComm>> {
        let (sh, rk, limit) = (self.sh(), self.rk(), self.init_timeout);
        if cfg.is_nonblocking() {
            let task = crate::procs::split::spawn(sh.clone(), rk, seq, color, key, limit)?;
            // NOCOLOR: the task still takes part in the match, and ends by itself.
            let signals = oxccl_core::one_sided::SignalLimits::from_config(cfg, self.signals);
            return Ok(color.map(|_| self.pending_child(seq, Some(task)).with_signals(signals)));
        }
        let child = crate::procs::split::split(sh, rk, seq, color, key, limit)?;
        let signals = oxccl_core::one_sided::SignalLimits::from_config(cfg, self.signals);
        Ok(child.map(|(shared, rank)| {
            MockComm::from_shared(shared, rank, self.device, limit).with_signals(signals)
        }))
    }
}

impl MockComm {
    /// The reduction handle `op` on `dtype` would get, checked as NCCL's backend checks it
    /// (the mock's issue applies reductions itself; this is for tests of the rules).
    pub fn create_op(&self, op: &ReduceOp, dtype: DataType) -> Result<MockRedOp> {
        let _call = self.calls.enter();
        // A reduction handle reduces `dtype` (fp8 needs the library's own, 2.24.3+).
        check::dtype(&self.ctx(), dtype, true)?;
        check::reduce_op(&self.ctx(), dtype, op)?;
        self.ensure_ready("create a reduction")?;
        Ok(MockRedOp { op: *op, dtype })
    }
}

impl Communicator for MockComm {
    type Stream = MockStream;
    type Abort = MockAbort;

    fn rank(&self) -> u32 {
        self.rk()
    }

    fn size(&self) -> u32 {
        self.sh().size
    }

    fn device(&self) -> Device {
        self.device
    }

    fn features(&self) -> &FeatureSet {
        &self.sh().features
    }

    fn state(&self) -> CommState {
        self.b.state()
    }

    fn poll(&self) -> Result<Progress> {
        self.b.poll()
    }

    fn new_stream(&self) -> Result<MockStream> {
        MockStream::new()
    }

    fn new_stream_with(&self, priority: oxccl_core::traits::StreamPriority) -> Result<MockStream> {
        MockStream::with_priority(priority)
    }

    fn abort_handle(&self) -> MockAbort {
        MockAbort { b: self.b.clone() }
    }

    unsafe fn issue(&self, op: &CommOp<'_>, stream: &MockStream) -> Result<()> {
        let _call = self.calls.enter();
        check::op(op, &self.ctx())?;
        self.one_kind(op)?;
        // As the NCCL backend issues it: fp8 that is only moved travels as uint8 on a library
        // without fp8 (the cross-rank matching compares what NCCL would be given).
        let op = &check::wire_op(op, &self.sh().features);
        self.wait_ready()?;
        self.ensure_ready(op.kind().name())?;
        let index = self.rs().ops.fetch_add(1, Ordering::Relaxed);
        let fault = self.sh().plan.fault_for(self.rk(), index);
        if let Some(FaultKind::Fail(code)) = fault {
            let e = Error::Backend {
                code,
                text: text_str(crate::messages::code_text(code)),
                last: text!(
                    "{} (op {index}) on rank {} failed by the fault plan",
                    op.kind(),
                    self.rk()
                ),
            };
            self.sh().fail(self.rk(), e.clone());
            return Err(e);
        }
        let job = Job {
            comm: self.sh().clone(),
            rank: self.rk(),
            desc: OpDesc::of(op),
            seq: self.next_seq(op),
            index,
            fault,
        };
        match group_call::queue(stream.shared(), job) {
            None => Ok(()),
            Some(job) => exec::submit(stream.shared(), vec![job]),
        }
    }

    fn split(&self, color: Option<u32>, key: u32, cfg: &CommConfig) -> Result<Option<MockComm>> {
        let _call = self.calls.enter();
        self.sh().features.require(Feature::Split)?;
        cfg.check_for(self.sh().features.version())?;
        if cfg.is_nonblocking() {
            self.sh().features.require(Feature::NonBlocking)?;
        }
        // NCCL takes both as `int` (color -1 is NOCOLOR): the real backend refuses larger
        // values, and so does the mock, before the call joins any rendezvous.
        if let Some(c) = color.filter(|c| i32::try_from(*c).is_err()) {
            return Err(Error::invalid(
                "color",
                format_args!("0..={}, got {c}", i32::MAX),
            ));
        }
        if i32::try_from(key).is_err() {
            return Err(Error::invalid(
                "key",
                format_args!("0..={}, got {key}", i32::MAX),
            ));
        }
        self.ensure_ready("split")?;
        let seq = self.rs().split_seq.fetch_add(1, Ordering::Relaxed);
        if crate::mirror::spans::spans(self.sh()) {
            return self.split_across(seq, color, key, cfg);
        }
        if cfg.is_nonblocking() {
            // Post the call and return: the child binds when polled (NOCOLOR: no child).
            self.sh()
                .split_post(self.rk(), seq, color, key, color.is_some());
            let signals = oxccl_core::one_sided::SignalLimits::from_config(cfg, self.signals);
            return Ok(color.map(|_| self.pending_child(seq, None).with_signals(signals)));
        }
        // Bounded by the init limit (a process group's timeout), as the init is.
        let joined = self
            .sh()
            .split_join(self.rk(), seq, color, key, self.init_timeout);
        let child = match joined {
            Ok(c) => c,
            Err(e @ Error::Timeout { .. }) => {
                // As NCCL's parent stuck in a split: nothing else can run on it.
                self.b.abort(&format!("{e}"));
                return Err(e);
            }
            Err(e) => {
                self.sh().fail(self.rk(), e.clone());
                return Err(e);
            }
        };
        Ok(child.map(|(shared, rank)| {
            let planned = shared.plan.init_polls(rank);
            if planned.is_some() {
                let mut life = lock(&shared.rank(rank).life);
                life.cycle = Lifecycle::initializing();
                life.init_polls = planned.unwrap_or(0);
            }
            MockComm::from_shared(shared, rank, self.device, self.init_timeout).with_signals(
                oxccl_core::one_sided::SignalLimits::from_config(cfg, self.signals),
            )
        }))
    }

    fn abort(&self, reason: &str) {
        self.b.abort(reason);
    }

    fn finalize(&self) -> Result<Progress> {
        let _call = self.calls.enter();
        self.sh().features.require(Feature::Finalize)?;
        self.ensure_ready("finalize")?;
        {
            let mut life = lock(&self.rs().life);
            life.cycle.finalize_start()?;
            if life.nonblocking {
                // Reports InProgress now and for the configured polls, then Done once drained.
                life.op_polls = self.sh().nb_polls;
                drop(life);
                return Ok(Progress::InProgress);
            }
        }
        self.sh().wait_drained(self.rk(), None);
        self.b.end_finalize(lock(&self.rs().life))
    }

    fn register(&self, addr: usize, bytes: usize) -> Result<RegHandle> {
        let _call = self.calls.enter();
        self.sh().features.require(Feature::BufferRegistration)?;
        self.ensure_ready("register")?;
        if addr == 0 || bytes == 0 {
            return Err(Error::invalid(
                "addr",
                format_args!(
                    "a non-null address and a non-zero length, got {addr:#x} ({bytes} bytes)"
                ),
            ));
        }
        if addr.checked_add(bytes).is_none() {
            return Err(Error::invalid(
                "bytes",
                format_args!(
                    "a length that does not wrap the address space from {addr:#x}, got {bytes}"
                ),
            ));
        }
        let mut regs = lock(&self.rs().regs);
        if regs.0.contains_key(&addr) {
            return Err(Error::invalid(
                "addr",
                format_args!("an address not yet registered: {addr:#x} already is, with rank {} of this communicator", self.rk()),
            ));
        }
        let h = RegHandle {
            raw: regs.1,
            addr,
            bytes,
        };
        // usize::MAX registrations cannot happen; wrapping keeps it panic-free anyway.
        regs.1 = regs.1.wrapping_add(1);
        regs.0.insert(addr, h);
        Ok(h)
    }

    fn deregister(&self, handle: RegHandle) -> Result<()> {
        let _call = self.calls.enter();
        let mut regs = lock(&self.rs().regs);
        if regs.0.get(&handle.addr) == Some(&handle) {
            regs.0.remove(&handle.addr);
            return Ok(());
        }
        Err(Error::invalid(
            "handle",
            format_args!(
                "a handle registered with rank {} of this communicator: none is registered at {:#x}",
                self.rk(), handle.addr
            ),
        ))
    }
}

impl oxccl_core::Reshape for MockComm {
    fn revoke(&self, reason: &str) -> Result<Progress> {
        let _call = self.calls.enter();
        self.sh().features.require(Feature::Revoke)?;
        self.revoke_rank(reason)
    }

    fn shrink(
        &self,
        exclude: &[u32],
        cfg: &CommConfig,
        mode: oxccl_core::traits::ShrinkMode,
    ) -> Result<MockComm> {
        let _call = self.calls.enter();
        self.shrink_rank(exclude, cfg, mode)
    }

    fn grow_id(&self) -> Result<oxccl_core::UniqueId> {
        let _call = self.calls.enter();
        self.grow_id_rank()
    }

    fn grow(&self, size: u32, id: &oxccl_core::UniqueId, cfg: &CommConfig) -> Result<MockComm> {
        let _call = self.calls.enter();
        cfg.check_for(self.sh().features.version())?;
        let signals = oxccl_core::one_sided::SignalLimits::from_config(cfg, self.signals);
        Ok(self.grow_rank(size, id)?.with_signals(signals))
    }
}

impl oxccl_core::Suspend for MockComm {
    fn suspend(&self, release_memory: bool) -> Result<()> {
        let _ = release_memory;
        let _call = self.calls.enter();
        self.suspend_rank()
    }

    fn resume(&self) -> Result<()> {
        let _call = self.calls.enter();
        self.resume_rank()
    }

    fn mem_stats(&self) -> Result<oxccl_core::traits::MemStats> {
        let _call = self.calls.enter();
        self.mem_stats_rank()
    }
}

impl oxccl_core::OneSided for MockComm {
    unsafe fn put_signal(
        &self,
        put: &oxccl_core::one_sided::PutSignal,
        stream: &MockStream,
    ) -> Result<()> {
        let _call = self.calls.enter();
        // SAFETY: forwarded contract.
        unsafe { self.put_signal_rank(put, stream) }
    }

    fn signal(&self, peer: u32, signal: u32, ctx: u32, stream: &MockStream) -> Result<()> {
        let _call = self.calls.enter();
        self.signal_rank(peer, signal, ctx, stream)
    }

    fn wait_signal(
        &self,
        waits: &[oxccl_core::one_sided::SignalWait],
        stream: &MockStream,
    ) -> Result<()> {
        let _call = self.calls.enter();
        self.wait_signal_rank(waits, stream)
    }
}

impl oxccl_core::Windows for MockComm {
    fn register_window(&self, addr: usize, bytes: usize) -> Result<RegHandle> {
        let _call = self.calls.enter();
        self.ensure_ready("register a window")?;
        self.window_add(addr, bytes)
    }

    fn deregister_window(&self, handle: RegHandle) -> Result<()> {
        let _call = self.calls.enter();
        self.window_remove(handle)
    }
}

/// The mock world has no peer memory: its ranks answer as NCCL's ranks of a group spanning
/// nodes do, every call staying on the backend's own collectives.
impl oxccl_core::PeerKernels for MockComm {
    fn enable_peer_kernels(
        &self,
        _stream: &MockStream,
        _policy: oxccl_core::peer_kernels::PeerPolicy,
        _table: &oxccl_core::peer_kernels::PeerTable,
    ) -> Result<bool> {
        Ok(false)
    }

    fn peer_policy(&self) -> Option<oxccl_core::peer_kernels::PeerPolicy> {
        None
    }
}

impl oxccl_core::PerCallConfig for MockComm {
    /// The mock checks the operation and its configuration as NCCL's backend does, then runs
    /// the operation as any other (its results do not depend on NCCL's resources).
    unsafe fn issue_configured(
        &self,
        op: &CommOp<'_>,
        stream: &MockStream,
        cfg: &oxccl_core::coll_config::CollConfig,
    ) -> Result<()> {
        check::configured(&self.ctx(), op, cfg)?;
        // SAFETY: forwarded contract.
        unsafe { self.issue(op, stream) }
    }
}

impl Drop for MockComm {
    fn drop(&mut self) {
        self.b.leave();
    }
}
