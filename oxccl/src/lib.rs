//! oxccl: NCCL for Rust, loaded at run time, every feature gated by the loaded version, with
//! PyTorch's process group on top.
//!
//! - [`Nccl`] finds and loads `libnccl.so.2` (any release from 2.13 on), and says which
//!   features it has and why any is missing.
//! - [`Comm`] is a safe communicator over cudarc device slices: every collective, send/recv,
//!   all-to-all with uneven splits, gather/scatter, the `_v` variants, premul-sum, split,
//!   registration, graphs, abort from any thread through an [`AbortHandle`], and group guards
//!   (the package `oxccl-comm`, re-exported here whole).
//! - [`pg::ProcessGroup`] is PyTorch's process group over any backend: [`pg::Work`] handles,
//!   timeouts, coalescing, subgroups, a [`watchdog`] and a flight [`recorder`]; [`launch`]
//!   starts one from torchrun's, Slurm's or MPI's environment through a [`store`].
//! - [`elastic`] decides, through the store, which ranks go on after one is lost.
//! - [`mock`] is an in-process world of ranks on host memory for tests without GPUs.
//!
//! Thread safety: a [`Comm`] is `Send` (move it to the thread that drives its GPU); its
//! operations take `&mut self`, because NCCL forbids concurrent calls on one communicator.
//! [`AbortHandle`] is `Send + Sync + Clone` and stops the communicator from any thread.
#![warn(missing_docs)]

mod deadline;
pub mod elastic;
pub mod launch;
pub mod pg;
mod read_for_all;
pub mod recorder;
pub mod watchdog;

pub use oxccl_comm::*;
pub use oxccl_store as store;

/// The README's examples, compiled as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
