//! How often the host numbers launches for following once the device reports that numbered
//! launches did not follow: another grid ran between two calls (a user's kernel on the stream
//! between two all-reduces, a kernel of another stream of the context), as in most real
//! programs. Such a launch costs the kernel its check before the wait and a release at its
//! end, and buys nothing. So each miss the host sees leaves the next launches unnumbered for a
//! pause that doubles with each miss, and halves again once as many numbered launches in a row
//! brought no miss (back-to-back calls follow again). A host that runs L launches ahead of
//! the device learns of a miss only L launches later, so it numbers about L launches each time
//! a pause ends: about L / (L + LONGEST_PAUSE) of launches once the pauses are at their longest.

/// The launches left unnumbered after the first miss.
pub const FIRST_PAUSE: u32 = 16;
/// The longest pause.
pub const LONGEST_PAUSE: u32 = 4096;

/// The host's side of the backoff: fed the device's miss word (the number of the last
/// numbered launch whose check failed, written by the kernel; 0 before any), it says whether
/// the next launch that could follow is numbered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowBackoff {
    /// The miss word as last seen.
    seen: u32,
    /// Launches still to leave unnumbered.
    skip: u32,
    /// The pause the next miss starts.
    pause: u32,
    /// Numbered launches since the last miss seen.
    clean: u32,
}

impl Default for FollowBackoff {
    fn default() -> Self {
        FollowBackoff {
            seen: 0,
            skip: 0,
            pause: FIRST_PAUSE,
            clean: 0,
        }
    }
}

impl FollowBackoff {
    /// Whether the next launch that could follow is numbered, `miss` being the device's miss
    /// word as read now (a miss is seen when the word changed since the last call).
    pub fn number(&mut self, miss: u32) -> bool {
        if miss != self.seen {
            self.seen = miss;
            self.skip = self.pause;
            self.pause = self.pause.saturating_mul(2).min(LONGEST_PAUSE);
            self.clean = 0;
        }
        if self.skip > 0 {
            self.skip -= 1;
            return false;
        }
        self.clean += 1;
        if self.clean >= self.pause {
            self.pause = (self.pause / 2).max(FIRST_PAUSE);
            self.clean = 0;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    extern crate std;
    use std::collections::VecDeque;

    /// Runs `launches` launches where each numbered one misses (the device's word names it)
    /// once `lag` more launches were issued: how many were numbered.
    fn numbered_with_misses(launches: u32, lag: usize) -> u32 {
        let mut b = FollowBackoff::default();
        let (mut word, mut pending) = (0u32, VecDeque::new());
        let mut numbered = 0;
        for seq in 1..=launches {
            if pending.len() > lag {
                word = pending.pop_front().unwrap();
            }
            if b.number(word) {
                numbered += 1;
                pending.push_back(seq);
            }
        }
        numbered
    }

    #[test]
    fn launches_that_never_miss_are_all_numbered() {
        let mut b = FollowBackoff::default();
        assert!((0..100_000).all(|_| b.number(0)));
    }

    #[test]
    fn launches_that_always_miss_are_seldom_numbered() {
        // Seen at once, or a few launches late (the host ahead of the device).
        for lag in [0, 3, 10] {
            let n = numbered_with_misses(100_000, lag);
            assert!(n < 100_000 / 50, "lag {lag}: {n} numbered");
            assert!(n > 0, "lag {lag}: never numbered again");
        }
    }

    #[test]
    fn a_host_far_ahead_numbers_about_its_lead_per_longest_pause() {
        // The device judges a launch `lag` launches (numbered or not) after the host issued
        // it, and every numbered launch misses.
        for lag in [100u32, 240, 1000] {
            let launches = 100_000u32;
            let mut b = FollowBackoff::default();
            let (mut word, mut pending, mut numbered) = (0u32, VecDeque::new(), 0u32);
            for t in 1..=launches {
                while pending.front().is_some_and(|&at| at + lag <= t) {
                    word = pending.pop_front().unwrap();
                }
                if b.number(word) {
                    numbered += 1;
                    pending.push_back(t);
                }
            }
            let per_pause = f64::from(lag) / f64::from(LONGEST_PAUSE + lag);
            let bound = 3 * lag + (f64::from(launches) * per_pause * 1.5) as u32;
            assert!(numbered < bound, "lag {lag}: {numbered} numbered, bound {bound}");
            assert!(numbered >= lag, "lag {lag}: {numbered} numbered, fewer than its lead");
        }
    }

    #[test]
    fn a_miss_pauses_numbering_and_the_pause_doubles_then_decays() {
        let mut b = FollowBackoff::default();
        assert!(b.number(0));
        // A miss: the next FIRST_PAUSE launches go unnumbered, the one after is numbered.
        assert!((0..FIRST_PAUSE).all(|_| !b.number(7)));
        assert!(b.number(7));
        // Another miss: twice as long.
        assert!((0..2 * FIRST_PAUSE).all(|_| !b.number(9)));
        assert!(b.number(9));
        // Clean launches halve the pause, down to the first one.
        assert!((0..10 * LONGEST_PAUSE).all(|_| b.number(9)));
        assert!((0..FIRST_PAUSE).all(|_| !b.number(11)));
        assert!(b.number(11));
    }

    #[test]
    fn the_pause_stops_growing_at_the_longest() {
        let mut b = FollowBackoff::default();
        for miss in 1..40u32 {
            while !b.number(miss) {}
        }
        assert!((0..LONGEST_PAUSE).all(|_| !b.number(1000)));
        assert!(b.number(1000));
    }
}
