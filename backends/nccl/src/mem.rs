//! Device memory from NCCL's own allocator (`ncclMemAlloc`, 2.19+), suited to registration
//! and NVLink SHARP buffers.

use oxccl_core::{Error, Feature, Result};
use oxccl_loader::{Library, RawComm};
use std::sync::Arc;

/// A device allocation made by `ncclMemAlloc`; freed with `ncclMemFree` on drop.
#[derive(Debug)]
pub struct NcclMem {
    lib: Arc<Library>,
    ptr: usize,
    bytes: usize,
}

impl NcclMem {
    /// Allocates `bytes` on the current CUDA device of the calling thread.
    pub fn alloc(lib: &Arc<Library>, bytes: usize) -> Result<NcclMem> {
        lib.features().require(Feature::MemAlloc)?;
        if bytes == 0 {
            return Err(Error::invalid("bytes", format_args!("at least one byte")));
        }
        let f = lib.api().mem_alloc.ok_or(crate::absent::feature_symbol(
            Feature::MemAlloc,
            "ncclMemAlloc",
        ))?;
        let mut ptr: *mut std::ffi::c_void = std::ptr::null_mut();
        // SAFETY: valid out-pointer; NCCL allocates on the current device.
        lib.check(unsafe { f(&mut ptr, bytes) }, RawComm::NULL)?;
        Ok(NcclMem {
            lib: lib.clone(),
            ptr: ptr as usize,
            bytes,
        })
    }

    /// The device address.
    pub fn addr(&self) -> usize {
        self.ptr
    }

    /// The size in bytes.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for NcclMem {
    fn drop(&mut self) {
        if let Some(f) = self.lib.api().mem_free {
            // SAFETY: `ptr` came from ncclMemAlloc of this library and is freed once.
            let code = unsafe { f(self.ptr as *mut std::ffi::c_void) };
            if code != 0 {
                log::warn!("ncclMemFree({:#x}) returned {code}", self.ptr);
            }
        }
    }
}
