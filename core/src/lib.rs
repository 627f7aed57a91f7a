//! oxccl-core: the vocabulary, traits, state machines and argument checks of oxccl.
//!
//! This crate is `#![no_std]`: it knows nothing of dynamic loading, CUDA or threads. Backends
//! (the NCCL library as loaded, the in-process mock world) implement its traits; the checks
//! and state machines here are pure functions over plain data, so they are tested and fuzzed
//! without a GPU. The `alloc` feature adds what is sized at run time (a graph's buffers).
//! The process group's own rules (watchdog, flight recorder, membership, launch, tune) are
//! `oxccl-rules`'s: nothing below the process group uses them.
#![no_std]

#[cfg(feature = "alloc")]
extern crate alloc;

pub mod buf;
pub mod build;
pub mod check;
pub mod coll_config;
pub mod comm_state;
pub mod config;
pub mod dtype;
pub mod error;
pub mod feature;
pub mod fnv;
#[cfg(feature = "alloc")]
pub mod graph_buffers;
pub mod id;
pub mod one_sided;
pub mod op;
pub mod peer_kernels;
pub mod rank_list;
pub mod reduce;
pub mod result;
pub mod state;
pub mod text;
pub mod traits;
pub mod version;

pub use buf::{RawBuf, RawBufMut, RegHandle};
pub use check::CheckCtx;
pub use comm_state::CommState;
pub use config::{CommConfig, ConfigField};
pub use dtype::DataType;
pub use error::{CaptureError, Error, Fix, Result};
pub use feature::{Feature, FeatureSet, Missing};
pub use id::UniqueId;
pub use one_sided::OneSided;
pub use op::{CommOp, OpKind};
pub use rank_list::RankList;
pub use reduce::{HostScalar, ReduceOp, Scalar};
pub use result::ResultCode;
pub use state::group_call::{
    Ended, GroupError, GroupKind, GroupState, OpSummary, Queued, Recovery,
};
pub use state::work::{WorkError, WorkInfo, WorkMachine, WorkState};
pub use text::Text;
pub use traits::{
    pending_aborts, AbortInFlight, Backend, CommAbort, Communicator, Device, Event, MemStats,
    PeerKernels, PerCallConfig, Progress, Reshape, ReshapeBackend, ShrinkMode, Stream, Suspend,
    Windows,
};
pub use traits::{Capture, Graph};
pub use version::Version;

/// The README's examples, compiled and run as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
