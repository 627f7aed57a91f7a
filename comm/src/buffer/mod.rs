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
//! - On the mock a buffer is a [`HostBuf<T>`]: host memory reached only through its stream.
//!
//! Each backend also has a second kind, [`Memory::CommBuf`], in the library's own allocator
//! (`ncclMemAlloc` on NCCL: [`NcclBuf`]; a [`HostBuf`] with an allocation identity on the
//! mock), which the process group may register with its communicator or put in a symmetric
//! window per operation, as its tune table says. Every operation takes either kind (both are
//! an [`Operand`]): a second type rather than a flag on the first, because cudarc's
//! `CudaSlice` frees with `cuMemFreeAsync`, which cannot free `ncclMemAlloc` memory, and
//! because plain buffers must keep costing nothing extra.

mod device;
mod host;
mod nan;
mod nccl_buf;
mod operand;
mod uses;

pub use host::HostBuf;
pub use nccl_buf::{CommUse, NcclAccess, NcclBuf};
pub use operand::{CommAlloc, CommMem, Operand};

use crate::element::Element;
use oxccl_core::{Backend, Communicator, Device, RawBuf, RawBufMut, Result, Stream};

/// The stream type of a backend's communicators.
pub type StreamOf<B> = <<B as Backend>::Comm as Communicator>::Stream;

/// A buffer of `len` elements of `T` in a backend's memory.
pub trait Buffer<T>: Send + Sync {
    /// Number of elements.
    fn len(&self) -> usize;

    /// Whether the buffer holds no element.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A backend whose memory safe code can allocate, fill, read and hand to operations.
pub trait Memory: Backend + 'static {
    /// A buffer of elements of `T`.
    type Buf<T: Element>: Buffer<T> + Operand<Self, Elem = T>;

    /// A buffer of elements of `T` in the library's own allocator, which registration and
    /// symmetric windows take (see [`Operand::comm_mem`]).
    type CommBuf<T: Element>: Buffer<T> + Operand<Self, Elem = T>;

    /// Proof that a buffer is in use by work being issued on a stream; dropping it records the
    /// use, so that later uses of the buffer wait for that work. Live only across one issue.
    type Access<'a>;

    /// A new stream on `device` for the caller's copies (the type the communicators issue on).
    fn stream(&self, device: Device) -> Result<StreamOf<Self>>;

    /// `Ok` when this process has the devices the backend needs at all; otherwise the error a
    /// process group is refused with at construction, lazy or eager (c10d: "only supported with
    /// GPUs, no GPUs found"). The mock world needs none.
    fn require_devices(&self) -> Result<()> {
        Ok(())
    }

    /// A buffer of `len` zeros, allocated in `stream`'s order.
    fn alloc_zeros<T: Element>(&self, stream: &StreamOf<Self>, len: usize) -> Result<Self::Buf<T>>;

    /// A buffer holding a copy of `data`.
    fn upload<T: Element>(&self, stream: &StreamOf<Self>, data: &[T]) -> Result<Self::Buf<T>>;

    /// A [`Memory::CommBuf`] of `len` zeros (NCCL: `ncclMemAlloc`, NCCL 2.19+; an older
    /// library is refused with [`oxccl_core::Error::Unsupported`] naming `MemAlloc`).
    fn alloc_comm<T: Element>(
        &self,
        stream: &StreamOf<Self>,
        len: usize,
    ) -> Result<Self::CommBuf<T>>;

    /// A [`Memory::CommBuf`] holding a copy of `data`.
    fn upload_comm<T: Element>(
        &self,
        stream: &StreamOf<Self>,
        data: &[T],
    ) -> Result<Self::CommBuf<T>>;

    /// The contents of `buf`, once every work that uses it has run (blocks the caller).
    fn download<T: Element>(&self, stream: &StreamOf<Self>, buf: &Self::Buf<T>) -> Result<Vec<T>>;

    /// Whether `buf` holds a NaN (after the work that wrote it; blocks the caller). Types
    /// without NaNs ([`Element::FLOAT`] `None`) give `false` at once.
    fn has_nan<T: Element>(&self, stream: &StreamOf<Self>, buf: &Self::Buf<T>) -> Result<bool>;

    /// `buf` as an operation's input on `stream` (of `device`): `stream` first waits for
    /// earlier writers of `buf`. `arg` names the argument in errors (a buffer on another device).
    fn read<'a, T: Element>(
        arg: &'static str,
        device: Device,
        stream: &'a StreamOf<Self>,
        buf: &'a Self::Buf<T>,
    ) -> Result<(RawBuf, Self::Access<'a>)>;

    /// `buf` as an operation's output on `stream`: `stream` first waits for every earlier use.
    fn write<'a, T: Element>(
        arg: &'static str,
        device: Device,
        stream: &'a StreamOf<Self>,
        buf: &'a mut Self::Buf<T>,
    ) -> Result<(RawBufMut, Self::Access<'a>)>;

    /// Ends `access` with `end`, an event recorded on the access's stream after the work
    /// that used the buffer was enqueued: a buffer that can keeps `end` as that use's event
    /// instead of recording one of its own, so an operation's work and its buffers share one
    /// event. The default drops the access, which records as it always does.
    fn end_access(access: Self::Access<'_>, end: &<StreamOf<Self> as Stream>::Event) {
        let _ = end;
        drop(access);
    }
}
