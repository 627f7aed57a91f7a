//! oxccl-nccl: oxccl's core traits implemented over the NCCL library loaded at run time.
//!
//! CUDA comes through cudarc with dynamic loading, so building needs neither the CUDA toolkit
//! nor NCCL. Every call is checked by `oxccl_core::check` first; every NCCL result is turned
//! into an `oxccl_core::Error` carrying NCCL's own text and its last-error text.
//!
//! Thread safety: an [`NcclComm`] is `Send + Sync` so that [`NcclComm::abort`] and
//! [`oxccl_core::Communicator::poll`] work from any thread (a watchdog, a signal handler thread);
//! issuing operations on one communicator from several threads at once is forbidden by NCCL and
//! is part of the `unsafe` contract of `Communicator::issue`. The safe `oxccl::Comm` enforces it
//! with `&mut self`.
#![warn(missing_docs)]

mod absent;
mod backend;
mod comm;
mod cuda;
mod issue;
mod mem;
mod reducer;
mod registry;
mod stream;
mod wait;

pub use backend::NcclBackend;
pub use comm::NcclComm;
pub use cuda::cuda_error;
pub use mem::NcclMem;
pub use reducer::NcclRedOp;
pub use registry::Window;
pub use stream::{NcclEvent, NcclStream};
pub use wait::Deadline;

pub use oxccl_loader::Library;
