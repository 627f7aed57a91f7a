//! The watchdog's decisions (`oxccl_core::watchdog`) against models written here: the plan
//! for a failed work under each error-handling mode, whether the heartbeat is stuck and how
//! long to sleep, with arbitrary clocks (backwards, at the ends of `u64`, limits that
//! overflow when turned into nanoseconds).

use arbitrary::{Arbitrary, Unstructured};
use oxccl_core::state::lifecycle::CommState;
use oxccl_core::text::text_str;
use oxccl_core::watchdog::{
    failure_plan, heartbeat_stuck, next_sleep_ms, FailureKind, FailurePlan,
};
use oxccl_core::{Error, ErrorHandling};

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
}

const MODES: [ErrorHandling; 4] = [
    ErrorHandling::NoHandling,
    ErrorHandling::TearDown,
    ErrorHandling::CleanUpOnly,
    ErrorHandling::SkipCleanUp,
];

const STATES: [CommState; 7] = [
    CommState::Initializing,
    CommState::Ready,
    CommState::Failed,
    CommState::Aborted,
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
            let kind = if matches!(state, CommState::Aborted | CommState::Destroyed) {
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
        }
    }
}
