//! Argument checks, one pure function per operation. Every invalid call is refused here with an
//! [`Error::InvalidArgument`] naming the argument (or [`Error::Unsupported`] naming the feature),
//! before any library call.

mod buffers;
mod element;
pub mod windows;

use crate::buf::{RawBuf, RawBufMut};
use crate::dtype::DataType;
use crate::error::{Error, Result};
use crate::feature::{Feature, FeatureSet};
use crate::op::CommOp;
use crate::reduce::{ReduceOp, Scalar};
pub use buffers::{buffer, buffer_mut, exact_len, parts_sum};
use buffers::{in_place_or_disjoint, InPlace};
pub use element::{dtype, wire_dtype, wire_op};

/// `reduces` of [`dtype`] for the four reductions.
const REDUCED: bool = true;
/// `reduces` of [`dtype`] for every operation that only moves elements.
const MOVED: bool = false;

/// What the checks need to know of the communicator.
#[derive(Debug, Clone, Copy)]
pub struct CheckCtx<'f> {
    /// This rank.
    pub rank: u32,
    /// Number of ranks.
    pub size: u32,
    /// What the loaded library can do.
    pub features: &'f FeatureSet,
}

impl CheckCtx<'_> {
    /// `Ok` when the communicator's own numbers are sane: `1 <= size <= i32::MAX`, `rank < size`.
    pub fn validate(&self) -> Result<()> {
        if self.size == 0 || self.size > i32::MAX as u32 {
            return Err(Error::invalid(
                "size",
                format_args!("1..={}, got {}", i32::MAX, self.size),
            ));
        }
        if self.rank >= self.size {
            return Err(Error::invalid(
                "rank",
                format_args!("a rank below {}, got {}", self.size, self.rank),
            ));
        }
        Ok(())
    }
}

/// Checks any operation: dispatches to the function for its kind. Each of those first checks
/// the communicator's own numbers ([`CheckCtx::validate`]), so that none can panic on them.
pub fn op(op: &CommOp<'_>, ctx: &CheckCtx<'_>) -> Result<()> {
    match *op {
        CommOp::AllReduce {
            send,
            recv,
            dtype,
            op,
        } => all_reduce(ctx, send, recv, dtype, &op),
        CommOp::Broadcast {
            send,
            recv,
            dtype,
            root,
        } => broadcast(ctx, send, recv, dtype, root),
        CommOp::Reduce {
            send,
            recv,
            dtype,
            op,
            root,
        } => reduce(ctx, send, recv, dtype, &op, root),
        CommOp::AllGather { send, recv, dtype } => all_gather(ctx, send, recv, dtype),
        CommOp::ReduceScatter {
            send,
            recv,
            dtype,
            op,
        } => reduce_scatter(ctx, send, recv, dtype, &op),
        CommOp::AllToAll { send, recv, dtype } => all_to_all(ctx, send, recv, dtype),
        CommOp::AllToAllV {
            send,
            recv,
            dtype,
            send_counts,
            recv_counts,
        } => all_to_all_v(ctx, send, recv, dtype, send_counts, recv_counts),
        CommOp::Gather {
            send,
            recv,
            dtype,
            root,
        } => gather(ctx, send, recv, dtype, root),
        CommOp::Scatter {
            send,
            recv,
            dtype,
            root,
        } => scatter(ctx, send, recv, dtype, root),
        CommOp::AllGatherV {
            send,
            recv,
            dtype,
            counts,
        } => all_gather_v(ctx, send, recv, dtype, counts),
        CommOp::ReduceScatterV {
            send,
            recv,
            dtype,
            op,
            counts,
        } => reduce_scatter_v(ctx, send, recv, dtype, &op, counts),
        CommOp::Send { buf, dtype, peer } => send(ctx, buf, dtype, peer),
        CommOp::Recv { buf, dtype, peer } => recv(ctx, buf, dtype, peer),
        CommOp::Barrier => ctx.validate(),
    }
}

/// The reduction exists in the loaded library and applies to `dtype`; a premul-sum factor has
/// the buffer's type (host) or a non-null address (device).
pub fn reduce_op(ctx: &CheckCtx<'_>, dtype: DataType, op: &ReduceOp) -> Result<()> {
    match op {
        ReduceOp::Avg => ctx.features.require(Feature::Avg)?,
        ReduceOp::PreMulSum(_) => ctx.features.require(Feature::PreMulSum)?,
        _ => {}
    }
    if !dtype.supports(op) {
        return Err(Error::invalid(
            "op",
            format_args!("an operator that applies to {dtype}: {op} does not (premul-sum takes float16, bfloat16, float32, float64)"),
        ));
    }
    if matches!(op, ReduceOp::Avg) && dtype.is_fp8() && ctx.size == 1 {
        // NCCL's single-rank path has no fp8 average and answers ncclInvalidArgument (NCCL
        // 2.28, one rank): refused here, named, before the library is called.
        return Err(Error::invalid(
            "op",
            format_args!("sum, prod, min or max on {dtype} in a 1-rank communicator (NCCL has no single-rank fp8 avg)"),
        ));
    }
    match op {
        ReduceOp::PreMulSum(Scalar::Host(s)) if s.dtype() != dtype => Err(Error::invalid(
            "scalar",
            format_args!(
                "a premul-sum factor of the buffer's type {dtype}, got {}",
                s.dtype()
            ),
        )),
        ReduceOp::PreMulSum(Scalar::Device { addr }) => device_factor(*addr, dtype),
        _ => Ok(()),
    }
}

/// A device premul-sum factor: one element of `dtype` at a non-null, aligned address whose
/// element does not wrap the address space (NCCL reads it when the collective runs).
fn device_factor(addr: usize, dtype: DataType) -> Result<()> {
    let fits = addr.checked_add(dtype.size()).is_some();
    if addr == 0 || addr % dtype.size() != 0 || !fits {
        return Err(Error::invalid(
            "scalar",
            format_args!(
                "a non-null device address of one {dtype} aligned to {} bytes for the premul-sum factor, got {addr:#x}",
                dtype.size()
            ),
        ));
    }
    Ok(())
}

/// A root (or peer) is a rank of the communicator.
pub fn rank_arg(ctx: &CheckCtx<'_>, arg: &'static str, r: u32) -> Result<()> {
    if r >= ctx.size {
        return Err(Error::invalid(
            arg,
            format_args!("a rank below {}, got {r}", ctx.size),
        ));
    }
    Ok(())
}

/// all_reduce: `recv` as long as `send`; in place only when both are the same memory.
pub fn all_reduce(
    ctx: &CheckCtx<'_>,
    send: RawBuf,
    recv: RawBufMut,
    dt: DataType,
    op: &ReduceOp,
) -> Result<()> {
    ctx.validate()?;
    dtype(ctx, dt, REDUCED)?;
    reduce_op(ctx, dt, op)?;
    buffer("send", send, dt)?;
    buffer_mut("recv", recv, dt)?;
    exact_len("recv", recv.len, send.len, "as long as send")?;
    in_place_or_disjoint(send, recv, dt, InPlace::SendAt(0))
}

/// broadcast: `recv` on every rank; on the root, `send` as long as `recv` (or the same memory).
pub fn broadcast(
    ctx: &CheckCtx<'_>,
    send: RawBuf,
    recv: RawBufMut,
    dt: DataType,
    root: u32,
) -> Result<()> {
    ctx.validate()?;
    dtype(ctx, dt, MOVED)?;
    rank_arg(ctx, "root", root)?;
    buffer_mut("recv", recv, dt)?;
    if ctx.rank == root {
        buffer("send", send, dt)?;
        exact_len("send", send.len, recv.len, "as long as recv on the root")?;
        in_place_or_disjoint(send, recv, dt, InPlace::SendAt(0))?;
    }
    Ok(())
}

/// reduce: `send` on every rank; on the root `recv` as long as `send`, elsewhere empty or as long.
pub fn reduce(
    ctx: &CheckCtx<'_>,
    send: RawBuf,
    recv: RawBufMut,
    dt: DataType,
    op: &ReduceOp,
    root: u32,
) -> Result<()> {
    ctx.validate()?;
    dtype(ctx, dt, REDUCED)?;
    reduce_op(ctx, dt, op)?;
    rank_arg(ctx, "root", root)?;
    buffer("send", send, dt)?;
    buffer_mut("recv", recv, dt)?;
    if ctx.rank == root || recv.len != 0 {
        exact_len(
            "recv",
            recv.len,
            send.len,
            "as long as send (empty allowed off the root)",
        )?;
        in_place_or_disjoint(send, recv, dt, InPlace::SendAt(0))?;
    }
    Ok(())
}

/// all_gather: `recv` is `size` times `send`; in place when `send` is part `rank` of `recv`.
pub fn all_gather(ctx: &CheckCtx<'_>, send: RawBuf, recv: RawBufMut, dt: DataType) -> Result<()> {
    ctx.validate()?;
    dtype(ctx, dt, MOVED)?;
    buffer("send", send, dt)?;
    buffer_mut("recv", recv, dt)?;
    let whole = buffers::times("send", send.len, ctx.size)?;
    exact_len("recv", recv.len, whole, "world size times the send length")?;
    in_place_or_disjoint(
        send,
        recv,
        dt,
        InPlace::SendAt(ctx.rank as usize * send.len),
    )
}

/// reduce_scatter: `send` is `size` times `recv`; in place when `recv` is part `rank` of `send`.
pub fn reduce_scatter(
    ctx: &CheckCtx<'_>,
    send: RawBuf,
    recv: RawBufMut,
    dt: DataType,
    op: &ReduceOp,
) -> Result<()> {
    ctx.validate()?;
    dtype(ctx, dt, REDUCED)?;
    reduce_op(ctx, dt, op)?;
    buffer("send", send, dt)?;
    buffer_mut("recv", recv, dt)?;
    let whole = buffers::times("recv", recv.len, ctx.size)?;
    exact_len("send", send.len, whole, "world size times the recv length")?;
    in_place_or_disjoint(
        send,
        recv,
        dt,
        InPlace::RecvAt(ctx.rank as usize * recv.len),
    )
}

/// all_to_all: equal lengths that divide by the world size; distinct memory.
pub fn all_to_all(ctx: &CheckCtx<'_>, send: RawBuf, recv: RawBufMut, dt: DataType) -> Result<()> {
    ctx.validate()?;
    dtype(ctx, dt, MOVED)?;
    buffer("send", send, dt)?;
    buffer_mut("recv", recv, dt)?;
    exact_len("recv", recv.len, send.len, "as long as send")?;
    if send.len % ctx.size as usize != 0 {
        return Err(Error::invalid(
            "send",
            format_args!(
                "a length divisible by the world size {}, got {}",
                ctx.size, send.len
            ),
        ));
    }
    buffers::disjoint(send, recv, dt)
}

/// all_to_all with uneven parts: one count per rank each way, summing to the buffer lengths.
pub fn all_to_all_v(
    ctx: &CheckCtx<'_>,
    send: RawBuf,
    recv: RawBufMut,
    dt: DataType,
    send_counts: &[usize],
    recv_counts: &[usize],
) -> Result<()> {
    ctx.validate()?;
    dtype(ctx, dt, MOVED)?;
    buffer("send", send, dt)?;
    buffer_mut("recv", recv, dt)?;
    let s = parts_sum("send_counts", send_counts, ctx.size)?;
    exact_len(
        "send_counts",
        s,
        send.len,
        "counts summing to the send length",
    )?;
    let r = parts_sum("recv_counts", recv_counts, ctx.size)?;
    exact_len(
        "recv_counts",
        r,
        recv.len,
        "counts summing to the recv length",
    )?;
    buffers::disjoint(send, recv, dt)
}

/// Which buffer of a gather-like operation holds every rank's part; the other holds one part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Whole {
    /// `recv` (gather, all_gather_v).
    Recv,
    /// `send` (scatter, reduce_scatter_v).
    Send,
}

/// gather: on the root `recv` is `size` times `send`; elsewhere `recv` is empty.
pub fn gather(
    ctx: &CheckCtx<'_>,
    send: RawBuf,
    recv: RawBufMut,
    dt: DataType,
    root: u32,
) -> Result<()> {
    ctx.validate()?;
    dtype(ctx, dt, MOVED)?;
    rank_arg(ctx, "root", root)?;
    rooted_parts(ctx, send, recv, dt, root, Whole::Recv)
}

/// scatter: on the root `send` is `size` times `recv`; elsewhere `send` is empty.
pub fn scatter(
    ctx: &CheckCtx<'_>,
    send: RawBuf,
    recv: RawBufMut,
    dt: DataType,
    root: u32,
) -> Result<()> {
    ctx.validate()?;
    dtype(ctx, dt, MOVED)?;
    rank_arg(ctx, "root", root)?;
    rooted_parts(ctx, send, recv, dt, root, Whole::Send)
}

/// gather and scatter: on the root the `whole` buffer is `size` times the other, in distinct
/// memory; off the root it is empty (NCCL neither reads nor writes it there). `ctx` has been
/// validated.
fn rooted_parts(
    ctx: &CheckCtx<'_>,
    send: RawBuf,
    recv: RawBufMut,
    dt: DataType,
    root: u32,
    whole: Whole,
) -> Result<()> {
    buffer("send", send, dt)?;
    buffer_mut("recv", recv, dt)?;
    // (whole's name and length, part's name and length, the rule on the root, the rule elsewhere)
    let ((arg, len), part, on_root, off_root) = match whole {
        Whole::Recv => (
            ("recv", recv.len),
            ("send", send.len),
            "world size times the send length on the root",
            "an empty output off the root",
        ),
        Whole::Send => (
            ("send", send.len),
            ("recv", recv.len),
            "world size times the recv length on the root",
            "an empty input off the root",
        ),
    };
    if ctx.rank != root {
        return exact_len(arg, len, 0, off_root);
    }
    let want = buffers::times(part.0, part.1, ctx.size)?;
    exact_len(arg, len, want, on_root)?;
    buffers::disjoint(send, recv, dt)
}

/// all_gather_v: one count per rank; `send` holds this rank's count, `recv` their sum.
pub fn all_gather_v(
    ctx: &CheckCtx<'_>,
    send: RawBuf,
    recv: RawBufMut,
    dt: DataType,
    counts: &[usize],
) -> Result<()> {
    ctx.validate()?;
    dtype(ctx, dt, MOVED)?;
    counted_parts(ctx, send, recv, dt, counts, Whole::Recv)
}

/// reduce_scatter_v: one count per rank; `send` holds their sum, `recv` this rank's count.
pub fn reduce_scatter_v(
    ctx: &CheckCtx<'_>,
    send: RawBuf,
    recv: RawBufMut,
    dt: DataType,
    op: &ReduceOp,
    counts: &[usize],
) -> Result<()> {
    ctx.validate()?;
    dtype(ctx, dt, REDUCED)?;
    reduce_op(ctx, dt, op)?;
    counted_parts(ctx, send, recv, dt, counts, Whole::Send)
}

/// The buffers of the v-variants: one count per rank; the `whole` buffer holds their sum, the
/// other this rank's count; distinct memory. `ctx` has been validated.
fn counted_parts(
    ctx: &CheckCtx<'_>,
    send: RawBuf,
    recv: RawBufMut,
    dt: DataType,
    counts: &[usize],
    whole: Whole,
) -> Result<()> {
    buffer("send", send, dt)?;
    buffer_mut("recv", recv, dt)?;
    let total = parts_sum("counts", counts, ctx.size)?;
    // `parts_sum` checked one count per rank and `validate` that rank < size.
    let mine = counts[ctx.rank as usize];
    let want = |is_whole: bool| {
        if is_whole {
            (total, "the sum of the counts")
        } else {
            (mine, "this rank's count")
        }
    };
    let (n, what) = want(whole == Whole::Send);
    exact_len("send", send.len, n, what)?;
    let (n, what) = want(whole == Whole::Recv);
    exact_len("recv", recv.len, n, what)?;
    buffers::disjoint(send, recv, dt)
}

/// send: a peer of the communicator (itself allowed inside a group), a valid buffer.
pub fn send(ctx: &CheckCtx<'_>, buf: RawBuf, dt: DataType, peer: u32) -> Result<()> {
    ctx.validate()?;
    dtype(ctx, dt, MOVED)?;
    rank_arg(ctx, "peer", peer)?;
    buffer("buf", buf, dt)
}

/// recv: a peer of the communicator, a valid buffer.
pub fn recv(ctx: &CheckCtx<'_>, buf: RawBufMut, dt: DataType, peer: u32) -> Result<()> {
    ctx.validate()?;
    dtype(ctx, dt, MOVED)?;
    rank_arg(ctx, "peer", peer)?;
    buffer_mut("buf", buf, dt)
}

#[cfg(test)]
mod tests;
