//! The check of a collective issued with a per-call configuration: an operation NCCL has a
//! `nccl…Config` entry point for, and a configuration NCCL would accept.

use crate::coll_config::CollConfig;
use crate::error::{Error, Result};
use crate::feature::Feature;
use crate::op::CommOp;

use super::check_ctx::CheckCtx;

/// `op` with `cfg`: the library has per-call configuration; `op` is all_reduce, broadcast,
/// reduce, all_gather, reduce_scatter, all-to-all, gather or scatter; `cfg` passes
/// [`CollConfig::check`]. (The operation's own check is [`super::op`].)
pub fn configured(ctx: &CheckCtx<'_>, op: &CommOp<'_>, cfg: &CollConfig) -> Result<()> {
    ctx.features.require(Feature::CollConfig)?;
    match op {
        CommOp::AllReduce { .. }
        | CommOp::Broadcast { .. }
        | CommOp::Reduce { .. }
        | CommOp::AllGather { .. }
        | CommOp::ReduceScatter { .. }
        | CommOp::AllToAll { .. }
        | CommOp::Gather { .. }
        | CommOp::Scatter { .. } => cfg.check(),
        _ => Err(Error::invalid(
            "op",
            format_args!(
                "a collective NCCL configures per call (all_reduce, broadcast, reduce, all_gather, reduce_scatter, all_to_all, gather, scatter), got {}",
                op.kind().name()
            ),
        )),
    }
}
