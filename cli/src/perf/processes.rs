//! One process per rank, as torchrun, srun or mpirun start them: each rank times its share,
//! the samples are merged through the group (the slowest rank's time, wrong elements summed)
//! and rank 0 reports. On NCCL a process drives its GPU (see `nccl`); on the mock world the
//! ranks' processes share one communicator hosted by rank 0's process, so the launchers'
//! paths run on any machine.

use super::{mock_layers, Outcome, PerfArgs, Plan, Sample};
use oxccl::buffer::Memory;
use oxccl::launch::{Bootstrap, EnvVars, LaunchInfo};
use oxccl::mock::MockBackend;
use oxccl::pg::{PgOptions, ProcessGroup};
use oxccl::Result;
use serde_json::json;

/// Whether a launcher started this process (its rank variables are set).
pub fn launched() -> bool {
    let env = EnvVars::from_process();
    LaunchInfo::detect(|k| env.get(k)).is_ok()
}

/// The launcher's bootstrap, or an error in one line that says what to check.
pub fn bootstrap() -> std::result::Result<Bootstrap, String> {
    Bootstrap::from_env().map_err(|e| {
        format!("{e} (check the launcher's RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT)")
    })
}

/// The `pg` layer on the mock world spanning the launched processes (a rank each).
pub fn run_mock(a: &PerfArgs, plan: &Plan, why: &str) -> std::result::Result<Outcome, String> {
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
        let samples = super::sweep(plan, &mut layers, n, r, &sync, r == 0)?;
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

/// Every rank's samples merged through `pg`: the slowest rank's time, wrong elements summed
/// (unchecked, -1, where any rank did not check).
pub fn merge_through<B: Memory>(
    pg: &ProcessGroup<B>,
    mut samples: Vec<Sample>,
) -> Result<Vec<Sample>> {
    let secs: Vec<f64> = samples
        .iter()
        .map(|s| if s.secs.is_nan() { -1.0 } else { s.secs })
        .collect();
    let wrong: Vec<f64> = samples.iter().map(|s| s.wrong as f64).collect();
    let reduce = |v: &[f64], op| -> Result<Vec<f64>> {
        let mut b = pg.upload(v)?;
        pg.all_reduce(&mut b, op)?.wait()?;
        pg.download(&b)
    };
    let secs = reduce(&secs, oxccl::ReduceOp::Max)?;
    let unchecked = reduce(&wrong, oxccl::ReduceOp::Min)?;
    let wrong = reduce(&wrong, oxccl::ReduceOp::Sum)?;
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
