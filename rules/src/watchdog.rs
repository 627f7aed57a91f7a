//! The watchdog's decisions, as pure functions of what it observed and the clock: what to do
//! when a work fails or times out, whether the watchdog itself is stuck, how long to sleep.
//! The thread that acts on them lives in the std crate.

use crate::env::ErrorHandling;
use oxccl_core::error::Error;

pub mod desync;

/// What the watchdog does about one failed or timed-out work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailurePlan {
    /// Abort the work's communicator (freeing every rank blocked on it).
    pub abort: bool,
    /// Write the flight recorder's dump first.
    pub dump: bool,
    /// Take the process down afterwards.
    pub end_process: bool,
}

/// Why a work ended badly, as far as the plan is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// It ran past its timeout.
    Timeout,
    /// The library or a peer failed (an asynchronous error, a remote failure, a mismatch).
    Error,
    /// Its communicator was aborted on purpose (by the user, a destroy, a shutdown, or the
    /// watchdog itself for another work): nothing more to do.
    Aborted,
}

impl FailureKind {
    /// The kind of `e`.
    pub fn of(e: &Error) -> FailureKind {
        match e {
            Error::Timeout { .. } => FailureKind::Timeout,
            Error::Aborted { .. } => FailureKind::Aborted,
            Error::InvalidState {
                state:
                    oxccl_core::comm_state::CommState::Aborted
                    | oxccl_core::comm_state::CommState::Aborting
                    | oxccl_core::comm_state::CommState::Destroyed,
                ..
            } => FailureKind::Aborted,
            _ => FailureKind::Error,
        }
    }
}

/// The plan for a work that failed with `kind`, under `mode` (c10d's
/// `TORCH_NCCL_ASYNC_ERROR_HANDLING`): NoHandling leaves it to the user's `wait`; CleanUpOnly
/// aborts the communicator and lets the user's thread see the error; TearDown aborts, then ends
/// the process; SkipCleanUp ends the process without aborting (an abort may itself hang).
/// A dump is written before a process ends, and on a timeout when `dump_on_timeout`. A
/// purposeful abort triggers nothing.
pub fn failure_plan(mode: ErrorHandling, kind: FailureKind, dump_on_timeout: bool) -> FailurePlan {
    if kind == FailureKind::Aborted {
        return FailurePlan {
            abort: false,
            dump: false,
            end_process: false,
        };
    }
    let (abort, end_process) = match mode {
        ErrorHandling::NoHandling => (false, false),
        ErrorHandling::CleanUpOnly => (true, false),
        ErrorHandling::TearDown => (true, true),
        ErrorHandling::SkipCleanUp => (false, true),
    };
    FailurePlan {
        abort,
        dump: end_process || (dump_on_timeout && kind == FailureKind::Timeout),
        end_process,
    }
}

/// Whether a watchdog whose last heartbeat was at `last_ns` is stuck at `now_ns`, given the
/// limit (a clock going backwards is no time passed; overflow saturates).
pub fn heartbeat_stuck(last_ns: u64, now_ns: u64, limit_ms: u64) -> bool {
    now_ns.saturating_sub(last_ns) > limit_ms.saturating_mul(1_000_000)
}

/// How long the watchdog sleeps before its next pass: its poll period, but no longer than
/// the time left until the earliest deadline of the works in flight (at least 1 ms, so a
/// deadline already past does not spin).
pub fn next_sleep_ms(period_ms: u64, now_ns: u64, earliest_deadline_ns: Option<u64>) -> u64 {
    let until = earliest_deadline_ns
        .map(|d| d.saturating_sub(now_ns) / 1_000_000)
        .unwrap_or(period_ms);
    until.clamp(1, period_ms.max(1))
}

/// The newest of `n` works of one stream whose end was reached, asking `done(i)` (work `i`,
/// oldest first) as few times as it can; `None` when none was. Works of one stream end in
/// order, so the answers are a run of `true` then a run of `false`: the search gallops back
/// from the newest, where the boundary lies while the GPU keeps up (two questions), then
/// bisects, at most about 2 log2(n) + 1 questions where a question per work would cost the
/// watchdog a driver call each (an event query, contending with the issuing threads' driver
/// calls; docs/BENCHMARKS.md#watchdog-and-flight-recorder).
pub fn newest_done(n: usize, mut done: impl FnMut(usize) -> bool) -> Option<usize> {
    // Every index from `pending` on is known not done (none is known at first).
    let mut pending = n;
    let mut step = 1usize;
    let found = loop {
        if pending == 0 {
            return None;
        }
        let i = pending.saturating_sub(step);
        if done(i) {
            break i;
        }
        // Steps of 1, 1, 2, 4, ...: the newest two first.
        if pending < n {
            step = step.saturating_mul(2);
        }
        pending = i;
    };
    // `found` is done and `pending` is not (or is `n`): the boundary lies between.
    let (mut lo, mut hi) = (found, pending);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if done(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Some(lo)
}

/// What the watchdog knows of a work from its group's other works (one stream, issue order),
/// so it need not ask the library.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hint {
    /// Nothing: query its event.
    Unknown,
    /// A later work of its group has ended: so has this one.
    Done,
    /// An earlier work of its group is still running: so is this one (only its deadline is
    /// checked).
    Pending,
}

/// Each work's [`Hint`], for works `0..hints.len()` of any number of groups (`group(i)`), each
/// group's in issue order: a group's works run on one stream and end in order, so
/// [`newest_done`] over the ones with an end event (`has_end(i)`; `ended(i)` queries it)
/// finds the newest one ended, which vouches for every older one; the oldest one still
/// running is looked at in full ([`Hint::Unknown`]: its event, its communicator's errors, its
/// deadline), the ones after it only for their deadlines ([`Hint::Pending`]). A work without
/// an end event says nothing of its stream. `scratch` holds at least as many places as there
/// are works (fewer leaves the rest [`Hint::Unknown`]).
pub fn stream_hints(
    group: impl Fn(usize) -> usize,
    has_end: impl Fn(usize) -> bool,
    mut ended: impl FnMut(usize) -> bool,
    hints: &mut [Option<Hint>],
    scratch: &mut [usize],
) {
    hints.iter_mut().for_each(|h| *h = None);
    let n = hints.len().min(scratch.len());
    for first in 0..n {
        if hints[first].is_some() {
            continue;
        }
        let g = group(first);
        // This group's works with an end event, oldest first.
        let mut m = 0;
        for i in first..n {
            if group(i) == g && has_end(i) {
                scratch[m] = i;
                m += 1;
            }
        }
        let list = &scratch[..m];
        let newest = newest_done(m, |k| ended(list[k]));
        let done_to = newest.map(|k| list[k]);
        let running = match newest {
            Some(k) => list.get(k + 1).copied(),
            None => list.first().copied(),
        };
        for (i, h) in hints.iter_mut().enumerate().take(n).skip(first) {
            if group(i) == g {
                *h = Some(match (done_to, running) {
                    (_, Some(r)) if i > r => Hint::Pending,
                    (Some(d), _) if i <= d => Hint::Done,
                    _ => Hint::Unknown,
                });
            }
        }
    }
}

/// The store key a rank sets when one of its collectives fails in a way that dumps: every
/// rank's coordination check sees it and dumps its own flight recorder (c10d's dump on every
/// rank). Its value is the global rank that set it, in decimal.
pub const DUMP_REQUEST_KEY: &str = "oxccl/timeout_dump";

/// The global rank a dump request's value names, strictly (decimal digits); `None` for anything
/// else (a value this process cannot read is still a signal, from an unknown rank).
pub fn dump_signal_rank(value: &[u8]) -> Option<u32> {
    let s = core::str::from_utf8(value).ok()?;
    let n = crate::env::parse_u64("value", s, 0, u64::from(u32::MAX)).ok()?;
    u32::try_from(n).ok()
}

/// Whether a process should dump on seeing the dump request set by `signaller`: once (after
/// `already_dumped` nothing more), and not for its own signal (it dumped when it set it).
pub fn should_dump_on_request(signaller: Option<u32>, me: u32, already_dumped: bool) -> bool {
    !already_dumped && signaller != Some(me)
}

/// The counter every rank that dumped for a failure adds 1 to, once per process and rank
/// (beside [`DUMP_REQUEST_KEY`]): a failing rank keeps its process, and the store it may host,
/// alive until the counter reaches the world size (see [`dump_wait_step`]).
pub const DUMP_REPORT_COUNT_KEY: &str = "oxccl/dumped/count";

/// The key the rank whose report brings [`DUMP_REPORT_COUNT_KEY`] to the world size sets: a
/// failing rank waits on it (the server answers when it is set) instead of reading the
/// counter again and again.
pub const DUMP_ALL_REPORTED_KEY: &str = "oxccl/dumped/all";

/// The prefix of the key each rank that dumped for a failure sets (followed by its global rank
/// in decimal): who reported, for naming the ranks that did not.
pub const DUMP_REPORT_PREFIX: &str = "oxccl/dumped/rank/";

/// Why a failing rank stopped waiting for the other ranks' dumps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DumpWaitEnd {
    /// Every rank of the world reported its dump.
    AllReported,
    /// `OXCCL_WAIT_TIMEOUT_DUMP_MS` passed first.
    LimitPassed,
    /// The store could not be read: nobody can report any more (its host is likely gone).
    StoreUnreachable,
}

/// What a failing rank does next while it waits for every rank's dump before applying its
/// error-handling mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DumpWaitStep {
    /// Look at the counter again after this many milliseconds at most: the wait on
    /// [`DUMP_ALL_REPORTED_KEY`] that fills them ends as soon as the last rank reports.
    PollAfter(u64),
    /// Stop waiting, for this reason.
    End(DumpWaitEnd),
}

/// The next step of the wait for every rank's dump: `reported` is the report counter as read
/// (`None`: the store could not be read), `world` the number of ranks, `elapsed_ms` the time
/// since the failure and `limit_ms` the whole wait's bound (`OXCCL_WAIT_TIMEOUT_DUMP_MS`,
/// which also covers this rank's own dump); the next look comes after `poll_ms` (at least 1)
/// or at the limit, whichever is first.
pub fn dump_wait_step(
    reported: Option<i64>,
    world: u32,
    elapsed_ms: u64,
    limit_ms: u64,
    poll_ms: u64,
) -> DumpWaitStep {
    match reported {
        None => DumpWaitStep::End(DumpWaitEnd::StoreUnreachable),
        Some(n) if n >= i64::from(world) => DumpWaitStep::End(DumpWaitEnd::AllReported),
        Some(_) if elapsed_ms >= limit_ms => DumpWaitStep::End(DumpWaitEnd::LimitPassed),
        Some(_) => DumpWaitStep::PollAfter(poll_ms.max(1).min(limit_ms - elapsed_ms)),
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::Hint::{self, Done, Pending, Unknown};
    use std::vec;
    use std::vec::Vec;

    /// Hints for works of groups `groups[i]`, ends `ends[i]` (`None`: no event), with the
    /// queries asked.
    fn hints_of(groups: &[usize], ends: &[Option<bool>]) -> (Vec<Hint>, usize) {
        let mut hints = vec![None; groups.len()];
        let mut scratch = vec![0; groups.len()];
        let mut asked = 0;
        super::stream_hints(
            |i| groups[i],
            |i| ends[i].is_some(),
            |i| {
                asked += 1;
                ends[i].expect("asked about a work without an event")
            },
            &mut hints,
            &mut scratch,
        );
        (hints.into_iter().map(Option::unwrap).collect(), asked)
    }

    #[test]
    fn a_group_of_64_works_costs_two_queries_while_the_gpu_keeps_up() {
        let groups = [7usize; 64];
        let mut ends = [Some(true); 64];
        ends[63] = Some(false);
        let (hints, asked) = hints_of(&groups, &ends);
        assert_eq!(asked, 2);
        assert!(hints[..63].iter().all(|h| *h == Done));
        assert_eq!(hints[63], Unknown);
        // Everything ended: one query.
        let (hints, asked) = hints_of(&groups, &[Some(true); 64]);
        assert_eq!((asked, hints[0], hints[63]), (1, Done, Done));
        // Nothing ended: the oldest looked at in full, the rest for their deadlines.
        let (hints, asked) = hints_of(&groups, &[Some(false); 64]);
        assert!(asked <= 8, "{asked} queries");
        assert_eq!(hints[0], Unknown);
        assert!(hints[1..].iter().all(|h| *h == Pending));
    }

    #[test]
    fn interleaved_groups_and_works_without_events_keep_their_own_order() {
        // Group 1: works 0, 2, 4 (4 has no event); group 2: works 1, 3, 5, 6.
        let groups = [1, 2, 1, 2, 1, 2, 2];
        let ends = [
            Some(true),
            Some(true),
            Some(false),
            Some(false),
            None,
            Some(false),
            None,
        ];
        let (hints, _) = hints_of(&groups, &ends);
        assert_eq!(
            hints,
            [Done, Done, Unknown, Unknown, Pending, Pending, Pending]
        );
        // A group of works without events: nothing is known, nothing is asked.
        let (hints, asked) = hints_of(&[3, 3], &[None, None]);
        assert_eq!((hints, asked), (vec![Unknown, Unknown], 0));
        // Done up to a work without an event after the newest ended one.
        let (hints, _) = hints_of(&[1, 1, 1], &[Some(true), Some(true), None]);
        assert_eq!(hints, [Done, Done, Unknown]);
    }

    #[test]
    fn newest_done_finds_the_boundary_with_few_questions() {
        for n in 0..300usize {
            // `b` works done: indices 0..b.
            for b in 0..=n {
                let mut asked = 0u32;
                let got = super::newest_done(n, |i| {
                    assert!(i < n, "asked about work {i} of {n}");
                    asked += 1;
                    i < b
                });
                assert_eq!(got, b.checked_sub(1), "n {n}, {b} done");
                let bound = 2 * (usize::BITS - n.leading_zeros()) + 1;
                assert!(
                    asked <= bound,
                    "n {n}, {b} done: {asked} questions > {bound}"
                );
                if n > 0 && b + 1 >= n {
                    // The GPU keeping up: the newest, or the one before, is the boundary.
                    assert!(asked <= 2, "n {n}, {b} done: {asked} questions");
                }
            }
        }
    }

    use super::*;
    use oxccl_core::text::text_str;

    #[test]
    fn plans_by_mode() {
        let t = FailureKind::Timeout;
        let p = |mode, kind, dump| failure_plan(mode, kind, dump);
        assert_eq!(
            p(ErrorHandling::NoHandling, t, false),
            FailurePlan {
                abort: false,
                dump: false,
                end_process: false
            }
        );
        assert_eq!(
            p(ErrorHandling::NoHandling, t, true),
            FailurePlan {
                abort: false,
                dump: true,
                end_process: false
            }
        );
        assert_eq!(
            p(ErrorHandling::CleanUpOnly, FailureKind::Error, false),
            FailurePlan {
                abort: true,
                dump: false,
                end_process: false
            }
        );
        assert_eq!(
            p(ErrorHandling::TearDown, FailureKind::Error, false),
            FailurePlan {
                abort: true,
                dump: true,
                end_process: true
            }
        );
        assert_eq!(
            p(ErrorHandling::SkipCleanUp, t, false),
            FailurePlan {
                abort: false,
                dump: true,
                end_process: true
            }
        );
        for mode in [
            ErrorHandling::NoHandling,
            ErrorHandling::TearDown,
            ErrorHandling::CleanUpOnly,
            ErrorHandling::SkipCleanUp,
        ] {
            let none = p(mode, FailureKind::Aborted, true);
            assert!(!none.abort && !none.dump && !none.end_process);
        }
    }

    #[test]
    fn kinds_of_errors() {
        let timeout = Error::Timeout {
            what: text_str("x"),
            after_ms: 1,
        };
        assert_eq!(FailureKind::of(&timeout), FailureKind::Timeout);
        let aborted = Error::Aborted {
            reason: text_str("user"),
        };
        assert_eq!(FailureKind::of(&aborted), FailureKind::Aborted);
        let remote = Error::Remote {
            detail: text_str("peer"),
        };
        assert_eq!(FailureKind::of(&remote), FailureKind::Error);
        let dead = Error::InvalidState {
            state: oxccl_core::comm_state::CommState::Destroyed,
            attempted: "x",
            reason: text_str("destroyed"),
        };
        assert_eq!(FailureKind::of(&dead), FailureKind::Aborted);
    }

    #[test]
    fn the_wait_for_every_dump_ends_on_the_count_the_limit_or_a_gone_store() {
        use super::{dump_wait_step, DumpWaitEnd, DumpWaitStep};
        let end = DumpWaitStep::End;
        assert_eq!(
            dump_wait_step(Some(4), 4, 10, 1000, 100),
            end(DumpWaitEnd::AllReported)
        );
        // More reports than ranks (a rank that dumped twice is counted once, but a stale
        // counter must still end the wait).
        assert_eq!(
            dump_wait_step(Some(9), 4, 0, 1000, 100),
            end(DumpWaitEnd::AllReported)
        );
        assert_eq!(
            dump_wait_step(Some(3), 4, 10, 1000, 100),
            DumpWaitStep::PollAfter(100)
        );
        // The last look comes at the limit, not past it.
        assert_eq!(
            dump_wait_step(Some(3), 4, 950, 1000, 100),
            DumpWaitStep::PollAfter(50)
        );
        assert_eq!(
            dump_wait_step(Some(3), 4, 1000, 1000, 100),
            end(DumpWaitEnd::LimitPassed)
        );
        assert_eq!(
            dump_wait_step(None, 4, 0, 1000, 100),
            end(DumpWaitEnd::StoreUnreachable)
        );
        // A zero poll interval still sleeps; a zero limit ends at once; odd counters.
        assert_eq!(
            dump_wait_step(Some(0), 2, 0, 10, 0),
            DumpWaitStep::PollAfter(1)
        );
        assert_eq!(
            dump_wait_step(Some(0), 2, 0, 0, 5),
            end(DumpWaitEnd::LimitPassed)
        );
        assert_eq!(
            dump_wait_step(Some(-3), 2, u64::MAX, u64::MAX, u64::MAX),
            end(DumpWaitEnd::LimitPassed)
        );
        assert_eq!(
            dump_wait_step(Some(0), 0, 0, 0, 0),
            end(DumpWaitEnd::AllReported)
        );
    }

    #[test]
    fn dump_signals() {
        assert_eq!(dump_signal_rank(b"3"), Some(3));
        assert_eq!(dump_signal_rank(b"4294967295"), Some(u32::MAX));
        for bad in [&b""[..], b"-1", b"4294967296", b"x", b"\xff"] {
            assert_eq!(dump_signal_rank(bad), None, "{bad:?}");
        }
        assert!(should_dump_on_request(Some(1), 0, false));
        assert!(should_dump_on_request(None, 0, false));
        assert!(!should_dump_on_request(Some(0), 0, false));
        assert!(!should_dump_on_request(Some(1), 0, true));
    }

    #[test]
    fn heartbeat_and_sleep_survive_odd_clocks() {
        assert!(!heartbeat_stuck(10, 5, 0));
        assert!(heartbeat_stuck(0, u64::MAX, u64::MAX / 2_000_000));
        assert!(!heartbeat_stuck(0, 1_000_000, 1));
        assert!(heartbeat_stuck(0, 1_000_001, 1));
        assert!(!heartbeat_stuck(0, u64::MAX, u64::MAX));
        assert_eq!(next_sleep_ms(100, 0, None), 100);
        assert_eq!(next_sleep_ms(100, 0, Some(5_000_000)), 5);
        assert_eq!(next_sleep_ms(100, 10, Some(5)), 1);
        assert_eq!(next_sleep_ms(0, 0, None), 1);
        assert_eq!(next_sleep_ms(100, 0, Some(u64::MAX)), 100);
    }
}
