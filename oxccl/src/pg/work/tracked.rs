//! A work that carries its own state: its machine, its events, its recorder entry. Works of
//! groups that time their operations, works of groups without a watchdog, and works of a
//! ring that failed or ran past their deadline (handed out of the ring to be looked at alone)
//! are these; the rest live as slots of their communicator's ring (`ring`).
//!
//! The watchdog looks at every such work but writes nothing into it while all goes well: it
//! reads the work's fixed facts and events, keeps the recorder entry's id itself, and says
//! what it saw completed through its communicator's [`WorkHome`]. So the work's memory stays
//! with the issuing thread, which made it and frees it; only a failure, a timeout or timing
//! (durations, hooks) takes the work's lock on the watchdog's side.

use super::home::WorkHome;
use crate::recorder::slot::TraceSlot;
use crate::watchdog::group_watch::{CompletedWork, GroupWatch};
use crate::watchdog::{Hint, Watched};
use oxccl_core::state::work::{deadline_ns, WorkInfo, WorkMachine};
use oxccl_core::{CommAbort, CommState, Error, Event, Result, WorkState};
use oxccl_rules::recorder::TraceState;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// Laid out for the watchdog's reads: what it reads of every work first, in the first 64
/// bytes of the allocation with the reference counts (one or two cache lines: the allocator
/// aligns to 16; aligning to a line would send every allocation through its slower aligned
/// path); the rest is the issuing thread's and the user's. Every line the watchdog reads
/// has to come back to the issuing thread's core when it reuses the memory for a new work.
#[repr(C)]
pub(crate) struct TrackedWork<E, A> {
    /// Whether the machine is final and how ([`RUNNING`], [`COMPLETED`], [`FAILED`]): set
    /// under the lock, read by the watchdog without it.
    fin: AtomicU8,
    /// `info.timing`, here for the watchdog.
    timing: bool,
    /// Whether the watchdog's quick look may mark its place done in the home: not for a work
    /// a ring handed out (its ring marks places, under its lock: see `ring`), which the
    /// watchdog looks at in full instead.
    marks_done: bool,
    /// Its place among its communicator's works (from 1, issue order; see [`WorkHome`]); 0
    /// when not watched.
    pos: u64,
    /// When its group's timeout runs out (process clock, ns).
    deadline_ns: u64,
    /// What the communicator's works share: the group's watch, the abort handle, the places.
    pub(super) home: Arc<WorkHome<A>>,
    /// The flight-recorder entry: recorded at issue (no watchdog), or by the watchdog from
    /// these facts, which keeps the id (fixed once made). Its tag with the fields above.
    trace: TraceSlot,
    /// What the work is: fixed at creation, read without the lock.
    pub(super) info: WorkInfo,
    /// When it was issued (process clock, ns): fixed, read without the lock.
    created_ns: u64,
    /// Recorded before the operation when timing is on.
    start: Option<E>,
    /// Recorded after the operation; `None` for work that issued nothing.
    end: Option<E>,
    /// What polls change.
    machine: Mutex<WorkMachine>,
}

/// [`Inner::fin`]: not final.
const RUNNING: u8 = 0;
/// [`Inner::fin`]: completed.
const COMPLETED: u8 = 1;
/// [`Inner::fin`]: failed, timed out or aborted.
const FAILED: u8 = 2;

/// What the watchdog does, once the work's lock is released, with the completion or failure
/// it saw.
struct Report {
    trace: Option<u64>,
    /// `Some` once completed (the duration, when known).
    completed: Option<Option<u64>>,
    hook: Option<CompletedWork>,
}

impl<E: Event + 'static, A: CommAbort> TrackedWork<E, A> {
    /// The work of an operation issued at `created_ns` (the caller's one clock read), `pos`
    /// its place among its communicator's works (0: not watched); `marks_done`: see the
    /// field.
    pub fn new(
        info: WorkInfo,
        (created_ns, pos, marks_done): (u64, u64, bool),
        (start, end): (Option<E>, Option<E>),
        home: Arc<WorkHome<A>>,
        trace: TraceSlot,
    ) -> Arc<Self> {
        let mut machine = WorkMachine::new(info, created_ns);
        let mut fin = RUNNING;
        if end.is_none() {
            // No end event: nothing to wait for.
            let _ = machine.observe(created_ns, true, true);
            fin = COMPLETED;
        }
        Arc::new(TrackedWork {
            fin: AtomicU8::new(fin),
            timing: info.timing,
            marks_done,
            pos,
            deadline_ns: deadline_ns(created_ns, info.timeout_ms),
            machine: Mutex::new(machine),
            info,
            created_ns,
            start,
            end,
            home,
            trace,
        })
    }
}

impl<E: Event, A: CommAbort> TrackedWork<E, A> {
    /// Whether it completed successfully (final; read without the lock).
    pub fn completed(&self) -> bool {
        self.fin.load(Ordering::Acquire) == COMPLETED
    }

    pub fn lock(&self) -> MutexGuard<'_, WorkMachine> {
        self.machine.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Notes whether the machine is final, for the watchdog's reads (under the lock).
    fn note_fin(&self, m: &WorkMachine) {
        let fin = match m.state() {
            WorkState::Completed => COMPLETED,
            s if s.is_final() => FAILED,
            _ => RUNNING,
        };
        self.fin.store(fin, Ordering::Release);
    }

    /// Completes the machine (its measured duration with timing).
    fn complete(&self, m: &mut WorkMachine, now: u64) {
        let _ = m.observe(now, true, true);
        if let (Some(s), Some(e)) = (&self.start, &self.end) {
            if let Ok(ms) = s.elapsed_ms(e) {
                let _ = m.set_measured_duration((f64::from(ms.max(0.0)) * 1e6) as u64);
            }
        }
        self.note_fin(m);
    }

    /// The recorder entry's id as a user's look knows it: recorded at issue when the group has
    /// no watchdog; with one, the entry is the watchdog's to update.
    fn user_trace(&self) -> Option<u64> {
        self.trace.recorded()
    }

    /// What the watchdog reports of the completion (`completed`) or failure it saw.
    fn report(&self, m: &WorkMachine, trace: Option<u64>, now: u64, completed: bool) -> Report {
        if !completed {
            return Report {
                trace,
                completed: None,
                hook: None,
            };
        }
        let duration = m.duration_ns().ok();
        let hook = duration.map(|ns| CompletedWork {
            group: self.home.watch.uid,
            op: self.info.kind,
            coalesced: self.info.coalesced,
            seq: self.info.seq,
            created_ns: self.created_ns,
            completed_ns: m.ended_ns().unwrap_or(now),
            duration: Duration::from_nanos(ns),
        });
        Report {
            trace,
            completed: Some(duration),
            hook,
        }
    }

    /// Hands a report to the recorder and the hooks (without the work's lock).
    fn deliver(&self, r: Report, now: u64) {
        match r.completed {
            Some(duration) => self.home.watch.recorder.complete(r.trace, now, duration),
            // Its entry keeps the state it reached (scheduled or started) for the dumps.
            None => self.home.watch.recorder.finish(r.trace, None),
        }
        if let Some(done) = r.hook {
            self.home.watch.run_hooks(&done);
        }
    }

    /// One look at the operation: `Ok(true)` completed, `Ok(false)` still running, or its
    /// first error (the communicator's asynchronous error, an abort, a timeout). With
    /// `wait_limit_ms` (a waiting caller) a timeout aborts the communicator; without it (the
    /// watchdog, a query) the group's timeout applies and the watchdog's plan decides.
    /// `hint`: what the watchdog knows from the group's other works, saving the query.
    /// `report` (the watchdog's look, with the recorder entry's id): a completion or failure
    /// seen is handed to the recorder and the hooks.
    pub fn poll(
        &self,
        now: u64,
        wait_limit_ms: Option<u64>,
        hint: Hint,
        report: Option<Option<u64>>,
    ) -> Result<bool> {
        let mut m = self.lock();
        let seen = self.pos != 0 && self.home.done_upto() >= self.pos;
        if !m.state().is_final() && seen {
            // The watchdog saw it (or a later work of its stream) complete, and noted that in
            // its group rather than here: completed, as if it had noted it here.
            self.complete(&mut m, now);
        }
        if m.state().is_final() {
            let r = m.error().map_or(Ok(true), |e| Err(e.clone()));
            let rep = report.map(|t| self.report(&m, t, now, r.is_ok()));
            drop(m);
            if let Some(rep) = rep {
                self.deliver(rep, now);
            }
            if let (Err(e @ Error::Timeout { .. }), Some(_)) = (&r, wait_limit_ms) {
                // The watchdog noted the timeout first (its plan may not abort): a waiting
                // caller's timeout aborts all the same, as when the wait notes it itself.
                self.abort_for_wait(e);
            }
            return r;
        }
        if hint == Hint::Pending {
            // An earlier work of the stream still runs: only the deadline can end this one.
            drop(m);
            return self.check_deadline(now, wait_limit_ms, report);
        }
        let completed = match (&self.end, hint) {
            (None, _) | (_, Hint::Done) => Ok(true),
            (Some(end), _) => end.query(),
        };
        // A stream that passed the operation may still have cut it short (an abort, a peer's
        // failure): the communicator's error decides.
        let outcome = completed.and_then(|c| match &self.home.abort {
            Some(a) => match (c, a.state()) {
                // Passed on a healthy communicator: done, without asking the library.
                (true, CommState::Ready) => Ok(true),
                // A destroyed communicator's stream may have dropped the work unrun.
                (_, CommState::Destroyed) => Err(Error::Aborted {
                    reason: oxccl_core::text!("the communicator was destroyed"),
                }),
                // A revoke stopped what was in flight: the stream passes it, its output
                // undefined (the library's poll says success once quiescent).
                (_, state @ (CommState::Revoking | CommState::Revoked)) => {
                    Err(Error::InvalidState {
                        state,
                        attempted: "complete an operation",
                        reason: oxccl_core::text!(
                            "the communicator was revoked while it ran: its output is undefined"
                        ),
                    })
                }
                _ => a.poll().map(|_| c),
            },
            None => Ok(c),
        });
        let completed = match outcome {
            Ok(done) => done,
            Err(e) => {
                let _ = m.fail(now, e.clone());
                self.note_fin(&m);
                let rep = report.map(|t| self.report(&m, t, now, false));
                drop(m);
                match rep {
                    Some(rep) => self.deliver(rep, now),
                    None => self.home.watch.recorder.finish(self.user_trace(), None),
                }
                return Err(e);
            }
        };
        if completed {
            self.complete(&mut m, now);
            let rep = report.map(|t| self.report(&m, t, now, true));
            drop(m);
            if let Some(rep) = rep {
                self.deliver(rep, now);
            }
            return Ok(true);
        }
        if m.state() == WorkState::Scheduled {
            if let Some(s) = &self.start {
                if s.query().unwrap_or(false) {
                    let _ = m.observe(now, true, false);
                    let id = report.flatten().or(self.user_trace());
                    self.home
                        .watch
                        .recorder
                        .update(id, TraceState::Started, now);
                }
            }
        }
        drop(m);
        self.check_deadline(now, wait_limit_ms, report)
    }

    /// `Ok(false)` while the work is within its limit (`wait_limit_ms`, else the group's
    /// timeout); its timeout error past it (a waiting caller's timeout aborts the
    /// communicator). With desync debugging on, the error (and the abort's reason) says which
    /// ranks never joined the collective: read from the store without the work's lock.
    /// `report`: as in [`TrackedWork::poll`].
    fn check_deadline(
        &self,
        now: u64,
        wait_limit_ms: Option<u64>,
        report: Option<Option<u64>>,
    ) -> Result<bool> {
        let limit = wait_limit_ms.unwrap_or(self.info.timeout_ms);
        let m = self.lock();
        let past = m.is_past_deadline(now, limit);
        if !past && !m.state().is_final() {
            return Ok(false);
        }
        drop(m);
        let info = self.info;
        let verdict = past
            .then(|| self.home.watch.verdict(info.seq, info.kind))
            .flatten();
        let note = verdict.as_ref().map(|v| v.note()).unwrap_or_default();
        let mut m = self.lock();
        let checked = m.check_deadline_noting(now, limit, &note);
        self.note_fin(&m);
        let rep = match (&checked, report) {
            (Err(_), Some(t)) => Some(self.report(&m, t, now, false)),
            _ => None,
        };
        drop(m);
        if let Some(rep) = rep {
            self.deliver(rep, now);
        }
        if let Err(e) = checked {
            if wait_limit_ms.is_some() {
                self.abort_for_wait(&e);
            }
            return Err(e);
        }
        Ok(false)
    }

    /// A waiting caller's timeout `e` aborts the communicator (c10d's blocking wait), the
    /// reason led by the desync verdict's headline when there is one (computed once per
    /// collective, so asking again is a read). An abort already under way keeps its reason.
    fn abort_for_wait(&self, e: &Error) {
        if self.home.on_failure.is_some() {
            // An elastic group: the survivors' decision stops what is in flight (a revoke
            // keeps the communicator for the shrink).
            return;
        }
        let Some(a) = &self.home.abort else { return };
        if a.state().is_aborted() {
            return;
        }
        let verdict = self.home.watch.verdict(self.info.seq, self.info.kind);
        let reason = match verdict.as_ref().and_then(|v| v.headline()) {
            Some(h) => format!("{h}; {e}"),
            None => e.to_string(),
        };
        a.abort(&reason);
    }
}

impl<E: Event + 'static, A: CommAbort> Watched for TrackedWork<E, A> {
    fn record_trace(&self) -> Option<u64> {
        let c = self.home.watch.trace_context(self.info, self.created_ns);
        self.trace.record_copy(&self.home.watch.recorder, &c)
    }

    fn probe_done(&self) -> Option<bool> {
        // A work without an end event says nothing of its stream.
        self.end.as_ref().map(|end| end.query().unwrap_or(false))
    }

    fn has_end(&self) -> bool {
        self.end.is_some()
    }

    fn poll(&self, now_ns: u64, hint: Hint, trace: Option<u64>) -> Result<bool> {
        // Without timing and with nothing failed, a look that finds the work done, or behind
        // a running one and in time, writes nothing into it (see the module's documentation).
        if !self.timing && self.marks_done && self.fin.load(Ordering::Acquire) != FAILED {
            let done = match (&self.end, hint) {
                (_, Hint::Pending) => Ok(false),
                (None, _) | (_, Hint::Done) => Ok(true),
                (Some(end), Hint::Unknown) => end.query(),
            };
            match done {
                Ok(true)
                    if self
                        .home
                        .abort
                        .as_ref()
                        .is_none_or(|a| a.state() == CommState::Ready) =>
                {
                    // Only a work with an end event says its stream got past it (one that
                    // issued nothing says nothing of the works before it).
                    if self.end.is_some() {
                        self.home.saw_done(self.pos);
                    }
                    self.home.watch.recorder.complete(trace, now_ns, None);
                    return Ok(true);
                }
                Ok(false) if hint == Hint::Pending && now_ns <= self.deadline_ns => {
                    return Ok(false);
                }
                _ => {}
            }
        }
        TrackedWork::poll(self, now_ns, None, hint, Some(trace))
    }

    fn deadline_ns(&self) -> u64 {
        self.deadline_ns
    }

    fn created_ns(&self) -> u64 {
        self.created_ns
    }

    fn watch(&self) -> &GroupWatch {
        &self.home.watch
    }

    fn watch_arc(&self) -> Arc<GroupWatch> {
        self.home.watch.clone()
    }

    fn info(&self) -> WorkInfo {
        self.info
    }

    fn abort_comm(&self, reason: &str) {
        if let Some(a) = &self.home.abort {
            a.abort(reason);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_the_watchdog_reads_is_in_the_first_64_bytes() {
        // An event as large as NCCL's (32 bytes) and an abort handle of one pointer.
        type I = TrackedWork<[u64; 4], Arc<()>>;
        // Behind the two reference counts of the `Arc`.
        let counts = 16;
        let trace = std::mem::offset_of!(I, trace);
        // The trace slot's tag (its first byte) and every field before it.
        assert!(counts + trace < 64, "the trace slot's tag is at {trace}");
        assert!(std::mem::offset_of!(I, home) + 8 <= trace);
        // The issuing thread's part comes after.
        assert!(counts + std::mem::offset_of!(I, info) >= 64);
        assert!(std::mem::offset_of!(I, machine) > std::mem::offset_of!(I, info));
    }
}
