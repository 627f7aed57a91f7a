//! `oxccl perf`: the options resolved into a plan once; every rank of the plan's world builds
//! the plan's layers, sweeps through them and merges its samples with the others'; rank 0
//! reports them as a table, JSON or an SVG chart, and exits 1 when a result is wrong.

use super::args::PerfArgs;
use super::drive::{merge, sweep};
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
    let merged = world
        .run(|rank, r| {
            let mut layers = rank_layers::of(&plan, rank, r)?;
            let sync = || rank.barrier();
            let samples = sweep(&plan.sweep, &points, &mut layers, (r, n), &sync, r == 0)?;
            // The layers let go of their buffers (collectively) before the merge.
            drop(layers);
            merge(rank, samples)
        })
        .map_err(Failure::env)?;
    match merged {
        Some(merged) => report::deliver(&plan, &world, &points, &merged),
        None => Ok(ExitCode::SUCCESS),
    }
}
