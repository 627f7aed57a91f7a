//! Locking that survives poisoning: a panic in one rank's thread must not turn every later
//! lock of the shared world into a second panic.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// How long a blocked wait sleeps before it re-checks the world (aborts and deaths also
/// notify, so this is only a safety net against a missed wake-up).
pub(crate) const TICK: Duration = Duration::from_millis(50);

/// Locks `m`, taking the data even when another thread panicked while holding it.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Waits on `cv` for at most `d`, surviving poisoning like [`lock`].
pub(crate) fn wait_for<'a, T>(
    cv: &Condvar,
    g: MutexGuard<'a, T>,
    d: Duration,
) -> MutexGuard<'a, T> {
    match cv.wait_timeout(g, d) {
        Ok((g, _)) => g,
        Err(p) => p.into_inner().0,
    }
}
