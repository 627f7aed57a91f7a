//! The CUDA driver calls the backend makes through cudarc's raw bindings (`sys`): one wrapper
//! each, in the style of [`crate::ffi`]. Calls through cudarc's own API stay with their users.

use cudarc::driver::sys;

/// Whether the driver library loads (a dlopen by its usual names, nothing more). Our own
/// dlopen rather than cudarc's `is_culib_present`, which exists only when cudarc loads the
/// driver itself: a program may have cudarc link it (`dynamic-linking`, as candle does).
pub(crate) fn driver_present() -> bool {
    use std::env::consts::{DLL_PREFIX, DLL_SUFFIX};
    let names = [
        format!("{DLL_PREFIX}cuda{DLL_SUFFIX}.1"),
        format!("{DLL_PREFIX}cuda{DLL_SUFFIX}"),
        format!("{DLL_PREFIX}nvcuda{DLL_SUFFIX}"),
    ];
    names.iter().any(|name| {
        // SAFETY: loading the driver library runs only its own initialisers, as cudarc's
        // first call would; the handle is dropped at once.
        unsafe { libloading::Library::new(name) }.is_ok()
    })
}

/// `cuCtxGetDevice`: the device of the calling thread's current context; `None` without one.
/// Call it once the driver is known to load ([`driver_present`]).
pub(crate) fn ctx_get_device() -> Option<sys::CUdevice> {
    let mut dev: sys::CUdevice = 0;
    // SAFETY: a valid out-pointer; without a current context the call fails and writes
    // nothing.
    let r = unsafe { sys::cuCtxGetDevice(&mut dev) };
    (r == sys::CUresult::CUDA_SUCCESS).then_some(dev)
}

/// `cuStreamWaitValue64`: `stream` waits until the 64-bit value at `addr` is at least `value`
/// (GEQ, which compares as a wrap-around counter would).
///
/// # Safety
/// `stream` is a live stream; `addr` is 8 aligned bytes of device memory it can reach, kept
/// allocated while the wait may be pending.
pub(crate) unsafe fn stream_wait_value64_geq(
    stream: sys::CUstream,
    addr: sys::CUdeviceptr,
    value: u64,
) -> sys::CUresult {
    let geq = sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ as u32;
    // SAFETY: this function's contract.
    unsafe { sys::cuStreamWaitValue64_v2(stream, addr, value, geq) }
}
