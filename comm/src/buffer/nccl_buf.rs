//! NCCL's own memory as a buffer: [`NcclBuf`], allocated with `ncclMemAlloc` (NCCL 2.19+),
//! the memory local registration works best on and symmetric windows require.
//!
//! Ordering is stream-ordered, as the rest of [`super`]: the allocation keeps, per stream
//! that used it, an event recorded after that stream's last use (see `uses`). A new use on a
//! stream waits for the other streams' events; on the stream of the last use it waits for
//! nothing (the stream's order already puts it after), so the process group's back-to-back
//! operations on its stream cost one event record per buffer and no stream wait. Dropping the
//! buffer never blocks: the memory is let go at once when every event has completed, else
//! parked and let go by a later allocation or drop once they have (so the memory outlives the
//! work that uses it, and Drop neither waits nor panics). Registrations keep the allocation
//! alive too (see [`CommMem`]): it is let go only after every communicator that
//! registered it has released it. Let go, it is kept for the next buffer of its size rather
//! than freed ([`NcclMem`]'s documentation says why: NCCL met memory freed and allocated again
//! at the same address with wrong data).

use super::memory::next_id;
use super::memory::{Buffer, CommAlloc, CommMem, Memory, Operand};
use super::uses::Uses;
use crate::element::Element;
use cudarc::driver::{result, CudaContext, CudaStream};
use oxccl_core::{Device, Error, Event, RawBuf, RawBufMut, Result, Stream};
use oxccl_nccl::{cuda_error, NcclBackend, NcclEvent, NcclMem, NcclStream};
use std::marker::PhantomData;
use std::sync::{Arc, Mutex, PoisonError};

/// A buffer of `len` elements of `T` in memory from `ncclMemAlloc`: the
/// [`Memory::CommBuf`] of NCCL, taken by every operation of the process group like a
/// `CudaSlice`, and registered or put in a symmetric window as the group's tune table says.
pub struct NcclBuf<T> {
    alloc: Arc<NcclAlloc>,
    len: usize,
    _elem: PhantomData<fn() -> T>,
}

impl<T> std::fmt::Debug for NcclBuf<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NcclBuf")
            .field("len", &self.len)
            .field("addr", &format_args!("{:#x}", self.alloc.addr))
            .finish()
    }
}

/// The streams an allocation's work is on (see [`super::uses`]). Streams are kept alive
/// while listed (their handles are never reused meanwhile), so a use is "on the same
/// stream" only when it truly is.
type StreamUses = Uses<Arc<CudaStream>, NcclEvent>;

/// Whether every use has run (a broken context runs nothing any more: done). An event query,
/// so not for inside a graph capture, which it would end: called on drop, by the process
/// group's sweep (which skips captures) and before a registration is let go. Uses
/// themselves never query (see `uses`).
fn idle(uses: &StreamUses) -> bool {
    uses.events().all(|ev| ev.query().unwrap_or(true))
}

/// One `ncclMemAlloc` allocation with the events of its last uses. What every use reads
/// (the uses, the address, the device) comes first, on one cache line.
#[repr(C, align(64))]
struct NcclAlloc {
    /// A spin lock: held for a few list steps (and, on another stream's use, a stream
    /// wait), on a path every operation takes per buffer.
    uses: spin::Mutex<StreamUses>,
    addr: usize,
    /// The context's device, kept so that a use's check reads no other line.
    device: Device,
    id: u64,
    bytes: usize,
    ctx: Arc<CudaContext>,
    /// `None` only while being dropped.
    mem: Option<NcclMem>,
}

/// Allocations dropped while work still used them, freed once it has run.
static PARKED: Mutex<Vec<(NcclMem, StreamUses, Arc<CudaContext>)>> = Mutex::new(Vec::new());

/// Frees the parked allocations whose work has run (never blocks).
fn reap() {
    let mut parked = PARKED.lock().unwrap_or_else(PoisonError::into_inner);
    parked.retain(|(_, uses, ctx)| {
        let done = idle(uses);
        if done {
            if let Err(e) = ctx.bind_to_thread() {
                log::debug!("binding the context to free NCCL memory: {e}");
            }
        }
        !done
    });
}

impl Drop for NcclAlloc {
    fn drop(&mut self) {
        let Some(mem) = self.mem.take() else { return };
        if let Err(e) = self.ctx.bind_to_thread() {
            log::debug!("binding the context to free NCCL memory: {e}");
        }
        let uses = self.take_uses();
        if idle(&uses) {
            drop(mem);
        } else {
            // Still in use on a stream: freed by a later reap once the events completed.
            PARKED.lock().unwrap_or_else(PoisonError::into_inner).push((
                mem,
                uses,
                self.ctx.clone(),
            ));
        }
        reap();
    }
}

impl CommAlloc for NcclAlloc {
    fn idle(&self) -> bool {
        idle(&self.lock_uses())
    }
}

/// Proof that a buffer of NCCL's memory is in use by work being issued on a stream (the
/// [`Memory::Access`] of NCCL): dropping it records the use, so that later uses wait for it.
pub enum NcclAccess<'a> {
    /// A cudarc slice's: cudarc's event tracking records the use.
    Slice(cudarc::driver::SyncOnDrop<'a>),
    /// An [`NcclBuf`]'s: see [`CommUse`].
    Comm(CommUse<'a>),
}

/// A use of an [`NcclBuf`] on a stream: when it ends, the allocation keeps an event recorded
/// on that stream after the use's work, so later uses elsewhere, a drop or a copy to the
/// host wait for it. Ended by [`CommUse::end_with`] with the operation's own end event (one
/// event for the work and its buffers), else on drop with an event of its own.
pub struct CommUse<'a> {
    alloc: &'a NcclAlloc,
    stream: &'a NcclStream,
    began: u64,
    ended: bool,
}

impl CommUse<'_> {
    /// Ends the use with `event`, recorded after the use's work: kept as the allocation's
    /// event for the use's stream. An event of another stream (its pool tells) is not
    /// taken: the use then records its own.
    pub fn end_with(mut self, event: &NcclEvent) {
        if self.stream.records(event) {
            // The stream's entry usually holds the end of its last use there: renewed in
            // place where it can be (a later mark of the same stream), else replaced.
            self.finish(|held| {
                if !held.as_mut().is_some_and(|h| h.renew(event)) {
                    *held = Some(event.clone());
                }
            });
        }
    }

    fn finish(&mut self, update: impl FnOnce(&mut Option<NcclEvent>)) {
        self.ended = true;
        self.alloc
            .lock_uses()
            .end(self.stream.cuda(), self.began, Arc::ptr_eq, update);
    }
}

impl Drop for CommUse<'_> {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        match self.stream.record(false) {
            Ok(ev) => self.finish(|held| *held = Some(ev)),
            Err(e) => {
                // A broken context runs nothing any more: the earlier event stands.
                log::debug!("recording the use of NCCL memory: {e}");
                self.finish(|_| {});
            }
        }
    }
}

impl NcclAlloc {
    fn lock_uses(&self) -> spin::MutexGuard<'_, StreamUses> {
        self.uses.lock()
    }

    /// The uses, taken out (on drop).
    fn take_uses(&mut self) -> StreamUses {
        std::mem::replace(self.uses.get_mut(), Uses::empty())
    }

    /// Makes `stream` wait for the uses on other streams; the guard records this one when
    /// dropped.
    fn access<'a>(
        &'a self,
        arg: &'static str,
        device: Device,
        stream: &'a NcclStream,
    ) -> Result<CommUse<'a>> {
        // Compared by device: each `CudaContext::new` of a device is another handle of the
        // same primary context.
        if self.device != device {
            return Err(Error::invalid(
                arg,
                format_args!(
                    "NCCL memory on the communicator's device {}, got memory of device {}",
                    device.0, self.device.0
                ),
            ));
        }
        let st = stream.cuda();
        let began = self
            .lock_uses()
            .begin(st, Arc::ptr_eq, |ev| ev.wait_on(st))?;
        Ok(CommUse {
            alloc: self,
            stream,
            began,
            ended: false,
        })
    }
}

impl<T: Element> Buffer<T> for NcclBuf<T> {
    fn len(&self) -> usize {
        self.len
    }
}

impl<T: Element> NcclBuf<T> {
    /// `len` zeros in `ncclMemAlloc` memory on `stream`'s device.
    pub fn zeros(backend: &NcclBackend, stream: &NcclStream, len: usize) -> Result<NcclBuf<T>> {
        reap();
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .filter(|b| *b > 0)
            .ok_or_else(|| {
                Error::invalid(
                    "len",
                    format_args!(
                        "1 to {} elements of {} bytes, got {len}",
                        usize::MAX / std::mem::size_of::<T>().max(1),
                        std::mem::size_of::<T>()
                    ),
                )
            })?;
        let st = stream.cuda();
        let ctx = st.context().clone();
        ctx.bind_to_thread()
            .map_err(|e| cuda_error("binding the device to allocate NCCL memory", e))?;
        let mem = NcclMem::alloc(backend.library(), bytes)?;
        let addr = mem.addr();
        // SAFETY: `addr..addr+bytes` is the allocation just made on this context; the memset
        // is ordered on `st`, and the event recorded after it orders every later use.
        unsafe { result::memset_d8_async(addr as u64, 0, bytes, st.cu_stream()) }
            .map_err(|e| cuda_error("zeroing NCCL memory", e))?;
        let event = stream.record(false)?;
        Ok(NcclBuf {
            alloc: Arc::new(NcclAlloc {
                uses: spin::Mutex::new(Uses::new(st.clone(), event)),
                addr,
                device: Device(ctx.ordinal() as u32),
                id: next_id(),
                bytes,
                ctx,
                mem: Some(mem),
            }),
            len,
            _elem: PhantomData,
        })
    }

    /// A copy of `data` in `ncclMemAlloc` memory (blocks until copied).
    pub fn from_host(backend: &NcclBackend, stream: &NcclStream, data: &[T]) -> Result<NcclBuf<T>> {
        let mut buf = NcclBuf::zeros(backend, stream, data.len())?;
        buf.copy_from_host(stream, data)?;
        Ok(buf)
    }

    /// Overwrites the buffer with `data` (of its length; blocks until copied).
    pub fn copy_from_host(&mut self, stream: &NcclStream, data: &[T]) -> Result<()> {
        if data.len() != self.len {
            return Err(Error::invalid(
                "data",
                format_args!("{} elements (the buffer's), got {}", self.len, data.len()),
            ));
        }
        let st = stream.cuda();
        let _rec = self.alloc.access("data", self.device(), stream)?;
        // SAFETY: the destination holds `data.len()` elements; the copy is ordered after the
        // last use, and the stream is synchronized below before `data` can go away.
        unsafe { result::memcpy_htod_async(self.alloc.addr as u64, data, st.cu_stream()) }
            .map_err(|e| cuda_error("copying to NCCL memory", e))?;
        st.synchronize()
            .map_err(|e| cuda_error("waiting for a copy to NCCL memory", e))
    }

    /// The contents, after every work that uses the buffer (blocks).
    pub fn to_host(&self, stream: &NcclStream) -> Result<Vec<T>> {
        let st = stream.cuda();
        // SAFETY: every `Element` is valid as all-zero bytes (`ValidAsZeroBits`).
        let mut out = vec![unsafe { std::mem::zeroed::<T>() }; self.len];
        {
            let _rec = self.alloc.access("buf", self.device(), stream)?;
            // SAFETY: `out` holds `len` elements, as the source; ordered after the last use
            // and synchronized below before `out` is read.
            unsafe { result::memcpy_dtoh_async(&mut out, self.alloc.addr as u64, st.cu_stream()) }
                .map_err(|e| cuda_error("copying from NCCL memory", e))?;
        }
        st.synchronize()
            .map_err(|e| cuda_error("waiting for a copy from NCCL memory", e))?;
        Ok(out)
    }

    /// The allocation's identity, which keeps it alive (registrations and windows hold it).
    pub(crate) fn mem(&self) -> CommMem {
        CommMem {
            id: self.alloc.id,
            addr: self.alloc.addr,
            bytes: self.alloc.bytes,
            keep: self.alloc.clone(),
        }
    }

    /// The device the memory is on.
    pub fn device(&self) -> Device {
        self.alloc.device
    }

    /// The device address (for frameworks that issue on raw pointers).
    pub fn addr(&self) -> usize {
        self.alloc.addr
    }
}

impl<T: Element> Operand<NcclBackend> for NcclBuf<T> {
    type Elem = T;

    fn numel(&self) -> usize {
        self.len
    }

    fn read<'a>(
        &'a self,
        arg: &'static str,
        device: Device,
        stream: &'a NcclStream,
    ) -> Result<(RawBuf, NcclAccess<'a>)> {
        let g = self.alloc.access(arg, device, stream)?;
        Ok((RawBuf::new(self.alloc.addr, self.len), NcclAccess::Comm(g)))
    }

    fn write<'a>(
        &'a mut self,
        arg: &'static str,
        device: Device,
        stream: &'a NcclStream,
    ) -> Result<(RawBufMut, NcclAccess<'a>)> {
        let g = self.alloc.access(arg, device, stream)?;
        Ok((
            RawBufMut::new(self.alloc.addr, self.len),
            NcclAccess::Comm(g),
        ))
    }

    fn download(&self, _backend: &NcclBackend, stream: &NcclStream) -> Result<Vec<T>> {
        self.to_host(stream)
    }

    fn has_nan(&self, _backend: &NcclBackend, stream: &NcclStream) -> Result<bool> {
        // Through the host: the NaN kernel takes cudarc slices, and this check is opt-in.
        if T::FLOAT.is_none() {
            return Ok(false);
        }
        Ok(self.to_host(stream)?.into_iter().any(T::is_nan))
    }

    fn comm_mem(&self) -> Option<CommMem> {
        Some(self.mem())
    }
}

/// Plain cudarc memory: used as it is, never registered.
impl<T: Element> Operand<NcclBackend> for cudarc::driver::CudaSlice<T> {
    type Elem = T;

    fn numel(&self) -> usize {
        cudarc::driver::DeviceSlice::len(self)
    }

    fn read<'a>(
        &'a self,
        arg: &'static str,
        device: Device,
        stream: &'a NcclStream,
    ) -> Result<(RawBuf, NcclAccess<'a>)> {
        NcclBackend::read(arg, device, stream, self)
    }

    fn write<'a>(
        &'a mut self,
        arg: &'static str,
        device: Device,
        stream: &'a NcclStream,
    ) -> Result<(RawBufMut, NcclAccess<'a>)> {
        NcclBackend::write(arg, device, stream, self)
    }

    fn download(&self, backend: &NcclBackend, stream: &NcclStream) -> Result<Vec<T>> {
        backend.download(stream, self)
    }

    fn has_nan(&self, backend: &NcclBackend, stream: &NcclStream) -> Result<bool> {
        backend.has_nan(stream, self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_use_reads_lies_on_the_allocation_s_first_line() {
        use std::mem::{offset_of, size_of};
        assert_eq!(offset_of!(NcclAlloc, uses), 0);
        let end = offset_of!(NcclAlloc, device) + size_of::<Device>();
        assert!(offset_of!(NcclAlloc, addr) < 64 && end <= 64, "{end}");
    }
}
