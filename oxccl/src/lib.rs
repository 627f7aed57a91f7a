//! oxccl: NCCL for Rust, loaded at run time, every feature gated by the loaded version, with
//! PyTorch's process group on top.
//!
//! - [`Nccl`] finds and loads `libnccl.so.2` (any release from 2.13 on), and says which
//!   features it has and why any is missing.
//! - [`Comm`] is a safe communicator over cudarc device slices: every collective, send/recv,
//!   all-to-all with uneven splits, gather/scatter, the `_v` variants, premul-sum, split,
//!   registration, graphs, abort from any thread through an [`AbortHandle`], and group guards
//!   (the package `oxccl-comm`, its names re-exported here).
//! - [`pg::ProcessGroup`] is PyTorch's process group over any backend: [`pg::Work`] handles,
//!   timeouts, coalescing, subgroups, a [`watchdog`] and a flight [`recorder`]; [`launch`]
//!   starts one from torchrun's, Slurm's or MPI's environment through a [`store`].
//! - [`pg::elastic`] decides, through the store, which ranks go on after one is lost.
//! - [`mock`] is an in-process world of ranks on host memory for tests without GPUs.
//!
//! Thread safety: a [`Comm`] is `Send` (move it to the thread that drives its GPU); its
//! operations take `&mut self`, because NCCL forbids concurrent calls on one communicator.
//! [`AbortHandle`] is `Send + Sync + Clone` and stops the communicator from any thread.

mod deadline;
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

/// The README's examples, compiled as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
