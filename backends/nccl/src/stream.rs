//! CUDA streams and events behind the core's `Stream` and `Event` traits.

use crate::cuda::cuda_error;
use cudarc::driver::{sys, CudaContext, CudaEvent, CudaStream};
use oxccl_core::{Error, Event, Result, Stream};
use std::sync::Arc;

/// A CUDA stream NCCL operations are issued on.
#[derive(Debug, Clone)]
pub struct NcclStream {
    inner: Arc<CudaStream>,
}

impl NcclStream {
    /// Wraps a cudarc stream (shared: cudarc slices allocated on it stay stream-ordered).
    pub fn new(inner: Arc<CudaStream>) -> NcclStream {
        NcclStream { inner }
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

    /// The raw `cudaStream_t` given to NCCL.
    pub fn raw(&self) -> oxccl_loader::RawStream {
        oxccl_loader::RawStream(self.inner.cu_stream().cast())
    }
}

impl Stream for NcclStream {
    type Event = NcclEvent;

    fn record(&self, timing: bool) -> Result<NcclEvent> {
        let flags = if timing {
            sys::CUevent_flags::CU_EVENT_DEFAULT
        } else {
            sys::CUevent_flags::CU_EVENT_DISABLE_TIMING
        };
        let ev = self
            .inner
            .record_event(Some(flags))
            .map_err(|e| cuda_error("recording an event", e))?;
        Ok(NcclEvent { inner: ev, timing })
    }

    fn wait_event(&self, event: &NcclEvent) -> Result<()> {
        self.inner
            .wait(&event.inner)
            .map_err(|e| cuda_error("waiting on an event", e))
    }

    fn synchronize(&self) -> Result<()> {
        self.inner
            .synchronize()
            .map_err(|e| cuda_error("synchronizing a stream", e))
    }
}

/// A recorded CUDA event.
#[derive(Debug)]
pub struct NcclEvent {
    inner: CudaEvent,
    timing: bool,
}

impl NcclEvent {
    /// The cudarc event.
    pub fn cuda(&self) -> &CudaEvent {
        &self.inner
    }
}

impl Event for NcclEvent {
    fn query(&self) -> Result<bool> {
        self.inner
            .try_is_complete()
            .map_err(|e| cuda_error("querying an event", e))
    }

    fn synchronize(&self) -> Result<()> {
        self.inner
            .synchronize()
            .map_err(|e| cuda_error("synchronizing an event", e))
    }

    fn elapsed_ms(&self, end: &NcclEvent) -> Result<f32> {
        if !self.timing || !end.timing {
            return Err(Error::invalid(
                "event",
                format_args!("events recorded with timing"),
            ));
        }
        self.inner
            .elapsed_ms(&end.inner)
            .map_err(|e| cuda_error("timing events", e))
    }
}
