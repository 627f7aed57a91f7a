//! Deadlines from limits a person sets: a limit past what the clock can hold counts as about
//! a century, never as no time at all; and durations as whole milliseconds.

use std::time::{Duration, Instant};

/// `limit` from now.
pub(crate) fn deadline_after(limit: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(limit)
        .or_else(|| now.checked_add(Duration::from_secs(100 * 365 * 86_400)))
        .unwrap_or(now)
}

/// `d` in whole milliseconds (saturating at `u64::MAX`).
pub(crate) fn ms(d: Duration) -> u64 {
    d.as_millis().min(u128::from(u64::MAX)) as u64
}
