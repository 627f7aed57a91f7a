//! `Comm`, the safe communicator, on the NCCL library and real GPUs: every operation with its
//! values on every rank, the refusals a careless caller meets, graphs, groups, one-sided
//! operations and membership. `Comm` is NCCL's alone (cudarc slices on CUDA streams), so these
//! run where `OXCCL_TEST_GPUS=<n>` is set (one rank per GPU, on threads) and skip, saying so,
//! elsewhere. Expected values are written for any number of ranks.

#[path = "nccl/collectives.rs"]
mod collectives;
#[path = "nccl/graphs.rs"]
mod graphs;
#[path = "nccl/groups.rs"]
mod groups;
#[path = "nccl/membership.rs"]
mod membership;
#[path = "nccl/one_sided.rs"]
mod one_sided;
#[path = "nccl/refusals.rs"]
mod refusals;

use cudarc::driver::{CudaSlice, DeviceRepr, ValidAsZeroBits};
use oxccl_comm::core::CaptureError;
use oxccl_comm::{Comm, CommConfig, Error, Nccl};
use std::fmt::Debug;
use std::sync::Mutex;

/// The number of GPUs to run on, or `None` (and a note) when none is configured.
pub fn gpus() -> Option<u32> {
    match std::env::var("OXCCL_TEST_GPUS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        Some(n) if n >= 1 => Some(n),
        _ => {
            eprintln!("skipped: no GPU configured (set OXCCL_TEST_GPUS=<n> to run Comm on NCCL)");
            None
        }
    }
}

/// NCCL as found on this machine (a test that reaches here has a GPU configured).
pub fn nccl() -> Nccl {
    Nccl::load().unwrap_or_else(|e| panic!("loading NCCL: {e}"))
}

/// One test's ranks at a time: tests that share the GPUs would otherwise time each other out.
static GPUS: Mutex<()> = Mutex::new(());

/// Runs `body(rank, comm)` on one thread per GPU, all ranks of one new communicator of `lib`.
pub fn on_gpus_with<T: Send + 'static>(
    lib: Nccl,
    n: u32,
    body: impl Fn(u32, Comm) -> T + Send + Sync + Clone + 'static,
) -> Vec<T> {
    let _one = GPUS.lock().unwrap_or_else(|p| p.into_inner());
    let id = oxccl_comm::Backend::unique_id(&lib).expect("unique id");
    let ranks: Vec<_> = (0..n)
        .map(|r| {
            let (lib, body) = (lib.clone(), body.clone());
            std::thread::spawn(move || {
                let comm = Comm::init_rank(&lib, &id, r, n, r, &CommConfig::new()).expect("init");
                body(r, comm)
            })
        })
        .collect();
    ranks
        .into_iter()
        .map(|h| h.join().expect("rank thread panicked"))
        .collect()
}

/// [`on_gpus_with`] on the library as loaded.
pub fn on_gpus<T: Send + 'static>(
    n: u32,
    body: impl Fn(u32, Comm) -> T + Send + Sync + Clone + 'static,
) -> Vec<T> {
    on_gpus_with(nccl(), n, body)
}

/// `data` on `c`'s device, in its stream's order.
pub fn up<T: DeviceRepr>(c: &Comm, data: &[T]) -> CudaSlice<T> {
    c.stream().clone_htod(data).expect("upload")
}

/// `len` zeros on `c`'s device.
pub fn zeros<T: DeviceRepr + ValidAsZeroBits>(c: &Comm, len: usize) -> CudaSlice<T> {
    c.stream().alloc_zeros(len).expect("alloc")
}

/// `buf`'s contents once every operation issued on `c` has run (and `c` reported no error).
pub fn down<T: DeviceRepr + Default + Clone>(c: &Comm, buf: &CudaSlice<T>) -> Vec<T> {
    c.synchronize().expect("synchronize");
    c.stream().clone_dtoh(buf).expect("download")
}

/// `r` is [`Error::InvalidArgument`] naming `arg`.
#[track_caller]
pub fn refused_arg<T: Debug>(r: oxccl_comm::Result<T>, arg: &str) {
    match r {
        Err(Error::InvalidArgument { arg: a, .. }) if a == arg => {}
        other => panic!("expected InvalidArgument on `{arg}`, got {other:?}"),
    }
}

/// `r` is [`Error::Capture`] of `kind`.
#[track_caller]
pub fn refused_capture<T: Debug>(r: oxccl_comm::Result<T>, kind: CaptureError) {
    match r {
        Err(Error::Capture { kind: k, .. }) if k == kind => {}
        other => panic!("expected a {kind:?} capture error, got {other:?}"),
    }
}
