//! `oxccl perf --tune` for oxccl's all-reduce kernels: each kernel is timed through a group
//! of the same ranks that forces it, beside NCCL's buffer modes (the base group runs NCCL
//! alone), and the table gets a `kernels` line for the group size: up to which size each
//! kernel is never slower than NCCL's best mode at any measured size below it.

use super::layer::Layer;
use super::modes::ModeLayer;
use crate::elem::with_dtype;
use crate::ops::{Coll, Dtype};
use oxccl::buffer::Memory;
use oxccl::core::peer_kernels::{KernelAlgo, PeerPolicy, LINES_PER_SLOT, LINE_DATA_BYTES};
use oxccl::core::tune::KernelRow;
use oxccl::pg::{ProcessGroup, RegMode};

/// Where the kernels sit among a point's variants: after the three buffer modes.
pub const FIRST: usize = 3;

/// The layers that time each kernel, as (variant, layer), on groups of `pg`'s ranks.
pub fn layers<B: Memory>(pg: &ProcessGroup<B>, dtype: Dtype) -> Vec<(usize, Box<dyn Layer>)>
where
    oxccl::buffer::StreamOf<B>: oxccl::core::Capture,
{
    KernelAlgo::ALL
        .iter()
        .enumerate()
        .map(|(i, algo)| {
            let l: Box<dyn Layer> = with_dtype!(dtype, T => Box::new(
                ModeLayer::<B, T>::new(pg.clone(), RegMode::Plain, algo.name())
                    .kernels(PeerPolicy::Force(*algo))
            ));
            (FIRST + i, l)
        })
        .collect()
}

/// Whether variant `v` runs for `coll`: the modes for every tuned collective, the kernels for
/// all-reduce only.
pub fn runs(v: usize, coll: Coll) -> bool {
    v < FIRST || coll == Coll::AllReduce
}

/// Whether the kernel of variant `v` can run an all-reduce of `bytes` on `n` ranks (a size
/// beyond its slots runs on NCCL, which says nothing of the kernel).
fn fits(v: usize, bytes: u64, n: u32) -> bool {
    let slot = LINES_PER_SLOT * LINE_DATA_BYTES;
    match v - FIRST {
        0 => bytes <= slot,
        _ => bytes <= slot * u64::from(n),
    }
}

/// One measured all-reduce size: NCCL's fastest mode and each kernel, seconds per op (NaN:
/// not measured).
#[derive(Debug, Clone, Copy)]
pub struct KernelPoint {
    /// Bytes of the operation.
    pub op_bytes: u64,
    /// NCCL's fastest buffer mode.
    pub nccl: f64,
    /// One-shot, two-shot.
    pub kernels: [f64; 2],
}

/// The `kernels` line of the measured all-reduce sizes on `n` ranks: one-shot up to the
/// largest size such that it was never slower than NCCL's fastest mode at that size or any
/// smaller one, then two-shot likewise from there. `None` when no kernel was measured (a
/// backend without them, a group spanning hosts).
pub fn kernel_row(points: &[KernelPoint], n: u32) -> Option<KernelRow> {
    let mut ps = points.to_vec();
    ps.sort_by_key(|p| p.op_bytes);
    if !ps.iter().any(|p| p.kernels.iter().any(|t| t.is_finite())) {
        return None;
    }
    let wins = |p: &KernelPoint, k: usize| {
        let t = p.kernels[k];
        t.is_finite() && fits(FIRST + k, p.op_bytes, n) && t <= p.nccl
    };
    let mut one = 0;
    let mut i = 0;
    while i < ps.len() && wins(&ps[i], 0) {
        one = ps[i].op_bytes;
        i += 1;
    }
    let mut two = 0;
    while i < ps.len() && wins(&ps[i], 1) {
        two = ps[i].op_bytes;
        i += 1;
    }
    Some(KernelRow {
        ranks: n,
        one_shot_max: one,
        two_shot_max: two.max(one),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pt(bytes: u64, nccl: f64, one: f64, two: f64) -> KernelPoint {
        KernelPoint {
            op_bytes: bytes,
            nccl,
            kernels: [one, two],
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
    }
}
