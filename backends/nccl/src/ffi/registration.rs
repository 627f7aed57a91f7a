//! Memory NCCL knows: buffer and window registrations, NCCL's own allocations, and the
//! premul-sum operators a communicator makes.

use super::symbol::{gated, Code};
use oxccl_core::{Feature, Result};
use oxccl_loader::{Api, Library, RawComm, RawWindow};
use std::ffi::c_void;

/// `ncclCommRegister`: registers `bytes` at `addr` with `comm`; NCCL's handle.
///
/// # Safety
/// `comm` is a live communicator of `lib`; `addr..addr + bytes` is device memory the caller
/// keeps allocated while it is registered.
pub(crate) unsafe fn comm_register(
    lib: &Library,
    comm: RawComm,
    addr: usize,
    bytes: usize,
) -> Result<usize> {
    let f = gated(
        lib.api().comm_register,
        Feature::BufferRegistration,
        "ncclCommRegister",
    )?;
    let mut handle: *mut c_void = std::ptr::null_mut();
    // SAFETY: this function's contract; a local registration is not run on NCCL's own thread
    // on a nonblocking communicator (it writes `handle` before it returns), so a stack slot
    // suffices.
    lib.check(
        // SAFETY: as said above.
        unsafe { f(comm, addr as *mut c_void, bytes, &mut handle) },
        comm,
    )?;
    Ok(handle as usize)
}

/// `ncclCommDeregister` of `handle`.
///
/// # Safety
/// `comm` is a live communicator; `handle` came from [`comm_register`] on it and was not
/// deregistered since.
pub(crate) unsafe fn comm_deregister(api: &Api, comm: RawComm, handle: usize) -> Result<Code> {
    let f = gated(
        api.comm_deregister,
        Feature::BufferRegistration,
        "ncclCommDeregister",
    )?;
    // SAFETY: this function's contract.
    Ok(unsafe { f(comm, handle as *mut c_void) })
}

/// `ncclCommWindowRegister` of `bytes` at `addr` with `flags`; NCCL writes the window to `out`
/// (on a nonblocking communicator possibly after the call returned).
///
/// # Safety
/// `comm` is a live communicator; `addr..addr + bytes` is device memory the caller keeps
/// allocated while it is registered; `out` stays valid for NCCL to write until the call
/// completed.
pub(crate) unsafe fn comm_window_register(
    api: &Api,
    comm: RawComm,
    addr: usize,
    bytes: usize,
    out: *mut RawWindow,
    flags: i32,
) -> Result<Code> {
    let f = gated(
        api.comm_window_register,
        Feature::WindowRegistration,
        "ncclCommWindowRegister",
    )?;
    // SAFETY: this function's contract.
    Ok(unsafe { f(comm, addr as *mut c_void, bytes, out, flags) })
}

/// `ncclCommWindowDeregister` of `window`.
///
/// # Safety
/// `comm` is a live communicator; `window` came from [`comm_window_register`] on it and was
/// not deregistered since.
pub(crate) unsafe fn comm_window_deregister(
    api: &Api,
    comm: RawComm,
    window: usize,
) -> Result<Code> {
    let f = gated(
        api.comm_window_deregister,
        Feature::WindowRegistration,
        "ncclCommWindowDeregister",
    )?;
    // SAFETY: this function's contract.
    Ok(unsafe { f(comm, window as RawWindow) })
}

/// `ncclMemAlloc` of `bytes` on the calling thread's current device: its address, or NCCL's
/// error.
pub(crate) fn mem_alloc(lib: &Library, bytes: usize) -> Result<usize> {
    let f = gated(lib.api().mem_alloc, Feature::MemAlloc, "ncclMemAlloc")?;
    let mut ptr: *mut c_void = std::ptr::null_mut();
    // SAFETY: the out-pointer is a local; NCCL allocates on the current device.
    lib.check(unsafe { f(&mut ptr, bytes) }, RawComm::NULL)?;
    Ok(ptr as usize)
}

/// `ncclMemFree(ptr)`; `None` when the library lacks it.
///
/// # Safety
/// `ptr` came from [`mem_alloc`] of this library and is freed once, when nothing uses it.
pub(crate) unsafe fn mem_free(api: &Api, ptr: usize) -> Option<Code> {
    // SAFETY: this function's contract.
    api.mem_free.map(|f| unsafe { f(ptr as *mut c_void) })
}

/// Where the scalar of a premul-sum lives (`ncclScalarResidence_t`).
#[derive(Clone, Copy, Debug)]
pub(crate) enum ScalarAt {
    /// In device memory, read when the collective runs (`ncclScalarDevice`).
    Device(usize),
    /// In host memory, read during the create call (`ncclScalarHostImmediate`).
    Host(*mut c_void),
}

/// `ncclRedOpCreatePreMulSum` on `comm` for elements of `dtype` (an `ncclDataType_t`): the
/// operator's `ncclRedOp_t`, with the call's code.
///
/// # Safety
/// `comm` is a live communicator; the scalar holds one element of `dtype`: a host one for the
/// call, a device one until the last collective using the operator runs.
pub(crate) unsafe fn red_op_create_pre_mul_sum(
    api: &Api,
    comm: RawComm,
    scalar: ScalarAt,
    dtype: i32,
) -> Result<(Code, i32)> {
    let f = gated(
        api.red_op_create_pre_mul_sum,
        Feature::PreMulSum,
        "ncclRedOpCreatePreMulSum",
    )?;
    let (ptr, residence) = match scalar {
        ScalarAt::Device(addr) => (addr as *mut c_void, 0),
        ScalarAt::Host(p) => (p, 1),
    };
    let mut op = 0i32;
    // SAFETY: this function's contract; `op` is a local.
    let code = unsafe { f(&mut op, ptr, dtype, residence, comm) };
    Ok((code, op))
}

/// `ncclRedOpDestroy` of `op`; `None` when the library lacks it.
///
/// # Safety
/// `comm` is a live communicator; `op` was made on it and no call using it is still to
/// return.
pub(crate) unsafe fn red_op_destroy(api: &Api, comm: RawComm, op: i32) -> Option<Code> {
    // SAFETY: this function's contract.
    api.red_op_destroy.map(|f| unsafe { f(op, comm) })
}
