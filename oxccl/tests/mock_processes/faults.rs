//! The child side of the fault-plan scenario: a backend with a plan, built here rather than
//! chosen by `init_process_group`.

use crate::{finish, variant};
use oxccl::pg::ProcessGroup;
use oxccl::{ReduceOp, Result};
use std::time::{Duration, Instant};

/// A fault of the plan on rank 1's second op, planned in every process (each process's plan
/// applies to its own ranks), through a backend built here rather than chosen.
pub fn fault_child(kind: &str) -> Result<()> {
    use oxccl::core::{FeatureSet, ResultCode};
    use oxccl::mock::{FaultPlan, MockBackend, DEFAULT_INIT_TIMEOUT, DEFAULT_VERSION};
    let plan = match kind {
        "fail" => FaultPlan::new().fail_op(1, 1, ResultCode::INTERNAL_ERROR),
        "lose" => FaultPlan::new().lose_rank(1, 1),
        _ => FaultPlan::new().delay_op(1, 1, Duration::from_millis(500)),
    };
    let backend = MockBackend::with_options(
        FeatureSet::for_version(DEFAULT_VERSION),
        plan,
        1,
        DEFAULT_INIT_TIMEOUT,
    )
    .across_processes();
    let boot = oxccl::launch::Bootstrap::from_env()?;
    let opts = oxccl::pg::PgOptions::from_env(None)?;
    let pg = ProcessGroup::new(backend, boot.store, boot.rank, boot.world_size, opts)?;
    let me = pg.global_rank();
    let mut b = pg.upload(&[1.0f32; 256])?;
    pg.all_reduce(&mut b, ReduceOp::Sum)?.wait()?;
    let start = Instant::now();
    let r = pg.all_reduce(&mut b, ReduceOp::Sum).and_then(|w| w.wait());
    let ms = start.elapsed().as_millis();
    let sum = pg.download(&b).ok().and_then(|v| v.first().copied());
    println!(
        "RESULT rank={me} err={} ms={ms} first={sum:?}",
        r.as_ref().err().map_or("none", variant)
    );
    if let Err(e) = r {
        println!("DETAIL rank={me} {e}");
    }
    finish(&pg, None)
}
