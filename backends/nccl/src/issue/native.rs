//! The operations NCCL has one call for: the five classic collectives, send and recv, the
//! barrier (a one-element all-reduce), and all-to-all, gather and scatter where the library
//! has them (2.28+, unless hidden).

use super::call_ctx::Ctx;
use super::pointers::{m, p};
use crate::absent::base_symbol;
use crate::codes::data_type;
use oxccl_core::{CommOp, DataType, Feature, ReduceOp, Result};

/// The native call for `op`: `Some(code)`, or `None` when it has none here and the grouped
/// fallback runs instead. A base symbol the library lacks is an error.
///
/// # Safety
/// `op` passed `check::op` and its buffers hold what `Communicator::issue`'s contract says;
/// `scratch` is one f32 of the communicator's device (read only for a barrier).
pub(super) unsafe fn call(c: &Ctx<'_>, op: &CommOp<'_>, scratch: usize) -> Result<Option<i32>> {
    let api = c.api;
    let (comm, stream, red) = (c.comm, c.stream, c.red);
    // SAFETY: for every call below, the caller's contract; counts are the checked lengths.
    let code = unsafe {
        match *op {
            CommOp::AllReduce {
                send, recv, dtype, ..
            } => {
                let f = api.all_reduce.ok_or_else(|| base_symbol("ncclAllReduce"))?;
                let dt = data_type(dtype);
                f(p(send.addr), m(recv.addr), send.len, dt, red, comm, stream)
            }
            CommOp::Broadcast {
                send,
                recv,
                dtype,
                root,
            } => {
                let f = api.broadcast.ok_or_else(|| base_symbol("ncclBroadcast"))?;
                let (dt, root) = (data_type(dtype), root as i32);
                f(p(send.addr), m(recv.addr), recv.len, dt, root, comm, stream)
            }
            CommOp::Reduce {
                send,
                recv,
                dtype,
                root,
                ..
            } => {
                let f = api.reduce.ok_or_else(|| base_symbol("ncclReduce"))?;
                let (dt, root) = (data_type(dtype), root as i32);
                f(
                    p(send.addr),
                    m(recv.addr),
                    send.len,
                    dt,
                    red,
                    root,
                    comm,
                    stream,
                )
            }
            CommOp::AllGather { send, recv, dtype } => {
                let f = api.all_gather.ok_or_else(|| base_symbol("ncclAllGather"))?;
                f(
                    p(send.addr),
                    m(recv.addr),
                    send.len,
                    data_type(dtype),
                    comm,
                    stream,
                )
            }
            CommOp::ReduceScatter {
                send, recv, dtype, ..
            } => {
                let f = api
                    .reduce_scatter
                    .ok_or_else(|| base_symbol("ncclReduceScatter"))?;
                let dt = data_type(dtype);
                f(p(send.addr), m(recv.addr), recv.len, dt, red, comm, stream)
            }
            CommOp::AllToAll { send, recv, dtype } => {
                let Some(f) = api.alltoall.filter(|_| c.feats.has(Feature::AllToAll)) else {
                    return Ok(None);
                };
                let per = send.len / c.size;
                f(
                    p(send.addr),
                    m(recv.addr),
                    per,
                    data_type(dtype),
                    comm,
                    stream,
                )
            }
            CommOp::Gather {
                send,
                recv,
                dtype,
                root,
            } => {
                let Some(f) = api.gather.filter(|_| c.feats.has(Feature::GatherScatter)) else {
                    return Ok(None);
                };
                let (dt, root) = (data_type(dtype), root as i32);
                f(p(send.addr), m(recv.addr), send.len, dt, root, comm, stream)
            }
            CommOp::Scatter {
                send,
                recv,
                dtype,
                root,
            } => {
                let Some(f) = api.scatter.filter(|_| c.feats.has(Feature::GatherScatter)) else {
                    return Ok(None);
                };
                let (dt, root) = (data_type(dtype), root as i32);
                f(p(send.addr), m(recv.addr), recv.len, dt, root, comm, stream)
            }
            CommOp::Send { buf, dtype, peer } => c.send(buf.addr, buf.len, dtype, peer),
            CommOp::Recv { buf, dtype, peer } => c.recv(buf.addr, buf.len, dtype, peer),
            CommOp::Barrier => {
                let f = api.all_reduce.ok_or_else(|| base_symbol("ncclAllReduce"))?;
                let sum = ReduceOp::Sum.builtin_code().unwrap_or(0);
                let f32 = data_type(DataType::Float32);
                f(p(scratch), m(scratch), 1, f32, sum, comm, stream)
            }
            CommOp::AllToAllV { .. }
            | CommOp::AllGatherV { .. }
            | CommOp::ReduceScatterV { .. } => return Ok(None),
        }
    };
    Ok(Some(code))
}
