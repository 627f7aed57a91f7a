//! Raw buffers as the backends see them: an address and a length in elements.
//!
//! Addresses are `usize` rather than pointers so that operation descriptions can be queued,
//! recorded and moved between threads; a backend turns them back into pointers at the call.

/// A buffer the operation reads: device memory for NCCL, host memory for the mock world.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RawBuf {
    /// Start address (0 only when `len` is 0).
    pub addr: usize,
    /// Length in elements of the operation's data type.
    pub len: usize,
}

/// A buffer the operation writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RawBufMut {
    /// Start address (0 only when `len` is 0).
    pub addr: usize,
    /// Length in elements of the operation's data type.
    pub len: usize,
}

impl RawBuf {
    /// A buffer of `len` elements at `addr`.
    pub const fn new(addr: usize, len: usize) -> RawBuf {
        RawBuf { addr, len }
    }
    /// No buffer (for ranks that pass none, such as non-roots of a gather).
    pub const EMPTY: RawBuf = RawBuf { addr: 0, len: 0 };
}

impl RawBufMut {
    /// A buffer of `len` elements at `addr`.
    pub const fn new(addr: usize, len: usize) -> RawBufMut {
        RawBufMut { addr, len }
    }
    /// No buffer.
    pub const EMPTY: RawBufMut = RawBufMut { addr: 0, len: 0 };
    /// The same memory, read-only (an in-place operation reads what it writes).
    pub const fn as_read(&self) -> RawBuf {
        RawBuf {
            addr: self.addr,
            len: self.len,
        }
    }
}

/// A registered buffer, as returned by
/// [`Communicator::register`](crate::traits::Communicator::register) (and a window by
/// `register_window`): the backend's handle and the memory it covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RegHandle {
    /// The backend's handle value.
    pub raw: usize,
    /// The registered address.
    pub addr: usize,
    /// The registered length in bytes.
    pub bytes: usize,
}
