//! CUDA stream capture behind the core's [`Capture`] and [`Graph`] traits: NCCL calls issued
//! on a capturing stream become graph nodes (NCCL 2.9+), launched later with one
//! `cuGraphLaunch`.
//!
//! The capture is thread-local (`CU_STREAM_CAPTURE_MODE_THREAD_LOCAL`): the capturing thread
//! may not make calls that could synchronize implicitly, while other threads (the watchdog
//! querying earlier events) go on. cudarc's event tracking on `CudaSlice` makes a stream wait
//! on the slice's last events when the slice is used on it, and CUDA forbids waiting on an
//! event recorded outside the capture from a capturing stream: callers take buffer addresses
//! on another, non-capturing stream (the process group's copy stream) or before the capture.

use crate::comm_inner::CommInner;
use crate::cuda::cuda_error;
use crate::graph_refs::GraphRef;
use crate::stream::NcclStream;
use cudarc::driver::{result, sys, CudaGraph};
use oxccl_core::{Capture, CaptureError, Error, Graph, Result};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// A captured and instantiated CUDA graph. Dropping it destroys the graph and its
/// executable (errors are kept by cudarc's context, never a panic); launches already queued
/// still run, as CUDA keeps a launched executable alive until its work is done.
///
/// It counts as holding every communicator whose operations it captured: NCCL cannot release
/// those until it is destroyed, so aborting or destroying one of them meanwhile releases it on
/// a detached thread, which ends when the last such graph is dropped (see
/// [`crate::NcclComm::abort`]).
pub struct NcclGraph {
    /// cudarc's owner of the graph and its executable; behind a lock because CUDA forbids
    /// using one graph object from two threads at once. Dropped before `holds`: the count
    /// falls once NCCL's own reference is gone.
    inner: Mutex<CudaGraph>,
    /// The device ordinal of the captured stream: a launch elsewhere is refused.
    ordinal: usize,
    /// The communicators whose operations the graph captured, counted while it lives.
    holds: Vec<GraphRef<CommInner>>,
}

// SAFETY: the CUDA graph handles are plain driver handles, usable from any thread of the
// process once their context is bound (every use binds it); CUDA requires that calls on one
// graph are serialized, which the mutex does.
unsafe impl Send for NcclGraph {}
// SAFETY: as above: every access to the handles goes through the mutex.
unsafe impl Sync for NcclGraph {}

impl std::fmt::Debug for NcclGraph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NcclGraph")
            .field("device", &self.ordinal)
            .field("communicators", &self.holds.len())
            .finish()
    }
}

fn status(stream: &NcclStream) -> Result<sys::CUstreamCaptureStatus> {
    stream
        .cuda()
        .capture_status()
        .map_err(|e| cuda_error("asking whether a stream captures", e))
}

impl Capture for NcclStream {
    type Graph = NcclGraph;

    fn begin_capture(&self) -> Result<()> {
        if status(self)? != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE {
            return Err(CaptureError::AlreadyCapturing.error_str(
                "begin_capture on a CUDA stream that is capturing: captures do not nest",
            ));
        }
        self.captured.begin();
        let begun = self
            .cuda()
            .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(|e| cuda_error("beginning a stream capture", e));
        if begun.is_err() {
            self.captured.cancel();
        }
        begun
    }

    fn end_capture(&self) -> Result<NcclGraph> {
        // The communicators issued on since the capture began (taken once the stream's status
        // is known): the graph holds them; without a graph they are let go (CUDA destroys a failed capture's graph, and NCCL's
        // reference with it).
        let was = status(self)?;
        let holds = self.captured.end();
        if was == sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE {
            return Err(CaptureError::NotCapturing
                .error_str("end_capture on a CUDA stream that is not capturing"));
        }
        // Ends the capture even when it was invalidated, so the stream is usable again.
        let ended = self.cuda().end_capture(sys::CUgraphInstantiate_flags(0));
        let invalidated = |detail: &dyn std::fmt::Debug| {
            CaptureError::Invalidated.error(format_args!(
                "the capture saw a call CUDA forbids while capturing (a synchronize, an event \
                 query, a wait on an event recorded outside it), so no graph was made: {detail:?}"
            ))
        };
        match ended {
            Ok(Some(g)) => Ok(NcclGraph {
                inner: Mutex::new(g),
                ordinal: self.cuda().context().ordinal(),
                holds,
            }),
            Ok(None) => Err(invalidated(&"no graph")),
            Err(e) if e.0 == sys::cudaError_enum::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED => {
                Err(invalidated(&e))
            }
            Err(e) => Err(cuda_error("ending a stream capture", e)),
        }
    }

    fn is_capturing(&self) -> bool {
        // An error asking is taken as "not capturing": the next CUDA call reports it.
        matches!(
            status(self),
            Ok(sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE
                | sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_INVALIDATED)
        )
    }
}

impl NcclGraph {
    /// Uploads the graph to the device ahead of its first launch (`cuGraphUpload`), so the
    /// first launch costs what the later ones cost.
    pub fn upload(&self, stream: &NcclStream) -> Result<()> {
        let g = self.locked_for(stream)?;
        // SAFETY: the executable is live (owned by `g`, locked) and `stream` is a live stream
        // of the same context (checked above).
        unsafe { result::graph::upload(g.cu_graph_exec(), stream.cuda().cu_stream()) }
            .map_err(|e| cuda_error("uploading a graph", e))
    }

    /// The executable, locked, once `stream` is checked to be of the graph's device and that
    /// device is bound to this thread: what an upload or a launch needs first.
    fn locked_for(&self, stream: &NcclStream) -> Result<MutexGuard<'_, CudaGraph>> {
        self.same_device(stream)?;
        let g = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        stream
            .cuda()
            .context()
            .bind_to_thread()
            .map_err(|e| cuda_error("binding the device to the thread", e))?;
        Ok(g)
    }

    fn same_device(&self, stream: &NcclStream) -> Result<()> {
        let ordinal = stream.cuda().context().ordinal();
        if ordinal != self.ordinal {
            return Err(Error::invalid(
                "stream",
                format_args!(
                    "a stream of device {} where the graph was captured, got device {ordinal}",
                    self.ordinal
                ),
            ));
        }
        Ok(())
    }
}

impl Graph for NcclGraph {
    type Stream = NcclStream;

    unsafe fn replay(&self, stream: &NcclStream) -> Result<()> {
        let g = self.locked_for(stream)?;
        if status(stream)? != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE {
            return Err(oxccl_core::traits::forbidden("launching a graph"));
        }
        // A captured kernel of oxccl's may run on this stream: the peer memory's release waits
        // for it too (a graph dropped right after its launch leaves the launch running).
        for held in &self.holds {
            if let Some(peer) = held.held().peer.read().as_ref() {
                peer.note_stream(stream.cuda());
            }
        }
        // SAFETY: the executable is live (owned by `g`, locked for the call) and `stream` is a
        // live stream of its context (checked above); the buffers its nodes use are valid by
        // this function's contract.
        unsafe { result::graph::launch(g.cu_graph_exec(), stream.cuda().cu_stream()) }
            .map_err(|e| cuda_error("launching a graph", e))
    }
}
