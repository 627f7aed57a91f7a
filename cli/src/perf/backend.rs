//! Which backend runs a sweep or a check: NCCL where a library and a GPU are found, else the
//! mock world, and why (for the first line).

use clap::ValueEnum;
use oxccl::Nccl;

/// Which backend runs a sweep or a check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BackendSel {
    /// NCCL when a library and a GPU are found, else the mock world.
    Auto,
    /// NCCL, or exit 3 saying what is missing.
    Nccl,
    /// The mock world on host memory (ranks as threads).
    Mock,
}

/// NCCL or the mock, and why (for the first line).
pub fn choose(
    backend: BackendSel,
    library: Option<&std::path::Path>,
) -> Result<(bool, String), String> {
    // (why not, what to do about it) when NCCL cannot run here.
    let probe = || -> Result<(), (String, String)> {
        oxccl::loader::Library::load_from(library).map_err(|e| {
            let why = match e {
                // The list of places tried is long: `oxccl info` prints it.
                oxccl::loader::LoadError::NothingFound { .. } => {
                    "no NCCL library found (`oxccl info` lists the places tried)".to_owned()
                }
                e => format!("no NCCL library: {e}"),
            };
            (why, crate::info::GET_ONE.to_owned())
        })?;
        oxccl::nccl::require_driver().map_err(|_| {
            (
                "no GPU: the CUDA driver is not installed".to_owned(),
                "run on a machine with NVIDIA GPUs, or --backend mock".to_owned(),
            )
        })
    };
    match (backend, probe()) {
        (BackendSel::Mock, _) => Ok((false, "--backend mock".to_owned())),
        (_, Ok(())) => Ok((true, String::new())),
        (BackendSel::Nccl, Err((why, todo))) => Err(format!("{why}; {todo}")),
        (BackendSel::Auto, Err((why, _))) => Ok((false, why)),
    }
}

/// The library of `--library`, or the search's.
pub fn load(library: Option<&std::path::Path>) -> Result<Nccl, String> {
    match library {
        Some(p) => Nccl::open(p),
        None => Nccl::load(),
    }
    .map_err(|e| format!("{e}; {}", crate::info::GET_ONE))
}

/// Where a measurement runs: NCCL, loaded, or the mock world.
#[derive(Clone)]
pub enum Ground {
    /// NCCL's library, loaded once for the whole run.
    Nccl(Box<Nccl>),
    /// The mock world, and why NCCL does not run (for the first line).
    Mock(String),
}

impl Ground {
    /// The backend `backend` asks for, as [`choose`] finds it, with NCCL loaded.
    pub fn of(backend: BackendSel, library: Option<&std::path::Path>) -> Result<Ground, String> {
        match choose(backend, library)? {
            (true, _) => load(library).map(|lib| Ground::Nccl(Box::new(lib))),
            (false, why) => Ok(Ground::Mock(why)),
        }
    }

    /// Whether this is the mock world (whose defaults are smaller).
    pub fn is_mock(&self) -> bool {
        matches!(self, Ground::Mock(_))
    }
}
