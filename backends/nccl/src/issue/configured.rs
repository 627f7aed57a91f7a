//! One collective with a configuration for this call alone (NCCL 2.31+: the `nccl…Config`
//! entry points). Checked as any operation, then its configuration; NCCL alone runs it.

use super::shape::{shape, Coll};
use crate::comm_inner::CommInner;
use crate::ffi;
use crate::reducer::NcclRedOp;
use crate::stream::NcclStream;
use oxccl_core::coll_config::CollConfig;
use oxccl_core::{check, CommOp, Error, Result};
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
    let (raw, st) = (comm.raw, stream.raw());
    // Refused by `check::configured` above.
    let a = shape(op, comm.size as usize).ok_or_else(|| {
        Error::invalid("op", format_args!("a collective NCCL configures per call"))
    })?;
    let (b, root, c) = (&a.bufs, a.root, &buf);
    // SAFETY: `op` passed `check::op` (lengths, roots) and its buffers hold what the caller
    // promised; the communicator is ready (so live) and the stream its own; `red` lives until
    // the end of this function; `buf` was built for the loaded release.
    let code = unsafe {
        match a.coll {
            Coll::AllReduce => ffi::all_reduce_config(api, b, red, raw, st, c),
            Coll::Broadcast => ffi::broadcast_config(api, b, root, raw, st, c),
            Coll::Reduce => ffi::reduce_config(api, b, red, root, raw, st, c),
            Coll::AllGather => ffi::all_gather_config(api, b, raw, st, c),
            Coll::ReduceScatter => ffi::reduce_scatter_config(api, b, red, raw, st, c),
            Coll::AllToAll => ffi::all_to_all_config(api, b, raw, st, c),
            Coll::Gather => ffi::gather_config(api, b, root, raw, st, c),
            Coll::Scatter => ffi::scatter_config(api, b, root, raw, st, c),
        }
    }?;
    comm.finish(code, op.kind().name())
}
