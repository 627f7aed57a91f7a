//! CUDA streams and events behind the core's `Stream` and `Event` traits.

use crate::comm_inner::CommInner;
use crate::cuda::cuda_error;
use crate::graph_refs::CaptureRefs;
use crate::peer::KernelEnd;
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
}

impl NcclStream {
    /// Wraps a cudarc stream (shared: cudarc slices allocated on it stay stream-ordered).
    pub fn new(inner: Arc<CudaStream>) -> NcclStream {
        NcclStream {
            inner,
            pool: Arc::default(),
            captured: Arc::default(),
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

    /// Whether `event` was recorded on this stream (it came from this stream's pool, which
    /// its clones share with it and no other stream has).
    pub fn records(&self, event: &NcclEvent) -> bool {
        Arc::ptr_eq(&self.pool, &event.pool)
    }

    /// The end of a kernel call issued on this stream, as this stream's event.
    pub(crate) fn kernel_end(&self, end: KernelEnd) -> NcclEvent {
        NcclEvent {
            point: Point::KernelEnd(end),
            pool: self.pool.clone(),
        }
    }

    /// The raw `cudaStream_t` given to NCCL.
    pub fn raw(&self) -> oxccl_loader::RawStream {
        oxccl_loader::RawStream(self.inner.cu_stream().cast())
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
            point: Point::Recorded {
                event: ManuallyDrop::new(ev),
                timing,
            },
            pool: self.pool.clone(),
        })
    }

    fn wait_event(&self, event: &NcclEvent) -> Result<()> {
        match &event.point {
            Point::Recorded { event, .. } => self
                .inner
                .wait(event)
                .map_err(|e| cuda_error("waiting on an event", e)),
            Point::KernelEnd(k) => k.order(&self.inner),
        }
    }

    fn synchronize(&self) -> Result<()> {
        self.inner
            .synchronize()
            .map_err(|e| cuda_error("synchronizing a stream", e))
    }
}

/// A point in a stream's work: a recorded CUDA event, or the end of a kernel call that marks
/// its own end (oxccl's kernels, issued through [`oxccl_core::Communicator::issue_with_end`]),
/// which the host tells by reading host memory, with no driver call. Clones share the one
/// point (an operation's work and the buffers it used end with the same one); the last one
/// dropped returns a recorded event to its stream's pool, the only place an event is
/// recorded again.
#[derive(Debug)]
pub struct NcclEvent {
    point: Point,
    /// The pool of the stream the point is on (which stream it is, see [`NcclStream::records`]).
    pool: Arc<EventPool>,
}

#[derive(Debug)]
enum Point {
    Recorded {
        event: ManuallyDrop<Arc<CudaEvent>>,
        timing: bool,
    },
    KernelEnd(KernelEnd),
}

impl Clone for NcclEvent {
    fn clone(&self) -> NcclEvent {
        let point = match &self.point {
            Point::Recorded { event, timing } => Point::Recorded {
                event: event.clone(),
                timing: *timing,
            },
            Point::KernelEnd(k) => Point::KernelEnd(k.clone()),
        };
        NcclEvent {
            point,
            pool: self.pool.clone(),
        }
    }
}

impl Drop for NcclEvent {
    fn drop(&mut self) {
        let Point::Recorded { event, timing } = &mut self.point else {
            return;
        };
        // SAFETY: `event` is taken once, here, and never touched again.
        let ev = unsafe { ManuallyDrop::take(event) };
        // The only holder: nobody can clone it any more (no weak references are made), so
        // nothing waits on it after it is pooled. Two last clones dropped at once both see
        // 2 and the event is destroyed instead: never re-recorded early.
        if Arc::strong_count(&ev) == 1 {
            self.pool.give(*timing, ev);
        }
    }
}

impl NcclEvent {
    /// The cudarc event; `None` for a kernel call's end.
    pub fn cuda(&self) -> Option<&CudaEvent> {
        match &self.point {
            Point::Recorded { event, .. } => Some(event),
            Point::KernelEnd(_) => None,
        }
    }

    /// Whether this is a kernel call's end, told without the driver (see [`NcclEvent`]).
    pub fn is_kernel_end(&self) -> bool {
        matches!(self.point, Point::KernelEnd(_))
    }

    fn timed(&self) -> Option<&CudaEvent> {
        match &self.point {
            Point::Recorded {
                event,
                timing: true,
            } => Some(event),
            _ => None,
        }
    }
}

impl Event for NcclEvent {
    fn query(&self) -> Result<bool> {
        match &self.point {
            Point::Recorded { event, .. } => event
                .try_is_complete()
                .map_err(|e| cuda_error("querying an event", e)),
            Point::KernelEnd(k) => Ok(k.ended()),
        }
    }

    fn synchronize(&self) -> Result<()> {
        match &self.point {
            Point::Recorded { event, .. } => event
                .synchronize()
                .map_err(|e| cuda_error("synchronizing an event", e)),
            Point::KernelEnd(k) => k.synchronize(),
        }
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
