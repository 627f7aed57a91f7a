//! Memory the operations of a backend read and write, behind one trait, so that code written
//! once (the process group, a user's training step) runs on the mock world in tests and on NCCL
//! in production without `unsafe` at the call site.
//!
//! The design is stream-ordered memory, as CUDA's: a buffer remembers the last work that used
//! it, any later use (an operation on another stream, a download to the host) first waits for
//! that work, and dropping a buffer while work still uses it is safe because the memory is
//! released only after that work ran (cudarc's stream-ordered free on NCCL; a reference the
//! stream holds on the mock). So safe code cannot free, reuse or read a buffer while an
//! operation on it is in flight, and the process group's `Work` need not borrow its buffers: the
//! borrow checker still forbids writing a buffer while it is handed to an operation, and the
//! stream order does the rest.
//!
//! - On NCCL a buffer is a cudarc `CudaSlice<T>` (with cudarc's event tracking, its default).
//! - On the mock a buffer is a `HostBuf<T>` (feature `mock`): host memory reached only through its stream.
//!
//! Each backend also has a second kind, [`Memory::CommBuf`], in the library's own allocator
//! (`ncclMemAlloc` on NCCL: `NcclBuf` (feature `nccl`); a `HostBuf` with an allocation identity on the
//! mock), which the process group may register with its communicator or put in a symmetric
//! window per operation, as its tune table says. Every operation takes either kind (both are
//! an [`Operand`]): a second type rather than a flag on the first, because cudarc's
//! `CudaSlice` frees with `cuMemFreeAsync`, which cannot free `ncclMemAlloc` memory, and
//! because plain buffers must keep costing nothing extra.

#[cfg(feature = "nccl")]
mod device;
#[cfg(feature = "mock")]
mod host;
mod memory;
#[cfg(feature = "nccl")]
mod nan;
#[cfg(feature = "nccl")]
mod nccl_buf;
#[cfg(feature = "nccl")]
mod uses;

#[cfg(feature = "nccl")]
pub(crate) use device::same_device;
#[cfg(feature = "mock")]
pub use host::HostBuf;
pub use memory::{Buffer, CommAlloc, CommMem, Memory, Operand, StreamOf};
#[cfg(feature = "nccl")]
pub use nccl_buf::{CommUse, NcclAccess, NcclBuf};
