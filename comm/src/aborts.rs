//! Aborts still running in the background: a time limit that expires on an init or split in
//! progress returns its [`crate::Error::Timeout`] at once and leaves the library's abort of the
//! half-made communicator to a thread named `oxccl-abort`
//! ([`oxccl_core::CommAbort::abort_in_background`]). Each such communicator reports
//! [`crate::CommState::Aborting`] until its abort returns, then [`crate::CommState::Aborted`];
//! a split child discarded so has no handle left, and is seen only here. A program that
//! retries on the same GPUs, or wants NCCL's resources back before it goes on, waits here
//! first; one that exits may leave them running (the process's end stops them).

use std::time::{Duration, Instant};

/// How many background aborts are running in this process now (every backend's).
pub fn pending_aborts() -> usize {
    oxccl_core::pending_aborts()
}

/// Waits until no background abort is running in this process, at most `limit`: whether none
/// is (`true` at once when none was). Aborts started meanwhile are waited for too.
pub fn wait_for_aborts(limit: Duration) -> bool {
    let began = Instant::now();
    let mut polls = 0u32;
    while pending_aborts() != 0 {
        if began.elapsed() >= limit {
            return pending_aborts() == 0;
        }
        // Quick looks first (a release about to return), then gentle ones.
        polls = polls.saturating_add(1);
        if polls < 64 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    true
}
