//! End marks: how a call of oxccl's kernels says it has ended without an event recorded after
//! it, which would take the next kernel's early launch away (see `peer::kernels`).
//!
//! A stream that marks has a slot of device memory (a u64 mark, a u32 count of ended blocks).
//! Its marks count up from 1 in launch order (taken and launched under one lock), and a marking
//! call's last block to end writes the call's mark once every block of it has ended: a slot
//! holding m means every call marked up to m has ended, its writes visible to the device. A
//! stream waits for a mark with a wait for a value (`cuStreamWaitValue64`, at least m). The host
//! asks whether a mark was reached by reading the slot (a copy on a stream of the marks' own; the
//! highest value seen answers for every older mark), and blocks until it is on an event recorded
//! after a wait for it on another stream of theirs.
//!
//! Slots are never freed or given to another stream: a stream may still wait on a slot after its
//! owner is gone, and 16 bytes of device memory per stream that ever marked is what that costs.

use crate::cuda::cuda_error;
use cudarc::driver::{sys, CudaContext, CudaEvent, CudaStream};
use oxccl_core::Result;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Bytes of one stream's slot (a u64 mark, a u32 count of ended blocks, padding).
const SLOT_BYTES: u64 = 16;
/// Slots per allocation of device memory.
const SLOTS_PER_CHUNK: u64 = 256;
/// The least time between two reads of a slot (each is a copy and a wait for it).
const READ_EVERY: std::time::Duration = std::time::Duration::from_micros(20);

/// Device memory slots are cut from, per device: (ordinal, next free address, end). A blocking
/// lock: it is held over the allocation of a new chunk.
static CHUNKS: std::sync::Mutex<Vec<(usize, u64, u64)>> = std::sync::Mutex::new(Vec::new());

/// A zeroed slot of `ctx`'s device, bound to the calling thread, kept for the process's life.
fn take_slot(ctx: &Arc<CudaContext>) -> Result<u64> {
    let ordinal = ctx.ordinal();
    let mut chunks = CHUNKS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(c) = chunks.iter_mut().find(|c| c.0 == ordinal && c.1 < c.2) {
        c.1 += SLOT_BYTES;
        return Ok(c.1 - SLOT_BYTES);
    }
    let bytes = SLOT_BYTES * SLOTS_PER_CHUNK;
    // SAFETY: the context is current (the caller bound it); the allocation is never freed, and
    // is zeroed (synchronously) before any slot of it is handed out.
    let base = unsafe {
        let base = cudarc::driver::result::malloc_sync(bytes as usize)
            .map_err(|e| cuda_error("allocating end marks", e))?;
        cudarc::driver::result::memset_d8_sync(base, 0, bytes as usize)
            .map_err(|e| cuda_error("zeroing end marks", e))?;
        base
    };
    chunks.push((ordinal, base + SLOT_BYTES, base + bytes));
    Ok(base)
}

/// Whether `ctx`'s device waits for 64-bit values on streams (`cuStreamWaitValue64`).
fn waits_for_values(ctx: &Arc<CudaContext>) -> bool {
    ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS)
        .is_ok_and(|v| v != 0)
}

/// One stream's end marks (see the module).
#[derive(Debug)]
pub(crate) struct StreamMarks {
    ctx: Arc<CudaContext>,
    /// Device address of the slot.
    slot: u64,
    /// The last mark given; held over a marking launch, so marks follow launch order.
    last: spin::Mutex<u64>,
    /// Where the host's events wait for marks (made on first use).
    side: spin::Once<Arc<CudaStream>>,
    /// Reads the slot (made on first use).
    reader: spin::Once<spin::Mutex<SlotReader>>,
    /// The highest mark the host has seen in the slot.
    reached: AtomicU64,
}

impl StreamMarks {
    /// Marks for a stream of `ctx`; `None` where the device cannot wait for them (no 64-bit
    /// stream waits).
    pub(crate) fn new(ctx: &Arc<CudaContext>) -> Result<Option<StreamMarks>> {
        if !waits_for_values(ctx) {
            return Ok(None);
        }
        ctx.bind_to_thread()
            .map_err(|e| cuda_error("binding the device for end marks", e))?;
        Ok(Some(StreamMarks {
            ctx: ctx.clone(),
            slot: take_slot(ctx)?,
            last: spin::Mutex::new(0),
            side: spin::Once::new(),
            reader: spin::Once::new(),
            reached: AtomicU64::new(0),
        }))
    }

    /// Device address of the slot (the kernels' `mark_word`).
    pub(crate) fn slot(&self) -> u64 {
        self.slot
    }

    /// Gives the next mark to `launch`, which launches the call that writes it: the lock is
    /// held over the launch, so a later mark is never launched before an earlier one. A mark
    /// is used up only when `launch` succeeds.
    pub(crate) fn launch_marked<T>(
        &self,
        launch: impl FnOnce(u64) -> Result<T>,
    ) -> Result<(T, u64)> {
        let mut last = self.last.lock();
        let mark = *last + 1;
        let made = launch(mark)?;
        *last = mark;
        Ok((made, mark))
    }

    /// Makes `stream` wait until the slot reaches `mark`.
    ///
    /// # Safety
    /// `stream` is a live stream (of this slot's device, or of one the driver lets reach it:
    /// it refuses the wait otherwise).
    pub(crate) unsafe fn wait_on(&self, stream: sys::CUstream, mark: u64) -> Result<()> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| cuda_error("binding the device for an end mark", e))?;
        // SAFETY: the slot is 8 aligned bytes of this context's device memory, never freed;
        // `stream` is live and can reach it (the caller's contract). GEQ compares as the mark's
        // wrap-around order would.
        unsafe { crate::cuda_ffi::stream_wait_value64_geq(stream, self.slot, mark) }
            .result()
            .map_err(|e| cuda_error("waiting for an end mark", e))
    }

    /// Whether the slot has reached `mark`: known already, or read now. Reads are at least
    /// [`READ_EVERY`] apart (one answers for every older mark): a look sooner, or while
    /// another thread reads, answers from the last one.
    pub(crate) fn reached(&self, mark: u64) -> Result<bool> {
        if self.reached.load(Ordering::Acquire) >= mark {
            return Ok(true);
        }
        let reader = self
            .reader
            .try_call_once(|| SlotReader::new(&self.ctx).map(spin::Mutex::new))?;
        let Some(mut reader) = reader.try_lock() else {
            return Ok(false);
        };
        if reader.last.is_some_and(|t| t.elapsed() < READ_EVERY) {
            return Ok(false);
        }
        let seen = reader.read(&self.ctx, self.slot)?;
        self.reached.fetch_max(seen, Ordering::AcqRel);
        Ok(seen >= mark)
    }

    /// An event that fires once the slot reaches `mark`: recorded on the marks' own stream
    /// after a wait for it.
    pub(crate) fn event_at(&self, mark: u64) -> Result<Arc<CudaEvent>> {
        let side = self.side.try_call_once(|| {
            self.ctx
                .new_stream()
                .map_err(|e| cuda_error("creating the end marks' stream", e))
        })?;
        // SAFETY: `side` is a live stream of this context (held here).
        unsafe { self.wait_on(side.cu_stream(), mark)? };
        side.record_event(Some(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING))
            .map(Arc::new)
            .map_err(|e| cuda_error("recording an end mark's event", e))
    }
}

/// Reads a slot from the host: a copy into pinned memory on a stream of its own, waited for.
#[derive(Debug)]
struct SlotReader {
    stream: Arc<CudaStream>,
    /// One u64 of pinned host memory, written only by this reader's copies.
    host: *mut u64,
    /// When the last read began.
    last: Option<std::time::Instant>,
}

// SAFETY: `host` is pinned memory owned by this reader and touched only through `read`, which
// takes the reader by `&mut` (it sits behind a lock).
unsafe impl Send for SlotReader {}
// SAFETY: as above: no `&self` method touches `host`.
unsafe impl Sync for SlotReader {}

impl SlotReader {
    fn new(ctx: &Arc<CudaContext>) -> Result<SlotReader> {
        let stream = ctx
            .new_stream()
            .map_err(|e| cuda_error("creating the end marks' reader", e))?;
        // SAFETY: the context is current (`new_stream` bound it); 8 bytes of pinned memory,
        // freed in `Drop`.
        let host = unsafe { cudarc::driver::result::malloc_host(8, 0) }
            .map_err(|e| cuda_error("allocating the end marks' reader", e))?;
        Ok(SlotReader {
            stream,
            host: host.cast(),
            last: None,
        })
    }

    /// The value in `slot` now (a copy, then a wait for it).
    fn read(&mut self, ctx: &Arc<CudaContext>, slot: u64) -> Result<u64> {
        self.last = Some(std::time::Instant::now());
        ctx.bind_to_thread()
            .map_err(|e| cuda_error("binding the device for an end mark", e))?;
        // SAFETY: `host` is this reader's u64 of pinned memory (exclusive: `&mut self`); `slot`
        // is 8 aligned bytes of this context's device memory, never freed; the stream is live
        // and waited for before the value is read, so no copy is in flight after this call.
        unsafe {
            let dst = std::slice::from_raw_parts_mut(self.host, 1);
            cudarc::driver::result::memcpy_dtoh_async(dst, slot, self.stream.cu_stream())
                .and_then(|()| cudarc::driver::result::stream::synchronize(self.stream.cu_stream()))
                .map_err(|e| cuda_error("reading an end mark", e))?;
            Ok(std::ptr::read_volatile(self.host))
        }
    }
}

impl Drop for SlotReader {
    fn drop(&mut self) {
        // SAFETY: made by `malloc_host` in `new`; every copy into it was waited for in `read`.
        if let Err(e) = unsafe { cudarc::driver::result::free_host(self.host.cast()) } {
            log::debug!("freeing the end marks' reader: {e:?}");
        }
    }
}

/// A call's end: its mark on a stream's marks, held by value (an operation makes one per
/// call, with no allocation). A clone shares the host's event where one was made already and
/// makes its own otherwise (each records after a wait for the same mark, so they agree).
#[derive(Debug)]
pub(crate) struct MarkedEnd {
    pub(crate) marks: Arc<StreamMarks>,
    pub(crate) mark: u64,
    event: spin::Once<Arc<CudaEvent>>,
}

impl Clone for MarkedEnd {
    fn clone(&self) -> MarkedEnd {
        let event = match self.event.get() {
            Some(e) => spin::Once::initialized(e.clone()),
            None => spin::Once::new(),
        };
        MarkedEnd {
            marks: self.marks.clone(),
            mark: self.mark,
            event,
        }
    }
}

impl MarkedEnd {
    pub(crate) fn new(marks: Arc<StreamMarks>, mark: u64) -> MarkedEnd {
        MarkedEnd {
            marks,
            mark,
            event: spin::Once::new(),
        }
    }

    /// Takes `newer`'s mark where it is of the same stream's marks (a later call there ends
    /// after this one, so its end stands for both): the value changes, no reference is
    /// taken. `false`: of other marks, left as it is.
    pub(crate) fn renew(&mut self, newer: &MarkedEnd) -> bool {
        if !Arc::ptr_eq(&self.marks, &newer.marks) {
            return false;
        }
        if newer.mark > self.mark {
            self.mark = newer.mark;
            // The host's event, if one was made, fires at the old mark.
            self.event = spin::Once::new();
        }
        true
    }

    /// Whether the call has ended (see [`StreamMarks::reached`]).
    pub(crate) fn ended(&self) -> Result<bool> {
        self.marks.reached(self.mark)
    }

    /// The event that fires at this end (made on first use).
    pub(crate) fn event(&self) -> Result<&CudaEvent> {
        self.event
            .try_call_once(|| self.marks.event_at(self.mark))
            .map(|e| &**e)
    }
}
