//! One work (an issued operation, or a coalesced block of them): scheduled → started →
//! completed, or failed / timed out / aborted.
//!
//! Time is passed in as nanoseconds of a monotonic clock the caller reads; timeouts are in
//! milliseconds, as PyTorch's. A time earlier than the creation time counts as no time passed
//! (saturating), never as a panic. The first failure is kept; a finished work refuses every
//! further transition.

use crate::error::Error;
use crate::op::OpKind;
use crate::text::{text, text_str};
use core::fmt;

const NS_PER_MS: u64 = 1_000_000;

/// Where a work is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WorkState {
    /// Issued; its start has not been seen (without timing it never is).
    Scheduled,
    /// Its start event has completed.
    Started,
    /// Its end event has completed. Final.
    Completed,
    /// The backend or the communicator reported an error. Final.
    Failed,
    /// It ran past its timeout. Final.
    TimedOut,
    /// Its communicator was aborted. Final.
    Aborted,
}

impl WorkState {
    /// Lower-case name.
    pub const fn name(self) -> &'static str {
        match self {
            WorkState::Scheduled => "scheduled",
            WorkState::Started => "started",
            WorkState::Completed => "completed",
            WorkState::Failed => "failed",
            WorkState::TimedOut => "timed out",
            WorkState::Aborted => "aborted",
        }
    }

    /// Whether the work is finished (no transition leaves this state).
    pub const fn is_final(self) -> bool {
        !matches!(self, WorkState::Scheduled | WorkState::Started)
    }
}

impl fmt::Display for WorkState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// PyTorch's `OpType` name for an operation ("ALLREDUCE"), as its timeout texts print it;
/// `coalesced` gives "COALESCED". Uneven variants share the name of the even one.
pub const fn op_type_name(kind: OpKind, coalesced: bool) -> &'static str {
    if coalesced {
        return "COALESCED";
    }
    match kind {
        OpKind::AllReduce => "ALLREDUCE",
        OpKind::Broadcast => "BROADCAST",
        OpKind::Reduce => "REDUCE",
        OpKind::AllGather | OpKind::AllGatherV => "ALLGATHER",
        OpKind::ReduceScatter | OpKind::ReduceScatterV => "REDUCE_SCATTER",
        OpKind::AllToAll | OpKind::AllToAllV => "ALLTOALL",
        OpKind::Gather => "GATHER",
        OpKind::Scatter => "SCATTER",
        OpKind::Send => "SEND",
        OpKind::Recv => "RECV",
        OpKind::Barrier => "BARRIER",
    }
}

/// What a work is, fixed when it is created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkInfo {
    /// The group's sequence number of this work (from 1).
    pub seq: u64,
    /// The operation (the first one, for a coalesced block).
    pub kind: OpKind,
    /// Whether the work stands for a coalesced block.
    pub coalesced: bool,
    /// Elements read (PyTorch's `NumelIn`).
    pub numel_in: usize,
    /// Elements written (PyTorch's `NumelOut`).
    pub numel_out: usize,
    /// How long it may run, from creation, in milliseconds.
    pub timeout_ms: u64,
    /// Whether start events are recorded (PyTorch's `ENABLE_TIMING`): durations need it.
    pub timing: bool,
}

/// A refused work transition or query. Converts into [`Error::InvalidArgument`] naming `work`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WorkError {
    /// The work is finished; nothing changes it any more.
    #[error("cannot {attempted}: the work is already {state}")]
    Finished {
        /// Its final state.
        state: WorkState,
        /// What was attempted.
        attempted: &'static str,
    },
    /// A duration was asked of a work created with timing off.
    #[error("durations need timing, which was off when the work was created")]
    TimingDisabled,
    /// A duration was asked before both its ends were known.
    #[error("duration unknown: the work is {state} and its start was {}", if *.start_known { "seen" } else { "not seen" })]
    DurationUnknown {
        /// The work's state.
        state: WorkState,
        /// Whether its start was seen.
        start_known: bool,
    },
}

impl From<WorkError> for Error {
    fn from(e: WorkError) -> Error {
        Error::InvalidArgument {
            arg: "work",
            expected: text(format_args!("{e}")),
        }
    }
}

/// The state of one work with its times and its first failure.
#[derive(Debug, Clone, PartialEq)]
pub struct Work {
    info: WorkInfo,
    state: WorkState,
    created_ns: u64,
    started_ns: Option<u64>,
    ended_ns: Option<u64>,
    measured_ns: Option<u64>,
    error: Option<Error>,
}

impl Work {
    /// A work issued at `created_ns`.
    pub fn new(info: WorkInfo, created_ns: u64) -> Work {
        Work {
            info,
            state: WorkState::Scheduled,
            created_ns,
            started_ns: None,
            ended_ns: None,
            measured_ns: None,
            error: None,
        }
    }

    /// What the work is.
    pub fn info(&self) -> &WorkInfo {
        &self.info
    }

    /// Where it is.
    pub fn state(&self) -> WorkState {
        self.state
    }

    /// Whether it is finished: completed, or an error is set (PyTorch's `isCompleted`).
    pub fn is_finished(&self) -> bool {
        self.state.is_final()
    }

    /// When it was created.
    pub fn created_ns(&self) -> u64 {
        self.created_ns
    }

    /// When its start was first seen.
    pub fn started_ns(&self) -> Option<u64> {
        self.started_ns
    }

    /// When it was seen to finish (completed, failed, timed out or aborted).
    pub fn ended_ns(&self) -> Option<u64> {
        self.ended_ns
    }

    /// The first failure (failed, timed out or aborted).
    pub fn error(&self) -> Option<&Error> {
        self.error.as_ref()
    }

    /// Whole milliseconds from creation to `now_ns`.
    pub fn elapsed_ms(&self, now_ns: u64) -> u64 {
        now_ns.saturating_sub(self.created_ns) / NS_PER_MS
    }

    /// Applies what polling the work's events showed: `completed` finishes it, `started` moves
    /// a scheduled work on; a poll that shows less than is known changes nothing. Returns the
    /// state after.
    pub fn observe(
        &mut self,
        now_ns: u64,
        started: bool,
        completed: bool,
    ) -> Result<WorkState, WorkError> {
        self.refuse_if_final("observe")?;
        if started && self.state == WorkState::Scheduled {
            self.state = WorkState::Started;
            self.started_ns = Some(now_ns);
        }
        if completed {
            self.finish(WorkState::Completed, now_ns, None);
        }
        Ok(self.state)
    }

    /// The work failed with `error` (kept as its first failure).
    pub fn fail(&mut self, now_ns: u64, error: Error) -> Result<(), WorkError> {
        self.refuse_if_final("fail")?;
        self.finish(WorkState::Failed, now_ns, Some(error));
        Ok(())
    }

    /// Its communicator was aborted for `reason`.
    pub fn abort(&mut self, now_ns: u64, reason: &str) -> Result<(), WorkError> {
        self.refuse_if_final("abort")?;
        self.finish(
            WorkState::Aborted,
            now_ns,
            Some(Error::Aborted {
                reason: text_str(reason),
            }),
        );
        Ok(())
    }

    /// `Ok` while the work is in time (or completed). A work in flight past its timeout becomes
    /// timed out and gives [`Error::Timeout`] with PyTorch's description; a work that failed
    /// earlier gives its first failure again.
    pub fn check_timeout(&mut self, now_ns: u64) -> Result<(), Error> {
        if self.state.is_final() {
            return match &self.error {
                Some(e) => Err(e.clone()),
                None => Ok(()),
            };
        }
        let elapsed_ns = now_ns.saturating_sub(self.created_ns);
        if elapsed_ns <= self.info.timeout_ms.saturating_mul(NS_PER_MS) {
            return Ok(());
        }
        let after_ms = elapsed_ns / NS_PER_MS;
        let i = &self.info;
        let e = Error::Timeout {
            what: text(format_args!(
                "WorkNCCL(SeqNum={}, OpType={}, NumelIn={}, NumelOut={}, Timeout(ms)={}) ran for {} milliseconds before timing out",
                i.seq,
                op_type_name(i.kind, i.coalesced),
                i.numel_in,
                i.numel_out,
                i.timeout_ms,
                after_ms
            )),
            after_ms,
        };
        self.finish(WorkState::TimedOut, now_ns, Some(e.clone()));
        Err(e)
    }

    /// Records the duration measured between the work's start and end events (more exact
    /// than the poll times). Needs timing and a completed work.
    pub fn set_measured_duration(&mut self, ns: u64) -> Result<(), WorkError> {
        if !self.info.timing {
            return Err(WorkError::TimingDisabled);
        }
        if self.state != WorkState::Completed {
            return Err(WorkError::DurationUnknown {
                state: self.state,
                start_known: self.started_ns.is_some(),
            });
        }
        self.measured_ns = Some(ns);
        Ok(())
    }

    /// How long the work ran: the measured duration when one was set, else from the time its
    /// start was seen to the time its completion was seen. Needs timing and both ends.
    pub fn duration_ns(&self) -> Result<u64, WorkError> {
        if !self.info.timing {
            return Err(WorkError::TimingDisabled);
        }
        let unknown = WorkError::DurationUnknown {
            state: self.state,
            start_known: self.started_ns.is_some(),
        };
        if self.state != WorkState::Completed {
            return Err(unknown);
        }
        if let Some(ns) = self.measured_ns {
            return Ok(ns);
        }
        match (self.started_ns, self.ended_ns) {
            (Some(s), Some(e)) => Ok(e.saturating_sub(s)),
            _ => Err(unknown),
        }
    }

    fn refuse_if_final(&self, attempted: &'static str) -> Result<(), WorkError> {
        if self.state.is_final() {
            Err(WorkError::Finished {
                state: self.state,
                attempted,
            })
        } else {
            Ok(())
        }
    }

    fn finish(&mut self, state: WorkState, now_ns: u64, error: Option<Error>) {
        self.state = state;
        self.ended_ns = Some(now_ns);
        if self.error.is_none() {
            self.error = error;
        }
    }
}

#[cfg(test)]
mod tests {
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

    fn new(timing: bool) -> Work {
        Work::new(info(timing), 1_000 * MS)
    }

    /// One work in each state, created at 1 s with a 100 ms timeout.
    fn all_states(timing: bool) -> [Work; 6] {
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

    #[test]
    fn timeout_from_started_and_coalesced_name() {
        let mut w = Work::new(
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
        let huge = Work::new(
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
}
