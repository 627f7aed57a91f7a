//! Capturing a [`Comm`]'s operations into a CUDA graph and launching it: [`Comm::capture`],
//! [`CommGraph`].
//!
//! While a capture is open, the communicator's typed calls take their cudarc slices on a
//! second stream of the device (made at the first capture) instead of the capturing one:
//! cudarc's event tracking makes the stream that uses a slice wait on the slice's last events,
//! and CUDA forbids a capturing stream to wait on an event recorded outside the capture. The
//! operations themselves go on the communicator's stream and are captured. Refused inside a
//! capture: a barrier (the backend's [`CaptureError::Unsupported`]), and anything that makes
//! the host wait for the stream ([`Comm::synchronize`]: CUDA invalidates the capture).
//!
//! A launch proves the graph's buffers are alive and free, as the process group's does
//! (`oxccl::pg::PgGraph`): it takes each captured buffer by `&mut` (checked by address and
//! size), orders the stream after their earlier uses, launches, and records the launch as their
//! last use. [`Comm::issue`] (raw addresses) inside a capture is captured too, but its buffers
//! are not known to the graph: a graph holding a raw operation launches only through
//! [`CommGraph::replay_unchecked`].

use crate::capture_slot::Recorded;
use crate::comm::{wr, Comm};
use cudarc::driver::{DevicePtrMut, SyncOnDrop};
use oxccl_core::graph_buffers::GraphBuffers;
use oxccl_core::{text, Capture, CaptureError, CommAbort, CommState, Error, Graph, Result};
use oxccl_nccl::{NcclAbort, NcclGraph};
use std::sync::atomic::Ordering;
use std::sync::PoisonError;

impl Comm {
    /// Captures the operations `f` issues on this communicator into a CUDA graph, without
    /// running them. Replay it with [`CommGraph::replay`] (or [`CommGraph::bind`]) as often
    /// as wanted; each launch runs them all again, in order. Every rank captures the same
    /// operations. [`CaptureError::AlreadyCapturing`] when a capture is open; an error of `f`
    /// ends the capture and is returned (no graph). A nonblocking init still running is
    /// waited for first.
    pub fn capture(&mut self, f: impl FnOnce(&mut Comm) -> Result<()>) -> Result<CommGraph> {
        self.wait_ready()?;
        if self.cap().copy.get().is_none() {
            let copy = self
                .stream()
                .context()
                .new_stream()
                .map_err(|e| oxccl_nccl::cuda_error("creating the capture's copy stream", e))?;
            let _ = self.cap().copy.set(copy);
        }
        if self.cap().on.swap(true, Ordering::AcqRel) {
            return Err(CaptureError::AlreadyCapturing
                .error_str("a capture is already open on this communicator"));
        }
        *self
            .cap()
            .rec
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Recorded::default();
        if let Err(e) = self.nccl_stream().begin_capture() {
            self.cap().on.store(false, Ordering::Release);
            return Err(e);
        }
        let body = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(self)));
        self.cap().on.store(false, Ordering::Release);
        let graph = self.nccl_stream().end_capture();
        let rec = std::mem::take(
            &mut *self
                .cap()
                .rec
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        let body = match body {
            Ok(b) => b,
            // The capture is over and the stream usable again: let the panic go on.
            Err(p) => std::panic::resume_unwind(p),
        };
        body?;
        let regions = rec.regions.sorted();
        Ok(CommGraph {
            graph: graph?,
            abort: oxccl_core::Communicator::abort_handle(self.backend()),
            raw_comm: self.backend().raw().0 as usize,
            regions,
            ops: rec.ops,
            has_raw: rec.raw,
        })
    }

    /// Whether a capture is open on this communicator.
    pub fn is_capturing(&self) -> bool {
        self.cap().on.load(Ordering::Relaxed)
    }
}

/// The operations of a [`Comm::capture`], replayed as one CUDA graph on the communicator's
/// stream. Dropping it frees the graph (never waits; launches already made still run).
pub struct CommGraph {
    graph: NcclGraph,
    /// The captured communicator: keeps its state readable, so a launch after it was dropped
    /// or aborted is refused.
    abort: NcclAbort,
    raw_comm: usize,
    regions: GraphBuffers,
    ops: usize,
    has_raw: bool,
}

impl std::fmt::Debug for CommGraph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommGraph")
            .field("ops", &self.ops)
            .field("buffers", &self.regions.len())
            .field("raw_ops", &self.has_raw)
            .finish()
    }
}

/// A launch being prepared: the buffers bound so far, held until the launch is queued.
#[must_use = "nothing runs until CommReplay::replay"]
pub struct CommReplay<'a> {
    graph: &'a CommGraph,
    comm: &'a Comm,
    held: Vec<SyncOnDrop<'a>>,
    bound: GraphBuffers,
    first_error: Option<Error>,
}

impl CommGraph {
    /// Operations captured.
    pub fn ops(&self) -> usize {
        self.ops
    }

    /// Distinct buffers the typed operations use: each launch must be given them all.
    pub fn buffers(&self) -> usize {
        self.regions.len()
    }

    /// Starts a launch on `comm` (the captured communicator) given buffers of several types:
    /// [`CommReplay::buf`] each, then [`CommReplay::replay`].
    pub fn bind<'a, T>(
        &'a self,
        comm: &'a mut Comm,
        buf: &'a mut impl DevicePtrMut<T>,
    ) -> CommReplay<'a> {
        self.unbound(comm).buf(buf)
    }

    /// Launches the graph once on `comm`'s stream, given every buffer its operations use (of
    /// one type; [`CommGraph::bind`] otherwise). Refused: another communicator than the
    /// captured one ([`CaptureError::Mismatch`], argument `comm`), buffers that are not the
    /// captured ones ([`CaptureError::Mismatch`], argument `bufs`), a graph holding a raw
    /// operation ([`CaptureError::Unsupported`]: use [`CommGraph::replay_unchecked`]), a
    /// communicator no longer ready ([`Error::InvalidState`]), a launch inside a capture
    /// ([`CaptureError::Forbidden`]).
    pub fn replay<S: DevicePtrMut<T>, T>(
        &self,
        comm: &mut Comm,
        bufs: &mut [&mut S],
    ) -> Result<()> {
        bufs.iter_mut()
            .fold(self.unbound(comm), |l, b| l.buf(&mut **b))
            .replay()
    }

    /// A launch on `comm` with no buffer bound yet: where [`CommGraph::bind`] and
    /// [`CommGraph::replay`] start.
    fn unbound<'a>(&'a self, comm: &'a Comm) -> CommReplay<'a> {
        CommReplay {
            graph: self,
            comm,
            held: Vec::new(),
            bound: GraphBuffers::default(),
            first_error: None,
        }
    }

    /// Launches the graph on `comm`'s stream without checking or ordering its buffers.
    ///
    /// # Safety
    /// Every buffer of every captured operation must be alive, of its captured length, and
    /// not used by other work until this launch has completed on [`Comm::stream`]; earlier
    /// work on those buffers on other streams must have completed or been waited for.
    pub unsafe fn replay_unchecked(&self, comm: &mut Comm) -> Result<()> {
        self.ready_on(comm)?;
        // SAFETY: the caller's contract covers the buffers; the communicator is the captured
        // one and ready (checked above).
        unsafe { self.graph.replay(comm.nccl_stream()) }
    }

    /// `comm` is the captured communicator, ready, and not capturing.
    fn ready_on(&self, comm: &Comm) -> Result<()> {
        if comm.is_capturing() {
            return Err(oxccl_core::traits::forbidden(
                "launching a communicator's graph",
            ));
        }
        match self.abort.state() {
            CommState::Ready => {}
            state => {
                return Err(Error::InvalidState {
                    state,
                    attempted: "launch a graph",
                    reason: text!("the captured communicator is {state:?}"),
                })
            }
        }
        if comm.backend().raw().0 as usize != self.raw_comm {
            return Err(CaptureError::Mismatch.error_str(
                "argument `comm`: the communicator the graph was captured on, got another",
            ));
        }
        Ok(())
    }
}

impl<'a> CommReplay<'a> {
    /// Binds one more buffer the captured operations use.
    pub fn buf<T>(mut self, buf: &'a mut impl DevicePtrMut<T>) -> Self {
        if self.first_error.is_some() {
            return self;
        }
        if self.comm.is_capturing() {
            self.first_error = Some(oxccl_core::traits::forbidden(
                "launching a communicator's graph",
            ));
            return self;
        }
        let len = buf.len();
        match wr("bufs", self.comm.device(), buf, self.comm.stream()) {
            Ok((raw, sync)) => {
                self.held.push(sync);
                if len > 0 {
                    self.bound
                        .add(raw.addr, len.saturating_mul(std::mem::size_of::<T>()));
                }
            }
            Err(e) => self.first_error = Some(e),
        }
        self
    }

    /// Launches the graph once after the bound buffers' earlier uses; their later uses wait
    /// for it. See [`CommGraph::replay`] for the refusals.
    pub fn replay(mut self) -> Result<()> {
        if let Some(e) = self.first_error.take() {
            return Err(e);
        }
        let g = self.graph;
        g.ready_on(self.comm)?;
        if g.has_raw {
            return Err(CaptureError::Unsupported.error_str(
                "the graph holds a raw operation (Comm::issue) whose buffers it cannot check: \
                 launch it with CommGraph::replay_unchecked",
            ));
        }
        g.regions.check_bound(std::mem::take(&mut self.bound))?;
        // SAFETY: every buffer of the captured operations is bound (same addresses and
        // sizes), held by `&mut` until the guards drop after the launch is queued; the stream
        // waited for their earlier uses when they were bound, and the guards record this
        // launch as their last use.
        unsafe { g.graph.replay(self.comm.nccl_stream())? };
        drop(std::mem::take(&mut self.held));
        Ok(())
    }
}
