//! Device addresses as the pointers NCCL's C functions take.

use oxccl_core::DataType;
use std::ffi::c_void;

/// A pointer to memory NCCL reads.
pub(super) type P = *const c_void;
/// A pointer to memory NCCL writes.
pub(super) type M = *mut c_void;

/// `addr` as a pointer NCCL reads.
pub(super) fn p(addr: usize) -> P {
    addr as P
}

/// `addr` as a pointer NCCL writes.
pub(super) fn m(addr: usize) -> M {
    addr as M
}

/// Byte offset of element `i` of `dt` (lengths were checked, so this cannot overflow).
pub(super) fn at(addr: usize, i: usize, dt: DataType) -> usize {
    addr + i * dt.size()
}
