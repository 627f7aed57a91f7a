//! One collective with a configuration for this call alone (NCCL 2.31+: the `nccl…Config`
//! entry points). Checked as any operation, then its configuration; NCCL alone runs it.

use super::pointers::{m, p};
use crate::absent::feature_symbol;
use crate::codes::data_type;
use crate::comm_inner::CommInner;
use crate::reducer::NcclRedOp;
use crate::stream::NcclStream;
use oxccl_core::coll_config::CollConfig;
use oxccl_core::{check, CommOp, DataType, Error, Feature, Result};
use oxccl_loader::coll_config::CollConfigBuf;
use std::sync::Arc;

/// Issues `op` with `cfg` on `stream` (see [`oxccl_core::Communicator::issue_configured`]);
/// the caller holds the call lock.
///
/// # Safety
/// As [`super::issue_op::issue`].
pub(crate) unsafe fn issue(
    comm: &Arc<CommInner>,
    op: &CommOp<'_>,
    stream: &NcclStream,
    cfg: &CollConfig,
) -> Result<()> {
    let feats = &comm.settings.features;
    check::configured(&comm.check_ctx(), op, cfg)?;
    check::op(op, &comm.check_ctx())?;
    comm.registry.one_kind(op, comm.rank)?;
    let buf = CollConfigBuf::new(cfg, comm.lib.version())?;
    let op = &super::issue_op::wire(op, feats);
    comm.ready_for(op.kind().name())?;
    let red = match op.reduce_op() {
        Some(r) => Some(NcclRedOp::create(
            comm,
            r,
            op.dtype().unwrap_or(DataType::Float32),
        )?),
        None => None,
    };
    let red = red.as_ref().map_or(0, NcclRedOp::code);
    let api = comm.lib.api();
    let (raw, st, c) = (comm.raw, stream.raw(), buf.as_ptr());
    let missing = |name: &'static str| feature_symbol(Feature::CollConfig, name);
    // SAFETY: `op` passed `check::op` (lengths, roots) and its buffers hold what the caller
    // promised; the communicator is ready (so live); `c` points to a config built for the
    // loaded release, alive until the call returns.
    let code = unsafe {
        match *op {
            CommOp::AllReduce {
                send, recv, dtype, ..
            } => {
                let f = api
                    .all_reduce_config
                    .ok_or(missing("ncclAllReduceConfig"))?;
                f(
                    p(send.addr),
                    m(recv.addr),
                    send.len,
                    data_type(dtype),
                    red,
                    raw,
                    st,
                    c,
                )
            }
            CommOp::Broadcast {
                send,
                recv,
                dtype,
                root,
            } => {
                let f = api.broadcast_config.ok_or(missing("ncclBroadcastConfig"))?;
                let dt = data_type(dtype);
                f(
                    p(send.addr),
                    m(recv.addr),
                    recv.len,
                    dt,
                    root as i32,
                    raw,
                    st,
                    c,
                )
            }
            CommOp::Reduce {
                send,
                recv,
                dtype,
                root,
                ..
            } => {
                let f = api.reduce_config.ok_or(missing("ncclReduceConfig"))?;
                let dt = data_type(dtype);
                f(
                    p(send.addr),
                    m(recv.addr),
                    send.len,
                    dt,
                    red,
                    root as i32,
                    raw,
                    st,
                    c,
                )
            }
            CommOp::AllGather { send, recv, dtype } => {
                let f = api
                    .all_gather_config
                    .ok_or(missing("ncclAllGatherConfig"))?;
                f(
                    p(send.addr),
                    m(recv.addr),
                    send.len,
                    data_type(dtype),
                    raw,
                    st,
                    c,
                )
            }
            CommOp::ReduceScatter {
                send, recv, dtype, ..
            } => {
                let f = api
                    .reduce_scatter_config
                    .ok_or(missing("ncclReduceScatterConfig"))?;
                f(
                    p(send.addr),
                    m(recv.addr),
                    recv.len,
                    data_type(dtype),
                    red,
                    raw,
                    st,
                    c,
                )
            }
            CommOp::AllToAll { send, recv, dtype } => {
                let f = api.alltoall_config.ok_or(missing("ncclAlltoAllConfig"))?;
                let per = send.len / comm.size as usize;
                f(
                    p(send.addr),
                    m(recv.addr),
                    per,
                    data_type(dtype),
                    raw,
                    st,
                    c,
                )
            }
            CommOp::Gather {
                send,
                recv,
                dtype,
                root,
            } => {
                let f = api.gather_config.ok_or(missing("ncclGatherConfig"))?;
                let dt = data_type(dtype);
                f(
                    p(send.addr),
                    m(recv.addr),
                    send.len,
                    dt,
                    root as i32,
                    raw,
                    st,
                    c,
                )
            }
            CommOp::Scatter {
                send,
                recv,
                dtype,
                root,
            } => {
                let f = api.scatter_config.ok_or(missing("ncclScatterConfig"))?;
                let dt = data_type(dtype);
                f(
                    p(send.addr),
                    m(recv.addr),
                    recv.len,
                    dt,
                    root as i32,
                    raw,
                    st,
                    c,
                )
            }
            // Refused by `check::configured` above.
            _ => {
                return Err(Error::invalid(
                    "op",
                    format_args!("a collective NCCL configures per call"),
                ))
            }
        }
    };
    comm.finish(code, op.kind().name())
}
