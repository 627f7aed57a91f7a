//! Settling the calls made on one NCCL communicator: waiting for a nonblocking init before an
//! operation, turning each return code into a result (waiting out `InProgress`, recording a
//! fatal failure in the lifecycle), and polling a nonblocking call to its end within the
//! communicator's time limit.

use crate::comm_inner::CommInner;
use crate::wait::Deadline;
use oxccl_core::{text, CommState, Error, Result, ResultCode};
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl CommInner {
    /// Ready for an operation: the hot path reads one atomic; a communicator still
    /// initializing (nonblocking init) is waited for first (see [`CommInner::wait_ready`]).
    pub(crate) fn ready_for(self: &Arc<Self>, attempted: &'static str) -> Result<()> {
        if self.ready.load(Ordering::Acquire) {
            return Ok(());
        }
        if self.state() == CommState::Initializing {
            self.wait_ready("nonblocking init")?;
        }
        self.life.lock().ensure_ready(attempted)
    }

    /// Turns an NCCL return code into a result, waiting out InProgress on a nonblocking
    /// communicator and recording fatal failures in the lifecycle.
    pub(crate) fn finish(self: &Arc<Self>, code: i32, what: &str) -> Result<()> {
        if code == ResultCode::IN_PROGRESS.0 && self.nonblocking {
            return self.wait_ready(what);
        }
        if code != 0 && self.state().is_aborted() {
            // Cut short by an abort from another thread: NCCL says only "internal error" (and
            // its last-error text belongs to a freed communicator), so say why it stopped.
            let reason = self.life.lock().reason().to_string();
            return Err(Error::Aborted {
                reason: text!("{what} cut short: {reason} (NCCL returned code {code})"),
            });
        }
        let r = self.lib.check(code, self.raw);
        if let Err(e) = &r {
            if !matches!(code, 4 | 5) {
                self.transition(|l| l.fail(&text!("{what}: {e}")));
            }
        }
        r
    }

    /// Polls until no nonblocking call is in progress, bounded by the communicator's timeout
    /// (its settings' `timeout`); [`Error::Timeout`] naming `what` past it. A communicator still
    /// initializing at the deadline (a nonblocking init that never completed) is aborted, with
    /// a reason saying so, in the background
    /// ([`oxccl_core::CommAbort::abort_in_background`]): the timeout returns at once, the state
    /// is [`CommState::Aborting`] until NCCL's abort returns, then [`CommState::Aborted`]
    /// ([`oxccl_core::pending_aborts`] counts the aborts still running).
    pub(crate) fn wait_ready(self: &Arc<Self>, what: &str) -> Result<()> {
        let r = Deadline::after(self.settings.timeout).poll(what, || self.poll());
        if let Err(Error::Timeout { after_ms, .. }) = &r {
            if self.state() == CommState::Initializing {
                self.abort_in_background(&format!("{what} timed out after {after_ms} ms"));
            }
        }
        r
    }
}
