//! The handle of an operation in flight: c10d's `Work`, over the core's work state machine.
//!
//! The watchdog looks at every work but writes nothing into it while all goes well: it reads
//! the work's fixed facts and events, keeps the recorder entry's id itself, and says what it
//! saw completed through its group ([`GroupWatch::saw_done`]). So the work's memory stays
//! with the issuing thread, which made it and frees it; only a failure, a timeout or timing
//! (durations, hooks) takes the work's lock on the watchdog's side.

use crate::buffer::StreamOf;
use crate::deadline::ms;
use crate::recorder::now_ns;
use crate::recorder::slot::TraceSlot;
use crate::watchdog::group_watch::{CompletedWork, GroupWatch};
use crate::watchdog::{Hint, Watchdog, Watched};
use oxccl_core::recorder::TraceState;
use oxccl_core::state::work::{WorkInfo, WorkMachine};
use oxccl_core::traits::AbortOf;
use oxccl_core::{CommAbort, CommState, Error, Event, OpKind, Result, Stream, WorkState};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// Laid out for the watchdog's reads: what it reads of every work first, in the first 64
/// bytes of the allocation with the reference counts (one or two cache lines: the allocator
/// aligns to 16; aligning to a line would send every allocation through its slower aligned
/// path); the rest is the issuing thread's and the user's. Every line the watchdog reads
/// has to come back to the issuing thread's core when it reuses the memory for a new work.
#[repr(C)]
pub(crate) struct Inner<E, A> {
    /// Whether the machine is final and how ([`RUNNING`], [`COMPLETED`], [`FAILED`]): set
    /// under the lock, read by the watchdog without it.
    fin: AtomicU8,
    /// `info.timing`, here for the watchdog.
    timing: bool,
    /// Its place among the works its group queued to the watchdog (from 1, issue order); 0
    /// when not watched.
    pos: u64,
    /// When its group's timeout runs out (process clock, ns).
    deadline_ns: u64,
    /// The group's watch and the communicator's abort handle, shared by the entry's works.
    home: Arc<WorkHome<A>>,
    /// The flight-recorder entry: recorded at issue (no watchdog), or by the watchdog from
    /// these facts, which keeps the id (fixed once made). Its tag with the fields above.
    trace: TraceSlot,
    /// What the work is: fixed at creation, read without the lock.
    info: WorkInfo,
    /// When it was issued (process clock, ns): fixed, read without the lock.
    created_ns: u64,
    /// Recorded before the operation when timing is on.
    start: Option<E>,
    /// Recorded after the operation; `None` for work that issued nothing.
    end: Option<E>,
    /// What polls change.
    machine: Mutex<WorkMachine>,
    /// Issued inside a graph capture: it runs only at the graph's launches.
    captured: bool,
}

/// What every work of a communicator shares: its group's watch and the communicator's abort
/// handle (none for captured works), behind one reference count, so a work costs one count
/// to make and one to drop instead of two each.
pub(crate) struct WorkHome<A> {
    pub watch: Arc<GroupWatch>,
    pub abort: Option<A>,
    /// Asked when a wait fails (an elastic group: see `recovery`).
    pub on_failure: Option<Arc<dyn OnFailure>>,
}

/// What an elastic group answers when a wait of its work fails: the error to report instead
/// ([`Error::MembersLost`] once the survivors decided), after the decision is made.
pub(crate) trait OnFailure: Send + Sync {
    /// The error a wait that failed with `cause` reports.
    fn settle(&self, cause: &Error) -> Error;
}

/// When a work issued at `created_ns` with `info` times out.
fn deadline(info: &WorkInfo, created_ns: u64) -> u64 {
    created_ns.saturating_add(info.timeout_ms.saturating_mul(1_000_000))
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

/// An operation in flight: wait for it, ask whether it completed, read its first error and its
/// duration. Cheap to clone (the watchdog holds a clone). Dropping it never waits: the
/// operation goes on in stream order, and its buffers stay valid until it has run.
pub struct Work<E, A> {
    inner: Arc<Inner<E, A>>,
}

impl<E, A> Clone for Work<E, A> {
    fn clone(&self) -> Self {
        Work {
            inner: self.inner.clone(),
        }
    }
}

impl<E, A> std::fmt::Debug for Work<E, A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self
            .inner
            .machine
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .state();
        f.debug_struct("Work")
            .field("info", &self.inner.info)
            .field("state", &state)
            .finish()
    }
}

impl<E: Event + 'static, A: CommAbort> Work<E, A> {
    /// The work of an operation issued at `created_ns` (the caller's one clock read), `pos`
    /// its place in its group's watched works (0: not watched).
    pub(crate) fn new(
        info: WorkInfo,
        (created_ns, pos): (u64, u64),
        (start, end): (Option<E>, Option<E>),
        home: Arc<WorkHome<A>>,
        trace: TraceSlot,
    ) -> Self {
        let mut machine = WorkMachine::new(info, created_ns);
        let mut fin = RUNNING;
        if end.is_none() {
            // No end event (every issue path records one today): nothing to wait for.
            let _ = machine.observe(created_ns, true, true);
            fin = COMPLETED;
        }
        Work {
            inner: Arc::new(Inner {
                fin: AtomicU8::new(fin),
                timing: info.timing,
                pos,
                deadline_ns: deadline(&info, created_ns),
                machine: Mutex::new(machine),
                info,
                created_ns,
                start,
                end,
                home,
                trace,
                captured: false,
            }),
        }
    }

    /// The work of an operation issued inside a graph capture: nothing ran, and nothing will
    /// run until the graph is launched, so it is final at once with a [`Error::Capture`]
    /// ([`oxccl_core::CaptureError::Forbidden`]) that [`Work::wait`] returns instead of
    /// waiting for something that never comes. No events, no watchdog.
    pub(crate) fn captured(info: WorkInfo, watch: Arc<GroupWatch>) -> Self {
        let now = now_ns();
        let mut machine = WorkMachine::new(info, now);
        let _ = machine.fail(
            now,
            oxccl_core::CaptureError::Forbidden.error(format_args!(
                "waiting on {} (seq {}), which was captured into a graph: it runs at each \
                 launch of the graph; wait on the work PgGraph::launch returns",
                info.kind, info.seq
            )),
        );
        Work {
            inner: Arc::new(Inner {
                fin: AtomicU8::new(FAILED),
                timing: info.timing,
                pos: 0,
                deadline_ns: deadline(&info, now),
                machine: Mutex::new(machine),
                info,
                created_ns: now,
                start: None,
                end: None,
                home: Arc::new(WorkHome {
                    watch,
                    abort: None,
                    on_failure: None,
                }),
                trace: TraceSlot::Off,
                captured: true,
            }),
        }
    }

    /// Whether the operation was issued inside a graph capture
    /// ([`super::ProcessGroup::capture`]): such a work is final at once, not successful, and
    /// [`Work::wait`] returns its [`Error::Capture`]; the operation runs at each launch of
    /// the graph, whose own work ([`super::PgGraph::launch`]) is the one to wait on.
    pub fn is_captured(&self) -> bool {
        self.inner.captured
    }

    /// The work as the watchdog holds it.
    pub(crate) fn watched(&self) -> Arc<dyn Watched> {
        self.inner.clone()
    }

    /// What the work is: sequence number, operation, element counts, timeout.
    pub fn info(&self) -> WorkInfo {
        self.inner.info
    }

    /// The sequence number (from 1 per group, equal across ranks).
    pub fn seq(&self) -> u64 {
        self.info().seq
    }

    /// The operation (the first one of a coalesced block).
    pub fn op(&self) -> OpKind {
        self.info().kind
    }

    /// The time limit [`Work::wait`] applies.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.info().timeout_ms)
    }

    /// Whether the operation has finished, successfully or not (never blocks).
    pub fn is_completed(&self) -> bool {
        !matches!(
            self.inner.poll(now_ns(), None, Hint::Unknown, None),
            Ok(false)
        )
    }

    /// Whether the operation finished successfully (never blocks).
    pub fn is_success(&self) -> bool {
        matches!(
            self.inner.poll(now_ns(), None, Hint::Unknown, None),
            Ok(true)
        )
    }

    /// The first error of the operation, once it failed.
    pub fn error(&self) -> Option<Error> {
        self.inner.lock().error().cloned()
    }

    /// Blocks until the operation completed, bounded by the group's timeout (counted from the
    /// issue). On a timeout the communicator is aborted with the reason (c10d's blocking wait),
    /// and every later operation on it fails fast saying so.
    pub fn wait(&self) -> Result<()> {
        self.wait_timeout(self.timeout())
    }

    /// [`Work::wait`] with its own limit, counted from the issue.
    pub fn wait_timeout(&self, limit: Duration) -> Result<()> {
        use oxccl_core::state::wait::{pause, Pause};
        let began = now_ns();
        loop {
            // One clock read per look: the poll's time and the pause's.
            let now = now_ns();
            match self.inner.poll(now, Some(ms(limit)), Hint::Unknown, None) {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(e) => {
                    Watchdog::instance().settle_failure(&self.inner.home.watch, &e);
                    return Err(match &self.inner.home.on_failure {
                        Some(hook) => hook.settle(&e),
                        None => e,
                    });
                }
            }
            // Yields first, then sleeps longer the longer it waits (the core's rule).
            match pause(Duration::from_nanos(now.saturating_sub(began))) {
                Pause::Yield => std::thread::yield_now(),
                Pause::Sleep(d) => std::thread::sleep(d),
            }
        }
    }

    /// How long the operation ran on its stream; needs timing on ([`super::PgOptions::timing`])
    /// and a completed operation.
    pub fn duration(&self) -> Result<Duration> {
        self.inner.poll(now_ns(), None, Hint::Unknown, None)?;
        let ns = self.inner.lock().duration_ns()?;
        Ok(Duration::from_nanos(ns))
    }
}

impl<E: Event, A: CommAbort> Inner<E, A> {
    fn lock(&self) -> MutexGuard<'_, WorkMachine> {
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
    fn poll(
        &self,
        now: u64,
        wait_limit_ms: Option<u64>,
        hint: Hint,
        report: Option<Option<u64>>,
    ) -> Result<bool> {
        let mut m = self.lock();
        let seen = self.pos != 0 && self.home.watch.done_upto() >= self.pos;
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
    /// `report`: as in [`Inner::poll`].
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

impl<E: Event + 'static, A: CommAbort> Watched for Inner<E, A> {
    fn record_trace(&self) -> Option<u64> {
        self.trace.record_copy(&self.home.watch.recorder)
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
        if !self.timing && self.fin.load(Ordering::Acquire) != FAILED {
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
                        self.home.watch.saw_done(self.pos);
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
        Inner::poll(self, now_ns, None, hint, Some(trace))
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

/// `Work` over a backend's event and abort handle.
pub type WorkOf<B> = Work<EventOf<B>, AbortOf<B>>;

/// The event type of a backend's streams.
pub type EventOf<B> = <StreamOf<B> as Stream>::Event;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_the_watchdog_reads_is_in_the_first_64_bytes() {
        // An event as large as NCCL's (32 bytes) and an abort handle of one pointer.
        type I = Inner<[u64; 4], Arc<()>>;
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
