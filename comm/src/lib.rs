//! oxccl-comm: the safe communicator API of oxccl (NCCL for Rust, loaded at run time, every
//! feature gated by the loaded version). The `oxccl` crate re-exports all of it; add this one
//! alone for a communicator without the process group.
//!
//! - `Nccl` finds and loads `libnccl.so.2` (any release from 2.13 on), and says which
//!   features it has and why any is missing.
//! - `Comm` is a safe communicator over cudarc device slices: every collective, send/recv,
//!   all-to-all with uneven splits, gather/scatter, the `_v` variants, premul-sum, split,
//!   registration, symmetric windows and one-sided put / signal / wait on them (NCCL 2.29+),
//!   revoke, shrink and grow (`Comm::shrink`, `Comm::grow`, `Comm::join_grown`),
//!   suspend / resume, abort from any thread through an `AbortHandle`, and group guards.
//! - `Comm::issue` is the raw escape hatch for frameworks with their own tensors.
//! - `mock` is an in-process world of ranks on host memory for tests without GPUs.
//!
//! Thread safety: a `Comm` is `Send` (move it to the thread that drives its GPU); its
//! operations take `&mut self`, because NCCL forbids concurrent calls on one communicator.
//! `AbortHandle` is `Send + Sync + Clone` and stops the communicator from any thread.
//!
//! Cargo features (on by default): `nccl`, the NCCL backend and everything on it
//! (`Comm`, `CommGroup`, `CommGraph`, `GroupGuard`, `buffer::NcclBuf`); `mock`, the in-process mock
//! world and its buffers (`buffer::HostBuf`), for tests without GPUs. A program that only
//! wants one turns the other off. `cuda-12080` (also default) names the CUDA version of
//! cudarc's bindings; a program whose own cudarc picks the version leaves it out. (Items of a feature are named without links here, so this
//! page reads the same under every feature set.)

mod aborts;
pub mod buffer;
#[cfg(feature = "nccl")]
mod capture_slot;
#[cfg(feature = "nccl")]
mod comm;
#[cfg(feature = "nccl")]
mod comm_graph;
#[cfg(feature = "nccl")]
mod comm_group;
#[cfg(feature = "nccl")]
mod configured;
pub mod element;
#[cfg(feature = "nccl")]
mod group_guard;
#[cfg(feature = "nccl")]
mod one_sided;
mod path_text;
#[cfg(feature = "nccl")]
mod reshape;
#[cfg(feature = "nccl")]
mod window_table;

pub use aborts::{pending_aborts, wait_for_aborts};
#[cfg(feature = "nccl")]
pub use comm::{peer_policy_from_env, peer_table_from_env, AbortHandle, Comm};
#[cfg(feature = "nccl")]
pub use comm_graph::{CommGraph, CommReplay};
#[cfg(feature = "nccl")]
pub use comm_group::CommGroup;
pub use element::Element;
#[cfg(feature = "nccl")]
pub use group_guard::GroupGuard;
pub use path_text::escaped_path;

pub use oxccl_core as core;
pub use oxccl_core::{Backend, Capture, CommAbort, Communicator, Event, Graph, Stream};
pub use oxccl_core::{
    CommConfig, CommOp, CommState, ConfigField, DataType, Device, Error, Feature, FeatureSet,
    HostScalar, Missing, Progress, RawBuf, RawBufMut, ReduceOp, RegHandle, Result, ResultCode,
    Scalar, UniqueId, Version,
};
pub use oxccl_core::{
    OneSided, PeerKernels, PerCallConfig, Reshape, ReshapeBackend, Suspend, Windows,
};
#[cfg(feature = "nccl")]
pub use oxccl_loader as loader;
#[cfg(feature = "mock")]
pub use oxccl_mock as mock;
#[cfg(feature = "nccl")]
pub use oxccl_nccl as nccl;
#[cfg(feature = "nccl")]
pub use oxccl_nccl::{NcclComm, NcclEvent, NcclMem, NcclStream};

/// The traits whose methods a program calls (`nccl.unique_id()`, `backend.version()`, a
/// buffer's `len()`, a stream's `synchronize()`, a communicator's capabilities), for one glob
/// import: `use oxccl::prelude::*;`.
pub mod prelude {
    pub use crate::buffer::{Buffer, Memory, Operand};
    pub use crate::element::Element;
    pub use oxccl_core::{Backend, Capture, CommAbort, Communicator, Event, Graph, Stream};
    pub use oxccl_core::{
        OneSided, PeerKernels, PerCallConfig, Reshape, ReshapeBackend, Suspend, Windows,
    };
}

/// The NCCL library as loaded: `Nccl::load()` searches, `Nccl::open(path)` takes a path.
#[cfg(feature = "nccl")]
pub type Nccl = oxccl_nccl::NcclBackend;

/// The README's examples, compiled as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
