//! How often the host numbers launches for following once the device reports that numbered
//! launches did not follow: another grid ran between two calls (a user's kernel on the stream
//! between two all-reduces, a kernel of another stream of the context), as in most real
//! programs. Such a launch costs the kernel its check before the wait and a release at its
//! end, and buys nothing.
//!
//! The device reports misses only (a report of every launch would cost each a store into host
//! memory), and the host learns of one only once the device ran that far: a host that runs L
//! launches ahead of the device has numbered L more by then. So after a miss the host leaves
//! launches unnumbered for a pause that doubles with each miss, then numbers one launch, the
//! probe, and waits for its verdict: a miss within twice the lead it has seen (the launches it
//! issued between a numbered launch and the report of its miss) starts a longer pause; none
//! means the probe followed, and every launch is numbered again (back-to-back calls follow
//! again), the pause halving once as many numbered launches in a row brought no miss. Once
//! the pauses are at their longest, about one launch in [`LONGEST_PAUSE`] is numbered however
//! far ahead the host runs.

/// The launches left unnumbered after the first miss.
pub const FIRST_PAUSE: u32 = 16;
/// The longest pause, and the longest wait for a probe's verdict.
pub const LONGEST_PAUSE: u32 = 4096;
/// Launches a probe's verdict is waited for beyond twice the lead.
pub const PROBE_MARGIN: u32 = 16;

/// Where the backoff is: numbering every launch, pausing, or waiting for a probe's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Every launch is numbered.
    Free,
    /// Launches still to leave unnumbered.
    Paused(u32),
    /// The probe's number and the launches issued since it.
    Probing { seq: u32, since: u32 },
}

/// The host's side of the backoff: fed the device's miss word (the number of the last
/// numbered launch whose check failed, written by the kernel; 0 before any) and the number the
/// next launch would get, it says whether that launch, one that could follow, is numbered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowBackoff {
    /// The miss word as last seen.
    seen: u32,
    phase: Phase,
    /// The pause the next miss starts.
    pause: u32,
    /// Numbered launches since the last miss seen, in the free phase.
    clean: u32,
    /// The most launches seen between a numbered launch and the report of its miss.
    lead: u32,
}

impl Default for FollowBackoff {
    fn default() -> Self {
        FollowBackoff {
            seen: 0,
            phase: Phase::Free,
            pause: FIRST_PAUSE,
            clean: 0,
            lead: 0,
        }
    }
}

impl FollowBackoff {
    /// Whether the next launch that could follow is numbered, `miss` being the device's miss
    /// word as read now (a miss is seen when the word changed since the last call) and `seq`
    /// the number that launch gets if it is: the one after the last number given.
    pub fn number(&mut self, miss: u32, seq: u32) -> bool {
        if miss != self.seen {
            self.seen = miss;
            self.saw_miss(miss, seq);
        }
        match self.phase {
            Phase::Free => {
                self.clean += 1;
                if self.clean >= self.pause {
                    self.pause = (self.pause / 2).max(FIRST_PAUSE);
                    self.clean = 0;
                }
                true
            }
            Phase::Paused(left) if left > 0 => {
                self.phase = Phase::Paused(left - 1);
                false
            }
            Phase::Paused(_) => {
                self.phase = Phase::Probing { seq, since: 0 };
                true
            }
            Phase::Probing { seq: probe, since } => {
                if since < self.verdict_wait() {
                    self.phase = Phase::Probing {
                        seq: probe,
                        since: since + 1,
                    };
                    false
                } else {
                    // No miss came back for the probe: it followed.
                    self.phase = Phase::Free;
                    self.clean = 1;
                    true
                }
            }
        }
    }

    /// Whether a launch captured into a graph is numbered: while every launch is. A captured
    /// launch runs only at the graph's launches, so no verdict on it comes back in time to
    /// pace the backoff (nor may one count as a probe that followed): it leaves the backoff
    /// as it is.
    pub fn number_captured(&self) -> bool {
        self.phase == Phase::Free
    }

    /// A miss of launch `miss` reported when the next number is `next`: learn the lead, start
    /// the next pause.
    fn saw_miss(&mut self, miss: u32, next: u32) {
        // The probe's lead is counted in launches; any other's in numbered launches since it,
        // which in the free phase is every launch.
        let lead = match self.phase {
            Phase::Probing { seq, since } if seq == miss => since,
            _ => next.wrapping_sub(1).wrapping_sub(miss),
        };
        if lead <= LONGEST_PAUSE {
            self.lead = self.lead.max(lead);
        }
        self.phase = Phase::Paused(self.pause);
        self.pause = self.pause.saturating_mul(2).min(LONGEST_PAUSE);
        self.clean = 0;
    }

    /// How long a probe's verdict is waited for: twice the lead and a margin, at most the
    /// longest pause.
    fn verdict_wait(&self) -> u32 {
        self.lead
            .saturating_mul(2)
            .saturating_add(PROBE_MARGIN)
            .min(LONGEST_PAUSE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    extern crate std;
    use std::collections::VecDeque;

    /// Runs `launches` launches where the device judges each `lag` launches (numbered or not)
    /// after the host issued it and every numbered one misses: how many were numbered.
    fn numbered_with_misses(launches: u32, lag: u32) -> u32 {
        let mut b = FollowBackoff::default();
        let (mut word, mut pending, mut numbered) = (0u32, VecDeque::new(), 0u32);
        for t in 1..=launches {
            while pending.front().is_some_and(|&(at, _)| at + lag <= t) {
                word = pending.pop_front().unwrap().1;
            }
            if b.number(word, numbered + 1) {
                numbered += 1;
                pending.push_back((t, numbered));
            }
        }
        numbered
    }

    #[test]
    fn launches_that_never_miss_are_all_numbered() {
        let mut b = FollowBackoff::default();
        assert!((1..100_000).all(|s| b.number(0, s)));
    }

    #[test]
    fn launches_that_always_miss_are_seldom_numbered_however_far_ahead_the_host_runs() {
        // Before the first report the host numbers every launch it issues: as many as it
        // runs ahead. After that, a probe per pause.
        for lag in [0, 1, 3, 10, 100, 240, 1000, 4000] {
            let n = numbered_with_misses(100_000, lag);
            assert!(n <= lag + 40, "lag {lag}: {n} numbered");
            assert!(n > lag.min(100_000) / 2, "lag {lag}: {n}: never numbered");
        }
    }

    #[test]
    fn a_miss_pauses_then_a_probe_then_numbering_resumes_if_it_followed() {
        let mut b = FollowBackoff::default();
        assert!(b.number(0, 1));
        // The miss of launch 1, seen at once (lead 0): FIRST_PAUSE launches unnumbered, then
        // the probe.
        assert!((0..FIRST_PAUSE).all(|_| !b.number(1, 2)));
        assert!(b.number(1, 2));
        // No miss for the probe within the margin: numbering resumes.
        assert!((0..PROBE_MARGIN).all(|_| !b.number(1, 3)));
        assert!((3..1000).all(|s| b.number(1, s)));
    }

    #[test]
    fn captured_launches_are_numbered_only_while_free_and_leave_the_state() {
        let mut b = FollowBackoff::default();
        assert!(b.number_captured());
        assert!(b.number(0, 1));
        // Paused: captured launches are not numbered and do not shorten the pause.
        assert!(!b.number(1, 2));
        let paused = b;
        assert!((0..10 * FIRST_PAUSE).all(|_| !b.number_captured()));
        assert_eq!(b, paused);
        assert!((1..FIRST_PAUSE).all(|_| !b.number(1, 2)));
        assert!(b.number(1, 2));
        // Probing: nor do they stand for launches that would bring the probe's verdict.
        let probing = b;
        assert!((0..10 * PROBE_MARGIN).all(|_| !b.number_captured()));
        assert_eq!(b, probing);
        assert!((0..PROBE_MARGIN).all(|_| !b.number(1, 3)));
        assert!(b.number(1, 3));
        assert!(b.number_captured());
    }

    #[test]
    fn a_probe_that_misses_doubles_the_pause() {
        let mut b = FollowBackoff::default();
        assert!(b.number(0, 1));
        assert!((0..FIRST_PAUSE).all(|_| !b.number(1, 2)));
        assert!(b.number(1, 2));
        // The probe's miss, 5 launches later: a pause twice as long, then a probe that waits
        // twice that lead and the margin.
        assert!((0..5).all(|_| !b.number(1, 3)));
        assert!((0..2 * FIRST_PAUSE).all(|_| !b.number(2, 3)));
        assert!(b.number(2, 3));
        assert!((0..2 * 5 + PROBE_MARGIN).all(|_| !b.number(2, 4)));
        assert!(b.number(2, 4));
    }

    #[test]
    fn the_lead_comes_from_the_launches_numbered_since_the_miss() {
        let mut b = FollowBackoff::default();
        // 50 launches numbered, then the miss of the first: the host ran 49 ahead.
        assert!((1..=50).all(|s| b.number(0, s)));
        assert!((0..FIRST_PAUSE).all(|_| !b.number(1, 51)));
        assert!(b.number(1, 51));
        assert!((0..2 * 49 + PROBE_MARGIN).all(|_| !b.number(1, 52)));
        assert!(b.number(1, 52));
    }

    #[test]
    fn clean_launches_halve_the_pause_down_to_the_first() {
        let mut b = FollowBackoff::default();
        let s = std::cell::Cell::new(0u32);
        let next = || {
            s.set(s.get() + 1);
            s.get()
        };
        // Misses of the probes until the pause is the longest.
        let mut miss = 0;
        for _ in 0..20 {
            while !b.number(miss, next()) {}
            miss = s.get();
        }
        assert_eq!(b.pause, LONGEST_PAUSE);
        // A probe that follows, then clean launches: the pause halves back to the first.
        while !b.number(miss, next()) {}
        for _ in 0..10 * LONGEST_PAUSE {
            b.number(miss, next());
        }
        assert_eq!(b.phase, Phase::Free);
        assert_eq!(b.pause, FIRST_PAUSE);
        let given = s.get();
        assert!((0..FIRST_PAUSE).all(|_| !b.number(given, next())));
        assert!(b.number(given, next()));
    }

    #[test]
    fn pauses_and_waits_stop_growing_at_the_longest() {
        let mut b = FollowBackoff::default();
        let mut s = 1u32;
        for miss in 1..40u32 {
            while !b.number(miss, s) {
                s += 1;
            }
            s += 1;
        }
        assert!((0..LONGEST_PAUSE).all(|_| !b.number(1000, s)));
        assert!(b.number(1000, s));
        // A report naming a launch far in the past says nothing of the lead.
        assert!(b.verdict_wait() <= LONGEST_PAUSE);
    }
}
