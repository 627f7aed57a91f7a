//! The one way to build a [`CommOp`]: every front-end (`Comm`, the process group, its coalescing
//! blocks, the tool's raw layer) builds its operations here, so each rule is written once.
//!
//! Two vocabularies, one result:
//!
//! - **From buffers** (`CommOp::all_reduce`, `CommOp::all_reduce_in_place`, …: constructors on
//!   [`CommOp`]): for callers whose buffers carry their own lengths (typed slices). They only
//!   assemble the operation: the element type is the caller's buffer type, an in-place call
//!   reads the buffer it writes. The backend's issue checks the result ([`crate::check::op`]).
//! - **From NCCL's counts** ([`all_reduce`], [`all_gather`], …: functions of this module): for
//!   callers that hold addresses and a count, as NCCL's C API takes them. They derive every
//!   buffer length from the count, the world size and whether this rank is the root (the rules
//!   below), then run the check ([`crate::check::op`]) on what they built: an operation they
//!   return passes the check for the same communicator, and a refusal is the check's own
//!   [`Error::InvalidArgument`](crate::Error::InvalidArgument), naming the argument at fault.
//!
//! The derived lengths, per NCCL's meaning of `count` (`size` ranks, this `rank`):
//!
//! | operation | `count` is | send length | recv length |
//! |---|---|---|---|
//! | all_reduce | elements | `count` | `count` |
//! | broadcast | elements | `count` | `count` |
//! | reduce | elements | `count` | `count` on the root; elsewhere `count`, or 0 for a null `recv` |
//! | all_gather | elements per rank | `count` | `count × size` |
//! | reduce_scatter | elements per rank | `count × size` | `count` |
//! | all_to_all | elements per peer | `count × size` | `count × size` |
//! | gather | elements per rank | `count` | `count × size` on the root, else 0 |
//! | scatter | elements per rank | `count × size` on the root, else 0 | `count` |
//! | all_gather_v | `counts[r]` per rank | `counts[rank]` | sum of `counts` |
//! | reduce_scatter_v | `counts[r]` per rank | sum of `counts` | `counts[rank]` |
//! | all_to_all_v | per peer, each way | sum of `send_counts` | sum of `recv_counts` |
//! | send, recv | elements | `count` (the one buffer) | |
//!
//! In place: pass the same address for `send` and `recv` (all_reduce, broadcast, reduce), or use
//! [`all_gather_in_place`] / [`reduce_scatter_in_place`], which place this rank's part inside
//! the whole buffer. A length that overflows (`count × size`) is built as `usize::MAX`, which
//! the check refuses naming the buffer.
//!
//! ```
//! use oxccl_core::check::CheckCtx;
//! use oxccl_core::build;
//! use oxccl_core::{CommOp, DataType, Error, FeatureSet, RawBuf, RawBufMut, ReduceOp, Version};
//!
//! let features = FeatureSet::for_version(Version::new(2, 28, 3));
//! let ctx = CheckCtx { rank: 1, size: 4, features: &features };
//!
//! // NCCL's vocabulary: 256 floats per rank gathered into 1024.
//! let op = build::all_gather(&ctx, 0x1000, 0x8000, 256, DataType::Float32)?;
//! assert_eq!((op.numel_in(), op.numel_out()), (256, 1024));
//!
//! // In place: this rank's part is element 256 of the whole buffer.
//! let op = build::all_gather_in_place(&ctx, 0x8000, 256, DataType::Float32)?;
//! assert_eq!(op.buffers().0, RawBuf::new(0x8000 + 256 * 4, 256));
//!
//! // A root outside the communicator is refused, naming it.
//! let bad = build::broadcast(&ctx, 0x1000, 0x1000, 16, DataType::Float32, 4);
//! assert!(matches!(bad, Err(Error::InvalidArgument { arg: "root", .. })));
//!
//! // From buffers that carry their lengths (what `Comm` and the process group do).
//! let buf = RawBufMut::new(0x8000, 1024);
//! let op = CommOp::all_reduce_in_place(buf, DataType::Float32, ReduceOp::Sum);
//! assert_eq!(op.buffers(), (buf.as_read(), buf));
//! # Ok::<(), Error>(())
//! ```

use crate::buf::{RawBuf, RawBufMut};
use crate::check::{self, CheckCtx};
use crate::dtype::DataType;
use crate::error::Result;
use crate::op::CommOp;
use crate::reduce::ReduceOp;

/// Constructors from buffers that carry their lengths: one per kind, and an `_in_place` form
/// for the kinds whose in-place layout is one buffer read and written whole.
impl<'a> CommOp<'a> {
    /// [`CommOp::AllReduce`] of `send` into `recv`.
    pub const fn all_reduce(send: RawBuf, recv: RawBufMut, dtype: DataType, op: ReduceOp) -> Self {
        CommOp::AllReduce {
            send,
            recv,
            dtype,
            op,
        }
    }

    /// [`CommOp::AllReduce`] in place: `buf` is read, then written with the result.
    pub const fn all_reduce_in_place(buf: RawBufMut, dtype: DataType, op: ReduceOp) -> Self {
        CommOp::all_reduce(buf.as_read(), buf, dtype, op)
    }

    /// [`CommOp::Broadcast`] of `send` (read on `root` only) into `recv`.
    pub const fn broadcast(send: RawBuf, recv: RawBufMut, dtype: DataType, root: u32) -> Self {
        CommOp::Broadcast {
            send,
            recv,
            dtype,
            root,
        }
    }

    /// [`CommOp::Broadcast`] in place: `buf` is read on `root` and written everywhere else.
    pub const fn broadcast_in_place(buf: RawBufMut, dtype: DataType, root: u32) -> Self {
        CommOp::broadcast(buf.as_read(), buf, dtype, root)
    }

    /// [`CommOp::Reduce`] of `send` into `recv` of `root` (`recv` may be empty elsewhere).
    pub const fn reduce(
        send: RawBuf,
        recv: RawBufMut,
        dtype: DataType,
        op: ReduceOp,
        root: u32,
    ) -> Self {
        CommOp::Reduce {
            send,
            recv,
            dtype,
            op,
            root,
        }
    }

    /// [`CommOp::Reduce`] in place: `buf` is read on every rank and written on `root`.
    pub const fn reduce_in_place(buf: RawBufMut, dtype: DataType, op: ReduceOp, root: u32) -> Self {
        CommOp::reduce(buf.as_read(), buf, dtype, op, root)
    }

    /// [`CommOp::AllGather`] of `send` into `recv` (world size × `send.len`).
    pub const fn all_gather(send: RawBuf, recv: RawBufMut, dtype: DataType) -> Self {
        CommOp::AllGather { send, recv, dtype }
    }

    /// [`CommOp::ReduceScatter`] of `send` (world size × `recv.len`) into `recv`.
    pub const fn reduce_scatter(
        send: RawBuf,
        recv: RawBufMut,
        dtype: DataType,
        op: ReduceOp,
    ) -> Self {
        CommOp::ReduceScatter {
            send,
            recv,
            dtype,
            op,
        }
    }

    /// [`CommOp::AllToAll`] of equal parts.
    pub const fn all_to_all(send: RawBuf, recv: RawBufMut, dtype: DataType) -> Self {
        CommOp::AllToAll { send, recv, dtype }
    }

    /// [`CommOp::AllToAllV`]: `send_counts[p]` elements to rank p, `recv_counts[q]` from q.
    pub const fn all_to_all_v(
        send: RawBuf,
        recv: RawBufMut,
        dtype: DataType,
        send_counts: &'a [usize],
        recv_counts: &'a [usize],
    ) -> Self {
        CommOp::AllToAllV {
            send,
            recv,
            dtype,
            send_counts,
            recv_counts,
        }
    }

    /// [`CommOp::Gather`] of `send` into `recv` of `root` ([`RawBufMut::EMPTY`] elsewhere).
    pub const fn gather(send: RawBuf, recv: RawBufMut, dtype: DataType, root: u32) -> Self {
        CommOp::Gather {
            send,
            recv,
            dtype,
            root,
        }
    }

    /// [`CommOp::Scatter`] of `send` of `root` ([`RawBuf::EMPTY`] elsewhere) into `recv`.
    pub const fn scatter(send: RawBuf, recv: RawBufMut, dtype: DataType, root: u32) -> Self {
        CommOp::Scatter {
            send,
            recv,
            dtype,
            root,
        }
    }

    /// [`CommOp::AllGatherV`]: rank r contributes `counts[r]` elements.
    pub const fn all_gather_v(
        send: RawBuf,
        recv: RawBufMut,
        dtype: DataType,
        counts: &'a [usize],
    ) -> Self {
        CommOp::AllGatherV {
            send,
            recv,
            dtype,
            counts,
        }
    }

    /// [`CommOp::ReduceScatterV`]: rank r keeps `counts[r]` elements of the result.
    pub const fn reduce_scatter_v(
        send: RawBuf,
        recv: RawBufMut,
        dtype: DataType,
        op: ReduceOp,
        counts: &'a [usize],
    ) -> Self {
        CommOp::ReduceScatterV {
            send,
            recv,
            dtype,
            op,
            counts,
        }
    }

    /// [`CommOp::Send`] of `buf` to `peer`.
    pub const fn send(buf: RawBuf, dtype: DataType, peer: u32) -> Self {
        CommOp::Send { buf, dtype, peer }
    }

    /// [`CommOp::Recv`] into `buf` from `peer`.
    pub const fn recv(buf: RawBufMut, dtype: DataType, peer: u32) -> Self {
        CommOp::Recv { buf, dtype, peer }
    }
}

/// `count × size`, or `usize::MAX` (which every check refuses as a length) on overflow.
const fn times(count: usize, size: u32) -> usize {
    count.saturating_mul(size as usize)
}

/// The sum of `counts`, or `usize::MAX` on overflow (the check then names the counts).
fn sum(counts: &[usize]) -> usize {
    counts
        .iter()
        .try_fold(0usize, |a, c| a.checked_add(*c))
        .unwrap_or(usize::MAX)
}

/// This rank's count: 0 where there is none (the check names the counts or the rank).
fn mine(ctx: &CheckCtx<'_>, counts: &[usize]) -> usize {
    counts.get(ctx.rank as usize).copied().unwrap_or(0)
}

/// The address of this rank's part (element `rank × count`) of a buffer of `dtype` at `addr`;
/// 0 (refused by the check as a null buffer, unless empty) where it does not fit the address
/// space.
const fn part(ctx: &CheckCtx<'_>, addr: usize, count: usize, dtype: DataType) -> usize {
    let at = match (ctx.rank as usize).checked_mul(count) {
        Some(at) => at,
        None => return 0,
    };
    match at.checked_mul(dtype.size()) {
        Some(off) => match addr.checked_add(off) {
            Some(a) => a,
            None => 0,
        },
        None => 0,
    }
}

/// `op` once the check accepted it for `ctx`.
fn checked<'a>(ctx: &CheckCtx<'_>, op: CommOp<'a>) -> Result<CommOp<'a>> {
    check::op(&op, ctx).map(|()| op)
}

/// all_reduce of `count` elements from `send` into `recv` (the same address: in place).
pub fn all_reduce(
    ctx: &CheckCtx<'_>,
    send: usize,
    recv: usize,
    count: usize,
    dtype: DataType,
    op: ReduceOp,
) -> Result<CommOp<'static>> {
    let (s, r) = (RawBuf::new(send, count), RawBufMut::new(recv, count));
    checked(ctx, CommOp::all_reduce(s, r, dtype, op))
}

/// broadcast of `count` elements from `send` of `root` into `recv` of every rank.
pub fn broadcast(
    ctx: &CheckCtx<'_>,
    send: usize,
    recv: usize,
    count: usize,
    dtype: DataType,
    root: u32,
) -> Result<CommOp<'static>> {
    let (s, r) = (RawBuf::new(send, count), RawBufMut::new(recv, count));
    checked(ctx, CommOp::broadcast(s, r, dtype, root))
}

/// reduce of `count` elements of `send` into `recv` of `root` (elsewhere `recv` may be 0).
pub fn reduce(
    ctx: &CheckCtx<'_>,
    send: usize,
    recv: usize,
    count: usize,
    dtype: DataType,
    op: ReduceOp,
    root: u32,
) -> Result<CommOp<'static>> {
    let r = if ctx.rank != root && recv == 0 {
        RawBufMut::EMPTY
    } else {
        RawBufMut::new(recv, count)
    };
    checked(
        ctx,
        CommOp::reduce(RawBuf::new(send, count), r, dtype, op, root),
    )
}

/// all_gather of `count` elements per rank: `send` holds `count`, `recv` `count × size`.
pub fn all_gather(
    ctx: &CheckCtx<'_>,
    send: usize,
    recv: usize,
    count: usize,
    dtype: DataType,
) -> Result<CommOp<'static>> {
    let (s, r) = (
        RawBuf::new(send, count),
        RawBufMut::new(recv, times(count, ctx.size)),
    );
    checked(ctx, CommOp::all_gather(s, r, dtype))
}

/// all_gather in place in `buf` (`count × size` elements): this rank's part is read from
/// element `rank × count` of it.
pub fn all_gather_in_place(
    ctx: &CheckCtx<'_>,
    buf: usize,
    count: usize,
    dtype: DataType,
) -> Result<CommOp<'static>> {
    all_gather(ctx, part(ctx, buf, count, dtype), buf, count, dtype)
}

/// reduce_scatter of `count` elements per rank: `send` holds `count × size`, `recv` `count`.
pub fn reduce_scatter(
    ctx: &CheckCtx<'_>,
    send: usize,
    recv: usize,
    count: usize,
    dtype: DataType,
    op: ReduceOp,
) -> Result<CommOp<'static>> {
    let (s, r) = (
        RawBuf::new(send, times(count, ctx.size)),
        RawBufMut::new(recv, count),
    );
    checked(ctx, CommOp::reduce_scatter(s, r, dtype, op))
}

/// reduce_scatter in place in `buf` (`count × size` elements): this rank's part of the result
/// is written at element `rank × count` of it.
pub fn reduce_scatter_in_place(
    ctx: &CheckCtx<'_>,
    buf: usize,
    count: usize,
    dtype: DataType,
    op: ReduceOp,
) -> Result<CommOp<'static>> {
    reduce_scatter(ctx, buf, part(ctx, buf, count, dtype), count, dtype, op)
}

/// all_to_all of `count` elements per peer: both buffers hold `count × size`.
pub fn all_to_all(
    ctx: &CheckCtx<'_>,
    send: usize,
    recv: usize,
    count: usize,
    dtype: DataType,
) -> Result<CommOp<'static>> {
    let whole = times(count, ctx.size);
    let (s, r) = (RawBuf::new(send, whole), RawBufMut::new(recv, whole));
    checked(ctx, CommOp::all_to_all(s, r, dtype))
}

/// all_to_all_v: `send_counts[p]` elements to rank p, `recv_counts[q]` from rank q; the
/// buffers hold their sums.
pub fn all_to_all_v<'a>(
    ctx: &CheckCtx<'_>,
    send: usize,
    recv: usize,
    send_counts: &'a [usize],
    recv_counts: &'a [usize],
    dtype: DataType,
) -> Result<CommOp<'a>> {
    let (s, r) = (
        RawBuf::new(send, sum(send_counts)),
        RawBufMut::new(recv, sum(recv_counts)),
    );
    checked(
        ctx,
        CommOp::all_to_all_v(s, r, dtype, send_counts, recv_counts),
    )
}

/// gather of `count` elements per rank into `recv` of `root` (`count × size` there, empty
/// elsewhere: NCCL ignores `recv` off the root).
pub fn gather(
    ctx: &CheckCtx<'_>,
    send: usize,
    recv: usize,
    count: usize,
    dtype: DataType,
    root: u32,
) -> Result<CommOp<'static>> {
    let whole = if ctx.rank == root {
        times(count, ctx.size)
    } else {
        0
    };
    let (s, r) = (RawBuf::new(send, count), RawBufMut::new(recv, whole));
    checked(ctx, CommOp::gather(s, r, dtype, root))
}

/// scatter of `count` elements per rank from `send` of `root` (`count × size` there, empty
/// elsewhere: NCCL ignores `send` off the root).
pub fn scatter(
    ctx: &CheckCtx<'_>,
    send: usize,
    recv: usize,
    count: usize,
    dtype: DataType,
    root: u32,
) -> Result<CommOp<'static>> {
    let whole = if ctx.rank == root {
        times(count, ctx.size)
    } else {
        0
    };
    let (s, r) = (RawBuf::new(send, whole), RawBufMut::new(recv, count));
    checked(ctx, CommOp::scatter(s, r, dtype, root))
}

/// all_gather_v: `send` holds `counts[rank]` elements, `recv` the sum of `counts`.
pub fn all_gather_v<'a>(
    ctx: &CheckCtx<'_>,
    send: usize,
    recv: usize,
    counts: &'a [usize],
    dtype: DataType,
) -> Result<CommOp<'a>> {
    let (s, r) = (
        RawBuf::new(send, mine(ctx, counts)),
        RawBufMut::new(recv, sum(counts)),
    );
    checked(ctx, CommOp::all_gather_v(s, r, dtype, counts))
}

/// reduce_scatter_v: `send` holds the sum of `counts`, `recv` `counts[rank]` elements.
pub fn reduce_scatter_v<'a>(
    ctx: &CheckCtx<'_>,
    send: usize,
    recv: usize,
    counts: &'a [usize],
    dtype: DataType,
    op: ReduceOp,
) -> Result<CommOp<'a>> {
    let (s, r) = (
        RawBuf::new(send, sum(counts)),
        RawBufMut::new(recv, mine(ctx, counts)),
    );
    checked(ctx, CommOp::reduce_scatter_v(s, r, dtype, op, counts))
}

/// send of `count` elements at `buf` to `peer`.
pub fn send(
    ctx: &CheckCtx<'_>,
    buf: usize,
    count: usize,
    dtype: DataType,
    peer: u32,
) -> Result<CommOp<'static>> {
    checked(ctx, CommOp::send(RawBuf::new(buf, count), dtype, peer))
}

/// recv of `count` elements into `buf` from `peer`.
pub fn recv(
    ctx: &CheckCtx<'_>,
    buf: usize,
    count: usize,
    dtype: DataType,
    peer: u32,
) -> Result<CommOp<'static>> {
    checked(ctx, CommOp::recv(RawBufMut::new(buf, count), dtype, peer))
}

/// A barrier (refused only for a communicator whose own numbers are wrong).
pub fn barrier(ctx: &CheckCtx<'_>) -> Result<CommOp<'static>> {
    checked(ctx, CommOp::Barrier)
}

#[cfg(test)]
mod tests;
