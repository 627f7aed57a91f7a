//! `oxccl tune` for oxccl's kernels: each kernel is timed through a group of the same
//! ranks that forces it, beside NCCL's buffer modes (the base group runs NCCL alone), on its
//! own collective (the all-reduce kernels on all_reduce, the all-gather and reduce-scatter
//! kernels on theirs); the table's `kernels` line follows from the times
//! (`oxccl::rules::tune::build::kernel_row`).

use crate::elem::with_dtype;
use crate::ops::{Coll, Dtype};
use crate::perf::layer::Layer;
use crate::perf::modes::ModeLayer;
use oxccl::core::peer_kernels::{KernelAlgo, KernelColl, PeerPolicy};
use oxccl::pg::PgBackend;
use oxccl::pg::{ProcessGroup, RegMode};

/// Where the kernels sit among a point's variants: after the three buffer modes, in the order
/// of [`KernelAlgo::EVERY`].
pub const FIRST: usize = 3;

/// The kernels' variants.
pub const COUNT: usize = oxccl::rules::tune::build::KERNELS;

/// The collective of the tool that `coll` is.
fn tool_coll(coll: KernelColl) -> Coll {
    match coll {
        KernelColl::AllReduce => Coll::AllReduce,
        KernelColl::AllGather => Coll::AllGather,
        KernelColl::ReduceScatter => Coll::ReduceScatter,
    }
}

/// The layers that time each kernel whose collective is among `colls`, as (variant, layer),
/// on groups of `pg`'s ranks.
pub fn layers<B: PgBackend>(
    pg: &ProcessGroup<B>,
    dtype: Dtype,
    colls: &[Coll],
) -> Vec<(usize, Box<dyn Layer>)>
where
    oxccl::buffer::StreamOf<B>: oxccl::core::Capture,
{
    KernelAlgo::EVERY
        .iter()
        .filter(|algo| colls.contains(&tool_coll(algo.coll())))
        .map(|algo| {
            let l: Box<dyn Layer> = with_dtype!(dtype, T => Box::new(
                ModeLayer::<B, T>::new(pg.clone(), RegMode::Plain)
                    .kernels(PeerPolicy::Force(*algo))
            ));
            (FIRST + algo.index(), l)
        })
        .collect()
}

/// Whether variant `v` runs for `coll`: the modes for every tuned collective, a kernel for its
/// own collective only.
pub fn runs(v: usize, coll: Coll) -> bool {
    match v.checked_sub(FIRST).and_then(|k| KernelAlgo::EVERY.get(k)) {
        None => v < FIRST,
        Some(algo) => tool_coll(algo.coll()) == coll,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kernel_runs_on_its_own_collective_only() {
        assert!(
            runs(0, Coll::AllGather)
                && !runs(FIRST, Coll::AllGather)
                && runs(FIRST + 1, Coll::AllReduce)
        );
        let ag = FIRST + KernelAlgo::AllGather.index();
        let rs = FIRST + KernelAlgo::ReduceScatter.index();
        assert!(runs(ag, Coll::AllGather) && !runs(ag, Coll::AllReduce));
        assert!(runs(rs, Coll::ReduceScatter) && !runs(rs, Coll::AllGather));
        assert!(!runs(FIRST + COUNT, Coll::AllReduce));
    }
}
