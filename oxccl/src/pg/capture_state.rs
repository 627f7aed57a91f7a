//! A group's capture state, kept apart from the capture itself so the group's state and its
//! issue path can hold it: whether a capture is open on the group's stream, what it recorded,
//! and the captures open on this thread.

use super::backend::PgBackend;
use crate::buffer::StreamOf;
use oxccl_core::graph_buffers::GraphBuffers;
use oxccl_core::text::Escaped;
use oxccl_core::{CaptureError, CommOp, DataType, OpKind, Result};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// What an open capture has recorded so far.
#[derive(Debug, Default)]
pub(crate) struct Recorded {
    /// Every distinct buffer the captured operations use.
    pub regions: GraphBuffers,
    /// Each captured operation: kind, dtype, elements in and out.
    pub ops: Vec<(OpKind, DataType, usize, usize)>,
}

/// A group's capture state: whether a capture is open on its stream, and what it recorded
/// (the flag first: every operation reads it).
#[derive(Debug, Default)]
#[repr(C)]
pub(crate) struct CaptureState {
    /// Whether a capture is open.
    pub on: AtomicBool,
    rec: Mutex<Recorded>,
}

impl CaptureState {
    /// Whether a capture is open (one relaxed load: the cost on the hot path).
    #[inline]
    pub fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// What the open capture has recorded so far.
    pub fn rec(&self) -> MutexGuard<'_, Recorded> {
        self.rec.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Notes the buffers of `op` (issued inside the capture) and the op itself.
    pub fn note(&self, op: &CommOp<'_>) {
        let mut rec = self.rec();
        rec.regions.note(op);
        if let Some(dtype) = op.dtype() {
            rec.ops
                .push((op.kind(), dtype, op.numel_in(), op.numel_out()));
        }
    }
}

/// How an operation issued inside a capture reaches its buffers: on the copy stream, which
/// does not capture, while the operation itself goes on the group's capturing stream.
pub(crate) struct Captor<'a, B: PgBackend> {
    pub state: &'a CaptureState,
    pub copy: &'a StreamOf<B>,
}

thread_local! {
    /// Captures open on this thread, on any group: a communicator made meanwhile would be made
    /// by the capturing thread, whose CUDA calls the capture forbids.
    pub(crate) static OPEN_HERE: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Refuses to make a communicator (group `uid`) on a thread that has a capture open: its
/// creation allocates and synchronizes, which the capture forbids.
pub(crate) fn refuse_init_in_capture(uid: u64, desc: &str) -> Result<()> {
    if OPEN_HERE.with(|n| n.get()) > 0 {
        return Err(CaptureError::Unsupported.error(format_args!(
            "the communicator of group {uid} ({}) does not exist yet and cannot be made \
             inside a graph capture: use the group once (or bind its device) before capturing",
            Escaped(desc)
        )));
    }
    Ok(())
}
