//! The checks of the collectives whose buffers are whole on every rank: the reductions,
//! broadcast, all_gather, all_to_all and its uneven variant.

use super::buffers::{
    self, buffer, buffer_mut, exact_len, in_place_or_disjoint, parts_sum, InPlace,
};
use super::check_ctx::{rank_arg, CheckCtx};
use super::element::{dtype, MOVED, REDUCED};
use super::reduce_op::reduce_op;
use crate::buf::{RawBuf, RawBufMut};
use crate::dtype::DataType;
use crate::error::{Error, Result};
use crate::reduce::ReduceOp;

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
    if !send.len.is_multiple_of(ctx.size as usize) {
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
