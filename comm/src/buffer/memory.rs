//! The traits of a backend's memory: [`Memory`] (allocate, fill, read, hand to operations),
//! [`Buffer`], and [`Operand`], what an operation takes: any buffer of the backend's memory,
//! plain ([`Memory::Buf`]) or in the library's own allocator ([`Memory::CommBuf`]), the latter
//! carrying a [`CommMem`] identity that registration and symmetric windows key on. One file,
//! because each trait names the other.

use crate::element::Element;
use oxccl_core::{Backend, Communicator, Device, RawBuf, RawBufMut, Result, Stream};
use std::sync::Arc;

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

/// A buffer an operation of the process group reads or writes.
///
/// Implemented by both buffer kinds of each backend, so every operation takes either: a plain
/// buffer is always handed to the library as it is; a [`Memory::CommBuf`] may also be
/// registered or put in a window, as the group's tune table says (see
/// `oxccl::pg::PgOptions::tune`).
pub trait Operand<B: Memory>: Send + Sync {
    /// The element type.
    type Elem: Element;

    /// Number of elements (named apart from [`Buffer::len`], which plain buffers
    /// also have, so that calls are never ambiguous).
    fn numel(&self) -> usize;

    /// The buffer as an operation's input on `stream` (see [`Memory::read`]).
    fn read<'a>(
        &'a self,
        arg: &'static str,
        device: Device,
        stream: &'a StreamOf<B>,
    ) -> Result<(RawBuf, B::Access<'a>)>;

    /// The buffer as an operation's output on `stream` (see [`Memory::write`]).
    fn write<'a>(
        &'a mut self,
        arg: &'static str,
        device: Device,
        stream: &'a StreamOf<B>,
    ) -> Result<(RawBufMut, B::Access<'a>)>;

    /// The contents, once every work that uses the buffer has run (blocks the caller).
    fn download(&self, backend: &B, stream: &StreamOf<B>) -> Result<Vec<Self::Elem>>;

    /// Whether the buffer holds a NaN (see [`Memory::has_nan`]).
    fn has_nan(&self, backend: &B, stream: &StreamOf<B>) -> Result<bool>;

    /// The library allocation behind the buffer, when it can be registered or put in a
    /// window (`None` for plain buffers: they are always used as they are).
    fn comm_mem(&self) -> Option<CommMem> {
        None
    }
}

/// An allocation registrations may be made on: kept alive by every registration of it, so its
/// memory is freed only after the last communicator that registered it released it.
pub trait CommAlloc: Send + Sync {
    /// Whether no work issued on the allocation is still pending (never blocks).
    fn idle(&self) -> bool;
}

/// The identity of a library allocation: what a communicator's registration cache keys on.
/// Ids are unique in the process and never reused, so a freed allocation whose address is
/// reused can never hit a stale registration.
#[derive(Clone)]
pub struct CommMem {
    /// Unique id of the allocation.
    pub id: u64,
    /// Its address (device address on NCCL, host address on the mock).
    pub addr: usize,
    /// Its length in bytes (what is registered).
    pub bytes: usize,
    /// The allocation itself, kept by registrations.
    pub keep: Arc<dyn CommAlloc>,
}

impl std::fmt::Debug for CommMem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommMem")
            .field("id", &self.id)
            .field("addr", &format_args!("{:#x}", self.addr))
            .field("bytes", &self.bytes)
            .finish()
    }
}

/// A new allocation id (for the buffer kinds the enabled backends have).
#[cfg(any(feature = "nccl", feature = "mock"))]
pub(crate) fn next_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
