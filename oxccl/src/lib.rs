//! oxccl: NCCL for Rust, loaded at run time, every feature gated by the loaded version, with
//! PyTorch's process group on top, written once over a backend trait so the same code runs on
//! GPUs and, in tests, on an in-process mock world without one.
//!
//! # A first program
//!
//! Two ranks (one per GPU where NCCL and GPUs are, else on the mock world), as threads of this
//! process, each adding its rank + 1 across the group:
//!
//! ```
//! use oxccl::launch::{local_gpus, spawn, WithProcessGroup};
//! use oxccl::pg::{PgBackend, ProcessGroup};
//! use oxccl::ReduceOp;
//!
//! #[derive(Clone)]
//! struct Sum;
//!
//! impl WithProcessGroup for Sum {
//!     type Output = Vec<f32>;
//!     fn run<B: PgBackend>(self, pg: ProcessGroup<B>) -> oxccl::Result<Vec<f32>> {
//!         let mut x = pg.upload(&[pg.global_rank() as f32 + 1.0; 4])?;
//!         pg.all_reduce(&mut x, ReduceOp::Sum)?.wait()?;
//!         pg.download(&x)
//!     }
//! }
//!
//! fn main() -> oxccl::Result<()> {
//!     let world = match local_gpus() {
//!         0 => 2,
//!         n => n,
//!     };
//!     for (rank, sum) in spawn(world, Sum)?.iter().enumerate() {
//!         println!("rank {rank}: {sum:?}");
//!     }
//!     Ok(())
//! }
//! ```
//!
//! Under torchrun, srun or mpirun, [`launch::init_process_group`] runs the same `Sum` on the
//! launcher's ranks instead.
//!
//! # Which type do I want
//!
//! | you want | take |
//! |---|---|
//! | ranks that train together, PyTorch-style: work handles, timeouts, subgroups, dumps | [`pg::ProcessGroup`], made by [`launch::init_process_group`] under a launcher or [`launch::spawn`] as threads |
//! | the outcome of one operation: wait, poll, its error, its duration | [`pg::Work`] |
//! | one NCCL communicator over cudarc device slices (feature `nccl`) | `Comm`, its `group()` for operations launched together |
//! | NCCL on your framework's own tensors (raw device pointers) | `Comm::issue`, [`CommOp`] |
//! | which NCCL is loaded, and what it can do (feature `nccl`) | `Nccl` ([`FeatureSet`]) |
//! | ranks on host memory, for tests without a GPU (feature `mock`) | `mock::World`, or `OXCCL_BACKEND=mock` under the process group |
//! | a rendezvous between processes, PyTorch's `TCPStore` protocol | [`store::TcpStore`], [`store::FileStore`], [`store::MemStore`] |
//! | what each rank was doing when a job hung | [`recorder`] (dumps in PyTorch's format), `oxccl trace` |
//! | going on after a lost rank | [`pg::elastic`] (`OXCCL_ELASTIC=1`) |
//!
//! Every error is an [`Error`] whose variant says what to do; its `Debug` adds the fix for the
//! ones met first (no launcher, no GPU, a library too old), so `main` returning it says how
//! to go on.
//!
//! # Cargo features
//!
//! `nccl` (default): the NCCL backend, loaded at run time, and everything on it (`Nccl`,
//! `Comm`, graphs, device buffers). `mock` (default): the in-process mock world. A program
//! that wants one turns the other off (`default-features = false`); a mock-only build
//! compiles no CUDA binding. `cuda-12080` (default): the CUDA version cudarc's bindings are
//! built for; a program whose own cudarc names another, or `cuda-version-from-build-system`
//! (candle's CUDA feature), leaves it out (`default-features = false, features = ["nccl"]`),
//! and its cudarc features or `CUDARC_CUDA_VERSION` decide. oxccl asks cudarc for
//! `fallback-dynamic-loading`, so a program's `dynamic-linking` stands. `trace-reader` (off): `recorder::reader`, dumps read back and
//! a hang diagnosed from them (it needs `serde_json`).
//!
//! Thread safety: a `Comm` is `Send` (move it to the thread that drives its GPU); its
//! operations take `&mut self`, because NCCL forbids concurrent calls on one communicator.
//! Its `AbortHandle` is `Send + Sync + Clone` and stops the communicator from any thread.
//! A [`pg::ProcessGroup`] is `Clone`: every clone is the same group.

mod deadline;
mod env_vars;
pub mod launch;
pub mod pg;
mod read_for_all;
pub mod recorder;
pub mod watchdog;

// The safe layer, named one by one so that this page says what the crate offers.
#[cfg(feature = "mock")]
pub use oxccl_comm::mock;
pub use oxccl_comm::{buffer, core, element, escaped_path, pending_aborts, wait_for_aborts};
#[cfg(feature = "nccl")]
pub use oxccl_comm::{
    loader, nccl, peer_policy_from_env, peer_table_from_env, AbortHandle, Comm, CommGraph,
    CommGroup, CommReplay, GroupGuard, Nccl, NcclComm, NcclEvent, NcclMem, NcclStream,
};
pub use oxccl_comm::{
    Backend, Capture, CommAbort, CommConfig, CommOp, CommState, Communicator, ConfigField,
    DataType, Device, Element, Error, Event, Feature, FeatureSet, Graph, HostScalar, Missing,
    OneSided, PeerKernels, PerCallConfig, Progress, RawBuf, RawBufMut, ReduceOp, RegHandle,
    Reshape, ReshapeBackend, Result, ResultCode, Scalar, Stream, Suspend, UniqueId, Version,
    Windows,
};

pub mod prelude;
/// The process-group layer's rules, pure and fuzzed (the package `oxccl-rules`).
pub use oxccl_rules as rules;
pub use oxccl_store as store;

/// The README's examples, compiled as doctests (those that need no GPU run).
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

/// The guide's page on the process group (`docs/guide/process-group.md`), its programs
/// compiled as doctests.
#[doc = include_str!("../../docs/guide/process-group.md")]
#[cfg(doctest)]
pub struct GuideProcessGroup;

/// The guide's page on `Comm` (`docs/guide/comm.md`), its programs compiled as doctests.
#[doc = include_str!("../../docs/guide/comm.md")]
#[cfg(all(doctest, feature = "nccl", feature = "mock"))]
pub struct GuideComm;

/// The guide's page on graphs and buffers (`docs/guide/graphs-and-buffers.md`), its programs
/// compiled as doctests.
#[doc = include_str!("../../docs/guide/graphs-and-buffers.md")]
#[cfg(doctest)]
pub struct GuideGraphsAndBuffers;

/// The guide's page on safety nets and dumps (`docs/guide/safety-nets.md`), its programs
/// compiled as doctests.
#[doc = include_str!("../../docs/guide/safety-nets.md")]
#[cfg(doctest)]
pub struct GuideSafetyNets;

/// The guide's page on going on after a lost rank (`docs/guide/elastic.md`), its programs
/// compiled as doctests.
#[doc = include_str!("../../docs/guide/elastic.md")]
#[cfg(doctest)]
pub struct GuideElastic;

/// The guide's page on oxccl's kernels (`docs/guide/kernels.md`), its programs compiled as
/// doctests.
#[doc = include_str!("../../docs/guide/kernels.md")]
#[cfg(doctest)]
pub struct GuideKernels;

/// The guide's page on sharing a communicator with PyTorch (`docs/guide/pytorch.md`), its
/// programs compiled as doctests.
#[doc = include_str!("../../docs/guide/pytorch.md")]
#[cfg(all(doctest, feature = "nccl"))]
pub struct GuidePytorch;
