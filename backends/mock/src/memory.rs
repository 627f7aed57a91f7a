//! The only place the mock touches the caller's memory: whole-buffer copies in and out, and
//! read-only views of the inputs of a reduction.
//!
//! Every collective first reads all inputs (copies, or for reductions views that end before any
//! write), then computes, then writes all outputs, so in-place operations (send and recv the
//! same memory) read before anything is overwritten.
//!
//! What makes each access sound: `issue` runs `oxccl_core::check::op` first, so every buffer
//! (address, element count, type) that reaches here is non-null when non-empty, spans at most
//! `isize::MAX` bytes, does not wrap the address space, and is aligned to its type; a device
//! premul-sum factor is non-null, aligned to its type and does not wrap (checked by the mock's
//! `issue`). The accesses are byte copies (`u8` has no alignment requirement), of exactly the
//! span those rules validated; that the memory behind it is live and not used by anyone else
//! until the op completes is the caller's promise to the unsafe `issue`.

use oxccl_core::text::text_str;
use oxccl_core::{text, Error, Result, ResultCode};

/// Copies `bytes` bytes from host address `addr` (`what` names the buffer for the error when the
/// mock cannot allocate its copy: `Backend { code: SystemError }`, never an abort).
///
/// # Safety
/// `addr..addr + bytes` must be readable host memory (the contract of `Communicator::issue`).
pub(crate) unsafe fn read(addr: usize, bytes: usize, what: &str) -> Result<Vec<u8>> {
    let mut v: Vec<u8> = Vec::new();
    v.try_reserve_exact(bytes).map_err(|_| Error::Backend {
        code: ResultCode::SYSTEM_ERROR,
        text: text_str(crate::messages::code_text(ResultCode::SYSTEM_ERROR)),
        last: text!("cannot allocate {bytes} bytes for the mock's copy of the {what} buffer"),
    })?;
    if bytes != 0 {
        // SAFETY: the caller guarantees the source range is valid for reads; `v` has capacity
        // for `bytes` bytes in a fresh allocation, so the ranges cannot overlap; every byte
        // up to `bytes` is written before the length is set.
        unsafe {
            std::ptr::copy_nonoverlapping(addr as *const u8, v.as_mut_ptr(), bytes);
            v.set_len(bytes);
        }
    }
    Ok(v)
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

/// The `bytes` bytes at host address `addr`, borrowed without a copy (a reduction reads its
/// inputs once; copying them first would double the memory traffic).
///
/// # Safety
/// `addr..addr + bytes` must be readable host memory that nobody writes while the slice lives.
pub(crate) unsafe fn view<'a>(addr: usize, bytes: usize) -> &'a [u8] {
    if bytes == 0 {
        return &[];
    }
    // SAFETY: the caller guarantees the span is readable and unwritten for the slice's life;
    // `check::op` bounded it to isize::MAX bytes without wrapping.
    unsafe { std::slice::from_raw_parts(addr as *const u8, bytes) }
}
