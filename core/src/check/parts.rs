//! The checks of the operations where one buffer holds every rank's part and the other one
//! part: gather and scatter at a root, the v-variants of all_gather and reduce_scatter.

use super::buffers::{self, buffer, buffer_mut, exact_len, parts_sum};
use super::check_ctx::{rank_arg, CheckCtx};
use super::element::{dtype, MOVED, REDUCED};
use super::reduce_op::reduce_op;
use crate::buf::{RawBuf, RawBufMut};
use crate::dtype::DataType;
use crate::error::Result;
use crate::reduce::ReduceOp;

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
