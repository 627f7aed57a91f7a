//! Coalescing: operations of one group issued as one batch (one backend group), with one work
//! for the whole batch. The core's group state machine enforces the mixing rules: one
//! communicator per block, and for a fused block (c10d's `all_reduce_coalesced` and friends)
//! one kind, one dtype and one reduction.

use super::backend::PgBackend;
use super::comm_slot::Entry;
use super::elastic::settle_refusal;
use super::inner::ProcessGroup;
use super::issue::{Issuer, SeqKind};
use super::op_facts::OpFacts;
use super::ops::two_on;
use super::tune::prepare::prepare_on;
use super::work::{Work, WorkOf};
use crate::buffer::Operand;
use crate::element::{host_op, Element};
use oxccl_core::state::work::WorkInfo;
use oxccl_core::{
    text, CommAbort, CommOp, CommState, Error, GroupKind, GroupState, OpSummary, Progress, RawBuf,
    RawBufMut, ReduceOp, Result, Stream,
};
use oxccl_core::{DataType, OpKind};
use oxccl_rules::recorder::{coalesced_name, TensorMeta};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

/// One send or receive of a batch ([`ProcessGroup::batch_isend_irecv`]); peers are global
/// ranks. Either kind of buffer ([`Memory::Buf`](crate::buffer::Memory::Buf) or [`Memory::CommBuf`](crate::buffer::Memory::CommBuf)), mixed freely in
/// one batch: `P2pOp::Send(&buf, 1)` takes a reference to either.
pub enum P2pOp<'a, B: PgBackend, T: Element> {
    /// Send the buffer to the peer.
    Send(&'a dyn Operand<B, Elem = T>, u32),
    /// Receive into the buffer from the peer.
    Recv(&'a mut dyn Operand<B, Elem = T>, u32),
}

/// An open coalescing block on a group: operations issued through it are launched together
/// when it ends, as one work. Dropping it without [`Coalescing::end`] still closes the
/// backend group (never left open), and the batch's work is lost.
///
/// The block borrows every buffer given to it until it ends: its operations run only once
/// the backend group ends, so the buffers' stream order is recorded then, and nothing may
/// free, reuse or read them before. Safe code cannot:
///
/// ```compile_fail
/// # fn f<B: oxccl::buffer::Memory>(pg: &oxccl::pg::ProcessGroup<B>) -> oxccl::Result<()> {
/// let mut a = pg.upload(&[1.0f32])?;
/// let mut block = pg.start_coalescing()?;
/// block.all_reduce(&mut a, oxccl::ReduceOp::Sum)?;
/// drop(a); // error: `a` is borrowed by the block until it ends
/// block.end()?.wait()
/// # }
/// ```
#[must_use = "the batch is launched when the block ends"]
pub struct Coalescing<'a, B: PgBackend> {
    /// Declared first, dropped first (after `Drop::drop` closed the backend group): each
    /// borrows `entry`'s stream.
    held: Vec<B::Access<'a>>,
    pg: &'a ProcessGroup<B>,
    /// The group's communicator and stream, kept for the block's life: the accesses in
    /// `held` borrow its stream (see [`Coalescing::entry`]).
    entry: Arc<Entry<B>>,
    kind: GroupKind,
    rules: Box<GroupState>,
    numel: (usize, usize),
    /// Each queued operation: kind, dtype, elements in and out (for the work and the trace).
    ops: Vec<(OpKind, DataType, usize, usize)>,
    first_error: Option<Error>,
    open: bool,
}

impl<B: PgBackend> ProcessGroup<B> {
    /// Opens a coalescing block (c10d's `_start_coalescing`): the group's communicator is
    /// made first if needed, then a backend group is opened. Only one block per group at a
    /// time; the group's own methods are refused until it ends.
    pub fn start_coalescing(&self) -> Result<Coalescing<'_, B>> {
        self.open_block(GroupKind::Coalescing)
    }

    /// Runs `f` inside a coalescing block and ends it, whatever `f` returns: the block can
    /// never be left open. The first error (of `f` or of the end) is returned.
    pub fn coalesced<'a>(
        &'a self,
        f: impl FnOnce(&mut Coalescing<'a, B>) -> Result<()>,
    ) -> Result<WorkOf<B>> {
        let mut block = self.start_coalescing()?;
        let body = f(&mut block);
        let end = block.end();
        body.and(end)
    }

    /// All-reduces each buffer of `bufs` in place, as one fused batch with one work (c10d's
    /// `all_reduce_coalesced`): every buffer of one dtype, one reduction.
    pub fn all_reduce_coalesced<T: Element, X: Operand<B, Elem = T>>(
        &self,
        bufs: &mut [&mut X],
        op: ReduceOp,
    ) -> Result<WorkOf<B>> {
        let mut block = self.open_block(GroupKind::Fused)?;
        let body = bufs
            .iter_mut()
            .try_for_each(|b| block.all_reduce(&mut **b, op));
        let end = block.end();
        body.and(end)
    }

    /// Sends and receives of `ops` as one batch with one work (c10d's `batch_isend_irecv`).
    ///
    /// With a tune table ([`PgOptions::tune`](super::options::PgOptions::tune)), its [`Memory::CommBuf`](crate::buffer::Memory::CommBuf) buffers are
    /// registered as the table says for sends and receives (locally at most: a window is
    /// collective over the whole group, a send involves two ranks), before the batch opens,
    /// since nothing is registered inside one. Inside a capture they must be registered
    /// already (see [`ProcessGroup::capture`]).
    pub fn batch_isend_irecv<'a, T: Element>(
        &'a self,
        ops: &'a mut [P2pOp<'_, B, T>],
    ) -> Result<WorkOf<B>> {
        if let Some(table) = self.tune_for(OpKind::Send) {
            let inner = &self.inner();
            let capturing = inner.capture.is_on();
            inner
                .with_entry("batch_isend_irecv", |e| {
                    ops.iter().try_for_each(|op| {
                        let (kind, buf): (_, &dyn Operand<B, Elem = T>) = match op {
                            P2pOp::Send(b, _) => (OpKind::Send, *b),
                            P2pOp::Recv(b, _) => (OpKind::Recv, &**b),
                        };
                        let n = buf.numel();
                        let d = OpFacts {
                            kind,
                            dtype: T::DTYPE,
                            numel: if kind == OpKind::Send { (n, 0) } else { (0, n) },
                            peer: None,
                        };
                        let mems = if kind == OpKind::Send {
                            [buf.comm_mem(), None]
                        } else {
                            [None, buf.comm_mem()]
                        };
                        prepare_on(
                            &e.comm,
                            &e.regs,
                            Some(table),
                            &d,
                            &mems,
                            capturing,
                            inner.timeout(),
                        )
                        .map(drop)
                    })
                })
                .map_err(|e| settle_refusal(inner, e))?;
        }
        self.coalesced(|c| {
            ops.iter_mut().try_for_each(|op| match op {
                P2pOp::Send(b, peer) => c.send(*b, *peer),
                P2pOp::Recv(b, peer) => c.recv(&mut **b, *peer),
            })
        })
    }

    fn open_block(&self, kind: GroupKind) -> Result<Coalescing<'_, B>> {
        let inner = &self.inner();
        // Refusals that show a loss are answered as a failed wait is, on every path.
        let entry = inner
            .entry(kind.start_call())
            .map_err(|e| settle_refusal(inner, e))?;
        if inner.hot.coalescing.swap(true, Ordering::AcqRel) {
            return Err(Error::InvalidState {
                state: CommState::Ready,
                attempted: kind.start_call(),
                reason: text!("a coalescing block is already open on group {}", inner.uid),
            });
        }
        let mut rules = Box::new(GroupState::new());
        let opened = rules
            .start(kind)
            .map_err(Error::from)
            .and_then(|_| inner.backend.group_start());
        if let Err(e) = opened {
            inner.hot.coalescing.store(false, Ordering::Release);
            return Err(e);
        }
        Ok(Coalescing {
            held: Vec::new(),
            pg: self,
            entry,
            kind,
            rules,
            numel: (0, 0),
            ops: Vec::new(),
            first_error: None,
            open: true,
        })
    }
}

impl<'a, B: PgBackend> Coalescing<'a, B> {
    /// The group's communicator and stream, for as long as the block borrows its buffers.
    fn entry(&self) -> &'a Entry<B> {
        // SAFETY: `self.entry` is an `Arc` the block owns and never replaces, so the entry
        // lives at this address until the block is dropped; the references made here are
        // the issuers' and the accesses' in `held`, which are ended or dropped before
        // `entry` (in `end`, and in `Drop`, `held` being the first field).
        unsafe { &*Arc::as_ptr(&self.entry) }
    }

    /// Queues `op` under the block's rules, then issues it inside the backend group; `body`
    /// returns the accesses of its buffers, held until the group has ended (nothing of the
    /// batch is enqueued before). The first failure is kept and returned again by
    /// [`Coalescing::end`].
    fn push(
        &mut self,
        kind: OpKind,
        dtype: DataType,
        numel: (usize, usize),
        body: impl FnOnce(
            &Issuer<'a, B>,
            &mut dyn FnMut(&CommOp<'_>) -> Result<()>,
        ) -> Result<Vec<B::Access<'a>>>,
    ) -> Result<()> {
        let inner = &self.pg.inner();
        let uid = inner.uid;
        let entry = self.entry();
        let rules = &mut self.rules;
        let held = &mut self.held;
        let r = inner
            .with_entry("coalesced op", |_| {
                let is = Issuer {
                    entry,
                    device: inner.opts.device(),
                    cap: inner.captor()?,
                    timeout_ms: &inner.hot.timeout_ms,
                    timing: inner.opts.timing,
                    end: std::cell::Cell::new(None),
                };
                let mut taken = body(&is, &mut |op| {
                    rules.enqueue(uid, OpSummary::of(op))?;
                    // SAFETY: `body` passes only buffers taken by `Memory::read`/`write` on the
                    // issuer's stream whose guards are alive (returned, then held) past this call.
                    unsafe { is.issue(op) }
                })?;
                held.append(&mut taken);
                Ok(())
            })
            .map_err(|e| settle_refusal(inner, e));
        match &r {
            Ok(()) => {
                self.numel.0 += numel.0;
                self.numel.1 += numel.1;
                self.ops.push((kind, dtype, numel.0, numel.1));
            }
            Err(e) if self.first_error.is_none() => self.first_error = Some(e.clone()),
            Err(_) => {}
        }
        r
    }

    /// Issues an op reading `send` and writing `recv`, built by `build`.
    fn two<T: Element, S: Operand<B, Elem = T>, R: Operand<B, Elem = T>>(
        &mut self,
        kind: OpKind,
        send: Option<&'a S>,
        recv: Option<&'a mut R>,
        build: impl FnOnce(RawBuf, RawBufMut) -> CommOp<'static>,
    ) -> Result<()> {
        let numel = (
            send.map_or(0, |b| b.numel()),
            recv.as_ref().map_or(0, |b| b.numel()),
        );
        // A window beside plain memory is refused by the backend's issue, before anything
        // of the op is queued in the open group (the core's rule, as outside a block).
        self.push(kind, T::DTYPE, numel, |is, issue| {
            two_on(is, send, recv, |s, r, held| {
                issue(&build(s, r))?;
                Ok(held.into_iter().flatten().collect())
            })
        })
    }

    /// All-reduce of `buf` in place, in the batch.
    pub fn all_reduce<T: Element>(
        &mut self,
        buf: &'a mut impl Operand<B, Elem = T>,
        op: ReduceOp,
    ) -> Result<()> {
        let op = host_op::<T>(op)?;
        let n = buf.numel();
        self.push(OpKind::AllReduce, T::DTYPE, (n, n), |is, issue| {
            let (w, g) = Operand::<B>::write(buf, "buf", is.device, is.stream())?;
            issue(&CommOp::all_reduce_in_place(w, T::DTYPE, op))?;
            Ok(vec![g])
        })
    }

    /// Broadcast of `buf` from global rank `root`, in place, in the batch.
    pub fn broadcast<T: Element>(
        &mut self,
        buf: &'a mut impl Operand<B, Elem = T>,
        root: u32,
    ) -> Result<()> {
        let root = self.pg.inner().to_group_rank("root", root)?;
        let n = buf.numel();
        self.push(OpKind::Broadcast, T::DTYPE, (n, n), |is, issue| {
            let (w, g) = Operand::<B>::write(buf, "buf", is.device, is.stream())?;
            issue(&CommOp::broadcast_in_place(w, T::DTYPE, root))?;
            Ok(vec![g])
        })
    }

    /// All-gather of `send` into `recv`, in the batch.
    pub fn all_gather<T: Element>(
        &mut self,
        send: &'a impl Operand<B, Elem = T>,
        recv: &'a mut impl Operand<B, Elem = T>,
    ) -> Result<()> {
        self.two(OpKind::AllGather, Some(send), Some(recv), |send, recv| {
            CommOp::all_gather(send, recv, T::DTYPE)
        })
    }

    /// Reduce-scatter of `send` into `recv`, in the batch.
    pub fn reduce_scatter<T: Element>(
        &mut self,
        send: &'a impl Operand<B, Elem = T>,
        recv: &'a mut impl Operand<B, Elem = T>,
        op: ReduceOp,
    ) -> Result<()> {
        let op = host_op::<T>(op)?;
        self.two(
            OpKind::ReduceScatter,
            Some(send),
            Some(recv),
            |send, recv| CommOp::reduce_scatter(send, recv, T::DTYPE, op),
        )
    }

    /// Send of `buf` to global rank `dst`, in the batch (either kind of buffer, as it is:
    /// nothing is registered inside a block).
    pub fn send<T: Element, X: Operand<B, Elem = T> + ?Sized>(
        &mut self,
        buf: &'a X,
        dst: u32,
    ) -> Result<()> {
        let peer = self.pg.inner().to_group_rank("dst", dst)?;
        let n = buf.numel();
        self.push(OpKind::Send, T::DTYPE, (n, 0), |is, issue| {
            let (r, g) = buf.read("buf", is.device, is.stream())?;
            issue(&CommOp::send(r, T::DTYPE, peer))?;
            Ok(vec![g])
        })
    }

    /// Receive into `buf` from global rank `src`, in the batch.
    pub fn recv<T: Element, X: Operand<B, Elem = T> + ?Sized>(
        &mut self,
        buf: &'a mut X,
        src: u32,
    ) -> Result<()> {
        let peer = self.pg.inner().to_group_rank("src", src)?;
        let n = buf.numel();
        self.push(OpKind::Recv, T::DTYPE, (0, n), |is, issue| {
            let (w, g) = buf.write("buf", is.device, is.stream())?;
            issue(&CommOp::recv(w, T::DTYPE, peer))?;
            Ok(vec![g])
        })
    }

    /// Closes the block: the backend group ends (launching the batch; a nonblocking group end
    /// is polled until done, bounded by the group's timeout), and one work covers the batch.
    /// The first error of an operation inside is returned after the group was closed.
    pub fn end(mut self) -> Result<WorkOf<B>> {
        self.open = false;
        let inner = &self.pg.inner();
        inner.hot.coalescing.store(false, Ordering::Release);
        let rules_end = self.rules.end(self.kind);
        let ended = inner.backend.group_end();
        if let Some(e) = self.first_error.take() {
            return Err(e);
        }
        rules_end?;
        let timeout = inner.timeout();
        inner
            .with_entry(self.kind.end_call(), |e| {
                if ended? == Progress::InProgress {
                    let began = Instant::now();
                    while e.abort.poll()? == Progress::InProgress {
                        if began.elapsed() >= timeout {
                            let err = Error::Timeout {
                                what: text!("the end of a coalescing block on group {}", inner.uid),
                                after_ms: timeout.as_millis() as u64,
                            };
                            e.abort.abort(&err.to_string());
                            return Err(err);
                        }
                        std::thread::yield_now();
                    }
                }
                let timing = inner.opts.timing;
                let captured = inner.capture.is_on();
                let end = if captured {
                    None
                } else {
                    Some(e.stream.record(timing)?)
                };
                // The batch is enqueued: its buffers' uses end with its work's event.
                for access in std::mem::take(&mut self.held) {
                    match &end {
                        Some(ev) => B::end_access(access, ev),
                        None => drop(access),
                    }
                }
                let seq = inner.next_seq(SeqKind::Collective);
                let kinds: Vec<OpKind> = self.ops.iter().map(|o| o.0).collect();
                let info = WorkInfo {
                    seq,
                    kind: kinds.first().copied().unwrap_or(OpKind::AllReduce),
                    coalesced: true,
                    numel_in: self.numel.0,
                    numel_out: self.numel.1,
                    timeout_ms: timeout.as_millis().min(u128::from(u64::MAX)) as u64,
                    timing,
                };
                if captured {
                    return Ok(Work::captured(info));
                }
                let metas = |pick: fn(&(OpKind, DataType, usize, usize)) -> usize| {
                    self.ops
                        .iter()
                        .map(|o| TensorMeta::new(&[pick(o) as u64], o.1))
                        .collect::<Vec<_>>()
                };
                let trace =
                    inner.trace_built(coalesced_name(&kinds), seq, metas(|o| o.2), metas(|o| o.3));
                Ok(inner.work(info, None, end, e, trace))
            })
            .map_err(|e| settle_refusal(inner, e))
    }
}

impl<B: PgBackend> Drop for Coalescing<'_, B> {
    fn drop(&mut self) {
        if self.open {
            self.pg
                .inner()
                .hot
                .coalescing
                .store(false, Ordering::Release);
            self.rules.fail();
            if let Err(e) = self.pg.inner().backend.group_end() {
                log::warn!("closing a coalescing block on drop: {e}");
            }
        }
        // After the group ended (what it launched is enqueued): the accesses record now.
        self.held.clear();
    }
}
