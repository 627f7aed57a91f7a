//! CUDA streams and events behind the core's `Stream` and `Event` traits.

use crate::comm_inner::CommInner;
use crate::cuda::cuda_error;
use crate::end_mark::{MarkedEnd, StreamMarks};
use crate::graph_refs::CaptureRefs;
use cudarc::driver::{sys, CudaContext, CudaEvent, CudaStream, DriverError};
use oxccl_core::{Error, Event, Result, Stream};
use std::mem::ManuallyDrop;
use std::sync::Arc;

/// Events kept for reuse: creating a CUDA event costs about a microsecond, and a process
/// group records one per operation. An event goes back to the pool only when its last holder
/// lets go (see [`NcclEvent`]), so a recorded event is never re-recorded while anything can
/// still wait on it. A spin lock: it is held for one push or pop, and its release is a plain
/// store where a mutex's is a second atomic exchange, on a path every operation of a group
/// takes twice.
#[derive(Debug, Default)]
struct EventPool {
    /// Released events: without timing, with timing.
    free: [spin::Mutex<Vec<Arc<CudaEvent>>>; 2],
}

/// Released events kept per kind beyond which they are destroyed.
const POOL_LIMIT: usize = 256;

impl EventPool {
    fn take(&self, timing: bool) -> Option<Arc<CudaEvent>> {
        self.free[usize::from(timing)].lock().pop()
    }

    fn give(&self, timing: bool, ev: Arc<CudaEvent>) {
        let mut free = self.free[usize::from(timing)].lock();
        if free.len() < POOL_LIMIT {
            free.push(ev);
        }
    }
}

/// A CUDA stream NCCL operations are issued on.
#[derive(Debug, Clone)]
pub struct NcclStream {
    inner: Arc<CudaStream>,
    pool: Arc<EventPool>,
    /// The communicators issued on this stream while a capture begun on it is open (shared
    /// by its clones): the graph the capture makes counts as holding them.
    pub(crate) captured: Arc<CaptureRefs<CommInner>>,
    /// The end marks of oxccl's kernel calls on this stream (made on first use; `None` where
    /// the device cannot wait for them).
    marks: Arc<spin::Once<Option<Arc<StreamMarks>>>>,
}

impl NcclStream {
    /// Wraps a cudarc stream (shared: cudarc slices allocated on it stay stream-ordered).
    pub fn new(inner: Arc<CudaStream>) -> NcclStream {
        NcclStream {
            inner,
            pool: Arc::default(),
            captured: Arc::default(),
            marks: Arc::default(),
        }
    }

    /// A new non-default stream on `ctx`'s device.
    pub fn create(ctx: &Arc<CudaContext>) -> Result<NcclStream> {
        ctx.new_stream()
            .map(NcclStream::new)
            .map_err(|e| cuda_error("creating a stream", e))
    }

    /// The cudarc stream.
    pub fn cuda(&self) -> &Arc<CudaStream> {
        &self.inner
    }

    /// Whether `event` was recorded on this stream (it came from this stream's pool or marks,
    /// which its clones share with it and no other stream has).
    pub fn records(&self, event: &NcclEvent) -> bool {
        match &event.end {
            End::Recorded(r) => Arc::ptr_eq(&self.pool, &r.pool),
            End::Marked(m) => self
                .marks
                .get()
                .and_then(Option::as_ref)
                .is_some_and(|mine| Arc::ptr_eq(mine, &m.marks)),
        }
    }

    /// The raw `cudaStream_t` given to NCCL.
    pub fn raw(&self) -> oxccl_loader::RawStream {
        oxccl_loader::RawStream(self.inner.cu_stream().cast())
    }

    /// This stream's end marks, made on first use; `None` where the device cannot wait for
    /// them.
    pub(crate) fn marks(&self) -> Result<Option<&Arc<StreamMarks>>> {
        self.marks
            .try_call_once(|| Ok(StreamMarks::new(self.inner.context())?.map(Arc::new)))
            .map(Option::as_ref)
    }
}

impl NcclStream {
    /// Records `ev`, one of this stream's pooled events, straight through the driver: a
    /// non-default stream carries its context, so the call needs neither cudarc's context
    /// check nor its binding (an atomic exchange and a lookup per call, on every operation
    /// of a process group). The default stream, or a driver that wants the context current
    /// after all, goes through cudarc's call, which binds it.
    fn record_pooled(&self, ev: &CudaEvent) -> std::result::Result<(), DriverError> {
        let stream = self.inner.cu_stream();
        if !stream.is_null() {
            // SAFETY: `ev` was made by `record_event` on this stream's context (the pool
            // belongs to this stream and its clones) and is alive (borrowed); the stream is
            // alive (held by `inner`) and not the default one.
            match unsafe { cudarc::driver::result::event::record(ev.cu_event(), stream) } {
                Err(DriverError(sys::cudaError_enum::CUDA_ERROR_INVALID_CONTEXT)) => {}
                done => return done,
            }
        }
        ev.record(&self.inner)
    }
}

impl Stream for NcclStream {
    type Event = NcclEvent;

    fn record(&self, timing: bool) -> Result<NcclEvent> {
        let ev = match self.pool.take(timing) {
            Some(ev) => self
                .record_pooled(&ev)
                .map(|()| ev)
                .map_err(|e| cuda_error("recording an event", e))?,
            None => {
                let flags = if timing {
                    sys::CUevent_flags::CU_EVENT_DEFAULT
                } else {
                    sys::CUevent_flags::CU_EVENT_DISABLE_TIMING
                };
                self.inner
                    .record_event(Some(flags))
                    .map(Arc::new)
                    .map_err(|e| cuda_error("recording an event", e))?
            }
        };
        Ok(NcclEvent {
            end: End::Recorded(Recorded {
                inner: ManuallyDrop::new(ev),
                timing,
                pool: self.pool.clone(),
            }),
        })
    }

    fn wait_event(&self, event: &NcclEvent) -> Result<()> {
        event.wait_on(&self.inner)
    }

    fn synchronize(&self) -> Result<()> {
        self.inner
            .synchronize()
            .map_err(|e| cuda_error("synchronizing a stream", e))
    }
}

/// The end of work on a stream: a recorded CUDA event, or the end mark of a call of oxccl's
/// kernels (see `end_mark`). Clones share the one record or mark (an operation's work and the
/// buffers it used end with the same one); the last holder of a recorded event returns it to
/// its stream's pool, the only place an event is recorded again.
#[derive(Debug, Clone)]
pub struct NcclEvent {
    end: End,
}

#[derive(Debug, Clone)]
enum End {
    Recorded(Recorded),
    Marked(MarkedEnd),
}

/// One of a stream's pooled events, recorded there.
#[derive(Debug)]
struct Recorded {
    inner: ManuallyDrop<Arc<CudaEvent>>,
    timing: bool,
    pool: Arc<EventPool>,
}

impl Clone for Recorded {
    fn clone(&self) -> Recorded {
        Recorded {
            inner: self.inner.clone(),
            timing: self.timing,
            pool: self.pool.clone(),
        }
    }
}

impl Drop for Recorded {
    fn drop(&mut self) {
        // SAFETY: `inner` is taken once, here, and never touched again.
        let ev = unsafe { ManuallyDrop::take(&mut self.inner) };
        // The only holder: nobody can clone it any more (no weak references are made), so
        // nothing waits on it after it is pooled. Two last clones dropped at once both see
        // 2 and the event is destroyed instead: never re-recorded early.
        if Arc::strong_count(&ev) == 1 {
            self.pool.give(self.timing, ev);
        }
    }
}

impl NcclEvent {
    /// The end of the call that `marks` gave `mark` (its kernel writes it as it ends).
    pub(crate) fn marked(marks: Arc<StreamMarks>, mark: u64) -> NcclEvent {
        NcclEvent {
            end: End::Marked(MarkedEnd::new(marks, mark)),
        }
    }

    /// A CUDA event that fires at this end: the recorded one, or for an end mark one recorded
    /// after a wait for it on the marks' own stream (made on first use).
    pub fn cuda(&self) -> Result<&CudaEvent> {
        match &self.end {
            End::Recorded(r) => Ok(&r.inner),
            End::Marked(m) => m.event(),
        }
    }

    /// Whether this is an end mark rather than a recorded event.
    pub fn is_mark(&self) -> bool {
        matches!(self.end, End::Marked(_))
    }

    /// Renews this end in place to `newer`, a later end on the same stream, where that
    /// needs no new reference (both are end marks of one stream's marks): what a buffer's
    /// bookkeeping keeps per stream then costs no reference count per use. `false`: left as
    /// it is (the caller replaces it with a clone of `newer`).
    pub fn renew(&mut self, newer: &NcclEvent) -> bool {
        match (&mut self.end, &newer.end) {
            (End::Marked(m), End::Marked(n)) => m.renew(n),
            _ => false,
        }
    }

    /// Makes `stream` wait for this end: for the recorded event, or for the mark's value.
    pub fn wait_on(&self, stream: &CudaStream) -> Result<()> {
        match &self.end {
            End::Recorded(r) => stream
                .wait(&r.inner)
                .map_err(|e| cuda_error("waiting on an event", e)),
            // SAFETY: `stream` is alive (borrowed), which is all `wait_on` asks.
            End::Marked(m) => unsafe { m.marks.wait_on(stream.cu_stream(), m.mark) },
        }
    }

    fn timed(&self) -> Option<&CudaEvent> {
        match &self.end {
            End::Recorded(r) if r.timing => Some(&r.inner),
            _ => None,
        }
    }
}

impl Event for NcclEvent {
    fn query(&self) -> Result<bool> {
        match &self.end {
            End::Recorded(r) => r
                .inner
                .try_is_complete()
                .map_err(|e| cuda_error("querying an event", e)),
            End::Marked(m) => m.ended(),
        }
    }

    fn synchronize(&self) -> Result<()> {
        self.cuda()?
            .synchronize()
            .map_err(|e| cuda_error("synchronizing an event", e))
    }

    fn elapsed_ms(&self, end: &NcclEvent) -> Result<f32> {
        let (Some(start), Some(stop)) = (self.timed(), end.timed()) else {
            return Err(Error::invalid(
                "event",
                format_args!("events recorded with timing"),
            ));
        };
        start
            .elapsed_ms(stop)
            .map_err(|e| cuda_error("timing events", e))
    }
}
