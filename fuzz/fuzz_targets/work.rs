//! Random observe / fail / abort / timeout sequences with monotone time: never panics, states
//! only move forward, a finished work never changes, the first failure is kept.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use oxccl_core::state::work::{Work, WorkError, WorkInfo, WorkState};
use oxccl_core::{Error, OpKind};

#[derive(Debug, Arbitrary)]
enum Step {
    Observe {
        dt: u32,
        started: bool,
        completed: bool,
    },
    Fail {
        dt: u32,
    },
    Abort {
        dt: u32,
    },
    CheckTimeout {
        dt: u64,
    },
    Measured(u64),
    Duration,
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

fuzz_target!(|input: Input| {
    let info = WorkInfo {
        seq: input.seq,
        kind: OpKind::AllReduce,
        coalesced: input.coalesced,
        numel_in: input.numel_in,
        numel_out: input.numel_out,
        timeout_ms: input.timeout_ms,
        timing: input.timing,
    };
    let mut w = Work::new(info, input.created_ns);
    let mut now = input.created_ns;
    for step in input.steps {
        let before = w.clone();
        match step {
            Step::Observe {
                dt,
                started,
                completed,
            } => {
                now = now.saturating_add(u64::from(dt));
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
            Step::Fail { dt } => {
                now = now.saturating_add(u64::from(dt));
                let r = w.fail(
                    now,
                    Error::Remote {
                        detail: Default::default(),
                    },
                );
                assert_eq!(r.is_ok(), !before.is_finished());
            }
            Step::Abort { dt } => {
                now = now.saturating_add(u64::from(dt));
                let r = w.abort(now, "fuzz");
                assert_eq!(r.is_ok(), !before.is_finished());
            }
            Step::CheckTimeout { dt } => {
                now = now.saturating_add(dt);
                match w.check_timeout(now) {
                    Ok(()) => assert!(!w.is_finished() || w.state() == WorkState::Completed),
                    Err(e) => {
                        assert!(w.is_finished());
                        assert_eq!(Some(&e), w.error());
                        let _ = format!("{e}");
                    }
                }
            }
            Step::Measured(ns) => {
                let r = w.set_measured_duration(ns);
                assert_eq!(r.is_ok(), info.timing && w.state() == WorkState::Completed);
            }
            Step::Duration => {
                if let Ok(d) = w.duration_ns() {
                    assert!(info.timing && w.state() == WorkState::Completed);
                    let _ = d;
                }
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
            let seen = |w: &Work| (w.state(), w.started_ns(), w.ended_ns(), w.error().cloned());
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
        if let (Some(s), Some(e)) = (w.started_ns(), w.ended_ns()) {
            assert!(s <= e);
        }
    }
});
