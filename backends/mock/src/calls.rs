//! The per-communicator call lock, as the NCCL backend has it: every call that would reach NCCL
//! on one communicator (issue, split, finalize, registration, reduction handles) takes it, so
//! threads sharing a `&MockComm` serialize instead of overlapping; abort and poll never take
//! it. The mock also counts, so tests can observe the rule: how many calls are inside at once
//! (never more than one) and how many had to wait for another.
//!
//! On the mock `issue` only queues work to a stream thread: the lock covers the call, not the
//! stream's execution, which matches NCCL (calls are what must not overlap).

use crate::sync::lock;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};

/// The lock and its counters.
#[derive(Default)]
pub(crate) struct CallLock {
    lock: Mutex<()>,
    inside: AtomicU32,
    max_inside: AtomicU32,
    waited: AtomicU64,
}

/// A call in progress; leaving drops it.
pub(crate) struct InCall<'a> {
    owner: &'a CallLock,
    _held: MutexGuard<'a, ()>,
}

impl CallLock {
    /// Enters a call, waiting for the one in progress (if any) to leave.
    pub(crate) fn enter(&self) -> InCall<'_> {
        let held = match self.lock.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => {
                self.waited.fetch_add(1, Ordering::Relaxed);
                lock(&self.lock)
            }
        };
        // Counted inside the lock: a count above 1 means two calls overlapped.
        let now = self.inside.fetch_add(1, Ordering::AcqRel).saturating_add(1);
        self.max_inside.fetch_max(now, Ordering::AcqRel);
        InCall {
            owner: self,
            _held: held,
        }
    }

    /// Calls inside now (0 or 1).
    pub(crate) fn inside(&self) -> u32 {
        self.inside.load(Ordering::Acquire)
    }

    /// The most calls ever inside at once (1 once any call was made; never more).
    pub(crate) fn max_inside(&self) -> u32 {
        self.max_inside.load(Ordering::Acquire)
    }

    /// Calls that found another in progress and waited for it.
    pub(crate) fn waited(&self) -> u64 {
        self.waited.load(Ordering::Relaxed)
    }
}

impl Drop for InCall<'_> {
    fn drop(&mut self) {
        // Before the lock is released (fields drop after this body).
        self.owner.inside.fetch_sub(1, Ordering::AcqRel);
    }
}
