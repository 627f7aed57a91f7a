//! The ranks a measurement runs on, the same for `perf`, `tune` and `ping-pong`: NCCL's local
//! GPUs a thread each, or this process's GPU when torchrun, srun or mpirun started a process
//! per rank; the mock world's ranks as threads, or a rank per launched process sharing one
//! communicator hosted by rank 0's process (so that the launchers' paths run on any machine).
//! A body runs on every rank this process holds; rank 0's result comes back.

use super::backend::Ground;
use super::mock_world::{mock_process, mock_world_of};
use super::nccl::{local_gpus, process_world, thread_world, RankSetup};
use super::rank::Rank;
use oxccl::core::peer_kernels::PeerPolicy;
use oxccl::launch::{Bootstrap, EnvVars, LaunchInfo, Launcher};
use oxccl::mock::MockBackend;
use oxccl::{Nccl, Result};

/// The backend every rank of a world runs on.
enum Backend {
    Mock(MockBackend),
    Nccl(Box<Nccl>, RankSetup),
}

/// How a world's ranks are laid out.
enum Layout {
    /// This many ranks, a thread each in this process.
    Threads(u32),
    /// This process is one rank of a launched job.
    Process(Box<Bootstrap>),
}

/// Where a measurement's ranks run.
pub struct World {
    backend: Backend,
    layout: Layout,
}

/// Whether a launcher started this process (its rank variables are set).
fn launched() -> bool {
    let env = EnvVars::from_process();
    LaunchInfo::detect(|k| env.get(k)).is_ok()
}

impl World {
    /// The world on `ground`: this process's rank when a launcher started it, else `gpus`
    /// threads (default: every visible GPU, 2 on the mock). NCCL's communicators are made
    /// blocking or not, with the kernels `kernels` names (else `OXCCL_PEER_KERNELS`'s).
    pub fn of(
        ground: &Ground,
        gpus: Option<u32>,
        blocking: bool,
        kernels: Option<PeerPolicy>,
    ) -> std::result::Result<World, String> {
        let backend = match ground {
            Ground::Mock(_) => Backend::Mock(MockBackend::new()),
            Ground::Nccl(lib) => Backend::Nccl(lib.clone(), RankSetup::of(blocking, kernels)?),
        };
        let layout = match (&backend, launched()) {
            (_, true) => Layout::Process(Box::new(Bootstrap::from_env().map_err(|e| {
                format!("{e} (check the launcher's RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT)")
            })?)),
            (Backend::Mock(_), false) => Layout::Threads(gpus.unwrap_or(2)),
            (Backend::Nccl(..), false) => Layout::Threads(local_gpus(gpus)?),
        };
        Ok(World { backend, layout })
    }

    /// `n` mock ranks as threads over `backend` (a mock of another NCCL release, say).
    pub fn mock_threads(backend: MockBackend, n: u32) -> World {
        World {
            backend: Backend::Mock(backend),
            layout: Layout::Threads(n),
        }
    }

    /// `n` local GPUs of `lib`, a thread each.
    pub fn nccl_threads(lib: Nccl, n: u32, setup: RankSetup) -> World {
        World {
            backend: Backend::Nccl(Box::new(lib), setup),
            layout: Layout::Threads(n),
        }
    }

    /// The ranks of the whole world (every process's).
    pub fn ranks(&self) -> u32 {
        match &self.layout {
            Layout::Threads(n) => *n,
            Layout::Process(boot) => boot.world_size,
        }
    }

    /// Whether this process holds rank 0, the one that reports.
    pub fn leads(&self) -> bool {
        match &self.layout {
            Layout::Threads(_) => true,
            Layout::Process(boot) => boot.rank == 0,
        }
    }

    /// The launcher that started a process per rank (`None`: ranks as threads).
    pub fn launcher(&self) -> Option<Launcher> {
        match &self.layout {
            Layout::Threads(_) => None,
            Layout::Process(boot) => Some(boot.launcher),
        }
    }

    /// Refuses a root that is not a rank of the world.
    pub fn has_root(&self, root: u32) -> std::result::Result<(), String> {
        let n = self.ranks();
        match &self.layout {
            _ if root < n => Ok(()),
            Layout::Threads(_) => Err(format!(
                "-r {root} is not a rank of {n}: give a root below -g"
            )),
            Layout::Process(_) => Err(format!(
                "-r {root} is not a rank of the {n} launched: give a root below the world size"
            )),
        }
    }

    /// Runs `body` on every rank of this process, with the rank's number; rank 0's result
    /// (`None` in the processes of the other ranks). One rank's failure stops the others.
    pub fn run<R: Send>(
        &self,
        body: impl Fn(&Rank<'_>, u32) -> Result<R> + Sync,
    ) -> std::result::Result<Option<R>, String> {
        let first = |all: Vec<R>| all.into_iter().next();
        match (&self.backend, &self.layout) {
            (Backend::Mock(b), Layout::Threads(n)) => {
                mock_world_of(b.clone(), *n, |pg, r| body(&Rank::Mock(pg), r)).map(first)
            }
            (Backend::Mock(_), Layout::Process(boot)) => {
                mock_process(boot, |pg, r| body(&Rank::Mock(pg), r))
                    .map(|out| (boot.rank == 0).then_some(out))
            }
            (Backend::Nccl(lib, setup), Layout::Threads(n)) => {
                thread_world(lib, *n, *setup, &|pg, comm, r| {
                    body(&Rank::Nccl(pg, comm, lib), r)
                })
                .map(first)
            }
            (Backend::Nccl(lib, setup), Layout::Process(boot)) => {
                process_world(lib, boot, *setup, &|pg, comm, r| {
                    body(&Rank::Nccl(pg, comm, lib), r)
                })
                .map(|out| (boot.rank == 0).then_some(out))
            }
        }
    }
}
