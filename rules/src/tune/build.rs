//! The table a measurement gives (what `oxccl tune` writes): per collective and size the
//! fastest buffer mode, and up to which size each of oxccl's kernels never lost to NCCL.
//! Pure over the measured times, so the choice is tested without a GPU.

use super::{KernelRow, RegMode, TuneRow, TuneTable, COLLECTIVES};
use alloc::vec::Vec;
use oxccl_core::peer_kernels::{KernelAlgo, KernelColl, LINES_PER_SLOT, LINE_DATA_BYTES};
use oxccl_core::{OpKind, Result};

/// How many kernels a measurement times ([`KernelAlgo::EVERY`]).
pub const KERNELS: usize = KernelAlgo::EVERY.len();

/// One measured size of one collective: seconds per operation in each buffer mode and on each
/// of oxccl's kernels (NaN: not measured; a kernel of another collective is never measured).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measured {
    /// The collective.
    pub coll: OpKind,
    /// Bytes of the operation's larger buffer, as the table is looked up.
    pub op_bytes: u64,
    /// By [`RegMode::level`].
    pub modes: [f64; 3],
    /// By [`KernelAlgo::index`].
    pub kernels: [f64; KERNELS],
}

impl Measured {
    /// The fastest mode measured (a tie goes to the simpler mode); `None` when none was.
    pub fn best(&self) -> Option<RegMode> {
        let mut best: Option<(RegMode, f64)> = None;
        for m in RegMode::ALL {
            let t = self.modes[usize::from(m.level())];
            if t.is_finite() && best.is_none_or(|(_, b)| t < b) {
                best = Some((m, t));
            }
        }
        best.map(|(m, _)| m)
    }

    /// NCCL's time: its fastest mode's (infinite when none was measured).
    fn nccl(&self) -> f64 {
        self.modes
            .iter()
            .copied()
            .filter(|t| t.is_finite())
            .fold(f64::INFINITY, f64::min)
    }
}

/// The table of `points`, measured on `n` ranks: per collective, each measured size covers
/// the bytes above the previous one up to itself (the first from 0, the last to the end),
/// neighbours of one mode merged into one row; and the `kernels` line when a kernel was
/// measured. Points of a collective the table cannot name, or with no mode measured, are
/// left out.
pub fn table_of(points: &[Measured], n: u32) -> Result<TuneTable> {
    let mut rows: Vec<TuneRow> = Vec::new();
    for coll in COLLECTIVES {
        let mut ps: Vec<(u64, RegMode)> = points
            .iter()
            .filter(|p| p.coll == coll)
            .filter_map(|p| Some((p.op_bytes, p.best()?)))
            .collect();
        ps.sort_by_key(|p| p.0);
        ps.dedup_by_key(|p| p.0);
        let mut lo = 0u64;
        for (i, &(bytes, best)) in ps.iter().enumerate() {
            let hi = if i + 1 == ps.len() { u64::MAX } else { bytes };
            match rows.last_mut() {
                Some(r) if r.coll == Some(coll) && r.mode == best => r.max_bytes = hi,
                _ => rows.push(TuneRow {
                    coll: Some(coll),
                    dtype: None,
                    min_bytes: lo,
                    max_bytes: hi,
                    mode: best,
                }),
            }
            lo = hi.saturating_add(1);
        }
    }
    TuneTable::new(rows)?.with_kernels(kernel_row(points, n).into_iter().collect())
}

/// The collective a kernel runs.
const fn kind_of(coll: KernelColl) -> OpKind {
    match coll {
        KernelColl::AllReduce => OpKind::AllReduce,
        KernelColl::AllGather => OpKind::AllGather,
        KernelColl::ReduceScatter => OpKind::ReduceScatter,
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

/// The largest size of `ps` (one collective, by size) up to which `algo` was never slower
/// than NCCL, from `ps[from]` on, and the index of the first point past it.
fn reach(ps: &[&Measured], algo: KernelAlgo, n: u32, from: usize) -> (u64, usize) {
    let wins = |p: &Measured| {
        let t = p.kernels[algo.index()];
        t.is_finite() && fits(algo, p.op_bytes, n) && t <= p.nccl()
    };
    let mut max = 0;
    let mut i = from;
    while let Some(p) = ps.get(i).filter(|p| wins(p)) {
        max = p.op_bytes;
        i += 1;
    }
    (max, i)
}

/// The `kernels` line of the measured sizes on `n` ranks: one-shot up to the largest
/// all-reduce size such that it was never slower than NCCL's fastest mode at that size or any
/// smaller one, then two-shot likewise from there; the all-gather and reduce-scatter kernels
/// likewise on their collectives. `None` when no kernel was measured (a backend without them,
/// a group spanning hosts).
pub fn kernel_row(points: &[Measured], n: u32) -> Option<KernelRow> {
    if !points
        .iter()
        .any(|p| p.kernels.iter().any(|t| t.is_finite()))
    {
        return None;
    }
    let of = |coll: OpKind| {
        let mut ps: Vec<&Measured> = points.iter().filter(|p| p.coll == coll).collect();
        ps.sort_by_key(|p| p.op_bytes);
        ps
    };
    let on_own = |algo: KernelAlgo| reach(&of(kind_of(algo.coll())), algo, n, 0).0;
    let ar = of(OpKind::AllReduce);
    let (one, i) = reach(&ar, KernelAlgo::OneShot, n, 0);
    let (two, _) = reach(&ar, KernelAlgo::TwoShot, n, i);
    Some(KernelRow {
        ranks: n,
        one_shot_max: one,
        two_shot_max: two.max(one),
        all_gather_max: on_own(KernelAlgo::AllGather),
        reduce_scatter_max: on_own(KernelAlgo::ReduceScatter),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const NAN: f64 = f64::NAN;

    fn pt(bytes: u64, nccl: f64, one: f64, two: f64) -> Measured {
        Measured {
            coll: OpKind::AllReduce,
            op_bytes: bytes,
            modes: [nccl, NAN, NAN],
            kernels: [one, two, NAN, NAN],
        }
    }

    fn gather(coll: OpKind, bytes: u64, nccl: f64, t: f64) -> Measured {
        let mut kernels = [NAN; KERNELS];
        let algo = match coll {
            OpKind::AllGather => KernelAlgo::AllGather,
            _ => KernelAlgo::ReduceScatter,
        };
        kernels[algo.index()] = t;
        Measured {
            coll,
            op_bytes: bytes,
            modes: [nccl, NAN, NAN],
            kernels,
        }
    }

    fn modes(coll: OpKind, bytes: u64, modes: [f64; 3]) -> Measured {
        Measured {
            coll,
            op_bytes: bytes,
            modes,
            kernels: [NAN; KERNELS],
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
            pt(524288, 13.0, NAN, 11.0),
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
        let ps = [pt(8, 10.0, NAN, NAN)];
        assert!(kernel_row(&ps, 2).is_none());
        assert!(table_of(&ps, 2).unwrap().kernels().is_empty());
    }

    #[test]
    fn the_gathers_take_the_sizes_they_win_on_their_own_collective() {
        let ps = [
            pt(8, 10.0, 4.0, 5.0),
            gather(OpKind::AllGather, 64, 10.0, 4.0),
            gather(OpKind::AllGather, 65536, 10.0, 6.0),
            gather(OpKind::AllGather, 262144, 10.0, 10.5),
            gather(OpKind::AllGather, 1 << 20, 20.0, 15.0),
            gather(OpKind::ReduceScatter, 64, 10.0, 10.5),
            gather(OpKind::ReduceScatter, 1024, 10.0, 4.0),
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

    #[test]
    fn the_fastest_mode_wins_and_a_tie_goes_to_the_simpler_one() {
        assert_eq!(
            modes(OpKind::AllReduce, 8, [2.0, 1.0, 1.0]).best(),
            Some(RegMode::Registered)
        );
        assert_eq!(
            modes(OpKind::AllReduce, 8, [NAN, NAN, 3.0]).best(),
            Some(RegMode::Window)
        );
        assert_eq!(modes(OpKind::AllReduce, 8, [NAN; 3]).best(), None);
    }

    #[test]
    fn each_size_covers_up_to_itself_and_neighbours_of_one_mode_merge() {
        let ps = [
            modes(OpKind::AllReduce, 1024, [1.0, 2.0, 0.5]),
            modes(OpKind::AllReduce, 8, [1.0, 2.0, 0.5]),
            modes(OpKind::AllReduce, 1 << 20, [1.0, 0.5, 2.0]),
            modes(OpKind::AllGather, 64, [1.0, 2.0, 3.0]),
            modes(OpKind::AllGather, 128, [NAN; 3]),
            modes(OpKind::Send, 64, [1.0, 0.5, 3.0]),
        ];
        let t = table_of(&ps, 2).unwrap();
        let got: Vec<_> = t
            .rows()
            .iter()
            .map(|r| (r.coll, r.min_bytes, r.max_bytes, r.mode))
            .collect();
        assert_eq!(
            got,
            [
                (Some(OpKind::AllReduce), 0, 1024, RegMode::Window),
                (Some(OpKind::AllReduce), 1025, u64::MAX, RegMode::Registered),
                (Some(OpKind::AllGather), 0, u64::MAX, RegMode::Plain),
            ]
        );
        let f32 = oxccl_core::DataType::Float32;
        assert_eq!(
            t.choose(OpKind::AllReduce, f32, 2000, true),
            RegMode::Registered
        );
    }
}
