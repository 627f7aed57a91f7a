//! Every collective and p2p operation of a process group, on typed buffers of the backend.
//! Rooted operations and peers take global ranks, translated to group ranks here.

use super::backend::PgBackend;
use super::inner::ProcessGroup;
use super::issue::Issuer;
use super::op_facts::OpFacts;
use super::work::WorkOf;
use crate::buffer::Operand;
use crate::element::{host_op, Element};
use oxccl_core::{CommOp, OpKind, RawBuf, RawBufMut, ReduceOp, Result};

/// `buf` read on the issuer's stream; the access guard lives in the caller's scope.
macro_rules! rd {
    ($is:expr, $arg:literal, $buf:expr) => {
        Operand::<B>::read($buf, $arg, $is.device, $is.stream())?
    };
}
/// `buf` written on the issuer's stream.
macro_rules! wr {
    ($is:expr, $arg:literal, $buf:expr) => {
        Operand::<B>::write($buf, $arg, $is.device, $is.stream())?
    };
}

impl<B: PgBackend> ProcessGroup<B> {
    /// Reduces `buf` across the group's ranks, in place (c10d's `all_reduce`).
    pub fn all_reduce<T: Element>(
        &self,
        buf: &mut impl Operand<B, Elem = T>,
        op: ReduceOp,
    ) -> Result<WorkOf<B>> {
        let op = host_op::<T>(op)?;
        self.nan_check("all_reduce", "buf", buf)?;
        let n = buf.numel();
        let d = desc::<T>(OpKind::AllReduce, (n, n), None);
        let table = self.tune_for(d.kind);
        self.inner().issue(d, |is| {
            is.tune(table, &d, || [buf.comm_mem()])?;
            let (w, g) = wr!(is, "buf", buf);
            let op = CommOp::all_reduce_in_place(w, T::DTYPE, op);
            // SAFETY: the buffer came from `Memory::write` on the issuer's stream, its guard
            // lives until this call returned.
            unsafe { is.issue_ending(&op, [g]) }
        })
    }

    /// Copies `buf` of global rank `root` into `buf` of every rank, in place.
    pub fn broadcast<T: Element>(
        &self,
        buf: &mut impl Operand<B, Elem = T>,
        root: u32,
    ) -> Result<WorkOf<B>> {
        let root = self.inner().to_group_rank("root", root)?;
        self.nan_check("broadcast", "buf", buf)?;
        let n = buf.numel();
        let d = desc::<T>(OpKind::Broadcast, (n, n), None);
        let table = self.tune_for(d.kind);
        self.inner().issue(d, |is| {
            is.tune(table, &d, || [buf.comm_mem()])?;
            let (w, g) = wr!(is, "buf", buf);
            let op = CommOp::broadcast_in_place(w, T::DTYPE, root);
            // SAFETY: as in `all_reduce`.
            unsafe { is.issue_ending(&op, [g]) }
        })
    }

    /// Reduces `buf` across ranks into `buf` of global rank `root`, in place (the other
    /// ranks' buffers are left as they are).
    pub fn reduce<T: Element>(
        &self,
        buf: &mut impl Operand<B, Elem = T>,
        root: u32,
        op: ReduceOp,
    ) -> Result<WorkOf<B>> {
        let op = host_op::<T>(op)?;
        let root = self.inner().to_group_rank("root", root)?;
        self.nan_check("reduce", "buf", buf)?;
        let n = buf.numel();
        let d = desc::<T>(OpKind::Reduce, (n, n), None);
        let table = self.tune_for(d.kind);
        self.inner().issue(d, |is| {
            is.tune(table, &d, || [buf.comm_mem()])?;
            let (w, g) = wr!(is, "buf", buf);
            let op = CommOp::reduce_in_place(w, T::DTYPE, op, root);
            // SAFETY: as in `all_reduce`.
            unsafe { is.issue_ending(&op, [g]) }
        })
    }

    /// Issues an operation reading `send` and writing `recv`.
    fn two<'c, T: Element, S: Operand<B, Elem = T>, R: Operand<B, Elem = T>>(
        &self,
        kind: OpKind,
        peer: Option<u32>,
        send: Option<&S>,
        recv: Option<&mut R>,
        build: impl FnOnce(RawBuf, RawBufMut) -> CommOp<'c>,
    ) -> Result<WorkOf<B>> {
        if let Some(send) = send {
            self.nan_check(kind.name(), "send", send)?;
        }
        let numel = (
            send.map_or(0, |b| b.numel()),
            recv.as_ref().map_or(0, |b| b.numel()),
        );
        let d = desc::<T>(kind, numel, peer);
        let table = self.tune_for(kind);
        self.inner().issue(d, |is| {
            is.tune(table, &d, || {
                [
                    send.and_then(|b| b.comm_mem()),
                    recv.as_ref().and_then(|b| b.comm_mem()),
                ]
            })?;
            two_on(is, send, recv, |s, r, held| {
                // SAFETY: both buffers came from `Memory::read`/`write` on the issuer's stream
                // and their guards are handed to the issue, which ends them after it.
                unsafe { is.issue_ending(&build(s, r), held.into_iter().flatten()) }
            })
        })
    }

    /// Gathers every rank's `send` into `recv` (`size × send.len()` elements), by group rank
    /// (c10d's `all_gather_into_tensor`).
    pub fn all_gather<T: Element>(
        &self,
        send: &impl Operand<B, Elem = T>,
        recv: &mut impl Operand<B, Elem = T>,
    ) -> Result<WorkOf<B>> {
        self.two(
            OpKind::AllGather,
            None,
            Some(send),
            Some(recv),
            |send, recv| CommOp::all_gather(send, recv, T::DTYPE),
        )
    }

    /// Reduces `send` (`size × recv.len()` elements) across ranks; group rank r keeps part r
    /// in `recv` (c10d's `reduce_scatter_tensor`).
    pub fn reduce_scatter<T: Element>(
        &self,
        send: &impl Operand<B, Elem = T>,
        recv: &mut impl Operand<B, Elem = T>,
        op: ReduceOp,
    ) -> Result<WorkOf<B>> {
        let op = host_op::<T>(op)?;
        self.two(
            OpKind::ReduceScatter,
            None,
            Some(send),
            Some(recv),
            |send, recv| CommOp::reduce_scatter(send, recv, T::DTYPE, op),
        )
    }

    /// Part p of `send` goes to group rank p; part q of `recv` comes from group rank q (equal
    /// parts: c10d's `all_to_all_single` without split sizes).
    pub fn all_to_all<T: Element>(
        &self,
        send: &impl Operand<B, Elem = T>,
        recv: &mut impl Operand<B, Elem = T>,
    ) -> Result<WorkOf<B>> {
        self.two(
            OpKind::AllToAll,
            None,
            Some(send),
            Some(recv),
            |send, recv| CommOp::all_to_all(send, recv, T::DTYPE),
        )
    }

    /// Gathers uneven parts: group rank r contributes `counts[r]` elements (`send`), and
    /// `recv` holds every part by rank (c10d's `all_gather` with uneven sizes).
    pub fn all_gather_v<T: Element>(
        &self,
        send: &impl Operand<B, Elem = T>,
        recv: &mut impl Operand<B, Elem = T>,
        counts: &[usize],
    ) -> Result<WorkOf<B>> {
        self.two(
            OpKind::AllGatherV,
            None,
            Some(send),
            Some(recv),
            |send, recv| CommOp::all_gather_v(send, recv, T::DTYPE, counts),
        )
    }

    /// Reduce-scatter of uneven parts: group rank r keeps `counts[r]` elements of the result
    /// (c10d's `reduce_scatter` with uneven sizes).
    pub fn reduce_scatter_v<T: Element>(
        &self,
        send: &impl Operand<B, Elem = T>,
        recv: &mut impl Operand<B, Elem = T>,
        counts: &[usize],
        op: ReduceOp,
    ) -> Result<WorkOf<B>> {
        let op = host_op::<T>(op)?;
        self.two(
            OpKind::ReduceScatterV,
            None,
            Some(send),
            Some(recv),
            |send, recv| CommOp::reduce_scatter_v(send, recv, T::DTYPE, op, counts),
        )
    }

    /// All-to-all with uneven parts: `send_counts[p]` elements to group rank p, `recv_counts[q]`
    /// from group rank q (c10d's `all_to_all_single` with split sizes).
    pub fn all_to_all_v<T: Element>(
        &self,
        send: &impl Operand<B, Elem = T>,
        recv: &mut impl Operand<B, Elem = T>,
        send_counts: &[usize],
        recv_counts: &[usize],
    ) -> Result<WorkOf<B>> {
        self.two(
            OpKind::AllToAllV,
            None,
            Some(send),
            Some(recv),
            |send, recv| CommOp::all_to_all_v(send, recv, T::DTYPE, send_counts, recv_counts),
        )
    }

    /// Scatters `send` (on global rank `root`; `None` elsewhere) by group rank into `recv`.
    pub fn scatter<T: Element, X: Operand<B, Elem = T>>(
        &self,
        send: Option<&X>,
        recv: &mut X,
        root: u32,
    ) -> Result<WorkOf<B>> {
        let root = self.inner().to_group_rank("root", root)?;
        self.two(OpKind::Scatter, None, send, Some(recv), |send, recv| {
            CommOp::scatter(send, recv, T::DTYPE, root)
        })
    }

    /// Gathers every rank's `send` into `recv` of global rank `root` (`None` elsewhere).
    pub fn gather<T: Element, X: Operand<B, Elem = T>>(
        &self,
        send: &X,
        recv: Option<&mut X>,
        root: u32,
    ) -> Result<WorkOf<B>> {
        let root = self.inner().to_group_rank("root", root)?;
        self.two(OpKind::Gather, None, Some(send), recv, |send, recv| {
            CommOp::gather(send, recv, T::DTYPE, root)
        })
    }

    /// Sends `buf` to global rank `dst`.
    pub fn send<T: Element>(&self, buf: &impl Operand<B, Elem = T>, dst: u32) -> Result<WorkOf<B>> {
        let peer = self.inner().to_group_rank("dst", dst)?;
        let none: Option<&mut B::Buf<T>> = None;
        self.two(OpKind::Send, Some(peer), Some(buf), none, |buf, _| {
            CommOp::send(buf, T::DTYPE, peer)
        })
    }

    /// Receives into `buf` from global rank `src`.
    pub fn recv<T: Element>(
        &self,
        buf: &mut impl Operand<B, Elem = T>,
        src: u32,
    ) -> Result<WorkOf<B>> {
        let peer = self.inner().to_group_rank("src", src)?;
        let none: Option<&B::Buf<T>> = None;
        self.two(OpKind::Recv, Some(peer), none, Some(buf), |_, buf| {
            CommOp::recv(buf, T::DTYPE, peer)
        })
    }

    /// A barrier: a one-element all-reduce whose work completes once every rank reached it
    /// (wait for it, with a timeout of its own if need be).
    /// Refused inside a graph capture ([`oxccl_core::CaptureError::Unsupported`]).
    pub fn barrier(&self) -> Result<WorkOf<B>> {
        self.inner().refuse_in_capture(
            "a barrier",
            "it allocates, and its work is meant to be waited on",
        )?;
        let mut one = self.alloc_zeros::<u8>(1)?;
        self.inner()
            .issue(desc::<u8>(OpKind::Barrier, (1, 1), None), |is| {
                let (w, g) = wr!(is, "buf", &mut one);
                let op = CommOp::all_reduce_in_place(w, u8::DTYPE, ReduceOp::Sum);
                // SAFETY: as in `all_reduce`; the buffer is freed after the work in stream order.
                unsafe { is.issue_ending(&op, [g]) }
            })
    }
}

impl<B: PgBackend> ProcessGroup<B> {
    /// With the NaN check on, refuses an input holding a NaN, naming the operation, the rank
    /// and the buffer.
    fn nan_check<T: Element>(
        &self,
        op: &str,
        arg: &'static str,
        buf: &impl Operand<B, Elem = T>,
    ) -> Result<()> {
        if !self.inner().hot.facts.nan_check || T::FLOAT.is_none() {
            return Ok(());
        }
        let inner = &self.inner();
        let found = inner
            .entry("nan check")
            .and_then(|e| buf.has_nan(&inner.backend, &e.stream))?;
        if found {
            return Err(oxccl_core::Error::invalid(
                arg,
                format_args!(
                    "no NaN in the input of {op}: rank {} of group {} found one",
                    inner.global_rank, inner.uid
                ),
            ));
        }
        Ok(())
    }
}

/// The description of an operation on elements of `T`.
fn desc<T: Element>(kind: OpKind, numel: (usize, usize), peer: Option<u32>) -> OpFacts {
    OpFacts {
        kind,
        dtype: T::DTYPE,
        numel,
        peer,
    }
}

/// Takes `send` (read) and `recv` (written) on the issuer's stream, an absent one as empty,
/// and hands `f` their addresses and access guards (ended after the issue: by the issue
/// itself on the eager path, by the block's end when coalesced).
pub(crate) fn two_on<'a, B: PgBackend, T: Element, S, D, R>(
    is: &Issuer<'a, B>,
    send: Option<&'a S>,
    recv: Option<&'a mut D>,
    f: impl FnOnce(RawBuf, RawBufMut, [Option<B::Access<'a>>; 2]) -> Result<R>,
) -> Result<R>
where
    S: Operand<B, Elem = T>,
    D: Operand<B, Elem = T>,
{
    let (s, gs) = match send {
        Some(b) => {
            let (s, g) = rd!(is, "send", b);
            (s, Some(g))
        }
        None => (RawBuf::EMPTY, None),
    };
    let (r, gr) = match recv {
        Some(b) => {
            let (r, g) = wr!(is, "recv", b);
            (r, Some(g))
        }
        None => (RawBufMut::EMPTY, None),
    };
    f(s, r, [gs, gr])
}
