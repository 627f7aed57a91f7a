//! oxccl for candle: a process group's collectives on `candle_core::Tensor`, the layers a
//! tensor-parallel model is made of, and data-parallel gradient averaging over candle's
//! `GradStore`, with no `unsafe` in user code.
//!
//! - [`TensorGroup`]: all-reduce, broadcast, all-gather, reduce-scatter, all-to-all, send and
//!   receive on tensors of every dtype candle and NCCL share, over any oxccl
//!   [`ProcessGroup`](oxccl::pg::ProcessGroup): made by `oxccl::launch::spawn` (ranks as
//!   threads) or `oxccl::launch::init_process_group` (under torchrun, srun, mpirun).
//! - [`tp`]: [`ColumnParallelLinear`], [`RowParallelLinear`], [`VocabParallelEmbedding`], the
//!   LM head split by vocabulary, the all-reduce as a candle op ([`AllReduce`]) and its
//!   mirror for inputs ([`ParallelInput`]): the layers train as well as infer.
//! - [`DataParallel`]: parameters broadcast from rank 0, gradients averaged in buckets.
//! - [`Error`]: converts into `candle_core::Error`, so a candle program `?`s these calls.
//!
//! CPU tensors run on either backend (on the mock world without a GPU). CUDA tensors take the
//! `cuda` feature, not built yet (see the package README).

#![forbid(unsafe_code)]

#[cfg(feature = "cuda")]
mod cuda;
mod dp;
mod error;
mod group;
mod ops;
pub mod tp;

pub use dp::{DataParallel, DEFAULT_BUCKET_BYTES};
pub use error::{Error, Result};
pub use group::TensorGroup;
pub use ops::{AllReduce, ParallelInput};
pub use oxccl::ReduceOp;
pub use tp::{ColumnParallelLinear, RowParallelLinear, VocabParallelEmbedding};

/// The README's programs, compiled as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
