//! The sweep on the mock world: its `pg` layer, `n` ranks as threads, or, under torchrun, srun
//! or mpirun, a rank per launched process sharing one communicator hosted by rank 0's process,
//! so that the launchers' paths run on any machine.

use super::args::PerfArgs;
use super::drive::{merge, sweep, Plan, Sample};
use super::layer::{Layer, PgLayer};
use super::mock_world::mock_world;
use super::modes;
use super::outcome::Outcome;
use super::processes::{bootstrap, launched, merge_through};
use crate::elem::with_dtype;
use oxccl::mock::MockBackend;
use oxccl::pg::{PgOptions, ProcessGroup};
use oxccl::Result;
use serde_json::json;

/// The `pg` layer of one mock rank: `CommBuf` buffers in a group under the tune table of -R
/// or --tuned, else plain buffers; rank 0's results corrupted with --inject-error.
fn mock_layers(
    a: &PerfArgs,
    plan: &Plan,
    pg: &ProcessGroup<MockBackend>,
    rank: u32,
) -> Vec<Box<dyn Layer>> {
    let corrupt = a.inject_error && rank == 0;
    vec![if modes::pg_tuned() {
        modes::pg_layer(pg, plan.dtype, corrupt, a.graphs)
    } else {
        with_dtype!(plan.dtype, T => Box::new(PgLayer::<MockBackend, T>::new(pg.clone()).corrupting(corrupt).graphs(a.graphs)))
    }]
}

/// The `pg` layer on the mock world: `n` ranks as threads over one `MockBackend`, or, under
/// torchrun, srun or mpirun, a rank per launched process.
pub fn run_mock(a: &PerfArgs, plan: &Plan, why: &str) -> std::result::Result<Outcome, String> {
    if launched() {
        return run_processes(a, plan, why);
    }
    let n = a.gpus.unwrap_or(2);
    if plan.root >= n {
        return Err(format!(
            "-r {} is not a rank of {n}: give a root below -g",
            plan.root
        ));
    }
    let per_rank = mock_world(n, |pg, rank| {
        let mut layers = mock_layers(a, plan, pg, rank);
        let barrier_pg = pg.clone();
        let sync = move || barrier_pg.barrier()?.wait();
        sweep(plan, &mut layers, n, rank, &sync, rank == 0)
    })?;
    let first = format!("mock world (no NCCL run: {why}): {n} ranks as threads, pg layer only, host memory: times measure oxccl's host path, not a network");
    Ok(Outcome {
        head: json!({"backend": "mock", "reason": why, "ranks": n, "first_line": first}),
        merged: Some(merge(&per_rank)),
        n,
    })
}

/// The `pg` layer on the mock world spanning the launched processes (a rank each).
fn run_processes(a: &PerfArgs, plan: &Plan, why: &str) -> std::result::Result<Outcome, String> {
    let boot = bootstrap()?;
    let (r, n) = (boot.rank, boot.world_size);
    if plan.root >= n {
        return Err(format!(
            "-r {} is not a rank of the {n} launched: give a root below the world size",
            plan.root
        ));
    }
    let store =
        oxccl::pg::world_namespace(boot.group_store(), n).map_err(|e| format!("rank {r}: {e}"))?;
    let opts = PgOptions {
        bound_device: Some(boot.device),
        ..PgOptions::default()
    };
    let pg = ProcessGroup::new(MockBackend::for_processes(), store, r, n, opts)
        .map_err(|e| format!("rank {r}: {e}"))?;
    let run = || -> Result<Vec<Sample>> {
        let mut layers = mock_layers(a, plan, &pg, r);
        let sync = || pg.barrier()?.wait();
        let samples = sweep(plan, &mut layers, n, r, &sync, r == 0)?;
        drop(layers);
        merge_through(&pg, samples)
    };
    let merged = run();
    pg.destroy();
    let merged = merged.map_err(|e| format!("rank {r}: {e}"))?;
    let first = format!(
        "mock world (no NCCL run: {why}): {n} ranks, one process per rank ({:?}), pg layer only, host memory: times measure oxccl's host path, not a network",
        boot.launcher
    );
    Ok(Outcome {
        head: json!({"backend": "mock", "reason": why, "mode": "process per rank", "ranks": n, "launcher": format!("{:?}", boot.launcher), "first_line": first}),
        merged: (r == 0).then_some(merged),
        n,
    })
}
