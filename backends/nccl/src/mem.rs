//! Device memory from NCCL's own allocator (`ncclMemAlloc`, 2.19+), suited to registration
//! and NVLink SHARP buffers.
//!
//! Memory let go is kept, not freed: the next allocation of the same size on the same device
//! takes it back, and [`NcclMem::release_kept`] frees it when the program says no
//! communicator that used it lives any more. With NCCL 2.28.9, memory that a
//! communicator had registered (locally or in a window) or captured into a graph, then
//! deregistered and freed, and allocated again at the same address (which `ncclMemAlloc`
//! tends to hand back) moves the wrong data: captured broadcasts deliver nothing, in-place
//! all_gathers and send/recv pairs get wrong elements, silently. A peer's mapping
//! of the old memory outlives the free. Memory kept and handed back keeps its address and
//! its physical pages together, so whatever NCCL remembers of it stays true.
//!
//! Memory a CUDA graph captured an operation on is not handed back even so: it is kept until
//! [`NcclMem::release_kept`]. NCCL registers a captured operation's buffers by itself
//! (`NCCL_GRAPH_REGISTER`, on by default) and undoes that registration at some point after
//! the graph is destroyed; with NCCL 2.28.3 and 2.28.9, an all_gather on memory that earlier
//! captured operations used, handed back at the same address, can hang
//! (`tests/gpu_realloc_capture.rs`; not with `NCCL_GRAPH_REGISTER=0`).
//! Operations issued inside a capture begun on an [`crate::NcclStream`] mark their buffers
//! through [`NcclMem::note_captured`] as they are issued (a capture begun another way must
//! call it itself, as `oxccl perf`'s raw layer does).

use oxccl_core::{text, Error, Feature, Result};
use oxccl_loader::Library;
use std::sync::{Arc, Mutex, PoisonError};

/// A device allocation made by `ncclMemAlloc`; kept when dropped, for reuse unless a capture
/// used it (see the module documentation), freed with `ncclMemFree` only by
/// [`NcclMem::release_kept`].
#[derive(Debug)]
pub struct NcclMem {
    lib: Arc<Library>,
    ptr: usize,
    bytes: usize,
    /// The device it is on (`None`: unknown, then freed at drop instead of kept).
    device: Option<i32>,
}

/// Blocks let go, by library, device and size.
static KEPT: Mutex<Shelf<Arc<Library>>> = Mutex::new(Shelf::new());

/// The live allocations, and which of them a capture used.
static LIVE: Mutex<LiveSet> = Mutex::new(LiveSet::new());

/// Live allocations by address and size, each marked once a captured operation used it.
#[derive(Debug)]
pub(crate) struct LiveSet {
    /// (address, bytes, captured).
    blocks: Vec<(usize, usize, bool)>,
}

impl LiveSet {
    pub(crate) const fn new() -> Self {
        LiveSet { blocks: Vec::new() }
    }

    /// An allocation handed out.
    pub(crate) fn add(&mut self, ptr: usize, bytes: usize) {
        self.blocks.push((ptr, bytes, false));
    }

    /// Marks every live allocation overlapping `bytes` at `addr` as captured.
    pub(crate) fn mark(&mut self, addr: usize, bytes: usize) {
        let end = addr.saturating_add(bytes);
        for b in &mut self.blocks {
            if b.0 < end && addr < b.0.saturating_add(b.1) {
                b.2 = true;
            }
        }
    }

    /// The allocation at `ptr` let go: whether a capture used it (`None`: not live).
    pub(crate) fn remove(&mut self, ptr: usize) -> Option<bool> {
        let i = self.blocks.iter().position(|b| b.0 == ptr)?;
        Some(self.blocks.swap_remove(i).2)
    }
}

fn live() -> std::sync::MutexGuard<'static, LiveSet> {
    LIVE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Blocks waiting to be handed out again: generic over what owns them, so that the rule is
/// tested without a library.
#[derive(Debug)]
pub(crate) struct Shelf<L> {
    blocks: Vec<Block<L>>,
}

#[derive(Debug)]
struct Block<L> {
    owner: L,
    device: i32,
    ptr: usize,
    bytes: usize,
    /// Whether it may be handed out again (not after a capture used it).
    reusable: bool,
}

impl<L> Shelf<L> {
    pub(crate) const fn new() -> Self {
        Shelf { blocks: Vec::new() }
    }

    /// Keeps a block: to be handed out again when `reusable`, else only to be freed.
    pub(crate) fn keep(&mut self, owner: L, device: i32, ptr: usize, bytes: usize, reusable: bool) {
        self.blocks.push(Block {
            owner,
            device,
            ptr,
            bytes,
            reusable,
        });
    }

    /// A reusable kept block of exactly `bytes` on `device` from `owner` (the newest first:
    /// the most likely to be warm), taken off the shelf.
    pub(crate) fn take(
        &mut self,
        owner: impl Fn(&L) -> bool,
        device: i32,
        bytes: usize,
    ) -> Option<usize> {
        let i = self.blocks.iter().rposition(|b| {
            b.reusable && b.device == device && b.bytes == bytes && owner(&b.owner)
        })?;
        Some(self.blocks.swap_remove(i).ptr)
    }

    /// Takes every block of `owner` on `device` off the shelf: (address, bytes) each.
    pub(crate) fn take_all(
        &mut self,
        owner: impl Fn(&L) -> bool,
        device: i32,
    ) -> Vec<(usize, usize)> {
        let (mine, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.blocks)
            .into_iter()
            .partition(|b| b.device == device && owner(&b.owner));
        self.blocks = rest;
        mine.into_iter().map(|b| (b.ptr, b.bytes)).collect()
    }

    /// Bytes kept for `owner`.
    pub(crate) fn bytes(&self, owner: impl Fn(&L) -> bool) -> usize {
        self.blocks
            .iter()
            .filter(|b| owner(&b.owner))
            .map(|b| b.bytes)
            .sum()
    }
}

fn kept() -> std::sync::MutexGuard<'static, Shelf<Arc<Library>>> {
    KEPT.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The device of the calling thread's current context (what `ncclMemAlloc` allocates on);
/// `None` without a driver or a current context.
fn current_device() -> Option<i32> {
    crate::cuda::require_driver().ok()?;
    crate::cuda_ffi::ctx_get_device()
}

impl NcclMem {
    /// Allocates `bytes` on the current CUDA device of the calling thread: a block of that
    /// size kept from an earlier [`NcclMem`] of this library on that device if there is one,
    /// else from `ncclMemAlloc`. The contents are undefined.
    pub fn alloc(lib: &Arc<Library>, bytes: usize) -> Result<NcclMem> {
        crate::absent::gated(
            lib.features(),
            Feature::MemAlloc,
            lib.api().mem_alloc,
            "ncclMemAlloc",
        )?;
        if bytes == 0 {
            return Err(Error::invalid("bytes", format_args!("at least one byte")));
        }
        let device = current_device();
        if let Some(d) = device {
            // Taken apart from the `if let`, so that the shelf's lock is not held while the
            // live set's is taken (no path holds both).
            let taken = kept().take(|l| Arc::ptr_eq(l, lib), d, bytes);
            if let Some(ptr) = taken {
                live().add(ptr, bytes);
                return Ok(NcclMem {
                    lib: lib.clone(),
                    ptr,
                    bytes,
                    device,
                });
            }
        }
        let ptr = match crate::ffi::mem_alloc(lib, bytes) {
            Ok(ptr) => ptr,
            Err(e) => {
                let held = kept().bytes(|l| Arc::ptr_eq(l, lib));
                if held == 0 {
                    return Err(e);
                }
                // NCCL's own code and last error, with what the program can do about it.
                return Err(match e {
                    Error::Backend { code, text, last } => Error::Backend {
                        code,
                        text: text!(
                            "{text}; {held} bytes of NCCL memory are kept (for reuse, or after a \
                         capture): call NcclMem::release_kept once no communicator that used \
                         them lives"
                        ),
                        last,
                    },
                    other => other,
                });
            }
        };
        live().add(ptr, bytes);
        Ok(NcclMem {
            lib: lib.clone(),
            ptr,
            bytes,
            device,
        })
    }

    /// Says that a CUDA graph captured an operation on `bytes` at `addr`: the [`NcclMem`]s
    /// overlapping it are not handed out again once let go, only freed by
    /// [`NcclMem::release_kept`] (see the module documentation). Other memory is ignored.
    pub fn note_captured(addr: usize, bytes: usize) {
        live().mark(addr, bytes);
    }

    /// The device address.
    pub fn addr(&self) -> usize {
        self.ptr
    }

    /// The size in bytes.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Bytes of `lib`'s memory kept, on every device: dropped [`NcclMem`]s not yet handed out
    /// again, and those a capture used, which are only freed by [`NcclMem::release_kept`].
    pub fn kept_bytes(lib: &Arc<Library>) -> usize {
        kept().bytes(|l| Arc::ptr_eq(l, lib))
    }

    /// Frees every block of `lib`'s memory kept for reuse on the calling thread's current
    /// device with `ncclMemFree` (which frees only there); returns the bytes freed. Blocks of
    /// other devices stay kept: release them from a thread on their device. A block whose
    /// free fails stays kept too, no longer to be handed out (only freed by a later call), so
    /// it is neither lost nor handed out twice. Call it only
    /// when every communicator that registered or captured that memory has been destroyed:
    /// NCCL may otherwise move a later allocation's data through the freed memory (see the
    /// module documentation). Without a current device nothing is freed.
    pub fn release_kept(lib: &Arc<Library>) -> usize {
        let Some(device) = current_device() else {
            return 0;
        };
        let blocks = kept().take_all(|l| Arc::ptr_eq(l, lib), device);
        let mut freed = 0;
        for (ptr, bytes) in blocks {
            if free(lib, ptr) {
                freed += bytes;
            } else {
                kept().keep(lib.clone(), device, ptr, bytes, false);
            }
        }
        freed
    }
}

/// `ncclMemFree(ptr)`; whether it succeeded.
fn free(lib: &Library, ptr: usize) -> bool {
    // SAFETY: `ptr` came from ncclMemAlloc of this library, is no longer handed out (its
    // `NcclMem` is gone and it is off the shelf) and is freed once.
    let Some(code) = (unsafe { crate::ffi::mem_free(lib.api(), ptr) }) else {
        return false;
    };
    if code != 0 {
        log::warn!("ncclMemFree({ptr:#x}) returned {code}");
    }
    code == 0
}

impl Drop for NcclMem {
    fn drop(&mut self) {
        let captured = live().remove(self.ptr).unwrap_or(false);
        match self.device {
            Some(d) => kept().keep(self.lib.clone(), d, self.ptr, self.bytes, !captured),
            None => {
                free(&self.lib, self.ptr);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{LiveSet, Shelf};

    #[test]
    fn a_block_a_capture_used_is_kept_but_never_handed_out_again() {
        let mut live = LiveSet::new();
        live.add(0x1000, 4096);
        live.add(0x3000, 4096);
        live.add(0x5000, 4096);
        // A captured buffer inside the second allocation, and one spanning the third's start.
        live.mark(0x3100, 16);
        live.mark(0x4ff0, 32);
        assert_eq!(live.remove(0x1000), Some(false));
        assert_eq!(live.remove(0x3000), Some(true));
        assert_eq!(live.remove(0x5000), Some(true));
        assert_eq!(live.remove(0x5000), None, "removed once");
        let mut s: Shelf<u8> = Shelf::new();
        s.keep(1, 0, 0x1000, 4096, true);
        s.keep(1, 0, 0x3000, 4096, false);
        assert_eq!(s.take(|&o| o == 1, 0, 4096), Some(0x1000));
        assert_eq!(
            s.take(|&o| o == 1, 0, 4096),
            None,
            "the captured block stays out"
        );
        assert_eq!(s.bytes(|&o| o == 1), 4096, "but it is kept, to be freed");
        assert_eq!(s.take_all(|&o| o == 1, 0), vec![(0x3000, 4096)]);
    }

    #[test]
    fn a_block_comes_back_only_for_its_owner_device_and_size() {
        let mut s: Shelf<u8> = Shelf::new();
        s.keep(1, 0, 0x1000, 4096, true);
        s.keep(1, 1, 0x2000, 4096, true);
        s.keep(2, 0, 0x3000, 4096, true);
        assert_eq!(s.take(|&o| o == 1, 0, 8192), None, "another size");
        assert_eq!(s.take(|&o| o == 3, 0, 4096), None, "another owner");
        assert_eq!(s.take(|&o| o == 1, 0, 4096), Some(0x1000));
        assert_eq!(s.take(|&o| o == 1, 0, 4096), None, "taken once");
        assert_eq!(s.take(|&o| o == 1, 1, 4096), Some(0x2000));
        assert_eq!(s.bytes(|&o| o == 2), 4096);
    }

    #[test]
    fn the_newest_block_goes_first_and_release_takes_an_owners_blocks() {
        let mut s: Shelf<u8> = Shelf::new();
        s.keep(1, 0, 0x1000, 64, true);
        s.keep(1, 0, 0x2000, 64, true);
        s.keep(2, 0, 0x3000, 64, true);
        assert_eq!(s.take(|&o| o == 1, 0, 64), Some(0x2000));
        s.keep(1, 0, 0x4000, 128, true);
        s.keep(1, 1, 0x5000, 64, true);
        let mut all = s.take_all(|&o| o == 1, 0);
        all.sort();
        assert_eq!(all, vec![(0x1000, 64), (0x4000, 128)]);
        assert_eq!(s.bytes(|&o| o == 1), 64, "device 1's block stays kept");
        assert_eq!(s.take_all(|&o| o == 1, 1), vec![(0x5000, 64)]);
        assert_eq!(s.bytes(|&o| o == 1), 0);
        assert_eq!(s.take(|&o| o == 2, 0, 64), Some(0x3000));
    }
}
