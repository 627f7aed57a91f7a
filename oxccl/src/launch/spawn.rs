//! Ranks as threads of this process, without a launcher: PyTorch's `mp.spawn` for one
//! machine. Each rank gets the default group on an in-process store, on the backend
//! [`with_backend`] picks (NCCL with rank r on GPU r when a GPU and NCCL are here, else the
//! mock world), so one program runs on a laptop and on a GPU machine alike.

use super::choose::{with_backend, WithBackend, WithProcessGroup};
use crate::env_vars::EnvVars;
use crate::pg::{PgBackend, PgOptions, ProcessGroup};
use crate::store::{MemStore, Store};
use oxccl_core::{Device, Error, Result};
use std::sync::Arc;

/// The GPUs of this machine that CUDA sees (`CUDA_VISIBLE_DEVICES` applies); 0 without a
/// CUDA driver, or in a build without the `nccl` feature.
pub fn local_gpus() -> u32 {
    #[cfg(feature = "nccl")]
    return crate::nccl::device_count().unwrap_or(0);
    #[cfg(not(feature = "nccl"))]
    return 0;
}

/// Runs `job` on `world` ranks, threads of this process (rank r on device r), each with its
/// default group, and returns each rank's output by rank. The backend is the one
/// `OXCCL_BACKEND` picks (`auto`: NCCL when a CUDA driver and NCCL load, else the mock); the
/// group's options come from the `OXCCL_*` variables and PyTorch's names for them
/// ([`EnvVars::settings`]). NCCL needs a GPU per rank: `world`
/// above [`local_gpus`] is refused there before any rank starts (the mock has no limit). The first error of any rank
/// is returned once every rank has ended (the others see the failed rank's group fail or time
/// out, as they would across processes).
///
/// ```
/// use oxccl::launch::{spawn, WithProcessGroup};
/// use oxccl::pg::{PgBackend, ProcessGroup};
///
/// #[derive(Clone)]
/// struct Sum;
/// impl WithProcessGroup for Sum {
///     type Output = Vec<u32>;
///     fn run<B: PgBackend>(self, pg: ProcessGroup<B>) -> oxccl::Result<Vec<u32>> {
///         let mut x = pg.upload(&[pg.global_rank() + 1; 2])?;
///         pg.all_reduce(&mut x, oxccl::ReduceOp::Sum)?.wait()?;
///         pg.download(&x)
///     }
/// }
///
/// # std::env::set_var("OXCCL_BACKEND", "mock");
/// let out = spawn(2, Sum)?;
/// assert_eq!(out, [vec![3, 3], vec![3, 3]]);
/// # Ok::<(), oxccl::Error>(())
/// ```
pub fn spawn<W>(world: u32, job: W) -> Result<Vec<W::Output>>
where
    W: WithProcessGroup + Clone + Send,
    W::Output: Send,
{
    if world == 0 {
        return Err(Error::invalid(
            "world",
            format_args!("at least 1 rank, got 0"),
        ));
    }
    // Read once: the backend and the options see the same settings.
    let vars = EnvVars::from_process();
    let env = vars.settings().config?;
    let opts = PgOptions::from_vars(&vars, None)?;
    with_backend(&env, Spawn { world, job, opts })?
}

/// The ranks, run once the backend is chosen.
struct Spawn<W> {
    world: u32,
    job: W,
    opts: PgOptions,
}

impl<W> WithBackend for Spawn<W>
where
    W: WithProcessGroup + Clone + Send,
    W::Output: Send,
{
    type Output = Result<Vec<W::Output>>;

    fn run<B: PgBackend>(self, backend: B) -> Result<Vec<W::Output>> {
        let devices = backend.device_count()?;
        if self.world > devices {
            return Err(Error::invalid(
                "world",
                format_args!(
                    "at most {devices} ranks, one per GPU of this machine, got {}",
                    self.world
                ),
            ));
        }
        let store: Arc<dyn Store> = Arc::new(MemStore::new());
        let n = self.world;
        let outputs = std::thread::scope(|s| {
            let ranks: Vec<_> = (0..n)
                .map(|r| {
                    let (backend, store, job) = (backend.clone(), store.clone(), self.job.clone());
                    let opts = PgOptions {
                        device: Device(r),
                        ..self.opts.clone()
                    };
                    std::thread::Builder::new()
                        .name(format!("oxccl-rank-{r}"))
                        .spawn_scoped(s, move || {
                            job.run(ProcessGroup::new(backend, store, r, n, opts)?)
                        })
                })
                .collect();
            ranks
                .into_iter()
                .map(|t| match t {
                    Ok(t) => t.join().unwrap_or_else(|_| {
                        Err(Error::Remote {
                            detail: oxccl_core::text!("a rank's thread panicked"),
                        })
                    }),
                    Err(e) => Err(Error::invalid(
                        "world",
                        format_args!("ranks the system can start threads for: {e}"),
                    )),
                })
                .collect::<Vec<_>>()
        });
        outputs.into_iter().collect()
    }
}
