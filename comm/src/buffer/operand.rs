//! What an operation of the process group takes: any buffer of the backend's memory, plain
//! ([`Memory::Buf`]) or in the library's own allocator ([`Memory::CommBuf`]), the latter
//! carrying a [`CommMem`] identity that registration and symmetric windows key on.

use super::{Memory, StreamOf};
use crate::element::Element;
use oxccl_core::{Device, RawBuf, RawBufMut, Result};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A buffer an operation of the process group reads or writes.
///
/// Implemented by both buffer kinds of each backend, so every operation takes either: a plain
/// buffer is always handed to the library as it is; a [`Memory::CommBuf`] may also be
/// registered or put in a window, as the group's tune table says (see
/// `oxccl::pg::PgOptions::tune`).
pub trait Operand<B: Memory>: Send + Sync {
    /// The element type.
    type Elem: Element;

    /// Number of elements (named apart from [`super::Buffer::len`], which plain buffers
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

/// A new allocation id.
pub(crate) fn next_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
