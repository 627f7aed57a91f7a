//! Which backend runs a sweep or a check: NCCL where a library and a GPU are found, else the
//! mock world, and why (for the first line).

use clap::ValueEnum;

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
