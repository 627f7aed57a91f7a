//! The backend chosen at run time: `OXCCL_BACKEND=mock|nccl|auto`. `ProcessGroup<B>` is
//! generic, so user code is written once as a [`WithBackend`] (or [`WithProcessGroup`]) and
//! monomorphized for both backends; [`with_backend`] runs it on the one chosen.
//!
//! `auto` (or unset) takes NCCL when a CUDA driver and an NCCL library both load, else the
//! mock; the choice and its reason are logged (`log::info!`). The mock is made with
//! `MockBackend::for_processes`, so ranks in one process (threads) and in many (a launcher's
//! processes on one machine) both work with the same binary.

use super::bootstrap::Bootstrap;
use super::init::InitMethod;
use crate::env_vars::EnvVars;
use crate::pg::PgBackend;
use crate::pg::{PgOptions, ProcessGroup};
use oxccl_core::{text, Error, Result};
use oxccl_rules::env::{BackendChoice, EnvConfig};
use oxccl_rules::tune::file::{tune_from_env, TUNE_FILE_VAR};

/// Code generic over the backend, run by [`with_backend`] on the one chosen.
pub trait WithBackend {
    /// What the code returns.
    type Output;
    /// Runs with `backend`.
    fn run<B: PgBackend>(self, backend: B) -> Self::Output;
}

/// Code run on the default process group of a launched job (see [`init_process_group`]).
pub trait WithProcessGroup {
    /// What the code returns.
    type Output;
    /// Runs with this rank's default group.
    fn run<B: PgBackend>(self, pg: ProcessGroup<B>) -> Result<Self::Output>;
}

/// Which backend, and why (what [`with_backend`] logs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    /// The backend.
    pub backend: BackendChoice,
    /// Why it was chosen.
    pub reason: String,
}

/// The decision, a pure function of the configuration and of whether NCCL is usable here
/// (`probe`: `Ok` when a GPU driver and NCCL load, else why not). Configured NCCL that cannot
/// load is an error naming `OXCCL_BACKEND` (never a silent fall back to the mock).
pub fn decide(configured: Option<BackendChoice>, probe: Result<(), String>) -> Result<Choice> {
    Ok(match (configured, probe) {
        (Some(BackendChoice::Mock), _) => Choice {
            backend: BackendChoice::Mock,
            reason: "OXCCL_BACKEND=mock".into(),
        },
        (Some(BackendChoice::Nccl), Ok(())) => Choice {
            backend: BackendChoice::Nccl,
            reason: "OXCCL_BACKEND=nccl".into(),
        },
        (Some(BackendChoice::Nccl), Err(why)) => {
            return Err(Error::invalid(
                "OXCCL_BACKEND",
                format_args!("nccl only where a GPU and NCCL are usable: {why}"),
            ))
        }
        (None, Ok(())) => Choice {
            backend: BackendChoice::Nccl,
            reason: "a CUDA driver and NCCL are present (OXCCL_BACKEND unset or auto)".into(),
        },
        (None, Err(why)) => Choice {
            backend: BackendChoice::Mock,
            reason: format!("no usable GPU/NCCL ({why}); OXCCL_BACKEND unset or auto"),
        },
    })
}

/// The NCCL library as a probe finds it; nothing can be found in a build without it.
#[cfg(feature = "nccl")]
type Loaded = crate::Nccl;
#[cfg(not(feature = "nccl"))]
type Loaded = std::convert::Infallible;

/// NCCL, when the CUDA driver and the library both load.
#[cfg(feature = "nccl")]
fn probe() -> std::result::Result<Loaded, String> {
    crate::nccl::require_driver().map_err(|e| format!("no CUDA driver: {e}"))?;
    crate::Nccl::load().map_err(|e| format!("NCCL does not load: {e}"))
}

#[cfg(not(feature = "nccl"))]
fn probe() -> std::result::Result<Loaded, String> {
    Err("this build of oxccl has no `nccl` feature".into())
}

#[cfg(feature = "nccl")]
fn run_nccl<W: WithBackend>(w: W, nccl: Loaded) -> W::Output {
    w.run(nccl)
}

#[cfg(not(feature = "nccl"))]
fn run_nccl<W: WithBackend>(_: W, none: Loaded) -> W::Output {
    match none {}
}

/// The mock world for ranks as threads or as a launcher's processes.
#[cfg(feature = "mock")]
fn run_mock<W: WithBackend>(w: W, version: Option<oxccl_core::Version>) -> Result<W::Output> {
    let mock = match version {
        None => crate::mock::MockBackend::for_processes(),
        Some(v) => crate::mock::MockBackend::with_options(
            oxccl_core::FeatureSet::for_version(v),
            crate::mock::FaultPlan::new(),
            1,
            crate::mock::DEFAULT_INIT_TIMEOUT,
        )
        .across_processes(),
    };
    Ok(w.run(mock))
}

#[cfg(not(feature = "mock"))]
fn run_mock<W: WithBackend>(_: W, _: Option<oxccl_core::Version>) -> Result<W::Output> {
    Err(Error::invalid(
        "OXCCL_BACKEND",
        format_args!(
            "nccl, or a GPU with NCCL under auto: this build of oxccl has no `mock` feature"
        ),
    ))
}

/// Runs `w` on the backend `env` asks for (see the module documentation), logging which and why.
pub fn with_backend<W: WithBackend>(env: &EnvConfig, w: W) -> Result<W::Output> {
    // Probing loads libraries: skip it when the mock is configured.
    let loaded = match env.backend {
        Some(BackendChoice::Mock) => Err(String::new()),
        _ => probe(),
    };
    let choice = decide(
        env.backend,
        loaded.as_ref().map(|_| ()).map_err(Clone::clone),
    )?;
    log::info!("oxccl backend: {:?} ({})", choice.backend, choice.reason);
    match (choice.backend, loaded) {
        (BackendChoice::Nccl, Ok(nccl)) => Ok(run_nccl(w, nccl)),
        (BackendChoice::Nccl, Err(why)) => Err(Error::Remote {
            detail: text!("NCCL was chosen but is gone: {why}"),
        }),
        (BackendChoice::Mock, _) => run_mock(w, env.mock_version),
    }
}

/// c10d's `init_process_group()` for a launched job: the bootstrap of
/// [`Bootstrap::from_env`] (rank, world size, device, store from torchrun, Slurm or MPI
/// variables), the backend of [`with_backend`], options from `OXCCL_*` variables and
/// PyTorch's names for them ([`EnvVars::settings`]) with the bootstrap's device, then `w` with
/// the default group, made on [`Bootstrap::group_store`] (scoped by torchrun's restart count
/// where that is safe). The environment is read once, so every part sees the same values.
///
/// ```no_run
/// // torchrun --nproc-per-node 2 --no-python target/release/my_program
/// use oxccl::launch::{init_process_group, WithProcessGroup};
/// use oxccl::pg::{PgBackend, ProcessGroup};
/// use oxccl::ReduceOp;
///
/// struct Average;
/// impl WithProcessGroup for Average {
///     type Output = Vec<f32>;
///     fn run<B: PgBackend>(self, pg: ProcessGroup<B>) -> oxccl::Result<Vec<f32>> {
///         let mut grads = pg.upload(&[pg.global_rank() as f32; 1024])?;
///         pg.all_reduce(&mut grads, ReduceOp::Avg)?.wait()?;
///         pg.download(&grads)
///     }
/// }
///
/// fn main() -> oxccl::Result<()> {
///     let averaged = init_process_group(Average)?;
///     println!("{:?}", &averaged[..4]);
///     Ok(())
/// }
/// ```
pub fn init_process_group<W: WithProcessGroup>(w: W) -> Result<W::Output> {
    let vars = EnvVars::from_process();
    let env = vars.settings().config?;
    let boot = Bootstrap::with_env(
        &InitMethod::Env,
        None,
        None,
        env.timeout_for(None, None),
        &vars,
    )?;
    let mut opts = PgOptions::from_config(&env, None);
    opts.device = boot.device;
    opts.tune = tune_from_env(vars.get(TUNE_FILE_VAR))?;
    struct Run<W> {
        boot: Bootstrap,
        opts: PgOptions,
        w: W,
    }
    impl<W: WithProcessGroup> WithBackend for Run<W> {
        type Output = Result<W::Output>;
        fn run<B: PgBackend>(self, backend: B) -> Result<W::Output> {
            let b = self.boot;
            let store = b.group_store();
            let pg = ProcessGroup::new(backend, store, b.rank, b.world_size, self.opts)?;
            self.w.run(pg)
        }
    }
    with_backend(&env, Run { boot, opts, w })?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configured_mock_wins_and_configured_nccl_without_gpu_is_an_error() {
        let m = decide(Some(BackendChoice::Mock), Ok(())).unwrap();
        assert_eq!(m.backend, BackendChoice::Mock);
        let n = decide(Some(BackendChoice::Nccl), Ok(())).unwrap();
        assert_eq!(n.backend, BackendChoice::Nccl);
        match decide(Some(BackendChoice::Nccl), Err("no driver".into())) {
            Err(Error::InvalidArgument { arg, expected }) => {
                assert_eq!(arg, "OXCCL_BACKEND");
                assert!(expected.contains("no driver"), "{expected}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn auto_takes_nccl_when_usable_else_the_mock_with_why() {
        assert_eq!(decide(None, Ok(())).unwrap().backend, BackendChoice::Nccl);
        let c = decide(None, Err("no CUDA driver".into())).unwrap();
        assert_eq!(c.backend, BackendChoice::Mock);
        assert!(c.reason.contains("no CUDA driver"), "{}", c.reason);
    }
}
