//! The words a rank's kernels share with its host: the abort flag the host sets and the
//! kernels poll, and the status block the kernels write when they give up. Pinned host memory
//! mapped into the device's address space, so neither side waits for a copy.

use crate::cuda::cuda_error;
use cudarc::driver::sys;
use oxccl_core::peer_kernels::KernelStatus;
use oxccl_core::Result;
use std::sync::atomic::{AtomicU32, Ordering};

/// The abort flag's offset; the status block sits on its own cache line after it.
const STATUS_WORD: usize = 16;
const WORDS: usize = 32;

/// One rank's abort flag and status block.
#[derive(Debug)]
pub(crate) struct HostFlags {
    host: *mut u32,
    device: u64,
}

// SAFETY: the memory is owned by this value and read and written only through atomics.
unsafe impl Send for HostFlags {}
// SAFETY: as above.
unsafe impl Sync for HostFlags {}

impl HostFlags {
    /// Zeroed flags, mapped for every device (the caller's thread has a context current).
    pub(crate) fn new() -> Result<HostFlags> {
        let mut host: *mut std::ffi::c_void = std::ptr::null_mut();
        let bytes = WORDS * 4;
        // SAFETY: allocates `bytes` of pinned host memory into a local out-pointer.
        unsafe {
            sys::cuMemHostAlloc(
                &mut host,
                bytes,
                sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE,
            )
        }
        .result()
        .map_err(|e| cuda_error("allocating the kernels' host flags", e))?;
        let flags = HostFlags {
            host: host.cast(),
            device: 0,
        };
        // SAFETY: `host` points to `bytes` writable bytes just allocated.
        unsafe { std::ptr::write_bytes(flags.host, 0, WORDS) };
        let mut device = 0;
        // SAFETY: `host` is mapped pinned memory; the out-pointer is a local.
        unsafe { sys::cuMemHostGetDevicePointer_v2(&mut device, host, 0) }
            .result()
            .map_err(|e| cuda_error("mapping the kernels' host flags", e))?;
        Ok(HostFlags { device, ..flags })
    }

    fn word(&self, i: usize) -> &AtomicU32 {
        // SAFETY: `i < WORDS` at every call site; the memory lives as long as `self`, is
        // aligned for u32, and is only accessed atomically here (the device writes it with
        // its own atomics and volatile stores).
        unsafe { AtomicU32::from_ptr(self.host.add(i)) }
    }

    /// The device address of the abort flag.
    pub(crate) fn abort_addr(&self) -> u64 {
        self.device
    }

    /// The device address of the status block.
    pub(crate) fn status_addr(&self) -> u64 {
        self.device + (STATUS_WORD * 4) as u64
    }

    /// Tells every kernel of this rank to give up.
    pub(crate) fn raise_abort(&self) {
        self.word(0).store(1, Ordering::SeqCst);
    }

    /// What the kernels recorded (cause 0 while nothing failed).
    pub(crate) fn status(&self) -> KernelStatus {
        KernelStatus {
            cause: self.word(STATUS_WORD).load(Ordering::Acquire),
            missing: self.word(STATUS_WORD + 1).load(Ordering::Acquire),
            epoch: self.word(STATUS_WORD + 2).load(Ordering::Acquire),
        }
    }
}

impl Drop for HostFlags {
    fn drop(&mut self) {
        // SAFETY: allocated by cuMemHostAlloc in `new`, freed once; the group releases its
        // flags only after its kernels are done (see `PeerGroup::release`).
        let r = unsafe { sys::cuMemFreeHost(self.host.cast()) };
        if r != sys::CUresult::CUDA_SUCCESS {
            log::warn!("freeing the kernels' host flags: {r:?}");
        }
    }
}
