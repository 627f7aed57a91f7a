//! What every rank puts in and must get out: the inputs of `perf -c` and `check`, and the host
//! reference of each collective, computed in f64 and rounded into the element type.

use crate::elem::Elem;
use crate::ops::{Coll, Dtype, Redop};

/// One operation as run: which, how many elements in all, with what, on how many ranks.
#[derive(Clone, Copy, Debug)]
pub struct Case {
    /// The collective.
    pub coll: Coll,
    /// Elements of the whole array (nccl-tests' count).
    pub count: usize,
    /// Element type.
    pub dtype: Dtype,
    /// Reduce operator (used by reducing collectives).
    pub redop: Redop,
    /// Root rank (used by rooted collectives).
    pub root: u32,
    /// Ranks.
    pub n: u32,
    /// This rank.
    pub rank: u32,
}

impl Case {
    /// (send, recv) element counts of this rank.
    pub fn shape(&self) -> (usize, usize) {
        self.coll.shape(self.count, self.n, self.rank, self.root)
    }

    /// (send, recv) element counts of the rank with the most of each: what every rank
    /// allocates, so that buffers (and the collective windows of -R 2) are alike on all
    /// ranks, where a rooted operation's own shapes differ by rank.
    pub fn shape_any_rank(&self) -> (usize, usize) {
        (0..self.n)
            .map(|k| self.coll.shape(self.count, self.n, k, self.root))
            .fold((0, 0), |(a, b), (s, r)| (a.max(s), b.max(r)))
    }

    /// Elements of one rank's part.
    pub fn part(&self) -> usize {
        self.count / self.n.max(1) as usize
    }
}

/// Element `i` of rank `rank`'s input for `case`. Small non-negative integers (0 to 3; fewer
/// in fp8, see [`levels`]), exact in every type; for a product exactly one rank brings a 2 per element, so the product is 2 and never
/// overflows. Not periodic in `i` (the bit count of `i` shifted by the rank): a part of the
/// input delivered at another part's place, or another rank's data, differs from the expected
/// values somewhere whatever the parts' size (with `(rank + 3i) % 4` alone, parts of a
/// multiple of 4 elements were identical, and ranks 4 apart).
pub fn input(case: &Case, rank: u32, i: usize) -> f64 {
    let n = case.n;
    if case.redop == Redop::Prod {
        return if (i + rank as usize).is_multiple_of(n.max(1) as usize) {
            2.0
        } else {
            1.0
        };
    }
    let r = rank as usize;
    let mixed = i.wrapping_add(r.wrapping_mul(977)).count_ones() as usize;
    ((r + 3 * i + mixed) % levels(case.dtype, n)) as f64
}

/// How many values (0, 1, ..) the inputs take: 4, fewer in fp8 so that a sum over `n` ranks
/// stays among the type's exact integers (e5m2 has 0 to 8, e4m3 0 to 16) as long as it can.
fn levels(dtype: Dtype, n: u32) -> usize {
    let exact = match dtype {
        Dtype::F8e5m2 => 8,
        Dtype::F8e4m3 => 16,
        _ => return 4,
    };
    (exact / n.max(1) as usize + 1).clamp(2, 4)
}

/// The input buffer of this rank for `case` (its send buffer, or the in-place buffer).
pub fn inputs<T: Elem>(case: &Case, len: usize) -> Vec<T> {
    (0..len).map(|i| T::of(input(case, case.rank, i))).collect()
}

fn reduce(case: &Case, at: usize) -> f64 {
    let vals = (0..case.n).map(|j| input(case, j, at));
    match case.redop {
        Redop::Sum => vals.sum(),
        Redop::Prod => vals.product(),
        Redop::Min => vals.fold(f64::INFINITY, f64::min),
        Redop::Max => vals.fold(f64::NEG_INFINITY, f64::max),
        Redop::Avg => {
            let s: f64 = vals.sum::<f64>() / f64::from(case.n);
            if case.dtype.is_float() {
                s
            } else {
                s.trunc()
            }
        }
    }
}

/// The value element `i` of this rank's receive buffer must hold, `None` where nothing is
/// promised (the receive buffer of a non-root in reduce).
pub fn expected(case: &Case, i: usize) -> Option<f64> {
    let (n, r, root, part) = (case.n, case.rank, case.root, case.part().max(1));
    Some(match case.coll {
        Coll::AllReduce | Coll::All => reduce(case, i),
        Coll::Broadcast => input(case, root, i),
        Coll::Reduce if r == root => reduce(case, i),
        Coll::Reduce => return None,
        Coll::AllGather | Coll::Gather => input(case, (i / part) as u32, i % part),
        Coll::ReduceScatter => reduce(case, r as usize * part + i),
        Coll::Alltoall => input(case, (i / part) as u32, r as usize * part + i % part),
        Coll::Scatter => input(case, root, r as usize * part + i),
        Coll::Sendrecv => input(case, (r + n - 1) % n, i),
    })
}

/// The relative error a reduction in `dtype` may show (its rounding over a few steps).
pub fn tolerance(dtype: Dtype) -> f64 {
    match dtype {
        Dtype::F8e5m2 => 0.25,
        Dtype::F8e4m3 => 0.125,
        Dtype::Float16 | Dtype::Bfloat16 => 0.02,
        Dtype::Float32 => 1e-5,
        Dtype::Float64 => 1e-12,
        _ => 0.0,
    }
}

/// How many elements of `got` (this rank's receive buffer) differ from the reference.
pub fn count_wrong<T: Elem>(case: &Case, got: &[T]) -> u64 {
    // A reduction over n ranks rounds up to log2(n) + 1 times along its tree or ring (fp8's
    // Avg also premultiplies by a rounded 1/n): the per-step tolerance grows with it.
    let steps = f64::from(case.n.max(2)).log2().max(1.0);
    let tol = tolerance(case.dtype) * steps;
    got.iter()
        .enumerate()
        .filter(|(i, g)| match expected(case, *i) {
            None => false,
            Some(want) => {
                let want = T::of(want).get();
                let g = g.get();
                let err = (g - want).abs();
                // A NaN is wrong too.
                err.is_nan() || err > tol * want.abs().max(1.0)
            }
        })
        .count() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(coll: Coll, redop: Redop, rank: u32) -> Case {
        Case {
            coll,
            count: 8,
            dtype: Dtype::Int32,
            redop,
            root: 0,
            n: 2,
            rank,
        }
    }

    /// Whole parts delivered to the wrong place, and ranks 4 apart, are seen as wrong, with
    /// parts of a multiple of 4 elements (which the inputs' old period of 4 hid).
    #[test]
    fn misplaced_parts_and_other_ranks_data_are_wrong() {
        let part = 8;
        for coll in [
            Coll::Scatter,
            Coll::Alltoall,
            Coll::ReduceScatter,
            Coll::Sendrecv,
        ] {
            let c = Case {
                count: 2 * part,
                ..case(coll, Redop::Sum, 1)
            };
            let (_, rn) = c.shape();
            let right: Vec<f64> = (0..rn).map(|i| expected(&c, i).unwrap()).collect();
            assert_eq!(count_wrong::<f64>(&c, &right), 0, "{coll:?}");
            // Rank 1 gets what rank 0 should have got.
            let other = Case { rank: 0, ..c };
            let misplaced: Vec<f64> = (0..rn).map(|i| expected(&other, i).unwrap()).collect();
            assert!(count_wrong::<f64>(&c, &misplaced) > 0, "{coll:?}");
        }
        let eight = Case {
            n: 8,
            ..case(Coll::AllReduce, Redop::Sum, 0)
        };
        let seq = |rank| (0..64).map(move |i| input(&eight, rank, i));
        assert!(seq(1).ne(seq(5)), "ranks 4 apart");
    }

    #[test]
    fn every_rank_allocates_the_largest_shape() {
        let mut g = case(Coll::Gather, Redop::Sum, 1);
        assert_eq!(g.shape(), (4, 0));
        assert_eq!(g.shape_any_rank(), (4, 8));
        g.rank = 0;
        assert_eq!(g.shape_any_rank(), (4, 8));
        let s = case(Coll::Scatter, Redop::Sum, 1);
        assert_eq!((s.shape(), s.shape_any_rank()), ((0, 4), (8, 4)));
        let a = case(Coll::AllGather, Redop::Sum, 1);
        assert_eq!(a.shape_any_rank(), a.shape());
    }

    #[test]
    fn references() {
        // rank 0 inputs 0,0,3,3,1,1,0,0..; rank 1 inputs 3,2,2,0,0,3,3,0..
        assert_eq!(
            expected(&case(Coll::AllReduce, Redop::Sum, 0), 0),
            Some(3.0)
        );
        assert_eq!(
            expected(&case(Coll::AllReduce, Redop::Max, 0), 1),
            Some(2.0)
        );
        assert_eq!(
            expected(&case(Coll::AllReduce, Redop::Prod, 1), 5),
            Some(2.0)
        );
        // int32: the average truncates (3 / 2).
        assert_eq!(
            expected(&case(Coll::AllReduce, Redop::Avg, 1), 0),
            Some(1.0)
        );
        assert_eq!(expected(&case(Coll::Sendrecv, Redop::Sum, 0), 0), Some(3.0));
        assert_eq!(
            expected(&case(Coll::AllGather, Redop::Sum, 0), 4),
            Some(3.0)
        );
        assert_eq!(expected(&case(Coll::Reduce, Redop::Sum, 1), 0), None);
        let c = case(Coll::AllReduce, Redop::Sum, 0);
        assert_eq!(count_wrong::<i32>(&c, &[3, 2, 5, 3]), 0);
        assert_eq!(count_wrong::<i32>(&c, &[3, 2, 5, 4]), 1);
    }
}
