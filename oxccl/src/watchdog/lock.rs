//! The watchdog's locks outlive a panic: a thread that panicked while holding one (a
//! completion hook, say) leaves data that is still whole, so the watchdog goes on with it
//! rather than stop watching.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `m`, taking the data of a poisoned lock as it is.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
