//! One collective with a configuration for this call alone (NCCL 2.31+: the `nccl…Config`
//! entry points). Checked as any operation, then its configuration; NCCL alone runs it.

use super::shape::{shape, Coll};
use crate::absent::feature_symbol;
use crate::comm_inner::CommInner;
use crate::reducer::NcclRedOp;
use crate::stream::NcclStream;
use oxccl_core::coll_config::CollConfig;
use oxccl_core::{check, CommOp, Error, Feature, Result};
use oxccl_loader::coll_config::CollConfigBuf;
use std::sync::Arc;

/// Issues `op` with `cfg` on `stream` (see [`oxccl_core::PerCallConfig::issue_configured`]);
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
    check::configured(&comm.check_ctx(), op, cfg)?;
    let (op, _) = super::issue_op::admit(comm, op, stream)?;
    let op = &op;
    let buf = CollConfigBuf::new(cfg, comm.lib.version())?;
    let red = super::issue_op::reduction(comm, op)?;
    let red = red.as_ref().map_or(0, NcclRedOp::code);
    let api = comm.lib.api();
    let (raw, st, c) = (comm.raw, stream.raw(), buf.as_ptr());
    let missing = |name: &'static str| feature_symbol(Feature::CollConfig, name);
    // Refused by `check::configured` above.
    let a = shape(op, comm.size as usize).ok_or_else(|| {
        Error::invalid("op", format_args!("a collective NCCL configures per call"))
    })?;
    let (s, r, n, dt, root) = (a.send, a.recv, a.count, a.dtype, a.root);
    // SAFETY: `op` passed `check::op` (lengths, roots) and its buffers hold what the caller
    // promised; the communicator is ready (so live); `c` points to a config built for the
    // loaded release, alive until the call returns.
    let code = unsafe {
        match a.coll {
            Coll::AllReduce => {
                let f = api.all_reduce_config;
                f.ok_or(missing("ncclAllReduceConfig"))?(s, r, n, dt, red, raw, st, c)
            }
            Coll::Broadcast => {
                let f = api.broadcast_config;
                f.ok_or(missing("ncclBroadcastConfig"))?(s, r, n, dt, root, raw, st, c)
            }
            Coll::Reduce => {
                let f = api.reduce_config;
                f.ok_or(missing("ncclReduceConfig"))?(s, r, n, dt, red, root, raw, st, c)
            }
            Coll::AllGather => {
                let f = api.all_gather_config;
                f.ok_or(missing("ncclAllGatherConfig"))?(s, r, n, dt, raw, st, c)
            }
            Coll::ReduceScatter => {
                let f = api.reduce_scatter_config;
                f.ok_or(missing("ncclReduceScatterConfig"))?(s, r, n, dt, red, raw, st, c)
            }
            Coll::AllToAll => {
                let f = api.alltoall_config;
                f.ok_or(missing("ncclAlltoAllConfig"))?(s, r, n, dt, raw, st, c)
            }
            Coll::Gather => {
                let f = api.gather_config;
                f.ok_or(missing("ncclGatherConfig"))?(s, r, n, dt, root, raw, st, c)
            }
            Coll::Scatter => {
                let f = api.scatter_config;
                f.ok_or(missing("ncclScatterConfig"))?(s, r, n, dt, root, raw, st, c)
            }
        }
    };
    comm.finish(code, op.kind().name())
}
