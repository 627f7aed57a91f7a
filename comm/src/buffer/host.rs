//! The mock world's memory: host buffers reached only through their stream.

use super::memory::next_id;
use super::memory::{Buffer, CommAlloc, CommMem, Memory, Operand, StreamOf};
use crate::element::Element;
use oxccl_core::{Backend, Device, Error, Event, Feature, RawBuf, RawBufMut, Result, Stream};
use oxccl_mock::{MockBackend, MockEvent, MockStream};
use std::cell::UnsafeCell;
use std::sync::{Arc, Mutex, PoisonError};

/// Host memory standing for device memory on the mock world. Its elements are written only by
/// work on a stream, and read by [`Memory::download`] after that work: the buffer keeps the
/// event of its last use, and every new use waits for it.
pub struct HostBuf<T> {
    mem: Arc<HostMem<T>>,
}

struct HostMem<T> {
    cells: Box<[UnsafeCell<T>]>,
    /// The event after the last work that used the buffer (`None` until one did).
    last: Mutex<Option<MockEvent>>,
    /// The allocation id when the buffer stands for the library's own memory
    /// ([`Memory::alloc_comm`]): only then may it be registered or put in a window.
    comm: Option<u64>,
}

// SAFETY: the cells are touched only by (a) the creating thread before the buffer is shared,
// (b) stream tasks of operations, ordered one after another by the `last` event chain (each
// use waits for the previous one, see `HostBuf::access`), and (c) `download`, which first
// waits for `last`. So no two threads access a cell at the same time; `T: Send` lets the
// values move between those threads.
unsafe impl<T: Send> Sync for HostMem<T> {}
// SAFETY: as above; the memory is owned and `T: Send`.
unsafe impl<T: Send> Send for HostMem<T> {}

impl<T> std::fmt::Debug for HostBuf<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostBuf")
            .field("len", &self.mem.cells.len())
            .finish()
    }
}

impl<T: Element> Buffer<T> for HostBuf<T> {
    fn len(&self) -> usize {
        self.mem.cells.len()
    }
}

/// Records a use of a [`HostBuf`] on a stream when dropped, and keeps its memory alive on the
/// stream until the work issued meanwhile has run.
pub struct HostAccess<'a> {
    stream: &'a MockStream,
    last: &'a Mutex<Option<MockEvent>>,
    keep: Option<Arc<dyn Send + Sync>>,
}

impl HostAccess<'_> {
    /// Sends the memory's reference down the stream behind the work issued with it, so a
    /// buffer dropped right after the issue is freed only once that work ran.
    fn release(&mut self) {
        if let Some(keep) = self.keep.take() {
            if let Err(e) = self.stream.host_fn(move || drop(keep)) {
                // The stream is closing: its queued work is being dropped too, so nothing
                // uses the memory any more.
                log::debug!("mock stream closed while releasing a buffer: {e}");
            }
        }
    }
}

impl Drop for HostAccess<'_> {
    /// The use's last event is recorded after the memory's reference is let go on the stream,
    /// so an allocation found idle is held by nothing the stream still runs (the process
    /// group's window release counts a buffer dropped only once nothing holds it). Hence the
    /// mock keeps [`Memory::end_access`]'s default: the operation's end event comes before
    /// that reference is let go.
    fn drop(&mut self) {
        self.release();
        match self.stream.record(false) {
            Ok(ev) => *self.last.lock().unwrap_or_else(PoisonError::into_inner) = Some(ev),
            Err(e) => log::debug!("mock stream closed while recording a buffer's use: {e}"),
        }
    }
}

impl<T: Element> HostBuf<T> {
    fn from_vec(v: Vec<T>) -> HostBuf<T> {
        HostBuf::with_comm(v, None)
    }

    fn with_comm(v: Vec<T>, comm: Option<u64>) -> HostBuf<T> {
        HostBuf {
            mem: Arc::new(HostMem {
                cells: v.into_iter().map(UnsafeCell::new).collect(),
                last: Mutex::new(None),
                comm,
            }),
        }
    }

    /// Whether the buffer stands for the library's own memory (made by
    /// [`Memory::alloc_comm`] or [`Memory::upload_comm`]).
    pub fn is_comm(&self) -> bool {
        self.mem.comm.is_some()
    }

    /// Makes `stream` wait for the buffer's last use and returns its address.
    fn access<'a>(&'a self, stream: &'a MockStream) -> Result<(usize, HostAccess<'a>)> {
        let last = self.mem.last.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(ev) = last.as_ref() {
            stream.wait_event(ev)?;
        }
        drop(last);
        let keep: Arc<dyn Send + Sync> = self.mem.clone();
        Ok((
            self.mem.cells.as_ptr() as usize,
            HostAccess {
                stream,
                last: &self.mem.last,
                keep: Some(keep),
            },
        ))
    }
}

impl<T: Element> CommAlloc for HostMem<T> {
    fn idle(&self) -> bool {
        let last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        // A stream that failed runs nothing more: idle too.
        last.as_ref().is_none_or(|ev| ev.query().unwrap_or(true))
    }
}

impl<T: Element> Operand<MockBackend> for HostBuf<T> {
    type Elem = T;

    fn numel(&self) -> usize {
        self.mem.cells.len()
    }

    fn read<'a>(
        &'a self,
        arg: &'static str,
        device: Device,
        stream: &'a MockStream,
    ) -> Result<(RawBuf, HostAccess<'a>)> {
        MockBackend::read(arg, device, stream, self)
    }

    fn write<'a>(
        &'a mut self,
        arg: &'static str,
        device: Device,
        stream: &'a MockStream,
    ) -> Result<(RawBufMut, HostAccess<'a>)> {
        MockBackend::write(arg, device, stream, self)
    }

    fn download(&self, backend: &MockBackend, stream: &MockStream) -> Result<Vec<T>> {
        backend.download(stream, self)
    }

    fn has_nan(&self, backend: &MockBackend, stream: &MockStream) -> Result<bool> {
        backend.has_nan(stream, self)
    }

    fn comm_mem(&self) -> Option<CommMem> {
        let id = self.mem.comm?;
        Some(CommMem {
            id,
            addr: self.mem.cells.as_ptr() as usize,
            bytes: std::mem::size_of_val(&*self.mem.cells),
            keep: self.mem.clone(),
        })
    }
}

impl Memory for MockBackend {
    type Buf<T: Element> = HostBuf<T>;
    type CommBuf<T: Element> = HostBuf<T>;
    type Access<'a> = HostAccess<'a>;

    fn stream(&self, _device: Device) -> Result<MockStream> {
        MockStream::new()
    }

    fn alloc_zeros<T: Element>(&self, _stream: &MockStream, len: usize) -> Result<HostBuf<T>> {
        // All-zero bytes are zero (or false) for every element type NCCL moves.
        let mut v = Vec::new();
        v.try_reserve_exact(len).map_err(|_| {
            Error::invalid(
                "len",
                format_args!("a buffer that fits in memory, got {len} elements"),
            )
        })?;
        // SAFETY: every `Element` is valid as all zero bytes (the trait's contract), and `len`
        // elements were reserved above.
        unsafe {
            std::ptr::write_bytes(v.as_mut_ptr(), 0, len);
            v.set_len(len);
        }
        Ok(HostBuf::from_vec(v))
    }

    fn upload<T: Element>(&self, _stream: &MockStream, data: &[T]) -> Result<HostBuf<T>> {
        Ok(HostBuf::from_vec(data.to_vec()))
    }

    fn alloc_comm<T: Element>(&self, stream: &MockStream, len: usize) -> Result<HostBuf<T>> {
        self.features().require(Feature::MemAlloc)?;
        if len == 0 {
            // As ncclMemAlloc, which refuses an empty allocation.
            return Err(Error::invalid(
                "len",
                format_args!("at least one element for memory of the library's allocator"),
            ));
        }
        let plain = self.alloc_zeros::<T>(stream, len)?;
        let cells = Arc::try_unwrap(plain.mem)
            .map_err(|_| Error::invalid("len", format_args!("a fresh buffer")))?
            .cells;
        Ok(HostBuf {
            mem: Arc::new(HostMem {
                cells,
                last: Mutex::new(None),
                comm: Some(next_id()),
            }),
        })
    }

    fn upload_comm<T: Element>(&self, _stream: &MockStream, data: &[T]) -> Result<HostBuf<T>> {
        self.features().require(Feature::MemAlloc)?;
        if data.is_empty() {
            return Err(Error::invalid(
                "data",
                format_args!("at least one element for memory of the library's allocator"),
            ));
        }
        Ok(HostBuf::with_comm(data.to_vec(), Some(next_id())))
    }

    fn download<T: Element>(&self, _stream: &StreamOf<Self>, buf: &HostBuf<T>) -> Result<Vec<T>> {
        let last = buf
            .mem
            .last
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some(ev) = last {
            ev.synchronize()?;
        }
        // SAFETY: every work that used the buffer has run (its last event completed, and each
        // use waited for the one before), and no new work can be issued on it while `buf` is
        // borrowed here except reads, which do not write the cells.
        Ok(buf.mem.cells.iter().map(|c| unsafe { *c.get() }).collect())
    }

    fn has_nan<T: Element>(&self, stream: &MockStream, buf: &HostBuf<T>) -> Result<bool> {
        if T::FLOAT.is_none() {
            return Ok(false);
        }
        Ok(self.download(stream, buf)?.into_iter().any(T::is_nan))
    }

    fn read<'a, T: Element>(
        _arg: &'static str,
        _device: Device,
        stream: &'a MockStream,
        buf: &'a HostBuf<T>,
    ) -> Result<(RawBuf, HostAccess<'a>)> {
        let (addr, access) = buf.access(stream)?;
        Ok((RawBuf::new(addr, buf.len()), access))
    }

    fn write<'a, T: Element>(
        _arg: &'static str,
        _device: Device,
        stream: &'a MockStream,
        buf: &'a mut HostBuf<T>,
    ) -> Result<(RawBufMut, HostAccess<'a>)> {
        let (addr, access) = buf.access(stream)?;
        Ok((RawBufMut::new(addr, buf.len()), access))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// Once an allocation reports idle, its stream holds no reference to it any more: a
    /// buffer dropped right after its operation counts as dropped (the window release's
    /// test). Each round holds the stream until the buffer is gone, so the operation's end and
    /// the memory's release both still lie ahead on it.
    #[test]
    fn an_idle_allocation_is_held_by_nothing_its_stream_runs() {
        let mock = MockBackend::new();
        let st = MockStream::new().unwrap();
        for round in 0..200 {
            let buf = mock.upload_comm(&st, &[1.0f32; 4]).unwrap();
            let mem = buf.comm_mem().unwrap();
            let (open, gate) = mpsc::channel::<()>();
            st.host_fn(move || {
                let _ = gate.recv();
            })
            .unwrap();
            let (_, access) = MockBackend::read("buf", Device(0), &st, &buf).unwrap();
            let end = st.record(false).unwrap();
            MockBackend::end_access(access, &end);
            drop(buf);
            open.send(()).unwrap();
            while !mem.keep.idle() {
                std::thread::yield_now();
            }
            assert_eq!(Arc::strong_count(&mem.keep), 1, "round {round}");
        }
    }
}
