//! Peer memory through CUDA's virtual-memory API: physical memory on one device, exported as a
//! file descriptor, imported and mapped by every rank of the group (in this process or
//! another).
//!
//! Why not the legacy IPC handles (`cuIpcGetMemHandle`): freeing exported memory while another
//! process still has it open is undefined behaviour, and a group that aborts because a peer
//! hangs cannot wait for that peer to close it. Here every process holds its own reference to
//! the physical memory (its imported handle and its mapping): a rank releases its own at any
//! time, and the memory is freed only when the last rank that can still write to it lets go,
//! so a late peer never writes into memory that was handed out again.

use crate::cuda::cuda_error;
use cudarc::driver::sys;
use oxccl_core::Result;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

fn driver(what: &str, r: sys::CUresult) -> Result<()> {
    r.result().map_err(|e| cuda_error(what, e))
}

fn device_location(ordinal: i32) -> sys::CUmemLocation {
    // SAFETY: a plain C struct of an enum and integers (a union on newer headers), for which
    // all zero bits are valid; the fields that matter are set below.
    let mut loc: sys::CUmemLocation = unsafe { std::mem::zeroed() };
    loc.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
    loc.id = ordinal;
    loc
}

fn properties(ordinal: i32) -> sys::CUmemAllocationProp {
    // SAFETY: as in `device_location`: integers, enums and a null pointer are valid zeroed.
    let mut prop: sys::CUmemAllocationProp = unsafe { std::mem::zeroed() };
    prop.type_ = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.requestedHandleTypes =
        sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    prop.location = device_location(ordinal);
    prop
}

/// Whether the device can make memory other processes import by file descriptor.
pub(crate) fn supported(dev: sys::CUdevice) -> bool {
    let attr = |a| {
        let mut v = 0i32;
        // SAFETY: an attribute query into a local.
        let r = unsafe { sys::cuDeviceGetAttribute(&mut v, a, dev) };
        r == sys::CUresult::CUDA_SUCCESS && v != 0
    };
    attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)
        && attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED)
}

/// `bytes` rounded up to the device's allocation granularity.
pub(crate) fn rounded(ordinal: i32, bytes: u64) -> Result<usize> {
    let prop = properties(ordinal);
    let mut g = 0usize;
    // SAFETY: `prop` is a valid description; the out-pointer is a local.
    driver("reading the allocation granularity", unsafe {
        sys::cuMemGetAllocationGranularity(
            &mut g,
            &prop,
            sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
        )
    })?;
    let g = g.max(1) as u64;
    Ok((bytes.div_ceil(g) * g) as usize)
}

/// One reference to physical memory: made here or imported from a descriptor. Released on
/// drop; the memory itself lives while any reference or mapping of it does, in any process.
#[derive(Debug)]
pub(crate) struct Physical {
    handle: sys::CUmemGenericAllocationHandle,
    bytes: usize,
}

impl Physical {
    /// `bytes` (a multiple of the granularity) on device `ordinal`; the caller's thread has
    /// that device's context current.
    pub(crate) fn create(ordinal: i32, bytes: usize) -> Result<Physical> {
        let prop = properties(ordinal);
        let mut handle = 0;
        // SAFETY: `prop` describes pinned device memory with a descriptor handle type; the
        // out-pointer is a local.
        driver("allocating peer memory", unsafe {
            sys::cuMemCreate(&mut handle, bytes, &prop, 0)
        })?;
        Ok(Physical { handle, bytes })
    }

    /// Its size in bytes.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// A file descriptor other processes import it by.
    pub(crate) fn export(&self) -> Result<OwnedFd> {
        let mut fd: RawFd = -1;
        // SAFETY: `handle` is live and was made with the descriptor handle type; CUDA writes
        // an int descriptor to the out-pointer.
        driver("exporting peer memory", unsafe {
            sys::cuMemExportToShareableHandle(
                (&mut fd as *mut RawFd).cast(),
                self.handle,
                sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                0,
            )
        })?;
        // SAFETY: the export succeeded, so `fd` is a new descriptor this process owns.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// A reference to the memory another rank exported as `fd` (a descriptor open in this
    /// process), `bytes` long.
    pub(crate) fn import(fd: RawFd, bytes: usize) -> Result<Physical> {
        let mut handle = 0;
        // SAFETY: CUDA reads the descriptor from the pointer-sized argument (the documented
        // way to pass a POSIX descriptor); it does not take ownership of it.
        driver("importing a peer's memory", unsafe {
            sys::cuMemImportFromShareableHandle(
                &mut handle,
                fd as isize as *mut std::ffi::c_void,
                sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
            )
        })?;
        Ok(Physical { handle, bytes })
    }
}

impl Drop for Physical {
    fn drop(&mut self) {
        // SAFETY: the handle is live and released once; mappings of it keep the memory.
        let r = unsafe { sys::cuMemRelease(self.handle) };
        if r != sys::CUresult::CUDA_SUCCESS {
            log::warn!("releasing peer memory: {r:?}");
        }
    }
}

/// `Physical` memory mapped into this process's address space, readable and writable by one
/// device. Unmapped on drop; the caller makes sure no kernel still uses it (see
/// `PeerMemory`'s drop).
#[derive(Debug)]
pub(crate) struct Mapping {
    addr: sys::CUdeviceptr,
    bytes: usize,
}

impl Mapping {
    /// Maps `phys` for device `ordinal` (whose context is current on this thread).
    pub(crate) fn new(phys: &Physical, ordinal: i32) -> Result<Mapping> {
        let mut addr = 0;
        // SAFETY: reserves a fresh range of `bytes`; the out-pointer is a local.
        driver("reserving addresses for peer memory", unsafe {
            sys::cuMemAddressReserve(&mut addr, phys.bytes, 0, 0, 0)
        })?;
        let m = Mapping {
            addr,
            bytes: phys.bytes,
        };
        // SAFETY: the range was just reserved with the allocation's size, and the handle is
        // live; on failure the partial mapping is undone by `m`'s drop.
        driver("mapping peer memory", unsafe {
            sys::cuMemMap(addr, phys.bytes, 0, phys.handle, 0)
        })?;
        let desc = sys::CUmemAccessDesc {
            location: device_location(ordinal),
            flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        // SAFETY: the range is mapped; one access descriptor is passed.
        driver("opening peer memory to this device", unsafe {
            sys::cuMemSetAccess(addr, phys.bytes, &desc, 1)
        })?;
        Ok(m)
    }

    /// The mapped address (a device pointer on this process's devices).
    pub(crate) fn addr(&self) -> u64 {
        self.addr
    }

    /// Queues filling the mapping with zero bytes on `stream` (the setup's exchanges follow
    /// on the same stream, so every rank's memory is clear before any peer writes to it).
    pub(crate) fn zero(&self, stream: sys::CUstream) -> Result<()> {
        // SAFETY: the whole range is mapped and writable by the stream's device.
        driver("clearing peer memory", unsafe {
            sys::cuMemsetD8Async(self.addr, 0, self.bytes, stream)
        })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the range was reserved here and (maybe partly) mapped; unmapping a range
        // that is not mapped fails harmlessly, and the reservation is freed once.
        unsafe {
            let _ = sys::cuMemUnmap(self.addr, self.bytes);
            let _ = sys::cuMemAddressFree(self.addr, self.bytes);
        }
    }
}
