//! A data-parallel training step written once, generic over the backend: every rank
//! averages its gradient buckets with one coalesced all-reduce, then applies them.
//!
//! - Without a launcher (or with `OXCCL_BACKEND=mock`): four ranks of the mock world, as
//!   threads of this process, with an in-process store. `cargo run --example ddp_step`.
//! - Under torchrun on GPUs: `torchrun --nproc_per_node 2 --no-python target/release/examples/ddp_step`
//!   (each process joins the launcher's TCP store and uses GPU LOCAL_RANK through NCCL).
//!
//! Every rank prints the same line: the averaged gradients and the updated weights.

use oxccl::buffer::Memory;
use oxccl::pg::{PgOptions, ProcessGroup};
use oxccl::store::{MemStore, Store, TcpStore, TcpStoreOptions};
use oxccl::{Device, ReduceOp, Result};
use std::sync::Arc;

/// Gradient buckets of rank `r`: bucket b holds `len(b)` values `r + b`.
fn local_gradients(rank: u32) -> Vec<Vec<f32>> {
    (0..3u32)
        .map(|b| vec![(rank + b) as f32; 4 + b as usize])
        .collect()
}

/// One step: average the gradients across ranks (one coalesced batch, one work), then
/// `w -= lr × g`. Generic over the backend: the same code runs on the mock and on NCCL.
fn train_step<B: Memory>(pg: &ProcessGroup<B>, weights: &mut [f32], lr: f32) -> Result<Vec<f32>> {
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
                let pg = ProcessGroup::new(backend, store, r, n, PgOptions::from_env(None)?)?;
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

fn on_nccl(launch: &oxccl::core::launch::LaunchInfo) -> Result<()> {
    let nccl = oxccl::Nccl::load().map_err(|e| {
        oxccl::Error::invalid(
            "OXCCL_NCCL_LIBRARY",
            format_args!("a loadable NCCL library: {e}"),
        )
    })?;
    let host = launch
        .master_addr
        .as_ref()
        .map_or("127.0.0.1".to_string(), |h| h.as_str().to_string());
    let port = launch.master_port.unwrap_or(29500);
    // torchrun's agent already serves a store there: join it; otherwise rank 0 hosts one.
    let mut opts = if launch.use_agent_store || launch.rank != 0 {
        TcpStoreOptions::client(&host, port)
    } else {
        TcpStoreOptions::server(&host, port)
    };
    opts.world_size = Some(launch.world_size);
    let store: Arc<dyn Store> = Arc::new(TcpStore::new(opts)?);
    let mut pg_opts = PgOptions::from_env(None)?;
    pg_opts.device = Device(launch.local_rank.unwrap_or(0));
    let pg = ProcessGroup::new(nccl, store, launch.rank, launch.world_size, pg_opts)?;
    let mut weights = vec![1.0f32; 15];
    let grads = train_step(&pg, &mut weights, 0.5)?;
    report(launch.rank, &grads, &weights);
    pg.destroy();
    Ok(())
}

fn main() -> Result<()> {
    env_logger::init();
    let vars: std::collections::HashMap<String, String> = std::env::vars().collect();
    let mock = vars.get("OXCCL_BACKEND").map(String::as_str) == Some("mock");
    if mock || !vars.contains_key("RANK") {
        println!("mock world of 4 ranks (threads of this process)");
        return on_mock(4);
    }
    let launch = oxccl::core::launch::LaunchInfo::detect(|k| vars.get(k).map(String::as_str))?;
    on_nccl(&launch)
}
