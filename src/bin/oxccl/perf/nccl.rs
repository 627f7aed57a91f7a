//! The sweep on NCCL: a thread per local GPU, or one process per GPU under torchrun, srun or
//! mpirun; the `raw` and `comm` layers (device buffers by address: plain, registered or
//! symmetric windows; CUDA-graph capture of the timed loop) beside the `pg` layer.

use super::direct::NcclLayer;
use super::{Layer, Outcome, PerfArgs, PgLayer, Plan, Sample};
use oxccl::core::Backend;
use oxccl::pg::{PgOptions, ProcessGroup};
use oxccl::store::{MemStore, Store};
use oxccl::{Comm, CommConfig, Device, Error, Nccl, Result};
use serde_json::json;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

/// Runs the plan on NCCL.
pub fn run(a: &PerfArgs, plan: &Plan) -> std::result::Result<Outcome, String> {
    let lib = match &a.library {
        Some(p) => Nccl::open(p),
        None => Nccl::load(),
    }
    .map_err(|e| format!("{e}; {}", crate::info::GET_ONE))?;
    let env = oxccl::launch::EnvVars::from_process();
    let launched = oxccl::launch::LaunchInfo::detect(|k| env.get(k)).is_ok();
    let version = lib.version();
    if launched {
        let boot = oxccl::launch::Bootstrap::from_env()
            .map_err(|e| format!("{e} (check the launcher's RANK/WORLD_SIZE/MASTER_ADDR)"))?;
        let (r, n) = (boot.rank, boot.world_size);
        let id = exchange_id(&lib, boot.store.as_ref(), r).map_err(|e| e.to_string())?;
        let samples = rank(
            a,
            plan,
            &lib,
            id,
            boot.store.clone(),
            r,
            n,
            boot.device,
            true,
        )
        .map_err(|e| format!("rank {r}: {e}"))?;
        let first = format!(
            "NCCL {version}: {n} ranks, one process per GPU ({:?}), this is rank {r} on GPU {}",
            boot.launcher, boot.device.0
        );
        return Ok(Outcome {
            head: json!({"backend": "nccl", "nccl_version": version.to_string(), "mode": "process per GPU", "ranks": n, "graphs": a.graphs, "registration": a.registration, "first_line": first}),
            merged: (r == 0).then_some(samples),
            n,
        });
    }
    let n = match a.gpus {
        Some(g) => g,
        None => crate::gpus::probe()
            .map(|(g, _)| g.len() as u32)
            .map_err(|e| e.to_string())?
            .max(1),
    };
    let id = lib.unique_id().map_err(|e| e.to_string())?;
    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    let per_rank: Vec<Vec<Sample>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..n)
            .map(|r| {
                let (lib, store) = (lib.clone(), store.clone());
                s.spawn(move || rank(a, plan, &lib, id, store, r, n, Device(r), false))
            })
            .collect();
        hs.into_iter()
            .enumerate()
            .map(|(r, h)| {
                h.join()
                    .map_err(|_| format!("rank {r} panicked"))?
                    .map_err(|e| format!("rank {r}: {e}"))
            })
            .collect::<std::result::Result<_, String>>()
    })?;
    let first = format!(
        "NCCL {version} at {}: {n} GPUs, a thread per GPU, graphs {}, registration {}",
        lib.library().path().display(),
        a.graphs,
        a.registration
    );
    Ok(Outcome {
        head: json!({"backend": "nccl", "nccl_version": version.to_string(), "mode": "thread per GPU", "ranks": n, "graphs": a.graphs, "registration": a.registration, "first_line": first}),
        merged: Some(super::merge(&per_rank)),
        n,
    })
}

/// Rank 0's unique id for the raw/comm communicator, through the job's store.
fn exchange_id(lib: &Nccl, store: &dyn Store, r: u32) -> Result<oxccl::UniqueId> {
    if r == 0 {
        let id = lib.unique_id()?;
        store.set("oxccl_perf/comm_id", id.as_bytes())?;
        Ok(id)
    } else {
        oxccl::UniqueId::from_bytes(&store.get("oxccl_perf/comm_id", Duration::from_secs(600))?)
    }
}

#[allow(clippy::too_many_arguments)]
fn rank(
    a: &PerfArgs,
    plan: &Plan,
    lib: &Nccl,
    id: oxccl::UniqueId,
    store: Arc<dyn Store>,
    r: u32,
    n: u32,
    dev: Device,
    reduce_here: bool,
) -> Result<Vec<Sample>> {
    let cfg = CommConfig::new().blocking(a.blocking == 1);
    let comm = Rc::new(RefCell::new(Comm::init_rank(lib, &id, r, n, dev.0, &cfg)?));
    comm.borrow().wait_ready()?;
    let pg = ProcessGroup::new(
        lib.clone(),
        store,
        r,
        n,
        PgOptions {
            bound_device: Some(dev),
            ..PgOptions::default()
        },
    )?;
    let mut layers: Vec<Box<dyn Layer>> = Vec::new();
    for l in &plan.layers {
        layers.push(match *l {
            "pg" => crate::with_dtype!(plan.dtype, T => Box::new(PgLayer::<Nccl, T>::new(pg.clone()).corrupting(a.inject_error && r == 0)) as Box<dyn Layer>),
            name => {
                let raw = name == "raw";
                crate::with_dtype!(plan.dtype, T => Box::new(NcclLayer::<T>::new(comm.clone(), lib.clone(), raw, a.registration, a.graphs)) as Box<dyn Layer>)
            }
        });
    }
    let sync_pg = pg.clone();
    let sync = move || sync_pg.barrier()?.wait();
    let mut samples = super::sweep(plan, &mut layers, n, r, &sync, r == 0)?;
    drop(layers);
    if reduce_here {
        // One process per rank: merge through the process group (max of times, sum of wrongs).
        let mut secs: Vec<f64> = samples
            .iter()
            .map(|s| if s.secs.is_nan() { -1.0 } else { s.secs })
            .collect();
        let mut wrong: Vec<f64> = samples.iter().map(|s| s.wrong as f64).collect();
        let mut b = pg.upload(&secs)?;
        pg.all_reduce(&mut b, oxccl::ReduceOp::Max)?.wait()?;
        secs = pg.download(&b)?;
        let mut w = pg.upload(&wrong)?;
        pg.all_reduce(&mut w, oxccl::ReduceOp::Min)?.wait()?;
        let unchecked = pg.download(&w)?;
        let mut w = pg.upload(&wrong)?;
        pg.all_reduce(&mut w, oxccl::ReduceOp::Sum)?.wait()?;
        wrong = pg.download(&w)?;
        for (i, s) in samples.iter_mut().enumerate() {
            s.secs = if secs[i] < 0.0 { f64::NAN } else { secs[i] };
            s.wrong = if unchecked[i] < 0.0 {
                -1
            } else {
                wrong[i] as i64
            };
        }
    }
    pg.destroy();
    match Rc::try_unwrap(comm) {
        Ok(c) => c.into_inner().destroy()?,
        Err(_) => {
            return Err(Error::invalid(
                "comm",
                format_args!("no layer left holding it"),
            ))
        }
    }
    Ok(samples)
}
