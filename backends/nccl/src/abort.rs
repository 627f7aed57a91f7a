//! The abort handle of an NCCL communicator: the one thing any thread may do to it at any time.

use crate::comm_inner::CommInner;
use oxccl_core::{CommAbort, CommState, Progress, Result};
use std::sync::Arc;

/// Aborts, watches and polls one NCCL communicator from any thread (made by
/// [`oxccl_core::Communicator::abort_handle`]); it allows nothing else. It may outlive the communicator:
/// its calls then report the final state.
#[derive(Clone)]
pub struct NcclAbort {
    pub(crate) inner: Arc<CommInner>,
}

impl std::fmt::Debug for NcclAbort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NcclAbort")
            .field("rank", &self.inner.rank)
            .field("state", &self.inner.state())
            .finish()
    }
}

impl CommAbort for NcclAbort {
    /// Aborts the communicator (see [`crate::NcclComm::abort`]): never waits, even while live CUDA
    /// graphs hold its operations (then the library's release finishes when the last graph is
    /// dropped).
    fn abort(&self, reason: &str) {
        self.inner.abort(reason);
    }

    /// Aborts without waiting for NCCL's release (see
    /// [`oxccl_core::CommAbort::abort_in_background`]).
    fn abort_in_background(&self, reason: &str) {
        self.inner.abort_in_background(reason);
    }

    fn state(&self) -> CommState {
        self.inner.state()
    }

    fn poll(&self) -> Result<Progress> {
        self.inner.poll()
    }
}
