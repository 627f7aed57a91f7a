//! The sweep on NCCL: a thread per local GPU, or one process per GPU under torchrun, srun or
//! mpirun; the `raw` and `comm` layers (device buffers by address: plain, registered or
//! symmetric windows; CUDA-graph capture of the timed loop) beside the `pg` layer.

use super::args::PerfArgs;
use super::direct::NcclLayer;
use super::drive::{merge, sweep, Plan, Sample};
use super::layer::LibraryAlloc;
use super::layer::{Layer, PgLayer};
use super::outcome::Outcome;
use super::processes;
use super::stop::Stopper;
use crate::elem::with_dtype;
use oxccl::core::peer_kernels::{PeerPolicy, PeerTable};
use oxccl::core::Backend;
use oxccl::pg::{PgOptions, ProcessGroup};
use oxccl::store::{MemStore, Store};
use oxccl::{Comm, CommConfig, Device, Error, Nccl, Result};
use serde_json::json;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

/// A rank's handles: its process group and, beside it, a `Comm` of the same ranks.
pub type RankBody<'a, R> =
    &'a (dyn Fn(&ProcessGroup<Nccl>, &Rc<RefCell<Comm>>, u32) -> Result<R> + Sync);

/// The library of `--library`, or the search's.
pub fn load(library: Option<&std::path::Path>) -> std::result::Result<Nccl, String> {
    match library {
        Some(p) => Nccl::open(p),
        None => Nccl::load(),
    }
    .map_err(|e| format!("{e}; {}", crate::info::GET_ONE))
}

/// The GPUs to drive: `-g` (at most the visible ones), else every visible one.
pub fn local_gpus(g: Option<u32>) -> std::result::Result<u32, String> {
    let visible = crate::gpus::probe()?.0.len() as u32;
    match g {
        Some(g) if g > visible => Err(format!(
            "-g {g}: only {visible} GPUs are visible here (CUDA_VISIBLE_DEVICES narrows them); give -g {visible} or less"
        )),
        Some(g) => Ok(g),
        None if visible == 0 => Err("no GPU: the CUDA driver sees none; run with --backend mock".to_owned()),
        None => Ok(visible),
    }
}

/// Runs `body` on `n` local GPUs, a thread each, with a process group and a `Comm` per rank.
pub fn thread_world<R: Send>(
    lib: &Nccl,
    n: u32,
    setup: RankSetup,
    body: RankBody<'_, R>,
) -> std::result::Result<Vec<R>, String> {
    let id = lib.unique_id().map_err(|e| e.to_string())?;
    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    let stop = Stopper::default();
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..n)
            .map(|r| {
                let (lib, store, stop) = (lib.clone(), store.clone(), &stop);
                s.spawn(move || {
                    with_rank(&lib, id, store, r, n, Device(r), setup, Some(stop), body)
                })
            })
            .collect();
        hs.into_iter()
            .enumerate()
            .map(|(r, h)| {
                h.join()
                    .map_err(|_| format!("rank {r} panicked"))?
                    .map_err(|e| format!("rank {r}: {e}"))
            })
            .collect()
    })
}

/// How each rank's communicators are made: blocking or not, and who runs their all-reduces.
#[derive(Debug, Clone, Copy)]
pub struct RankSetup {
    /// Blocking communicators.
    pub blocking: bool,
    /// oxccl's kernels or NCCL (for the `Comm` and the process group).
    pub kernels: PeerPolicy,
}

impl RankSetup {
    /// The setup `-z` and `--peer-kernels` (else `OXCCL_PEER_KERNELS`) ask for.
    pub fn of(a: &PerfArgs) -> std::result::Result<RankSetup, String> {
        let kernels = match a.peer_kernels {
            Some(k) => k.policy(),
            None => oxccl::peer_policy_from_env().map_err(|e| e.to_string())?,
        };
        Ok(RankSetup {
            blocking: a.blocking == 1,
            kernels,
        })
    }
}

/// Makes this rank's communicator and process group, runs `body`, and releases both.
#[allow(clippy::too_many_arguments)]
fn with_rank<R>(
    lib: &Nccl,
    id: oxccl::UniqueId,
    store: Arc<dyn Store>,
    r: u32,
    n: u32,
    dev: Device,
    setup: RankSetup,
    stop: Option<&Stopper>,
    body: RankBody<'_, R>,
) -> Result<R> {
    let cfg = CommConfig::new().blocking(setup.blocking);
    let made = Comm::with_new_stream(lib.init_rank(&id, r, n, dev, &cfg)?)?;
    let comm = Rc::new(RefCell::new(made));
    if let Some(stop) = stop {
        let h = comm.borrow().abort_handle();
        stop.on_stop(Box::new(move |why| h.abort(why)));
    }
    comm.borrow().wait_ready()?;
    // The default limits, as the pg layer's group has (no tune table): the layers compare.
    comm.borrow_mut()
        .enable_peer_kernels_with(setup.kernels, &PeerTable::default())?;
    let opts = PgOptions {
        bound_device: Some(dev),
        peer_kernels: setup.kernels,
        ..PgOptions::default()
    };
    let pg = ProcessGroup::new(lib.clone(), store, r, n, opts)?;
    if let Some(stop) = stop {
        let pg = pg.clone();
        stop.on_stop(Box::new(move |why| pg.abort(why)));
    }
    let out = body(&pg, &comm, r);
    if let (Err(e), Some(stop)) = (&out, stop) {
        // Said at once (the run's own report waits for every rank), then the other ranks,
        // which would wait for this one in their next collective, are stopped.
        eprintln!("oxccl perf: rank {r} failed: {e}; stopping the other ranks");
        stop.stop(&format!("rank {r} failed: {e}"));
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
    out
}

/// Runs the plan on NCCL.
pub fn run(a: &PerfArgs, plan: &Plan) -> std::result::Result<Outcome, String> {
    let lib = load(a.library.as_deref())?;
    let version = lib.version();
    let setup = RankSetup::of(a)?;
    if processes::launched() {
        let boot = processes::bootstrap()?;
        let (r, n) = (boot.rank, boot.world_size);
        // A namespace of this run's own: a store that outlives a run (torchrun's agent store
        // across restarts) must not hand a restarted rank the last run's unique id.
        let store = oxccl::pg::world_namespace(boot.group_store(), n).map_err(|e| e.to_string())?;
        let id = exchange_id(&lib, store.as_ref(), r).map_err(|e| e.to_string())?;
        let body = |pg: &ProcessGroup<Nccl>, comm: &Rc<RefCell<Comm>>, r: u32| {
            let samples = rank(a, plan, &lib, pg, comm, r, n)?;
            processes::merge_through(pg, samples)
        };
        let samples = with_rank(&lib, id, store, r, n, boot.device, setup, None, &body)
            .map_err(|e| format!("rank {r}: {e}"))?;
        let first = format!(
            "NCCL {version}: {n} ranks, one process per GPU ({:?}), graphs {}, registration {}",
            boot.launcher, a.graphs, a.registration
        );
        return Ok(Outcome {
            head: json!({"backend": "nccl", "nccl_version": version.to_string(), "mode": "process per GPU", "ranks": n, "graphs": a.graphs, "registration": a.registration, "first_line": first}),
            merged: (r == 0).then_some(samples),
            n,
        });
    }
    let n = local_gpus(a.gpus)?;
    let body = |pg: &ProcessGroup<Nccl>, comm: &Rc<RefCell<Comm>>, r: u32| {
        rank(a, plan, &lib, pg, comm, r, n)
    };
    let per_rank = thread_world(&lib, n, setup, &body)?;
    let first = format!(
        "NCCL {version} at {}: {n} GPUs, a thread per GPU, graphs {}, registration {}",
        oxccl::escaped_path(lib.library().path()),
        a.graphs,
        a.registration
    );
    Ok(Outcome {
        head: json!({"backend": "nccl", "nccl_version": version.to_string(), "mode": "thread per GPU", "ranks": n, "graphs": a.graphs, "registration": a.registration, "first_line": first}),
        merged: Some(merge(&per_rank)),
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

/// How the layers are set up (the pg layer takes `corrupt`, `graphs` and `library_bufs`).
#[derive(Clone, Copy, Default)]
pub struct LayerOpts {
    /// -R: 0 plain, 1 registered, 2 symmetric windows.
    pub registration: u8,
    /// -G: graph launches (0: no graph).
    pub graphs: u32,
    /// The hidden --inject-error, on this rank.
    pub corrupt: bool,
    /// -z 0: the communicator is nonblocking.
    pub nonblocking: bool,
    /// The pg layer runs on `NcclBuf` (the memory the raw and comm layers take by default)
    /// instead of cudarc slices (see [`super::direct::library_memory`]).
    pub library_bufs: bool,
}

/// The layers of `plan` on one rank.
pub fn layers(
    plan_layers: &[&str],
    dtype: crate::ops::Dtype,
    lib: &Nccl,
    pg: &ProcessGroup<Nccl>,
    comm: &Rc<RefCell<Comm>>,
    o: LayerOpts,
) -> Vec<Box<dyn Layer>> {
    let LayerOpts {
        registration,
        graphs,
        corrupt,
        nonblocking,
        library_bufs,
    } = o;
    plan_layers
        .iter()
        .map(|l| match *l {
            // -R or --tuned: CommBuf buffers in a group under that tune table.
            "pg" if super::modes::pg_tuned() => super::modes::pg_layer(pg, dtype, corrupt, graphs),
            "pg" if library_bufs => with_dtype!(dtype, T => Box::new(PgLayer::<Nccl, T, LibraryAlloc>::new(pg.clone()).corrupting(corrupt).graphs(graphs)) as Box<dyn Layer>),
            "pg" => with_dtype!(dtype, T => Box::new(PgLayer::<Nccl, T>::new(pg.clone()).corrupting(corrupt).graphs(graphs)) as Box<dyn Layer>),
            name => {
                let raw = name == "raw";
                with_dtype!(dtype, T => Box::new(NcclLayer::<T>::new(comm.clone(), lib.clone(), raw, registration, graphs).corrupting(corrupt).nonblocking(nonblocking)) as Box<dyn Layer>)
            }
        })
        .collect()
}

fn rank(
    a: &PerfArgs,
    plan: &Plan,
    lib: &Nccl,
    pg: &ProcessGroup<Nccl>,
    comm: &Rc<RefCell<Comm>>,
    r: u32,
    n: u32,
) -> Result<Vec<Sample>> {
    let mut layers = layers(
        &plan.layers,
        plan.dtype,
        lib,
        pg,
        comm,
        LayerOpts {
            registration: a.registration,
            graphs: a.graphs,
            corrupt: a.inject_error && r == 0,
            nonblocking: a.blocking == 0,
            library_bufs: super::direct::library_memory(lib),
        },
    );
    let sync_pg = pg.clone();
    let sync = move || sync_pg.barrier()?.wait();
    sweep(plan, &mut layers, n, r, &sync, r == 0)
}
