//! One process per rank, as torchrun, srun or mpirun start them: whether a launcher started
//! this one, its bootstrap, and the merge of the ranks' samples through the group (the slowest
//! rank's time, wrong elements summed) so that rank 0 reports. On NCCL a process drives its
//! GPU (see `nccl`); on the mock world the processes share one communicator (see `mock`).

use super::drive::Sample;
use oxccl::buffer::Memory;
use oxccl::launch::{Bootstrap, EnvVars, LaunchInfo};
use oxccl::pg::ProcessGroup;
use oxccl::Result;

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
