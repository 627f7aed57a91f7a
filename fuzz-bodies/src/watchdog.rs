//! The watchdog's decisions (`oxccl_rules::watchdog`) against models written here: the plan
//! for a failed work under each error-handling mode, whether the heartbeat is stuck and how
//! long to sleep, with arbitrary clocks (backwards, at the ends of `u64`, limits that
//! overflow when turned into nanoseconds), and the search for a stream's newest ended work
//! (right, and within its bound of questions), and the steps of a failing rank's wait for
//! every rank's dump.

use arbitrary::{Arbitrary, Unstructured};
use oxccl_core::comm_state::CommState;
use oxccl_core::text::text_str;
use oxccl_core::Error;
use oxccl_rules::watchdog::{
    dump_wait_step, failure_plan, heartbeat_stuck, newest_done, next_sleep_ms, stream_hints,
    DumpWaitEnd, DumpWaitStep, FailureKind, FailurePlan, Hint,
};
use oxccl_rules::ErrorHandling;

#[derive(Debug, Arbitrary)]
enum Case {
    Plan {
        mode: u8,
        error: u8,
        state: u8,
        dump_on_timeout: bool,
    },
    Heartbeat {
        last: u64,
        now: u64,
        limit_ms: u64,
    },
    Sleep {
        period_ms: u64,
        now: u64,
        deadline: Option<u64>,
    },
    /// Works of one stream, the oldest `done` of them ended.
    Boundary {
        works: u16,
        done: u16,
    },
    /// Works of several groups in issue order: (group, has an end event); each group's
    /// oldest `ended[group]` works with an event have ended.
    Hints {
        works: Vec<(u8, bool)>,
        ended: [u8; 4],
    },
    /// One step of a failing rank's wait for every rank's dump.
    DumpWait {
        reported: Option<i64>,
        world: u32,
        elapsed_ms: u64,
        limit_ms: u64,
        poll_ms: u64,
    },
}

const MODES: [ErrorHandling; 4] = [
    ErrorHandling::NoHandling,
    ErrorHandling::TearDown,
    ErrorHandling::CleanUpOnly,
    ErrorHandling::SkipCleanUp,
];

const STATES: [CommState; 8] = [
    CommState::Initializing,
    CommState::Ready,
    CommState::Failed,
    CommState::Aborted,
    CommState::Aborting,
    CommState::Finalizing,
    CommState::Finalized,
    CommState::Destroyed,
];

/// An error of each shape the watchdog meets, and the kind the model gives it.
fn error(which: u8, state: CommState) -> (Error, FailureKind) {
    match which % 4 {
        0 => (
            Error::Timeout {
                what: text_str("work"),
                after_ms: 1,
            },
            FailureKind::Timeout,
        ),
        1 => (
            Error::Aborted {
                reason: text_str("user"),
            },
            FailureKind::Aborted,
        ),
        2 => {
            let kind = if matches!(
                state,
                CommState::Aborted | CommState::Aborting | CommState::Destroyed
            ) {
                FailureKind::Aborted
            } else {
                FailureKind::Error
            };
            let e = Error::InvalidState {
                state,
                attempted: "op",
                reason: text_str("x"),
            };
            (e, kind)
        }
        _ => (
            Error::Remote {
                detail: text_str("peer"),
            },
            FailureKind::Error,
        ),
    }
}

/// The model's plan: a purposeful abort triggers nothing; otherwise the mode says whether to
/// abort and whether to end the process, and a dump precedes any end (and a timeout, when
/// asked).
fn model_plan(mode: ErrorHandling, kind: FailureKind, dump_on_timeout: bool) -> FailurePlan {
    if kind == FailureKind::Aborted {
        return FailurePlan {
            abort: false,
            dump: false,
            end_process: false,
        };
    }
    let abort = matches!(mode, ErrorHandling::CleanUpOnly | ErrorHandling::TearDown);
    let end_process = matches!(mode, ErrorHandling::TearDown | ErrorHandling::SkipCleanUp);
    FailurePlan {
        abort,
        dump: end_process || (dump_on_timeout && kind == FailureKind::Timeout),
        end_process,
    }
}

/// One fuzz input: any bytes.
pub fn fuzz(data: &[u8]) {
    let Ok(cases) = Vec::<Case>::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    for case in cases {
        match case {
            Case::Plan {
                mode,
                error: which,
                state,
                dump_on_timeout,
            } => {
                let mode = MODES[usize::from(mode) % MODES.len()];
                let state = STATES[usize::from(state) % STATES.len()];
                let (e, kind) = error(which, state);
                assert_eq!(FailureKind::of(&e), kind, "{e:?}");
                let plan = failure_plan(mode, kind, dump_on_timeout);
                assert_eq!(plan, model_plan(mode, kind, dump_on_timeout));
                assert!(!plan.end_process || plan.dump, "an end without a dump");
            }
            Case::Heartbeat {
                last,
                now,
                limit_ms,
            } => {
                // In u128 nothing overflows; a clock before the last beat is no time passed.
                let elapsed = u128::from(now.saturating_sub(last));
                let want = elapsed > u128::from(limit_ms) * 1_000_000;
                assert_eq!(heartbeat_stuck(last, now, limit_ms), want);
            }
            Case::Sleep {
                period_ms,
                now,
                deadline,
            } => {
                let got = next_sleep_ms(period_ms, now, deadline);
                let cap = period_ms.max(1);
                assert!((1..=cap).contains(&got), "{got} outside 1..={cap}");
                match deadline {
                    // Never sleeps past a future deadline (to the millisecond below it).
                    Some(d) if d > now => {
                        let left_ms = (d - now) / 1_000_000;
                        assert_eq!(got, left_ms.clamp(1, cap));
                    }
                    // A deadline already past: the shortest sleep, no spin.
                    Some(_) => assert_eq!(got, 1),
                    None => assert_eq!(got, cap),
                }
            }
            Case::Boundary { works, done } => {
                let (n, b) = (usize::from(works), usize::from(done.min(works)));
                let mut asked = 0u32;
                let got = newest_done(n, |i| {
                    assert!(i < n, "asked about work {i} of {n}");
                    asked += 1;
                    i < b
                });
                assert_eq!(got, b.checked_sub(1), "{n} works, {b} done");
                let bound = 2 * (usize::BITS - n.leading_zeros()) + 1;
                assert!(asked <= bound, "{n} works, {b} done: {asked} questions");
            }
            Case::Hints { works, ended } => hints(&works, ended),
            Case::DumpWait {
                reported,
                world,
                elapsed_ms,
                limit_ms,
                poll_ms,
            } => {
                let step = dump_wait_step(reported, world, elapsed_ms, limit_ms, poll_ms);
                // The model: a gone store ends it, then a full count, then the limit; else
                // the next look is at most the poll interval away and never past the limit.
                let want = match reported {
                    None => DumpWaitStep::End(DumpWaitEnd::StoreUnreachable),
                    Some(n) if i128::from(n) >= i128::from(world) => {
                        DumpWaitStep::End(DumpWaitEnd::AllReported)
                    }
                    Some(_) if elapsed_ms >= limit_ms => {
                        DumpWaitStep::End(DumpWaitEnd::LimitPassed)
                    }
                    Some(_) => {
                        let DumpWaitStep::PollAfter(ms) = step else {
                            panic!("{step:?}: the wait ended early");
                        };
                        assert!(ms >= 1 && ms <= poll_ms.max(1), "{ms}");
                        assert!(u128::from(elapsed_ms) + u128::from(ms) <= u128::from(limit_ms));
                        step
                    }
                };
                assert_eq!(step, want);
            }
        }
    }
}

/// `stream_hints` against a scan of every work: a work is `Done` when a work of its group at
/// or after it (with an event) has ended, `Pending` when a work of its group before it (with
/// an event) is still running, else `Unknown`; only works with events are queried.
fn hints(works: &[(u8, bool)], ended: [u8; 4]) {
    let works = &works[..works.len().min(512)];
    let group = |i: usize| usize::from(works[i].0 % 4);
    // A work's end: its place among its group's works with an event, against the count ended.
    let place = |i: usize| {
        (0..i)
            .filter(|&j| group(j) == group(i) && works[j].1)
            .count()
    };
    let ended_at = |i: usize| place(i) < usize::from(ended[group(i)]);
    let mut got = vec![None; works.len()];
    let mut scratch = vec![0; works.len()];
    let mut asked = [0u32; 4];
    stream_hints(
        group,
        |i| works[i].1,
        |i| {
            assert!(works[i].1, "work {i} has no event to query");
            asked[group(i)] += 1;
            ended_at(i)
        },
        &mut got,
        &mut scratch,
    );
    for (i, h) in got.iter().enumerate() {
        let later_ended =
            (i..works.len()).any(|j| group(j) == group(i) && works[j].1 && ended_at(j));
        let earlier_running = (0..i).any(|j| group(j) == group(i) && works[j].1 && !ended_at(j));
        let want = if earlier_running {
            Hint::Pending
        } else if later_ended {
            Hint::Done
        } else {
            Hint::Unknown
        };
        assert_eq!(*h, Some(want), "work {i} of {works:?}, ended {ended:?}");
    }
    for (g, &a) in asked.iter().enumerate() {
        let n = (0..works.len())
            .filter(|&i| group(i) == g && works[i].1)
            .count();
        let bound = 2 * (usize::BITS - n.leading_zeros()) + 1;
        assert!(a <= bound, "group {g}: {a} queries for {n} works");
    }
}
