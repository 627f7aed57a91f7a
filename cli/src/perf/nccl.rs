//! The NCCL world: the GPUs a process drives, a thread each (or, under torchrun, srun or
//! mpirun, this process's one GPU), with a process group and a `Comm` of the same ranks per
//! rank, all of them stopped when one fails; and the layers `oxccl check` asks for by name.

pub use super::rank_layers::nccl_layer;
use super::stop::Stopper;
use oxccl::core::peer_kernels::{PeerPolicy, PeerTable};
use oxccl::core::Backend as _;
use oxccl::launch::Bootstrap;
use oxccl::pg::{PgOptions, ProcessGroup};
use oxccl::store::{MemStore, Store};
use oxccl::{Comm, CommConfig, Device, Error, Nccl, Result};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

// `oxccl check` takes these from here, beside the thread world.
pub use super::backend::load;
pub use super::plan::LayerOpts;

/// A rank's handles: its process group and, beside it, a `Comm` of the same ranks.
pub type RankBody<'a, R> =
    &'a (dyn Fn(&ProcessGroup<Nccl>, &Rc<RefCell<Comm>>, u32) -> Result<R> + Sync);

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
    /// Blocking or not, with the kernels `kernels` names, else `OXCCL_PEER_KERNELS`'s.
    pub fn of(
        blocking: bool,
        kernels: Option<PeerPolicy>,
    ) -> std::result::Result<RankSetup, String> {
        let kernels = match kernels {
            Some(k) => k,
            None => oxccl::peer_policy_from_env().map_err(|e| e.to_string())?,
        };
        Ok(RankSetup { blocking, kernels })
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
        eprintln!("oxccl: rank {r} failed: {e}; stopping the other ranks");
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

/// Runs `body` as this process's rank of a launched job (torchrun, srun, mpirun) on its
/// GPU, with a process group and a `Comm` of every launched rank.
pub fn process_world<R>(
    lib: &Nccl,
    boot: &Bootstrap,
    setup: RankSetup,
    body: RankBody<'_, R>,
) -> std::result::Result<R, String> {
    let (r, n) = (boot.rank, boot.world_size);
    // A namespace of this run's own: a store that outlives a run (torchrun's agent store
    // across restarts) must not hand a restarted rank the last run's unique id.
    let store = oxccl::pg::world_namespace(boot.group_store(), n).map_err(|e| e.to_string())?;
    let id = exchange_id(lib, store.as_ref(), r).map_err(|e| e.to_string())?;
    with_rank(lib, id, store, r, n, boot.device, setup, None, body)
        .map_err(|e| format!("rank {r}: {e}"))
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
