//! A data-parallel training step written once, generic over the backend: every rank
//! averages its gradient buckets with one coalesced all-reduce, then applies them.
//!
//! - Without a launcher: four ranks of the mock world, as threads of this process, with an
//!   in-process store. `cargo run --example ddp_step`.
//! - Under a launcher (`torchrun --nproc_per_node 4 --no-python target/debug/examples/ddp_step`,
//!   `srun`, `mpirun`): `oxccl::launch::init_process_group` joins the launcher's store and picks
//!   the backend (`OXCCL_BACKEND=mock|nccl|auto`): NCCL on GPU LOCAL_RANK when a GPU and NCCL
//!   are there, else the mock spanning the launched processes, so it runs on a laptop too.
//!
//! Every rank prints the same line: the averaged gradients and the updated weights.

use oxccl::launch::{init_process_group, WithProcessGroup};
use oxccl::pg::PgBackend;
use oxccl::pg::{PgOptions, ProcessGroup};
use oxccl::store::{MemStore, Store};
use oxccl::{ReduceOp, Result};
use std::sync::Arc;

/// Gradient buckets of rank `r`: bucket b holds `len(b)` values `r + b`.
fn local_gradients(rank: u32) -> Vec<Vec<f32>> {
    (0..3u32)
        .map(|b| vec![(rank + b) as f32; 4 + b as usize])
        .collect()
}

/// One step: average the gradients across ranks (one coalesced batch, one work), then
/// `w -= lr × g`. Generic over the backend: the same code runs on the mock and on NCCL.
fn train_step<B: PgBackend>(
    pg: &ProcessGroup<B>,
    weights: &mut [f32],
    lr: f32,
) -> Result<Vec<f32>> {
    let rank = pg.global_rank();
    let mut buckets = local_gradients(rank)
        .iter()
        .map(|g| pg.upload(g))
        .collect::<Result<Vec<_>>>()?;
    let mut refs: Vec<_> = buckets.iter_mut().collect();
    pg.all_reduce_coalesced(&mut refs, ReduceOp::Avg)?.wait()?;
    let mut grads = Vec::new();
    for b in &buckets {
        grads.extend(pg.download(b)?);
    }
    for (w, g) in weights.iter_mut().zip(&grads) {
        *w -= lr * g;
    }
    Ok(grads)
}

fn report(rank: u32, grads: &[f32], weights: &[f32]) {
    println!("rank {rank}: averaged gradients {grads:?}; weights {weights:?}");
}

fn on_mock(n: u32) -> Result<()> {
    let backend = oxccl::mock::MockBackend::new();
    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    let ranks: Vec<_> = (0..n)
        .map(|r| {
            let (backend, store) = (backend.clone(), store.clone());
            std::thread::spawn(move || -> Result<()> {
                // A device per rank, as on GPUs (the mock refuses two ranks on one device, as
                // NCCL does).
                let opts = PgOptions {
                    device: oxccl::Device(r),
                    ..PgOptions::from_env(None)?
                };
                let pg = ProcessGroup::new(backend, store, r, n, opts)?;
                let mut weights = vec![1.0f32; 15];
                let grads = train_step(&pg, &mut weights, 0.5)?;
                report(r, &grads, &weights);
                Ok(())
            })
        })
        .collect();
    for t in ranks {
        t.join().expect("rank thread")?;
    }
    Ok(())
}

/// A launched rank: the backend of `OXCCL_BACKEND` (NCCL when a GPU and NCCL are there, else
/// the mock spanning this machine's processes), the launcher's store, one step.
struct Step;

impl WithProcessGroup for Step {
    type Output = ();
    fn run<B: PgBackend>(self, pg: ProcessGroup<B>) -> Result<()> {
        let mut weights = vec![1.0f32; 15];
        let grads = train_step(&pg, &mut weights, 0.5)?;
        report(pg.global_rank(), &grads, &weights);
        pg.destroy();
        Ok(())
    }
}

fn main() -> Result<()> {
    env_logger::init();
    if std::env::var_os("RANK").is_none() {
        println!("mock world of 4 ranks (threads of this process)");
        return on_mock(4);
    }
    init_process_group(Step)
}
