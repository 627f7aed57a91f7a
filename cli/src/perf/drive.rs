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

/// Runs the sweep on this rank (rank `rank` of `n`) at each of `points` through every layer.
/// As soon as point `i` is measured, `done(i, samples)` gets its samples, in the order of the
/// layers, out of place before in place: every rank gets them at the same point, so that the
/// ranks can merge them there and the first rank report them while the sweep goes on. `sync`
/// lines the ranks up before each timed loop.
pub fn sweep(
    plan: &Sweep,
    points: &[SweepPoint],
    layers: &mut [Box<dyn Layer>],
    (rank, n): (u32, u32),
    sync: &dyn Fn() -> Result<()>,
    done: &mut dyn FnMut(usize, &[Sample]) -> Result<()>,
) -> Result<()> {
    let per_point = layers.len() * 2;
    let case_of = |p: &SweepPoint| Case {
        coll: p.coll,
        count: p.count,
        dtype: plan.dtype,
        redop: plan.redop,
        root: plan.root,
        n,
        rank,
    };
    let mut i = 0;
    for of_coll in points.chunk_by(|a, b| a.coll == b.coll) {
        warm_up(plan, of_coll.iter().map(case_of), layers)?;
        for point in of_coll {
            let case = case_of(point);
            let mut here = vec![Sample::NA; per_point];
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
            done(i, &here)?;
            i += 1;
        }
    }
    Ok(())
}

/// How far a long sweep has gone, on stderr (the first rank's): once the run has taken 3 s, a
/// line redrawn at each finished size where stderr is a terminal that the table does not
/// stream to; where stderr is not a terminal (a log, a pipe, a launcher's capture), a plain
/// line at the first size to end after every so many seconds, so that a log shows a long
/// run alive.
pub struct Progress {
    start: Instant,
    how: Shown,
    /// Seconds between plain lines.
    every: u64,
    /// Whole seconds after which the next plain line is due.
    next_line: u64,
}

/// How [`Progress`] shows itself.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shown {
    /// Not at all: the rows stream to the terminal that stderr is, they are the progress.
    Not,
    /// A line redrawn in place on the terminal.
    Redrawn,
    /// A line of its own every so many seconds.
    Lines,
}

impl Progress {
    /// Seconds before the redrawn line first appears (short runs stay quiet).
    const AFTER: u64 = 3;

    /// Progress for a sweep starting now, a plain line every `every` seconds where stderr is
    /// not a terminal; `rows_to_stdout`: whether the table's rows stream to stdout (not with
    /// `--json`).
    pub fn new(rows_to_stdout: bool, every: u64) -> Progress {
        let how = match std::io::stderr().is_terminal() {
            false => Shown::Lines,
            true if rows_to_stdout && std::io::stdout().is_terminal() => Shown::Not,
            true => Shown::Redrawn,
        };
        Progress {
            start: Instant::now(),
            how,
            every,
            next_line: every,
        }
    }

    /// Point `point`, the `done`th of `total`, has been measured.
    pub fn point_done(&mut self, point: &SweepPoint, done: usize, total: usize) {
        let what = format!(
            "{} {}  {done}/{total} sizes",
            point.coll.name(),
            crate::ops::human(point.size),
        );
        if let Some(text) = self.shown_at(self.start.elapsed().as_secs(), &what) {
            shown_on_stderr(&text);
        }
    }

    /// What to write on stderr `secs` into the run when `what` has just been measured.
    fn shown_at(&mut self, secs: u64, what: &str) -> Option<String> {
        match self.how {
            // The escape clears what a longer line drew before.
            Shown::Redrawn if secs >= Self::AFTER => Some(format!("\r  {what}  {secs} s\x1b[K")),
            Shown::Lines if secs >= self.next_line => {
                self.next_line = secs + self.every;
                Some(format!("# oxccl perf: {what}  {secs} s\n"))
            }
            _ => None,
        }
    }

    /// The sweep has ended: the redrawn line, if drawn, gets its line end.
    pub fn finish(&self) {
        if self.how == Shown::Redrawn && self.start.elapsed().as_secs() >= Self::AFTER {
            shown_on_stderr("\n");
        }
    }
}

/// Writes `text` to stderr at once; a closed stderr does not stop the run.
fn shown_on_stderr(text: &str) {
    use std::io::Write;
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(text.as_bytes()).and_then(|()| err.flush());
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
        // Each point's samples as they come, with how many runs the layer had made by then.
        let mut got: Vec<(usize, usize, Vec<Sample>)> = Vec::new();
        let mut done = |i: usize, s: &[Sample]| {
            got.push((i, log.borrow().len(), s.to_vec()));
            Ok(())
        };
        sweep(&plan, &points, &mut layers, (0, 2), &|| Ok(()), &mut done).unwrap();
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
        // Each point is handed over as soon as its timed run ends, before the next one runs.
        let when: Vec<(usize, usize)> = got.iter().map(|(i, runs, _)| (*i, *runs)).collect();
        assert_eq!(when, [(0, 5), (1, 7), (2, 9)]);
        for (_, _, samples) in &got {
            assert_eq!(samples.len(), 2, "one layer, two placements");
            assert!(samples[0].secs.is_nan() && samples[0].wrong == -1);
            assert!(samples[1].secs >= 0.0 && samples[1].wrong == -1);
        }
    }

    fn progress(how: Shown) -> Progress {
        Progress {
            start: Instant::now(),
            how,
            every: 10,
            next_line: 10,
        }
    }

    #[test]
    fn progress_in_a_log_is_a_plain_line_every_ten_seconds() {
        let mut p = progress(Shown::Lines);
        assert_eq!(p.shown_at(0, "a"), None, "short runs stay quiet");
        assert_eq!(p.shown_at(9, "a"), None);
        assert_eq!(
            p.shown_at(10, "all_reduce 8 MiB  3/20 sizes").as_deref(),
            Some("# oxccl perf: all_reduce 8 MiB  3/20 sizes  10 s\n")
        );
        assert_eq!(p.shown_at(19, "b"), None, "one line per 10 s");
        // A size that took long: one line for the time missed, then 10 s after it again.
        assert!(p.shown_at(35, "c").is_some());
        assert_eq!(p.shown_at(44, "d"), None);
        assert!(p.shown_at(45, "e").is_some());
        // Every 0 s: a line per size from the start.
        let mut p = progress(Shown::Lines);
        (p.every, p.next_line) = (0, 0);
        assert!(p.shown_at(0, "a").is_some() && p.shown_at(0, "b").is_some());
    }

    #[test]
    fn progress_on_a_terminal_is_redrawn_or_left_to_the_rows() {
        let mut p = progress(Shown::Redrawn);
        assert_eq!(p.shown_at(2, "a"), None);
        let line = p.shown_at(3, "a").expect("drawn after 3 s");
        assert!(line.starts_with('\r') && !line.contains('\n'), "{line:?}");
        assert!(p.shown_at(4, "b").is_some(), "redrawn at every size");
        let mut p = progress(Shown::Not);
        assert_eq!(p.shown_at(100, "a"), None);
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
