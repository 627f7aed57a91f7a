//! How a thread waiting for a work spends the time between two looks at it.
//!
//! Short operations end within microseconds and a waiter that sleeps misses their end by its
//! sleep (the operating system's shortest sleep is tens of microseconds, often more),
//! so a wait first yields between looks, for a bounded time; a long wait then sleeps, longer
//! the longer it has waited, so that it costs the machine little, but never longer than a
//! small share of the time waited so far: a wait ends at most that share late. A fixed sleep,
//! or one that grows without that bound, ends a wait up to a whole sleep late: a visible share
//! of a short graph launch, and of the bus bandwidth of a loop of large operations waited for
//! at once (docs/BENCHMARKS.md#the-five-collectives-8-b1-gib).

use core::time::Duration;

/// What a waiter does before its next look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pause {
    /// Yield the processor and look again at once.
    Yield,
    /// Sleep this long, then look again.
    Sleep(Duration),
}

/// How long a waiter only yields between looks: past it, it sleeps. Waits up to here end on
/// time (CUDA's own stream synchronize spins likewise); past it the shortest sleep is at most
/// 0.5 % of the wait.
pub const YIELD_FOR: Duration = Duration::from_millis(10);
/// The shortest sleep past [`YIELD_FOR`].
pub const FIRST_SLEEP: Duration = Duration::from_micros(50);
/// The longest sleep: a wait notices an end, an error or an abort within it.
pub const LONGEST_SLEEP: Duration = Duration::from_millis(1);
/// A sleep is at most this share of the time waited so far (past the shortest sleep): a
/// wait ends at most 0.5 % late.
pub const SLEEP_SHARE: u32 = 200;

/// The pause of a waiter that has waited `waited` so far: yields for [`YIELD_FOR`], then
/// sleeps `waited /` [`SLEEP_SHARE`], no shorter than [`FIRST_SLEEP`] and no longer than
/// [`LONGEST_SLEEP`].
pub fn pause(waited: Duration) -> Pause {
    if waited < YIELD_FOR {
        return Pause::Yield;
    }
    Pause::Sleep((waited / SLEEP_SHARE).clamp(FIRST_SLEEP, LONGEST_SLEEP))
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
        assert_eq!(pause(us(9_999)), Pause::Yield);
        assert_eq!(pause(us(10_000)), Pause::Sleep(us(50)));
        assert_eq!(pause(us(18_000)), Pause::Sleep(us(90)));
        assert_eq!(pause(us(100_000)), Pause::Sleep(us(500)));
        assert_eq!(pause(us(200_000)), Pause::Sleep(LONGEST_SLEEP));
        assert_eq!(pause(Duration::MAX), Pause::Sleep(LONGEST_SLEEP));
    }

    #[test]
    fn a_sleep_past_the_shortest_is_at_most_its_share_of_the_wait() {
        // The process group's loss at 128 MiB came from 1 ms sleeps on 18 ms waits.
        for ms in 0..2_000u64 {
            let waited = Duration::from_millis(ms);
            if let Pause::Sleep(d) = pause(waited) {
                assert!(d <= waited / SLEEP_SHARE, "{ms} ms: {d:?}");
            }
        }
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
