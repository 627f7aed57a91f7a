//! The words a rank's kernels share with its host: the abort flag the host sets and the
//! kernels poll, and the status block the kernels write when they give up. Pinned host memory
//! mapped into the device's address space, so neither side waits for a copy.

use crate::cuda::cuda_error;
use cudarc::driver::sys;
use oxccl_core::peer_kernels::KernelStatus;
use oxccl_core::Result;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, PoisonError};

/// The abort flag's offset; the status block sits on its own cache line after it.
const STATUS_WORD: usize = 16;
const WORDS: usize = 32;

/// A block of pinned host memory, as `cuMemHostAlloc` gave it.
#[derive(Debug, Clone, Copy)]
struct Block(*mut u32);

// SAFETY: a block is plain memory owned by whoever holds it (a `HostFlags`, or the spares).
unsafe impl Send for Block {}

/// Blocks of released groups, kept for the next group instead of freed: freeing pinned memory
/// may wait for the whole device, which never returns while an NCCL operation waits for a peer
/// that died. A block comes back here only after its group's release waited for its kernels:
/// nothing writes it then.
static SPARE: Mutex<Vec<Block>> = Mutex::new(Vec::new());

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
        let spare = SPARE.lock().unwrap_or_else(PoisonError::into_inner).pop();
        let host = match spare {
            Some(Block(host)) => host,
            None => {
                let mut host: *mut std::ffi::c_void = std::ptr::null_mut();
                // SAFETY: allocates `WORDS` words of pinned host memory into a local.
                unsafe {
                    sys::cuMemHostAlloc(
                        &mut host,
                        WORDS * 4,
                        sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE,
                    )
                }
                .result()
                .map_err(|e| cuda_error("allocating the kernels' host flags", e))?;
                host.cast()
            }
        };
        // Held from here, so an error below gives the block back.
        let mut flags = HostFlags { host, device: 0 };
        // SAFETY: `host` points to `WORDS` words this value alone holds (new, or a spare no
        // kernel writes any more).
        unsafe { std::ptr::write_bytes(flags.host, 0, WORDS) };
        let mut device = 0;
        // SAFETY: `host` is mapped pinned memory (portable: every context maps it); the
        // out-pointer is a local.
        unsafe { sys::cuMemHostGetDevicePointer_v2(&mut device, host.cast(), 0) }
            .result()
            .map_err(|e| cuda_error("mapping the kernels' host flags", e))?;
        flags.device = device;
        Ok(flags)
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

    /// The number of the last numbered launch whose block 0 found it could not follow the
    /// launch before (0 before any), the status block's fourth word (see
    /// `oxccl_core::peer_kernels::follow::backoff`).
    pub(crate) fn follow_miss(&self) -> u32 {
        self.word(STATUS_WORD + 3).load(Ordering::Relaxed)
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
    /// Keeps the block for the next group (see `SPARE`); the group lets its flags go only
    /// after its kernels are done (`PeerMemory`'s drop waits for them).
    fn drop(&mut self) {
        SPARE
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Block(self.host));
    }
}
