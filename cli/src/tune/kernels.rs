//! `oxccl tune` for oxccl's kernels: each kernel is timed through a group of the same
//! ranks that forces it, beside NCCL's buffer modes (the base group runs NCCL alone), on its
//! own collective (the all-reduce kernels on all_reduce, the all-gather and reduce-scatter
//! kernels on theirs), and the table gets a `kernels` line for the group size: up to which size
//! each kernel is never slower than NCCL's best mode at any measured size below it.

use crate::elem::with_dtype;
use crate::ops::{Coll, Dtype};
use crate::perf::layer::Layer;
use crate::perf::modes::ModeLayer;
use oxccl::core::peer_kernels::{
    KernelAlgo, KernelColl, PeerPolicy, LINES_PER_SLOT, LINE_DATA_BYTES,
};
use oxccl::pg::PgBackend;
use oxccl::pg::{ProcessGroup, RegMode};
use oxccl::rules::tune::KernelRow;

/// Where the kernels sit among a point's variants: after the three buffer modes, in the order
/// of [`KernelAlgo::EVERY`].
pub const FIRST: usize = 3;

/// The kernels' variants.
pub const COUNT: usize = KernelAlgo::EVERY.len();

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

/// Whether the kernel `algo` can run an operation of `bytes` (as the table counts them) on
/// `n` ranks (a size beyond its slots runs on NCCL, which says nothing of the kernel).
fn fits(algo: KernelAlgo, bytes: u64, n: u32) -> bool {
    let slot = LINES_PER_SLOT * LINE_DATA_BYTES;
    match algo {
        KernelAlgo::OneShot => bytes <= slot,
        // Two-shot's chunk, and the gathers' part of each rank, fill one slot each.
        KernelAlgo::TwoShot | KernelAlgo::AllGather | KernelAlgo::ReduceScatter => {
            bytes <= slot * u64::from(n)
        }
    }
}

/// One measured size of one collective: NCCL's fastest mode and each kernel, seconds per op
/// (NaN: not measured, or not that collective's kernel).
#[derive(Debug, Clone, Copy)]
pub struct KernelPoint {
    /// The collective.
    pub coll: Coll,
    /// Bytes of the operation.
    pub op_bytes: u64,
    /// NCCL's fastest buffer mode.
    pub nccl: f64,
    /// By [`KernelAlgo::index`].
    pub kernels: [f64; COUNT],
}

/// The largest size of `ps` (one collective, by size) up to which `algo` was never slower
/// than NCCL, from `ps[from]` on, and the index of the first point past it.
fn reach(ps: &[&KernelPoint], algo: KernelAlgo, n: u32, from: usize) -> (u64, usize) {
    let wins = |p: &KernelPoint| {
        let t = p.kernels[algo.index()];
        t.is_finite() && fits(algo, p.op_bytes, n) && t <= p.nccl
    };
    let mut max = 0;
    let mut i = from;
    while i < ps.len() && wins(ps[i]) {
        max = ps[i].op_bytes;
        i += 1;
    }
    (max, i)
}

/// The `kernels` line of the measured sizes on `n` ranks: one-shot up to the largest
/// all-reduce size such that it was never slower than NCCL's fastest mode at that size or any
/// smaller one, then two-shot likewise from there; the all-gather and reduce-scatter kernels
/// likewise on their collectives. `None` when no kernel was measured (a backend without them,
/// a group spanning hosts).
pub fn kernel_row(points: &[KernelPoint], n: u32) -> Option<KernelRow> {
    if !points
        .iter()
        .any(|p| p.kernels.iter().any(|t| t.is_finite()))
    {
        return None;
    }
    let of = |coll: Coll| {
        let mut ps: Vec<&KernelPoint> = points.iter().filter(|p| p.coll == coll).collect();
        ps.sort_by_key(|p| p.op_bytes);
        ps
    };
    let ar = of(Coll::AllReduce);
    let (one, i) = reach(&ar, KernelAlgo::OneShot, n, 0);
    let (two, _) = reach(&ar, KernelAlgo::TwoShot, n, i);
    let (all_gather, _) = reach(&of(Coll::AllGather), KernelAlgo::AllGather, n, 0);
    let (reduce_scatter, _) = reach(&of(Coll::ReduceScatter), KernelAlgo::ReduceScatter, n, 0);
    Some(KernelRow {
        ranks: n,
        one_shot_max: one,
        two_shot_max: two.max(one),
        all_gather_max: all_gather,
        reduce_scatter_max: reduce_scatter,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pt(bytes: u64, nccl: f64, one: f64, two: f64) -> KernelPoint {
        KernelPoint {
            coll: Coll::AllReduce,
            op_bytes: bytes,
            nccl,
            kernels: [one, two, f64::NAN, f64::NAN],
        }
    }

    fn gather(coll: Coll, bytes: u64, nccl: f64, t: f64) -> KernelPoint {
        let mut kernels = [f64::NAN; COUNT];
        let algo = match coll {
            Coll::AllGather => KernelAlgo::AllGather,
            _ => KernelAlgo::ReduceScatter,
        };
        kernels[algo.index()] = t;
        KernelPoint {
            coll,
            op_bytes: bytes,
            nccl,
            kernels,
        }
    }

    #[test]
    fn each_kernel_takes_the_sizes_it_wins_from_the_smallest_up() {
        let ps = [
            pt(8, 10.0, 4.0, 5.0),
            pt(1024, 10.0, 5.0, 6.0),
            pt(65536, 11.0, 9.0, 8.0),
            pt(131072, 11.0, 12.0, 10.0),
            pt(262144, 12.0, 13.0, 12.5),
            pt(524288, 13.0, f64::NAN, 11.0),
        ];
        let k = kernel_row(&ps, 4).unwrap();
        assert_eq!(
            (k.ranks, k.one_shot_max, k.two_shot_max),
            (4, 65536, 131072)
        );
    }

    #[test]
    fn a_loss_at_a_small_size_keeps_the_kernel_off_above_it() {
        let ps = [pt(8, 10.0, 11.0, 12.0), pt(1024, 10.0, 5.0, 6.0)];
        let k = kernel_row(&ps, 2).unwrap();
        assert_eq!((k.one_shot_max, k.two_shot_max), (0, 0));
    }

    #[test]
    fn sizes_beyond_the_slots_never_count_for_a_kernel() {
        let slot = LINES_PER_SLOT * LINE_DATA_BYTES;
        let ps = [
            pt(slot, 10.0, 5.0, 20.0),
            pt(2 * slot, 10.0, 5.0, 5.0),
            pt(3 * slot, 10.0, 1.0, 1.0),
        ];
        let k = kernel_row(&ps, 2).unwrap();
        assert_eq!((k.one_shot_max, k.two_shot_max), (slot, 2 * slot));
    }

    #[test]
    fn no_kernel_measured_gives_no_line() {
        let ps = [pt(8, 10.0, f64::NAN, f64::NAN)];
        assert!(kernel_row(&ps, 2).is_none());
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

    #[test]
    fn the_gathers_take_the_sizes_they_win_on_their_own_collective() {
        let ps = [
            pt(8, 10.0, 4.0, 5.0),
            gather(Coll::AllGather, 64, 10.0, 4.0),
            gather(Coll::AllGather, 65536, 10.0, 6.0),
            gather(Coll::AllGather, 262144, 10.0, 10.5),
            gather(Coll::AllGather, 1 << 20, 20.0, 15.0),
            gather(Coll::ReduceScatter, 64, 10.0, 10.5),
            gather(Coll::ReduceScatter, 1024, 10.0, 4.0),
        ];
        let k = kernel_row(&ps, 4).unwrap();
        assert_eq!(
            (k.one_shot_max, k.all_gather_max, k.reduce_scatter_max),
            (8, 65536, 0),
            "a loss stops each kernel at the size below it"
        );
        // Only all-gather measured: the all-reduce kernels stay off.
        let k = kernel_row(&ps[1..3], 2).unwrap();
        assert_eq!(
            (k.one_shot_max, k.two_shot_max, k.all_gather_max),
            (0, 0, 65536)
        );
    }
}
