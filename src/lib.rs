//! oxccl: NCCL for Rust, loaded at run time, every feature gated by the loaded version.
//!
//! - [`Nccl`] finds and loads `libnccl.so.2` (any release from 2.13 on), and says which
//!   features it has and why any is missing.
//! - [`Comm`] is a safe communicator over cudarc device slices: every collective, send/recv,
//!   all-to-all with uneven splits, gather/scatter, the `_v` variants, premul-sum, split,
//!   registration, abort from any thread through an [`AbortHandle`], and group guards.
//! - [`Comm::issue`] is the raw escape hatch for frameworks with their own tensors.
//! - [`mock`] is an in-process world of ranks on host memory for tests without GPUs.
//!
//! Thread safety: a [`Comm`] is `Send` (move it to the thread that drives its GPU); its
//! operations take `&mut self`, because NCCL forbids concurrent calls on one communicator.
//! [`AbortHandle`] is `Send + Sync + Clone` and stops the communicator from any thread.
#![warn(missing_docs)]

mod aborts;
pub mod buffer;
mod comm;
mod comm_graph;
mod deadline;
mod element;
mod graph_buffers;
mod group;
pub mod launch;
pub mod pg;
pub mod recorder;
pub mod store;
pub mod watchdog;

pub use aborts::{pending_aborts, wait_for_aborts};
pub use comm::{AbortHandle, Comm};
pub use comm_graph::{CommGraph, CommLaunch};
pub use element::Element;
pub use group::GroupGuard;

pub use oxccl_core as core;
pub use oxccl_core::{
    CommConfig, CommOp, CommState, ConfigField, DataType, Device, Error, Feature, FeatureSet,
    HostScalar, Missing, Progress, RawBuf, RawBufMut, ReduceOp, RegHandle, Result, ResultCode,
    Scalar, UniqueId, Version,
};
pub use oxccl_loader as loader;
pub use oxccl_mock as mock;
pub use oxccl_nccl as nccl;
pub use oxccl_nccl::{NcclComm, NcclEvent, NcclMem, NcclStream};

/// The NCCL library as loaded: `Nccl::load()` searches, `Nccl::open(path)` takes a path.
pub type Nccl = oxccl_nccl::NcclBackend;

/// A path as oxccl's messages show it: its bytes, control characters and bytes that are not
/// UTF-8 escaped (`\e`, `\xff`; [`core::text`](mod@crate::core::text) states the rule), so a hostile file name never
/// writes them to a terminal.
pub fn escaped_path(path: &std::path::Path) -> oxccl_core::text::EscapedBytes<'_> {
    oxccl_core::text::EscapedBytes(path.as_os_str().as_encoded_bytes())
}
