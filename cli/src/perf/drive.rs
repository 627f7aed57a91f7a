//! The sweep on one rank: every collective × size × layer × placement, layers alternated
//! within each size so that drift hits them alike; and the merge of the ranks' samples
//! (slowest rank's time, wrong elements summed), as nccl-tests reports.

use super::layer::Layer;
use crate::expect::Case;
use crate::ops::{Coll, Dtype, Redop};
use oxccl::Result;
use std::io::IsTerminal;
use std::time::Instant;

/// What to run, the same on every rank.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Collectives in order.
    pub colls: Vec<Coll>,
    /// Sizes in bytes.
    pub sizes: Vec<usize>,
    /// Element type.
    pub dtype: Dtype,
    /// Reduce operator.
    pub redop: Redop,
    /// Root rank.
    pub root: u32,
    /// Timed iterations per measurement.
    pub iters: usize,
    /// Untimed iterations first.
    pub warmup: usize,
    /// Check the results (one more run, compared with the host reference).
    pub check: bool,
    /// Layer names, in the order each rank builds its layers.
    pub layers: Vec<&'static str>,
}

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

/// Index of the sample for (collective c, size s, layer l, in place p) in the flat vector.
pub fn index(plan: &Plan, c: usize, s: usize, l: usize, p: bool) -> usize {
    ((c * plan.sizes.len() + s) * plan.layers.len() + l) * 2 + usize::from(p)
}

/// Runs the plan on this rank. `sync` lines the ranks up before each timed loop; `progress`
/// (rank 0 only) draws a line on stderr when the sweep runs long and stderr is a terminal.
pub fn sweep(
    plan: &Plan,
    layers: &mut [Box<dyn Layer>],
    n: u32,
    rank: u32,
    sync: &dyn Fn() -> Result<()>,
    progress: bool,
) -> Result<Vec<Sample>> {
    let total = plan.colls.len() * plan.sizes.len();
    let mut out = vec![Sample::NA; total * plan.layers.len() * 2];
    let start = Instant::now();
    let draw = progress && std::io::stderr().is_terminal();
    for (c, coll) in plan.colls.iter().enumerate() {
        warm_up(plan, layers, *coll, n, rank)?;
        for (s, bytes) in plan.sizes.iter().enumerate() {
            let count = coll.count_for(*bytes, plan.dtype.size(), n);
            let case = Case {
                coll: *coll,
                count,
                dtype: plan.dtype,
                redop: plan.redop,
                root: plan.root,
                n,
                rank,
            };
            for p in [false, true] {
                for layer in layers.iter_mut() {
                    // Samples are filed under the layer's name, whatever order they were built in.
                    let Some(l) = plan.layers.iter().position(|n| *n == layer.name()) else {
                        continue;
                    };
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
                    out[index(plan, c, s, l, p)] = Sample { secs, wrong };
                }
            }
            if draw && start.elapsed().as_secs() >= 3 {
                let done = c * plan.sizes.len() + s + 1;
                eprint!(
                    "\r  {} {:>9}  {done}/{total}  {:.0} s",
                    coll.name(),
                    crate::ops::human(*bytes),
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

/// Every size of `coll` run `plan.warmup` times on every layer before any is timed, as
/// nccl-tests warms up: the library's connections for each size's algorithm, the host's
/// clocks and caches are then warm when the first size is timed (cold, the first small sizes
/// of a run take far longer than their steady time).
fn warm_up(
    plan: &Plan,
    layers: &mut [Box<dyn Layer>],
    coll: Coll,
    n: u32,
    rank: u32,
) -> Result<()> {
    if plan.warmup == 0 {
        return Ok(());
    }
    for bytes in &plan.sizes {
        let case = Case {
            coll,
            count: coll.count_for(*bytes, plan.dtype.size(), n),
            dtype: plan.dtype,
            redop: plan.redop,
            root: plan.root,
            n,
            rank,
        };
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

/// The ranks' samples merged: the slowest rank's time, wrong elements summed.
pub fn merge(per_rank: &[Vec<Sample>]) -> Vec<Sample> {
    let Some(first) = per_rank.first() else {
        return Vec::new();
    };
    (0..first.len())
        .map(|i| {
            per_rank
                .iter()
                .map(|r| r[i])
                .fold(Sample::NA, |acc, x| Sample {
                    secs: if acc.secs.is_nan() {
                        x.secs
                    } else {
                        acc.secs.max(x.secs)
                    },
                    wrong: if x.wrong < 0 {
                        acc.wrong
                    } else {
                        acc.wrong.max(0) + x.wrong
                    },
                })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A layer that runs in place only and logs (elements, iterations) of each run.
    struct Logged {
        log: std::rc::Rc<std::cell::RefCell<Vec<(usize, usize)>>>,
        count: Option<usize>,
    }

    impl Layer for Logged {
        fn name(&self) -> &'static str {
            "pg"
        }
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
        let plan = Plan {
            colls: vec![Coll::AllReduce],
            sizes: vec![8, 64, 512],
            dtype: Dtype::Float32,
            redop: Redop::Sum,
            root: 0,
            iters: 20,
            warmup: 3,
            check: false,
            layers: vec!["pg"],
        };
        let log = std::rc::Rc::default();
        let mut layers: Vec<Box<dyn Layer>> = vec![Box::new(Logged {
            log: std::rc::Rc::clone(&log),
            count: None,
        })];
        let out = sweep(&plan, &mut layers, 2, 0, &|| Ok(()), false).unwrap();
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
        assert!(out[index(&plan, 0, 0, 0, false)].secs.is_nan());
        assert!(!out[index(&plan, 0, 0, 0, true)].secs.is_nan());
    }

    #[test]
    fn merge_takes_the_slowest_and_sums_wrong() {
        let a = vec![
            Sample {
                secs: 1.0,
                wrong: 0,
            },
            Sample::NA,
        ];
        let b = vec![
            Sample {
                secs: 2.0,
                wrong: 3,
            },
            Sample::NA,
        ];
        let m = merge(&[a, b]);
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
