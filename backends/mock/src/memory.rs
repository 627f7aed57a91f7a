//! The only place the mock touches the caller's memory: whole-buffer copies in and out.
//!
//! Every collective first copies all inputs, then computes, then writes all outputs, so in-place
//! operations (send and recv the same memory) read before anything is overwritten.

/// Copies `bytes` bytes from host address `addr`.
///
/// # Safety
/// `addr..addr + bytes` must be readable host memory (the contract of `Communicator::issue`).
pub(crate) unsafe fn read(addr: usize, bytes: usize) -> Vec<u8> {
    let mut v = vec![0u8; bytes];
    if bytes != 0 {
        // SAFETY: the caller guarantees the source range is valid for reads; `v` is a fresh
        // allocation of `bytes` bytes, so the ranges cannot overlap.
        unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, v.as_mut_ptr(), bytes) };
    }
    v
}

/// Copies `data` to host address `addr`.
///
/// # Safety
/// `addr..addr + data.len()` must be writable host memory that nobody else accesses now.
pub(crate) unsafe fn write(addr: usize, data: &[u8]) {
    if !data.is_empty() {
        // SAFETY: the caller guarantees the destination is valid for writes; `data` is the
        // mock's own copy, never the caller's buffer, so the ranges cannot overlap.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), addr as *mut u8, data.len()) };
    }
}
