//! oxccl-nccl: oxccl's core traits implemented over the NCCL library loaded at run time.
//!
//! CUDA comes through cudarc with dynamic loading, so building needs neither the CUDA toolkit
//! nor NCCL. Every call is checked by `oxccl_core::check` first; every NCCL result is turned
//! into an `oxccl_core::Error` carrying NCCL's own text and its last-error text.
//!
//! Thread safety: an [`NcclComm`] is `Send + Sync`; its [`NcclAbort`] handle
//! ([`oxccl_core::Communicator::abort_handle`]) aborts, watches and polls it from any thread (a
//! watchdog, a signal handler thread). Groups belong to the [`NcclBackend`] (per thread, per
//! loaded library).

mod abort;
mod absent;
mod backend;
mod bounded;
pub mod codes;
mod comm;
mod comm_inner;
mod create;
mod cuda;
mod cuda_ffi;
mod end_mark;
mod ffi;
mod gather_bytes;
mod graph;
mod graph_refs;
mod group_call;
mod issue;
mod mem;
mod one_sided;
mod peer;
mod ptx;
mod reducer;
mod registry;
mod release;
mod reshape;
mod settle;
mod stream;
mod suspend;
mod wait;

pub use abort::NcclAbort;
pub use backend::NcclBackend;
pub use comm::NcclComm;
pub use cuda::{cuda_error, device_count, require_driver};
pub use graph::NcclGraph;
pub use mem::NcclMem;
pub use ptx::ptx_module;
pub use registry::Window;
pub use stream::{NcclEvent, NcclStream};
pub use wait::Deadline;

pub use oxccl_loader::Library;
