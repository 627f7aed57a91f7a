//! How a thread waiting for a work spends the time between two looks at it.
//!
//! Short operations end within microseconds and a waiter that sleeps misses their end by its
//! sleep (the operating system's shortest sleep is ~50–60 µs, a sleep of 200 µs costs more),
//! so a wait first yields between looks, for a bounded time; a long wait then sleeps, longer
//! the longer it has waited, so that it costs the machine little. Measured on 2 × H200: a
//! wait that slept 200 µs after 64 quick looks added about one sleep to a 720 µs graph launch.

use core::time::Duration;

/// What a waiter does before its next look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pause {
    /// Yield the processor and look again at once.
    Yield,
    /// Sleep this long, then look again.
    Sleep(Duration),
}

/// How long a waiter only yields between looks: past it, it sleeps.
pub const YIELD_FOR: Duration = Duration::from_millis(2);
/// The first sleep past [`YIELD_FOR`].
pub const FIRST_SLEEP: Duration = Duration::from_micros(50);
/// The longest sleep: a wait notices an end, an error or an abort within it.
pub const LONGEST_SLEEP: Duration = Duration::from_millis(1);

/// The pause of a waiter that has waited `waited` so far: yields for [`YIELD_FOR`], then
/// sleeps [`FIRST_SLEEP`] doubling every further [`YIELD_FOR`] of waiting, up to
/// [`LONGEST_SLEEP`].
pub fn pause(waited: Duration) -> Pause {
    if waited < YIELD_FOR {
        return Pause::Yield;
    }
    let past = waited.as_nanos() / YIELD_FOR.as_nanos();
    // `past` >= 1 here; 2^(past - 1) sleeps of 50 µs, capped (the shift is bounded first).
    let doublings = u32::try_from(past - 1).unwrap_or(u32::MAX).min(8);
    let sleep = FIRST_SLEEP.saturating_mul(1u32 << doublings);
    Pause::Sleep(if sleep > LONGEST_SLEEP {
        LONGEST_SLEEP
    } else {
        sleep
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    #[test]
    fn yields_first_then_sleeps_longer_up_to_the_cap() {
        assert_eq!(pause(Duration::ZERO), Pause::Yield);
        assert_eq!(pause(us(1_999)), Pause::Yield);
        assert_eq!(pause(us(2_000)), Pause::Sleep(us(50)));
        assert_eq!(pause(us(3_999)), Pause::Sleep(us(50)));
        assert_eq!(pause(us(4_000)), Pause::Sleep(us(100)));
        assert_eq!(pause(us(6_000)), Pause::Sleep(us(200)));
        assert_eq!(pause(us(8_000)), Pause::Sleep(us(400)));
        assert_eq!(pause(us(10_000)), Pause::Sleep(us(800)));
        assert_eq!(pause(us(12_000)), Pause::Sleep(LONGEST_SLEEP));
        assert_eq!(pause(Duration::MAX), Pause::Sleep(LONGEST_SLEEP));
    }

    #[test]
    fn never_sleeps_past_the_cap_and_never_shrinks() {
        let mut last = Duration::ZERO;
        for ms in 0..10_000u64 {
            let p = match pause(Duration::from_micros(ms * 37)) {
                Pause::Yield => Duration::ZERO,
                Pause::Sleep(d) => d,
            };
            assert!(
                p <= LONGEST_SLEEP && p >= last,
                "{ms}: {p:?} after {last:?}"
            );
            last = p;
        }
    }
}
