//! Capturing a process group's operations into a graph (CUDA graphs on NCCL; a replayed
//! recording on the mock) and launching it: [`ProcessGroup::capture`] and [`PgGraph`].
//!
//! Inside a capture nothing may make the host wait for the group's stream, so the group
//! changes how it issues while a capture is open:
//! - the communicator is made before the capture begins (its creation is collective);
//! - buffers are reached on the group's copy stream, not on the capturing one: cudarc's event
//!   tracking makes the stream that uses a buffer wait on the buffer's last events, and CUDA
//!   forbids a capturing stream to wait on an event recorded outside the capture;
//! - no event is recorded for the works, and they are not queued to the watchdog (nothing
//!   runs until a launch). A work returned inside a capture is *captured*: it completed at
//!   once as far as the host is concerned, [`Work::wait`](super::Work::wait) refuses with
//!   [`Error::Capture`] ([`CaptureError::Forbidden`]) rather than hang or claim the operation
//!   ran, and [`Work::is_captured`](super::Work::is_captured) says so. Each
//!   [`PgGraph::replay`] returns a normal work for that launch, watched like any other;
//! - buffers of the library's allocator ([`crate::buffer::Memory::CommBuf`]) are not
//!   registered or put in windows inside the capture (host calls, collective for windows):
//!   the program prepares them before it ([`ProcessGroup::register_buffer`], or the same
//!   operations run once outside the capture), an operation on a buffer not yet in the mode
//!   the tune table asks for is refused, and the graph keeps those registrations as long as
//!   it lives (see `tuned` for why this design);
//! - refused: the NaN check (it synchronizes the host; refused when the capture begins), a
//!   barrier (it allocates and is meant to be waited on), a nested capture, and making any
//!   group's communicator on the capturing thread (first use of a lazy group or subgroup).
//!
//! The capture belongs to the group, not to a thread: an operation another thread issues on
//! the group while the capture is open is captured too (CUDA records whatever reaches the
//! capturing stream), and its work says so.
//!
//! A launch proves the graph's buffers are alive and free: it takes every buffer the captured
//! operations use by `&mut` (checked against the captured addresses and sizes), makes the
//! group's stream wait for their earlier uses, launches, and records the launch as their last
//! use. So the graph never borrows the buffers between launches, and safe code can neither
//! free nor touch them while a launch may still run, as for any operation.

use super::backend::PgBackend;
use super::capture_state::{Captor, Recorded, OPEN_HERE};
use super::comm_slot::Entry;
use super::elastic::settle_refusal;
use super::inner::PgInner;
use super::inner::ProcessGroup;
use super::issue::SeqKind;
use super::work::WorkOf;
use crate::buffer::{Operand, StreamOf};
use oxccl_core::graph_buffers::GraphBuffers;
use oxccl_core::state::work::WorkInfo;
use oxccl_core::text::Escaped;
use oxccl_core::{
    text, Capture, CaptureError, CommAbort, CommState, DataType, Error, Graph, OpKind, Result,
    Stream,
};
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl<B: PgBackend> PgInner<B> {
    /// `Some` while a capture is open on this group (made with the copy stream the buffers
    /// are reached on), `None` otherwise.
    pub(crate) fn captor(&self) -> Result<Option<Captor<'_, B>>> {
        if !self.capture.is_on() {
            return Ok(None);
        }
        Ok(Some(Captor {
            state: &self.capture,
            copy: self.copy_stream()?,
        }))
    }

    /// Refuses `attempted` inside a capture, saying why it cannot be captured.
    pub(crate) fn refuse_in_capture(&self, attempted: &str, why: &str) -> Result<()> {
        if self.capture.is_on() {
            return Err(CaptureError::Unsupported.error(format_args!(
                "{attempted} cannot be captured into a graph: {why}; issue it outside the capture"
            )));
        }
        Ok(())
    }
}

/// Ends the capture however the closure left (an error, a panic): the stream stops
/// capturing and the group issues normally again.
struct Open<'a, B: PgBackend> {
    inner: &'a PgInner<B>,
    entry: &'a Entry<B>,
    ended: bool,
}

impl<B: PgBackend> Open<'_, B> {
    fn end(mut self) -> (Result<<StreamOf<B> as Capture>::Graph>, Recorded) {
        self.ended = true;
        OPEN_HERE.with(|n| n.set(n.get().saturating_sub(1)));
        self.inner.capture.on.store(false, Ordering::Release);
        let graph = self.entry.stream.end_capture();
        let rec = std::mem::take(&mut *self.inner.capture.rec());
        (graph, rec)
    }
}

impl<B: PgBackend> Drop for Open<'_, B> {
    fn drop(&mut self) {
        if !self.ended {
            OPEN_HERE.with(|n| n.set(n.get().saturating_sub(1)));
            self.inner.capture.on.store(false, Ordering::Release);
            // The graph of an abandoned capture is dropped; an error ending it is only logged.
            if let Err(e) = self.entry.stream.end_capture() {
                log::warn!("ending an abandoned capture: {e}");
            }
            *self.inner.capture.rec() = Recorded::default();
        }
    }
}

impl<B: PgBackend> ProcessGroup<B> {
    /// Captures the operations `f` issues on this group into a graph, without running them
    /// (CUDA graph capture on NCCL; the mock records and replays). Replay it with
    /// [`PgGraph::replay`] as often as wanted: each launch runs them all again, in order.
    ///
    /// Every rank of the group captures the same operations. The communicator is made first
    /// if needed (collective). Inside `f`, issue through this group as usual (its own
    /// methods, coalescing blocks); the works returned there are captured (see
    /// [`super::Work::is_captured`]). Refused with [`Error::Capture`]: a group with the NaN
    /// check on ([`CaptureError::Unsupported`]), a capture already open on the group
    /// ([`CaptureError::AlreadyCapturing`]), and inside `f` a barrier or anything that makes
    /// the host wait for the group's stream, and an operation on a [`Memory::CommBuf`](crate::buffer::Memory::CommBuf) the
    /// group's tune table puts in a mode it is not in yet ([`CaptureError::Unsupported`]:
    /// register it first with [`ProcessGroup::register_buffer`], or run the operations once
    /// before capturing). An error of `f` ends the capture and is returned; no graph is made.
    pub fn capture(&self, f: impl FnOnce(&ProcessGroup<B>) -> Result<()>) -> Result<PgGraph<B>> {
        let inner = &**self.inner();
        if inner.opts.nan_check {
            return Err(CaptureError::Unsupported.error_str(
                "the NaN check (PgOptions::nan_check) reads every input on the host, which a \
                 graph capture forbids: turn it off for a group whose operations are captured",
            ));
        }
        inner.refuse_while_coalescing("capture", "")?;
        let entry = inner.entry("capture")?;
        // Made now: creating a stream inside the capture could synchronize.
        inner.copy_stream()?;
        if inner.capture.on.swap(true, Ordering::AcqRel) {
            return Err(CaptureError::AlreadyCapturing.error(format_args!(
                "a capture is already open on group {} ({}): captures do not nest",
                inner.uid,
                Escaped(&inner.desc)
            )));
        }
        *inner.capture.rec() = Recorded::default();
        if let Err(e) = entry.stream.begin_capture() {
            inner.capture.on.store(false, Ordering::Release);
            return Err(e);
        }
        OPEN_HERE.with(|n| n.set(n.get() + 1));
        let open = Open {
            inner,
            entry: &entry,
            ended: false,
        };
        let body = f(self);
        let (graph, rec) = open.end();
        body?;
        let graph = graph?;
        let pins = entry.regs.pins(&rec.regions);
        Ok(PgGraph {
            pg: self.clone(),
            entry: entry.clone(),
            graph,
            pins,
            regions: rec.regions.sorted(),
            profile: Profile::of(&rec.ops, inner.global_rank),
        })
    }

    /// Whether a capture is open on this group now.
    pub fn is_capturing(&self) -> bool {
        self.inner().capture.is_on()
    }
}

/// The operations of a capture ([`ProcessGroup::capture`]), replayed as one graph. It keeps
/// its group and communicator alive. Dropping it frees the graph (never waits, never
/// panics); launches already made still run.
pub struct PgGraph<B: PgBackend> {
    pg: ProcessGroup<B>,
    entry: Arc<Entry<B>>,
    graph: <StreamOf<B> as Capture>::Graph,
    /// The registered allocations the captured operations use: kept, so their registrations
    /// and windows outlive every launch (see `tuned`).
    pins: Vec<crate::buffer::CommMem>,
    /// The buffers the captured operations use, sorted by address.
    regions: GraphBuffers,
    /// What each launch's work and flight-recorder entry say, made once at capture.
    profile: Profile,
}

/// A launch's description, computed at capture. The recorder's entry (cloned per launch only
/// when the recorder is on) holds the element totals, one tensor each way, not one per
/// captured operation: a few allocations per launch, whatever the graph's length.
struct Profile {
    ops: usize,
    kind: OpKind,
    numel: (usize, usize),
    name: String,
    inputs: Vec<oxccl_rules::recorder::TensorMeta>,
    outputs: Vec<oxccl_rules::recorder::TensorMeta>,
}

impl Profile {
    /// The profile of `ops` captured on global rank `rank`: one collective keeps its own
    /// name ("graph:nccl:all_reduce"), several are named as a coalesced block.
    fn of(ops: &[(OpKind, DataType, usize, usize)], rank: u32) -> Profile {
        let kinds: Vec<OpKind> = ops.iter().map(|o| o.0).collect();
        let numel = ops.iter().fold((0, 0), |(a, b), o| (a + o.2, b + o.3));
        let dtype = ops.first().map_or(DataType::Uint8, |o| o.1);
        let meta = |n: usize| vec![oxccl_rules::recorder::TensorMeta::new(&[n as u64], dtype)];
        Profile {
            ops: ops.len(),
            kind: kinds.first().copied().unwrap_or(OpKind::AllReduce),
            numel,
            name: match kinds[..] {
                [k] if !k.is_p2p() => {
                    format!(
                        "graph:{}",
                        oxccl_rules::recorder::profiling_name(k, rank, None)
                    )
                }
                _ => format!("graph:{}", oxccl_rules::recorder::coalesced_name(&kinds)),
            },
            inputs: meta(numel.0),
            outputs: meta(numel.1),
        }
    }
}

impl<B: PgBackend> std::fmt::Debug for PgGraph<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgGraph")
            .field("group", &self.pg.uid())
            .field("ops", &self.profile.ops)
            .field("buffers", &self.regions.len())
            .field("registered", &self.pins.len())
            .finish()
    }
}

impl<B: PgBackend> PgGraph<B> {
    /// Operations captured (each launch runs them all).
    pub fn ops(&self) -> usize {
        self.profile.ops
    }

    /// Distinct buffers the captured operations use: each launch must be given them all.
    pub fn buffers(&self) -> usize {
        self.regions.len()
    }

    /// The group the graph was captured on.
    pub fn group(&self) -> &ProcessGroup<B> {
        &self.pg
    }

    /// Starts a launch given buffers of several element types: [`Replay::buf`] each buffer
    /// the captured operations use, then [`Replay::replay`].
    pub fn bind<'a, X: Operand<B>>(&'a self, buf: &'a mut X) -> Replay<'a, B> {
        self.unbound().buf(buf)
    }

    /// Launches the graph once on the group's stream, given every buffer its operations use
    /// (all of one type; see [`PgGraph::bind`] to mix types or kinds), and returns the launch's
    /// work (queued to the watchdog like any operation's).
    ///
    /// [`CaptureError::Mismatch`] when `bufs` are not exactly the captured buffers (by
    /// address and size); [`Error::InvalidState`] when the group was destroyed or its
    /// communicator aborted or failed; [`CaptureError::Forbidden`] inside a capture.
    pub fn replay<X: Operand<B>>(&self, bufs: &mut [&mut X]) -> Result<WorkOf<B>> {
        bufs.iter_mut()
            .fold(self.unbound(), |l, b| l.buf(&mut **b))
            .replay()
    }

    /// A launch with no buffer bound yet: where [`PgGraph::bind`] and [`PgGraph::replay`]
    /// start.
    fn unbound(&self) -> Replay<'_, B> {
        Replay {
            graph: self,
            held: Vec::new(),
            bound: GraphBuffers::default(),
            first_error: None,
        }
    }
}

/// A launch being prepared: the buffers bound so far, each held (the group's stream waits
/// for its earlier uses) until the launch is queued.
#[must_use = "nothing runs until Replay::replay"]
pub struct Replay<'a, B: PgBackend> {
    graph: &'a PgGraph<B>,
    held: Vec<B::Access<'a>>,
    bound: GraphBuffers,
    first_error: Option<Error>,
}

impl<'a, B: PgBackend> Replay<'a, B> {
    /// Binds one more buffer the captured operations use.
    pub fn buf<X: Operand<B>>(mut self, buf: &'a mut X) -> Self {
        if self.first_error.is_some() {
            return self;
        }
        let g = self.graph;
        if g.pg.inner().capture.is_on() {
            // Taking the buffer on the capturing stream would wait on its earlier events.
            self.first_error = Some(oxccl_core::traits::forbidden(
                "launching a graph of the group",
            ));
            return self;
        }
        let len = buf.numel();
        match buf.write("bufs", g.pg.inner().opts.device(), &g.entry.stream) {
            Ok((raw, access)) => {
                self.held.push(access);
                if len > 0 {
                    self.bound
                        .add(raw.addr, len.saturating_mul(std::mem::size_of::<X::Elem>()));
                }
            }
            Err(e) => self.first_error = Some(e),
        }
        self
    }

    /// Launches the graph once on the group's stream after the bound buffers' earlier uses,
    /// and returns the launch's work. See [`PgGraph::replay`] for the refusals.
    pub fn replay(mut self) -> Result<WorkOf<B>> {
        if let Some(e) = self.first_error.take() {
            return Err(e);
        }
        let g = self.graph;
        let inner = &**g.pg.inner();
        if inner.capture.is_on() {
            return Err(oxccl_core::traits::forbidden(
                "launching a graph of the group",
            ));
        }
        g.regions.check_bound(std::mem::take(&mut self.bound))?;
        match g.pg.comm_state() {
            Some(CommState::Ready) => {}
            state => {
                let state = state.unwrap_or(CommState::Destroyed);
                let reason = match g.entry.abort.poll() {
                    Err(e) => text!("{e}"),
                    Ok(_) => text!("the group's communicator is {state:?}"),
                };
                return Err(Error::InvalidState {
                    state,
                    attempted: "launch a graph",
                    reason,
                });
            }
        }
        inner.refuse_while_coalescing("launch a graph", ": launch after it ends")?;
        // Under the group's lock, as every operation: the launch's end event and its place
        // in the watchdog's queue keep the stream's order (the watchdog counts on it).
        inner
            .with_entry("launch a graph", |_| self.launch_locked())
            .map_err(|e| settle_refusal(inner, e))
    }

    /// [`Replay::replay`] under the group's lock, the refusals passed.
    fn launch_locked(&mut self) -> Result<WorkOf<B>> {
        let g = self.graph;
        let inner = &**g.pg.inner();
        let timing = inner.opts.timing;
        let e = &*g.entry;
        let start = if timing {
            Some(e.stream.record(true)?)
        } else {
            None
        };
        // SAFETY: every buffer the graph's operations use is bound (checked above: same
        // addresses and sizes) and held by `&mut` until the accesses drop after the launch is
        // queued; the group's stream waits for their earlier uses (taken on it), and their
        // later uses wait for this launch (the accesses end with its end event).
        unsafe { g.graph.replay(&e.stream)? };
        let end = e.stream.record(timing)?;
        // The launch's end is the bound buffers' end too: one event.
        for access in std::mem::take(&mut self.held) {
            B::end_access(access, &end);
        }
        let seq = inner.next_seq(SeqKind::Collective);
        let p = &g.profile;
        let trace = if inner.watch.recorder.is_enabled() {
            inner.trace_built(p.name.clone(), seq, p.inputs.clone(), p.outputs.clone())
        } else {
            // Numbers the op all the same; empty strings and vectors allocate nothing.
            inner.trace_built(String::new(), seq, Vec::new(), Vec::new())
        };
        Ok(inner.work(
            WorkInfo {
                seq,
                kind: p.kind,
                coalesced: p.ops > 1,
                numel_in: p.numel.0,
                numel_out: p.numel.1,
                timeout_ms: inner.timeout().as_millis().min(u128::from(u64::MAX)) as u64,
                timing,
            },
            start,
            Some(end),
            e,
            trace,
        ))
    }
}
