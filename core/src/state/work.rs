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

/// Whether a work created at `created_ns` has run past `limit_ms` at `now_ns` (the rule every
/// timeout applies, whoever holds the work's state).
pub fn is_past(created_ns: u64, now_ns: u64, limit_ms: u64) -> bool {
    now_ns.saturating_sub(created_ns) > limit_ms.saturating_mul(NS_PER_MS)
}

/// When a work created at `created_ns` with a limit of `limit_ms` times out (process clock, ns).
pub fn deadline_ns(created_ns: u64, limit_ms: u64) -> u64 {
    created_ns.saturating_add(limit_ms.saturating_mul(NS_PER_MS))
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

/// The state machine of one work: its state, its times and its first failure.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkMachine {
    info: WorkInfo,
    state: WorkState,
    created_ns: u64,
    started_ns: Option<u64>,
    ended_ns: Option<u64>,
    measured_ns: Option<u64>,
    error: Option<Failure>,
}

/// A work's first failure: boxed where there is an allocator, because a work is made per
/// operation and rarely fails, and the error's inline texts (~400 bytes) would otherwise be
/// most of its size (and of every process-group work's allocation).
#[cfg(feature = "alloc")]
type Failure = alloc::boxed::Box<Error>;
#[cfg(not(feature = "alloc"))]
type Failure = Error;

#[cfg(feature = "alloc")]
fn failure(e: Error) -> Failure {
    alloc::boxed::Box::new(e)
}
#[cfg(not(feature = "alloc"))]
fn failure(e: Error) -> Failure {
    e
}

/// The error a [`Failure`] holds (a deref of the box, where there is one).
fn failed(f: &Failure) -> &Error {
    f
}

impl WorkMachine {
    /// A work issued at `created_ns`.
    pub fn new(info: WorkInfo, created_ns: u64) -> WorkMachine {
        WorkMachine {
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
        self.error.as_ref().map(failed)
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
        self.check_deadline(now_ns, self.info.timeout_ms)
    }

    /// [`WorkMachine::check_timeout`] against `limit_ms` instead of the work's own timeout (a
    /// `wait` with a timeout of its own); the text names the limit applied.
    pub fn check_deadline(&mut self, now_ns: u64, limit_ms: u64) -> Result<(), Error> {
        self.check_deadline_noting(now_ns, limit_ms, "")
    }

    /// Whether the work is still in flight at `now_ns` past `limit_ms` from its creation: what
    /// [`WorkMachine::check_deadline`] would turn into a timeout (it changes nothing). A caller that
    /// has something to add to the timeout's text (a desync verdict that takes store reads)
    /// asks first, gathers it without holding the work, then calls
    /// [`WorkMachine::check_deadline_noting`].
    pub fn is_past_deadline(&self, now_ns: u64, limit_ms: u64) -> bool {
        !self.state.is_final() && is_past(self.created_ns, now_ns, limit_ms)
    }

    /// [`WorkMachine::check_deadline`] whose timeout text ends with `note` after PyTorch's
    /// description (`"; "` between them; nothing when `note` is empty). The text is cut at
    /// the error's capacity, so a note of many ranks may lose its tail.
    pub fn check_deadline_noting(
        &mut self,
        now_ns: u64,
        limit_ms: u64,
        note: &str,
    ) -> Result<(), Error> {
        if self.state.is_final() {
            return match self.error() {
                Some(e) => Err(e.clone()),
                None => Ok(()),
            };
        }
        // One rule for both: what `is_past_deadline` says is what times out here.
        if !self.is_past_deadline(now_ns, limit_ms) {
            return Ok(());
        }
        let after_ms = now_ns.saturating_sub(self.created_ns) / NS_PER_MS;
        let i = &self.info;
        let e = Error::Timeout {
            what: text(format_args!(
                "WorkNCCL(SeqNum={}, OpType={}, NumelIn={}, NumelOut={}, Timeout(ms)={}) ran for {} milliseconds before timing out{}{}",
                i.seq,
                op_type_name(i.kind, i.coalesced),
                i.numel_in,
                i.numel_out,
                limit_ms,
                after_ms,
                if note.is_empty() { "" } else { "; " },
                note
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
            self.error = error.map(failure);
        }
    }
}

#[cfg(test)]
mod tests;
