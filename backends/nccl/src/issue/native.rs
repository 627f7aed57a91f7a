//! The operations NCCL has one call for: the five classic collectives, send and recv, the
//! barrier (a one-element all-reduce), and all-to-all, gather and scatter where the library
//! has them (2.28+, unless hidden).

use super::call_ctx::Ctx;
use super::pointers::{m, p};
use super::shape::{shape, Coll};
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
    if let Some(a) = shape(op, c.size) {
        let (s, r, n, dt, root) = (a.send, a.recv, a.count, a.dtype, a.root);
        // SAFETY: for every call below, the caller's contract; counts are the checked lengths.
        let code = unsafe {
            match a.coll {
                Coll::AllReduce => {
                    let f = api.all_reduce.ok_or_else(|| base_symbol("ncclAllReduce"))?;
                    f(s, r, n, dt, red, comm, stream)
                }
                Coll::Broadcast => {
                    let f = api.broadcast.ok_or_else(|| base_symbol("ncclBroadcast"))?;
                    f(s, r, n, dt, root, comm, stream)
                }
                Coll::Reduce => {
                    let f = api.reduce.ok_or_else(|| base_symbol("ncclReduce"))?;
                    f(s, r, n, dt, red, root, comm, stream)
                }
                Coll::AllGather => {
                    let f = api.all_gather.ok_or_else(|| base_symbol("ncclAllGather"))?;
                    f(s, r, n, dt, comm, stream)
                }
                Coll::ReduceScatter => {
                    let f = api
                        .reduce_scatter
                        .ok_or_else(|| base_symbol("ncclReduceScatter"))?;
                    f(s, r, n, dt, red, comm, stream)
                }
                Coll::AllToAll => {
                    let Some(f) = api.alltoall.filter(|_| c.feats.has(Feature::AllToAll)) else {
                        return Ok(None);
                    };
                    f(s, r, n, dt, comm, stream)
                }
                Coll::Gather => {
                    let Some(f) = api.gather.filter(|_| c.feats.has(Feature::GatherScatter)) else {
                        return Ok(None);
                    };
                    f(s, r, n, dt, root, comm, stream)
                }
                Coll::Scatter => {
                    let Some(f) = api.scatter.filter(|_| c.feats.has(Feature::GatherScatter))
                    else {
                        return Ok(None);
                    };
                    f(s, r, n, dt, root, comm, stream)
                }
            }
        };
        return Ok(Some(code));
    }
    // SAFETY: as above.
    let code = unsafe {
        match *op {
            CommOp::Send { buf, dtype, peer } => c.send(buf.addr, buf.len, dtype, peer),
            CommOp::Recv { buf, dtype, peer } => c.recv(buf.addr, buf.len, dtype, peer),
            CommOp::Barrier => {
                let f = api.all_reduce.ok_or_else(|| base_symbol("ncclAllReduce"))?;
                let sum = ReduceOp::Sum.builtin_code().unwrap_or(0);
                let f32 = data_type(DataType::Float32);
                f(p(scratch), m(scratch), 1, f32, sum, comm, stream)
            }
            _ => return Ok(None),
        }
    };
    Ok(Some(code))
}
