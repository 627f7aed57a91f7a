//! The check of any operation: the one for its kind.

use super::check_ctx::CheckCtx;
use super::collectives::{
    all_gather, all_reduce, all_to_all, all_to_all_v, broadcast, reduce, reduce_scatter,
};
use super::p2p::{recv, send};
use super::parts::{all_gather_v, gather, reduce_scatter_v, scatter};
use crate::error::Result;
use crate::op::CommOp;

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
