//! The sweep on one rank: every collective × size × layer × placement, layers alternated
//! within each size so that drift hits them alike; and the merge of the ranks' samples
//! (slowest rank's time, wrong elements summed), as nccl-tests reports.

use super::layer::Layer;
use super::plan::{Sweep, SweepPoint};
use super::rank::Rank;
use crate::expect::Case;
use oxccl::{ReduceOp, Result};
use std::io::IsTerminal;
use std::time::Instant;

/// One measurement: (collective, size, layer, placement) → seconds per operation and wrong
/// elements. `secs` is NaN and `wrong` negative where the layer has no such call (N/A).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    /// Seconds per operation (slowest rank after the merge).
    pub secs: f64,
    /// Wrong elements (summed over ranks after the merge); -1: not checked or N/A.
    pub wrong: i64,
}

impl Sample {
    const NA: Sample = Sample {
        secs: f64::NAN,
        wrong: -1,
    };
}

/// Runs the sweep on this rank (rank `rank` of `n`) at each of `points` through every layer:
/// the samples in the order of the points, then of the layers, out of place before in place.
/// `sync` lines the ranks up before each timed loop; `progress` (rank 0 only) draws a line on
/// stderr when the sweep runs long and stderr is a terminal.
pub fn sweep(
    plan: &Sweep,
    points: &[SweepPoint],
    layers: &mut [Box<dyn Layer>],
    (rank, n): (u32, u32),
    sync: &dyn Fn() -> Result<()>,
    progress: bool,
) -> Result<Vec<Sample>> {
    let per_point = layers.len() * 2;
    let mut out = vec![Sample::NA; points.len() * per_point];
    let start = Instant::now();
    let draw = progress && std::io::stderr().is_terminal();
    let case_of = |p: &SweepPoint| Case {
        coll: p.coll,
        count: p.count,
        dtype: plan.dtype,
        redop: plan.redop,
        root: plan.root,
        n,
        rank,
    };
    let mut done = 0;
    for of_coll in points.chunk_by(|a, b| a.coll == b.coll) {
        warm_up(plan, of_coll.iter().map(case_of), layers)?;
        for point in of_coll {
            let case = case_of(point);
            let here = &mut out[done * per_point..][..per_point];
            for p in [false, true] {
                for (l, layer) in layers.iter_mut().enumerate() {
                    // Every rank takes the same branch: support depends only on the case.
                    if !layer.setup(&case, p)? {
                        continue;
                    }
                    // Warm-up outside any graph, as nccl-tests does: NCCL connects peers at
                    // their first operation, which a capture forbids.
                    layer.arm(0)?;
                    layer.run(plan.warmup)?;
                    layer.arm(plan.iters)?;
                    sync()?;
                    let t = Instant::now();
                    let ops = layer.run(plan.iters)?;
                    let secs = t.elapsed().as_secs_f64() / ops.max(1) as f64;
                    let wrong = if plan.check {
                        layer.check()? as i64
                    } else {
                        -1
                    };
                    layer.teardown()?;
                    here[l * 2 + usize::from(p)] = Sample { secs, wrong };
                }
            }
            done += 1;
            if draw && start.elapsed().as_secs() >= 3 {
                eprint!(
                    "\r  {} {:>9}  {done}/{}  {:.0} s",
                    point.coll.name(),
                    crate::ops::human(point.size),
                    points.len(),
                    start.elapsed().as_secs_f64()
                );
            }
        }
    }
    if draw && start.elapsed().as_secs() >= 3 {
        eprintln!();
    }
    Ok(out)
}

/// Every size of one collective (its `cases`) run `plan.warmup` times on every layer before
/// any is timed, as nccl-tests warms up: the library's connections for each size's algorithm,
/// the host's clocks and caches are then warm when the first size is timed (cold, the first
/// small sizes of a run take far longer than their steady time).
fn warm_up(
    plan: &Sweep,
    cases: impl Iterator<Item = Case>,
    layers: &mut [Box<dyn Layer>],
) -> Result<()> {
    if plan.warmup == 0 {
        return Ok(());
    }
    for case in cases {
        for layer in layers.iter_mut() {
            // The placement the layer has (the process group's reductions are in place).
            for p in [false, true] {
                if layer.setup(&case, p)? {
                    layer.arm(0)?;
                    layer.run(plan.warmup)?;
                    layer.teardown()?;
                    break;
                }
            }
        }
    }
    Ok(())
}

/// Every rank's samples merged through the world: the slowest rank's time, wrong elements
/// summed (unchecked, -1, where any rank did not check). Every rank calls it.
pub fn merge(rank: &Rank<'_>, mut samples: Vec<Sample>) -> Result<Vec<Sample>> {
    let secs: Vec<f64> = samples
        .iter()
        .map(|s| if s.secs.is_nan() { -1.0 } else { s.secs })
        .collect();
    let wrong: Vec<f64> = samples.iter().map(|s| s.wrong as f64).collect();
    let secs = rank.all_reduce(&secs, ReduceOp::Max)?;
    let unchecked = rank.all_reduce(&wrong, ReduceOp::Min)?;
    let wrong = rank.all_reduce(&wrong, ReduceOp::Sum)?;
    for (i, s) in samples.iter_mut().enumerate() {
        s.secs = if secs[i] < 0.0 { f64::NAN } else { secs[i] };
        s.wrong = if unchecked[i] < 0.0 {
            -1
        } else {
            wrong[i] as i64
        };
    }
    Ok(samples)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::{Coll, Dtype, Redop};
    use oxccl::mock::MockBackend;

    /// A layer that runs in place only and logs (elements, iterations) of each run.
    struct Logged {
        log: std::rc::Rc<std::cell::RefCell<Vec<(usize, usize)>>>,
        count: Option<usize>,
    }

    impl Layer for Logged {
        fn setup(&mut self, case: &Case, in_place: bool) -> Result<bool> {
            self.count = in_place.then_some(case.count);
            Ok(in_place)
        }
        fn run(&mut self, iters: usize) -> Result<usize> {
            let count = self.count.ok_or_else(super::super::layer::not_set_up)?;
            self.log.borrow_mut().push((count, iters));
            Ok(iters)
        }
        fn check(&mut self) -> Result<u64> {
            Ok(0)
        }
    }

    #[test]
    fn every_size_is_warmed_up_before_the_first_is_timed() {
        let plan = Sweep {
            colls: vec![Coll::AllReduce],
            sizes: vec![8, 64, 512],
            dtype: Dtype::Float32,
            redop: Redop::Sum,
            root: 0,
            iters: 20,
            warmup: 3,
            check: false,
        };
        let log = std::rc::Rc::default();
        let mut layers: Vec<Box<dyn Layer>> = vec![Box::new(Logged {
            log: std::rc::Rc::clone(&log),
            count: None,
        })];
        let points = plan.points(2);
        let out = sweep(&plan, &points, &mut layers, (0, 2), &|| Ok(()), false).unwrap();
        // Warm-up of 2, 16 and 128 floats, then per size its own warm-up and the timed run
        // (in place only: the out-of-place samples stay N/A).
        let want = vec![
            (2, 3),
            (16, 3),
            (128, 3),
            (2, 3),
            (2, 20),
            (16, 3),
            (16, 20),
            (128, 3),
            (128, 20),
        ];
        assert_eq!(*log.borrow(), want);
        assert!(out[0].secs.is_nan());
        assert!(!out[1].secs.is_nan());
    }

    #[test]
    fn merge_takes_the_slowest_and_sums_wrong() {
        let per_rank = crate::perf::mock_world::mock_world_of(MockBackend::new(), 2, |pg, r| {
            let mine = [
                Sample {
                    secs: 1.0 + f64::from(r),
                    wrong: 3 * i64::from(r),
                },
                Sample::NA,
            ];
            merge(&Rank::Mock(pg), mine.to_vec())
        })
        .expect("mock world");
        for m in per_rank {
            assert_eq!(
                m[0],
                Sample {
                    secs: 2.0,
                    wrong: 3
                }
            );
            assert!(m[1].secs.is_nan() && m[1].wrong == -1);
        }
    }
}
