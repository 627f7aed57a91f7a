//! Tests of every transition and every refused transition of the work state machine.
use super::*;

const MS: u64 = NS_PER_MS;

fn info(timing: bool) -> WorkInfo {
    WorkInfo {
        seq: 3,
        kind: OpKind::AllReduce,
        coalesced: false,
        numel_in: 12,
        numel_out: 12,
        timeout_ms: 100,
        timing,
    }
}

fn new(timing: bool) -> WorkMachine {
    WorkMachine::new(info(timing), 1_000 * MS)
}

/// One work in each state, created at 1 s with a 100 ms timeout.
fn all_states(timing: bool) -> [WorkMachine; 6] {
    let scheduled = new(timing);
    let mut started = new(timing);
    started.observe(1_010 * MS, true, false).unwrap();
    let mut completed = started.clone();
    completed.observe(1_030 * MS, true, true).unwrap();
    let mut failed = new(timing);
    failed
        .fail(
            1_020 * MS,
            Error::Remote {
                detail: text_str("peer lost"),
            },
        )
        .unwrap();
    let mut timed_out = new(timing);
    assert!(timed_out.check_timeout(1_200 * MS).is_err());
    let mut aborted = new(timing);
    aborted.abort(1_020 * MS, "user").unwrap();
    [scheduled, started, completed, failed, timed_out, aborted]
}

#[test]
fn all_states_are_what_they_say() {
    let states: [WorkState; 6] = all_states(true).map(|w| w.state());
    assert_eq!(
        states,
        [
            WorkState::Scheduled,
            WorkState::Started,
            WorkState::Completed,
            WorkState::Failed,
            WorkState::TimedOut,
            WorkState::Aborted
        ]
    );
    for w in all_states(true) {
        assert_eq!(w.is_finished(), w.state().is_final());
        assert_eq!(
            w.error().is_some(),
            matches!(
                w.state(),
                WorkState::Failed | WorkState::TimedOut | WorkState::Aborted
            )
        );
    }
}

#[test]
fn observe_moves_forward_only() {
    let mut w = new(true);
    assert_eq!(
        w.observe(1_001 * MS, false, false),
        Ok(WorkState::Scheduled)
    );
    assert_eq!(w.started_ns(), None);
    assert_eq!(w.observe(1_002 * MS, true, false), Ok(WorkState::Started));
    assert_eq!(w.started_ns(), Some(1_002 * MS));
    // A later poll that shows less, or the same, changes nothing.
    assert_eq!(w.observe(1_003 * MS, false, false), Ok(WorkState::Started));
    assert_eq!(w.observe(1_004 * MS, true, false), Ok(WorkState::Started));
    assert_eq!(w.started_ns(), Some(1_002 * MS));
    assert_eq!(w.observe(1_005 * MS, true, true), Ok(WorkState::Completed));
    assert_eq!(w.ended_ns(), Some(1_005 * MS));
    assert_eq!(w.error(), None);
}

#[test]
fn completion_without_a_seen_start_skips_started() {
    let mut w = new(false);
    assert_eq!(w.observe(1_005 * MS, false, true), Ok(WorkState::Completed));
    assert_eq!(w.started_ns(), None);
    let mut w = new(true);
    assert_eq!(w.observe(1_005 * MS, true, true), Ok(WorkState::Completed));
    assert_eq!(w.started_ns(), Some(1_005 * MS));
}

#[test]
fn fail_and_abort_from_live_states_keep_the_error() {
    for mut w in all_states(true).into_iter().take(2) {
        w.fail(
            1_050 * MS,
            Error::Remote {
                detail: text_str("x"),
            },
        )
        .unwrap();
        assert_eq!(w.state(), WorkState::Failed);
        assert!(matches!(w.error(), Some(Error::Remote { .. })));
        assert_eq!(w.ended_ns(), Some(1_050 * MS));
    }
    for mut w in all_states(true).into_iter().take(2) {
        w.abort(1_050 * MS, "watchdog").unwrap();
        assert_eq!(w.state(), WorkState::Aborted);
        assert!(matches!(w.error(), Some(Error::Aborted { reason }) if reason == "watchdog"));
    }
}

#[test]
fn final_states_refuse_every_transition_and_keep_the_first_failure() {
    for mut w in all_states(true).into_iter().skip(2) {
        let s = w.state();
        let before = w.clone();
        assert_eq!(
            w.observe(2_000 * MS, true, true),
            Err(WorkError::Finished {
                state: s,
                attempted: "observe"
            })
        );
        assert_eq!(
            w.fail(
                2_000 * MS,
                Error::Remote {
                    detail: text_str("late")
                }
            ),
            Err(WorkError::Finished {
                state: s,
                attempted: "fail"
            })
        );
        assert_eq!(
            w.abort(2_000 * MS, "late"),
            Err(WorkError::Finished {
                state: s,
                attempted: "abort"
            })
        );
        assert_eq!(w, before, "{s}");
    }
}

#[test]
fn timeout_text_is_pytorchs() {
    let mut w = new(false);
    assert_eq!(
        w.check_timeout(1_100 * MS),
        Ok(()),
        "exactly the timeout is still in time"
    );
    assert_eq!(w.state(), WorkState::Scheduled);
    let e = w.check_timeout(1_100 * MS + 1).unwrap_err();
    let Error::Timeout { what, after_ms } = &e else {
        panic!("{e:?}")
    };
    assert_eq!(*after_ms, 100);
    assert_eq!(
        what.as_str(),
        "WorkNCCL(SeqNum=3, OpType=ALLREDUCE, NumelIn=12, NumelOut=12, Timeout(ms)=100) ran for 100 milliseconds before timing out"
    );
    assert_eq!(w.state(), WorkState::TimedOut);
    assert_eq!(w.error(), Some(&e));
    // Asking again gives the same first failure, later times included.
    assert_eq!(w.check_timeout(5_000 * MS), Err(e));
}

/// A note (a desync verdict) follows PyTorch's text; asking whether the deadline passed
/// changes nothing, and a final work is never past it.
#[test]
fn a_noted_timeout_keeps_pytorchs_text_first() {
    let mut w = new(false);
    assert!(!w.is_past_deadline(1_100 * MS, 100));
    assert!(w.is_past_deadline(1_100 * MS + 1, 100));
    assert_eq!(w.state(), WorkState::Scheduled, "asking changes nothing");
    let e = w
        .check_deadline_noting(1_150 * MS, 100, "ranks [2] never joined it")
        .unwrap_err();
    let Error::Timeout {
        what,
        after_ms: 150,
    } = &e
    else {
        panic!("{e:?}")
    };
    assert_eq!(
        what.as_str(),
        "WorkNCCL(SeqNum=3, OpType=ALLREDUCE, NumelIn=12, NumelOut=12, Timeout(ms)=100) ran for 150 milliseconds before timing out; ranks [2] never joined it"
    );
    assert_eq!(w.state(), WorkState::TimedOut);
    assert!(!w.is_past_deadline(9_000 * MS, 100), "final: never past");
    // The first failure stays, whatever a later note says.
    assert_eq!(w.check_deadline_noting(9_000 * MS, 100, "other"), Err(e));
}

#[test]
fn timeout_from_started_and_coalesced_name() {
    let mut w = WorkMachine::new(
        WorkInfo {
            coalesced: true,
            ..info(true)
        },
        0,
    );
    w.observe(1, true, false).unwrap();
    match w.check_timeout(250 * MS) {
        Err(Error::Timeout {
            what,
            after_ms: 250,
        }) => assert!(what.contains("OpType=COALESCED"), "{what}"),
        e => panic!("{e:?}"),
    }
}

#[test]
fn check_timeout_on_final_states() {
    for mut w in all_states(false) {
        let s = w.state();
        let r = w.check_timeout(10_000 * MS);
        match s {
            WorkState::Completed => assert_eq!(r, Ok(())),
            WorkState::Failed => assert!(matches!(r, Err(Error::Remote { .. }))),
            WorkState::TimedOut => {
                assert!(matches!(r, Err(Error::Timeout { after_ms: 200, .. })))
            }
            WorkState::Aborted => assert!(matches!(r, Err(Error::Aborted { .. }))),
            WorkState::Scheduled | WorkState::Started => {
                assert!(matches!(
                    r,
                    Err(Error::Timeout {
                        after_ms: 9_000,
                        ..
                    })
                ))
            }
        }
    }
}

#[test]
fn time_before_creation_is_no_time() {
    let mut w = new(true);
    assert_eq!(w.elapsed_ms(0), 0);
    assert_eq!(w.check_timeout(0), Ok(()));
    w.observe(0, true, false).unwrap();
    w.observe(0, true, true).unwrap();
    assert_eq!(w.duration_ns(), Ok(0));
    let huge = WorkMachine::new(
        WorkInfo {
            timeout_ms: u64::MAX,
            ..info(true)
        },
        0,
    );
    assert_eq!(huge.clone().check_timeout(u64::MAX), Ok(()));
}

#[test]
fn duration_needs_timing_and_both_ends() {
    for w in all_states(false) {
        assert_eq!(w.duration_ns(), Err(WorkError::TimingDisabled));
    }
    for w in all_states(true) {
        let r = w.duration_ns();
        match w.state() {
            WorkState::Completed => assert_eq!(r, Ok(20 * MS)),
            s => assert_eq!(
                r,
                Err(WorkError::DurationUnknown {
                    state: s,
                    start_known: w.started_ns().is_some()
                })
            ),
        }
    }
    let mut w = new(true);
    w.observe(1_001 * MS, false, true).unwrap();
    assert_eq!(
        w.duration_ns(),
        Err(WorkError::DurationUnknown {
            state: WorkState::Completed,
            start_known: false
        })
    );
}

#[test]
fn measured_duration_wins_when_allowed() {
    for mut w in all_states(true) {
        let r = w.set_measured_duration(7);
        if w.state() == WorkState::Completed {
            assert_eq!(r, Ok(()));
            assert_eq!(w.duration_ns(), Ok(7));
        } else {
            assert!(matches!(r, Err(WorkError::DurationUnknown { .. })));
        }
    }
    for mut w in all_states(false) {
        assert_eq!(w.set_measured_duration(7), Err(WorkError::TimingDisabled));
    }
}

#[test]
fn op_type_names() {
    assert_eq!(op_type_name(OpKind::AllGatherV, false), "ALLGATHER");
    assert_eq!(op_type_name(OpKind::Send, true), "COALESCED");
    assert_eq!(op_type_name(OpKind::Barrier, false), "BARRIER");
}

#[test]
fn errors_map_to_the_crate_error() {
    let e: Error = WorkError::TimingDisabled.into();
    assert!(matches!(e, Error::InvalidArgument { arg: "work", .. }));
    assert!(!e.is_fatal());
}
