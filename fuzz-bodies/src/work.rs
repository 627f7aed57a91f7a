//! Random observe / fail / abort / timeout sequences with any clock (backwards, wrapping): never panics, states
//! only move forward, a finished work never changes, the first failure is kept.

use arbitrary::{Arbitrary, Unstructured};
use oxccl_core::state::work::{WorkError, WorkInfo, WorkMachine, WorkState};
use oxccl_core::text::TEXT_CAPACITY;
use oxccl_core::{Error, OpKind};

#[derive(Debug, Arbitrary)]
enum Step {
    Observe {
        t: Time,
        started: bool,
        completed: bool,
    },
    Fail {
        t: Time,
    },
    Abort {
        t: Time,
    },
    CheckTimeout {
        t: Time,
    },
    Measured(u64),
    Duration,
    /// `is_past_deadline` then `check_deadline_noting` against a limit of the caller's, with
    /// a note or none (a blocking wait that adds a desync verdict).
    CheckNoting {
        t: Time,
        limit_ms: u64,
        noted: bool,
    },
}

/// The clock at a step: forward, backward (a clock stepped back), or anywhere (overflow
/// included: `u64::MAX`, then forward again).
#[derive(Debug, Clone, Copy, Arbitrary)]
enum Time {
    Forward(u32),
    Back(u32),
    At(u64),
}

impl Time {
    fn apply(self, now: u64) -> u64 {
        match self {
            Time::Forward(d) => now.wrapping_add(u64::from(d)),
            Time::Back(d) => now.wrapping_sub(u64::from(d)),
            Time::At(t) => t,
        }
    }
}

#[derive(Debug, Arbitrary)]
struct Input {
    seq: u64,
    coalesced: bool,
    numel_in: usize,
    numel_out: usize,
    timeout_ms: u64,
    timing: bool,
    created_ns: u64,
    steps: Vec<Step>,
}

fn rank(s: WorkState) -> u8 {
    match s {
        WorkState::Scheduled => 0,
        WorkState::Started => 1,
        _ => 2,
    }
}

/// One fuzz input: any bytes.
pub fn fuzz(data: &[u8]) {
    let Ok(input) = <Input>::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let info = WorkInfo {
        seq: input.seq,
        kind: OpKind::AllReduce,
        coalesced: input.coalesced,
        numel_in: input.numel_in,
        numel_out: input.numel_out,
        timeout_ms: input.timeout_ms,
        timing: input.timing,
    };
    let mut w = WorkMachine::new(info, input.created_ns);
    let mut now = input.created_ns;
    let mut measured: Option<u64> = None;
    for step in input.steps {
        let before = w.clone();
        match step {
            Step::Observe {
                t,
                started,
                completed,
            } => {
                now = t.apply(now);
                let r = w.observe(now, started, completed);
                if before.is_finished() {
                    assert!(matches!(
                        r,
                        Err(WorkError::Finished {
                            attempted: "observe",
                            ..
                        })
                    ));
                } else {
                    assert_eq!(r, Ok(w.state()));
                    assert_eq!(completed, w.state() == WorkState::Completed);
                }
            }
            Step::Fail { t } => {
                now = t.apply(now);
                let r = w.fail(
                    now,
                    Error::Remote {
                        detail: Default::default(),
                    },
                );
                assert_eq!(r.is_ok(), !before.is_finished());
            }
            Step::Abort { t } => {
                now = t.apply(now);
                let r = w.abort(now, "fuzz");
                assert_eq!(r.is_ok(), !before.is_finished());
            }
            Step::CheckTimeout { t } => {
                now = t.apply(now);
                // The model: a live work times out once more than its timeout passed since
                // creation, a clock before creation counting as no time (saturating).
                let elapsed = now.saturating_sub(input.created_ns);
                let due = elapsed > input.timeout_ms.saturating_mul(1_000_000);
                let r = w.check_timeout(now);
                if !before.is_finished() {
                    assert_eq!(r.is_err(), due, "timeout at {elapsed} ns");
                    if due {
                        assert_eq!(w.state(), WorkState::TimedOut);
                        assert_eq!(w.ended_ns(), Some(now));
                        let after = elapsed / 1_000_000;
                        assert!(
                            matches!(&r, Err(Error::Timeout { after_ms, .. }) if *after_ms == after)
                        );
                    }
                }
                match r {
                    Ok(()) => assert!(!w.is_finished() || w.state() == WorkState::Completed),
                    Err(e) => {
                        assert!(w.is_finished());
                        assert_eq!(Some(&e), w.error());
                        let _ = format!("{e}");
                    }
                }
            }
            Step::CheckNoting { t, limit_ms, noted } => {
                now = t.apply(now);
                // The model: as CheckTimeout, against `limit_ms`; the text ends with the note.
                let elapsed = now.saturating_sub(input.created_ns);
                let due = !before.is_finished() && elapsed > limit_ms.saturating_mul(1_000_000);
                assert_eq!(w.is_past_deadline(now, limit_ms), due);
                let note = if noted {
                    "ranks [1-3] never joined it"
                } else {
                    ""
                };
                let r = w.check_deadline_noting(now, limit_ms, note);
                if !before.is_finished() {
                    assert_eq!(r.is_err(), due, "deadline at {elapsed} ns");
                }
                if due {
                    let Err(Error::Timeout { what, after_ms }) = &r else {
                        panic!("not a timeout: {r:?}");
                    };
                    assert_eq!(*after_ms, elapsed / 1_000_000);
                    // The same text as without a note, then "; " and the note, cut at the
                    // error's capacity.
                    let Err(Error::Timeout { what: plain, .. }) =
                        before.clone().check_deadline(now, limit_ms)
                    else {
                        panic!("check_deadline disagrees with check_deadline_noting");
                    };
                    let mut want = plain.to_string();
                    if noted {
                        want.push_str("; ");
                        want.push_str(note);
                    }
                    want.truncate(TEXT_CAPACITY);
                    assert_eq!(what.as_str(), want);
                    assert_eq!(w.state(), WorkState::TimedOut);
                }
                if let Err(e) = &r {
                    assert_eq!(Some(e), w.error());
                }
            }
            Step::Measured(ns) => {
                let r = w.set_measured_duration(ns);
                assert_eq!(r.is_ok(), info.timing && w.state() == WorkState::Completed);
                if r.is_ok() {
                    measured = Some(ns);
                }
            }
            Step::Duration => {
                // The model: the measured duration, else end minus start, saturating (a
                // clock that went back gives 0, not a wrapped huge number).
                let want = (info.timing && w.state() == WorkState::Completed)
                    .then(|| {
                        measured.or_else(|| {
                            let (s, e) = (w.started_ns()?, w.ended_ns()?);
                            Some(e.saturating_sub(s))
                        })
                    })
                    .flatten();
                assert_eq!(w.duration_ns().ok(), want);
            }
        }
        assert!(
            rank(w.state()) >= rank(before.state()),
            "{} went back to {}",
            before.state(),
            w.state()
        );
        // A finished work only takes its measured duration; nothing else changes.
        if before.is_finished() {
            let seen =
                |w: &WorkMachine| (w.state(), w.started_ns(), w.ended_ns(), w.error().cloned());
            assert_eq!(seen(&w), seen(&before), "a finished work changed");
        }
        if before.error().is_some() {
            assert_eq!(w.error(), before.error(), "first failure lost");
        }
        assert_eq!(
            w.error().is_some(),
            matches!(
                w.state(),
                WorkState::Failed | WorkState::TimedOut | WorkState::Aborted
            )
        );
    }
}
