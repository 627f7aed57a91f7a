//! A communicator's capture state: whether it captures now, the stream buffers are taken on
//! meanwhile, and what the capture has recorded (the graph's buffers, checked at each launch).

use cudarc::driver::CudaStream;
use oxccl_core::graph_buffers::GraphBuffers;
use oxccl_core::CommOp;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

/// A communicator's capture state (a field of [`Comm`](crate::Comm)).
#[derive(Debug, Default)]
pub(crate) struct CaptureSlot {
    pub(crate) on: AtomicBool,
    /// The stream slices are taken on while capturing (made at the first capture).
    pub(crate) copy: OnceLock<Arc<CudaStream>>,
    pub(crate) rec: Mutex<Recorded>,
}

impl CaptureSlot {
    /// The stream the typed calls take their slices on: `stream`, or the second stream while
    /// a capture is open (one relaxed load outside captures).
    pub(crate) fn access<'a>(&'a self, stream: &'a CudaStream) -> &'a CudaStream {
        if self.on.load(Ordering::Relaxed) {
            if let Some(c) = self.copy.get() {
                return c;
            }
        }
        stream
    }

    /// Notes the buffers of a typed call's `op` while capturing (`raw`: from [`Comm::issue`],
    /// whose buffers the graph cannot check).
    pub(crate) fn note(&self, op: &CommOp<'_>, raw: bool) {
        if !self.on.load(Ordering::Relaxed) {
            return;
        }
        let mut rec = self.rec.lock().unwrap_or_else(PoisonError::into_inner);
        rec.ops += 1;
        rec.raw |= raw;
        rec.regions.note(op);
    }
}

/// What an open capture has recorded so far.
#[derive(Debug, Default)]
pub(crate) struct Recorded {
    pub(crate) regions: GraphBuffers,
    pub(crate) ops: usize,
    /// A raw operation ([`Comm::issue`]) was captured: its buffers are not known.
    pub(crate) raw: bool,
}
