//! `oxccl perf`: the options resolved into a plan once; every rank of the plan's world builds
//! the plan's layers, sweeps through them and merges each size's samples with the others' as
//! the size ends; rank 0 prints each size's rows then, and at the end the table's last lines
//! or JSON, writes the SVG chart, and exits 1 when a result is wrong.

use super::args::PerfArgs;
use super::drive::{merge, sweep, Progress, Sample};
use super::plan::{Failure, Plan};
use super::world::World;
use super::{rank_layers, report};
use std::process::ExitCode;

/// Runs `oxccl perf`.
pub fn run(a: &PerfArgs) -> ExitCode {
    measure(a).unwrap_or_else(|f| f.exit("perf"))
}

fn measure(a: &PerfArgs) -> Result<ExitCode, Failure> {
    let plan = Plan::of(a)?;
    let world =
        World::of(&plan.ground, plan.gpus, plan.blocking, plan.kernels).map_err(Failure::env)?;
    world.has_root(plan.sweep.root).map_err(Failure::env)?;
    let n = world.ranks();
    let points = plan.sweep.points(n);
    let table = !plan.output.json;
    // The table's head before anything is measured, and each row as its size ends (as
    // nccl-tests prints), so that a pipe or a log follows the run.
    if table && world.leads() {
        report::print_opening(&plan, &world);
    }
    let merged = world
        .run(|rank, r| {
            let mut layers = rank_layers::of(&plan, rank, r)?;
            let sync = || rank.barrier();
            let mut progress = (r == 0).then(|| Progress::new(table, plan.output.progress_every));
            let mut merged = Vec::new();
            let mut done = |i: usize, mine: &[Sample]| {
                let point = merge(rank, mine.to_vec())?;
                if let Some(progress) = &mut progress {
                    if table {
                        report::print_point_rows(&plan, &points[i], &point);
                    }
                    progress.point_done(&points[i], i + 1, points.len());
                }
                merged.extend(point);
                Ok(())
            };
            sweep(&plan.sweep, &points, &mut layers, (r, n), &sync, &mut done)?;
            if let Some(progress) = &progress {
                progress.finish();
            }
            drop(layers);
            Ok(merged)
        })
        .map_err(Failure::env)?;
    match merged {
        Some(merged) => report::deliver(&plan, &world, &points, &merged),
        None => Ok(ExitCode::SUCCESS),
    }
}
