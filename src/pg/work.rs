//! The handle of an operation in flight: c10d's `Work`, over the core's work state machine.

use super::recorder::now_ns;
use super::trace_slot::TraceSlot;
use super::watch::{CompletedWork, GroupWatch};
use crate::watchdog::{Hint, Watched};
use oxccl_core::state::work::{Work as WorkMachine, WorkInfo};
use oxccl_core::trace::TraceState;
use oxccl_core::{CommAbort, Error, Event, OpKind, Result};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

pub(crate) struct Inner<E, A> {
    /// What polls change, under one lock (one lock per look, for the watchdog too).
    cell: Mutex<Cell>,
    /// What the work is: fixed at creation, read without the lock.
    info: WorkInfo,
    /// When it was issued (process clock, ns): fixed, read without the lock.
    created_ns: u64,
    /// Recorded before the operation when timing is on.
    start: Option<E>,
    /// Recorded after the operation; `None` for work that issued nothing.
    end: Option<E>,
    abort: Option<A>,
    watch: Arc<GroupWatch>,
    /// Issued inside a graph capture: it runs only at the graph's launches.
    captured: bool,
}

/// The changing part of a work.
struct Cell {
    machine: WorkMachine,
    /// The flight-recorder entry (recorded by the watchdog, off the hot path).
    trace: TraceSlot,
    /// Whether the completion was handed to hooks and the recorder (once).
    reported: bool,
}

/// What the watchdog does, once the work's lock is released, with a completion or failure it
/// saw first.
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
            .cell
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .machine
            .state();
        f.debug_struct("Work")
            .field("info", &self.inner.info)
            .field("state", &state)
            .finish()
    }
}

/// How long a waiting thread sleeps between polls once the first quick polls found nothing.
const POLL_SLEEP: Duration = Duration::from_micros(200);
/// Polls that only yield before the waiting thread starts to sleep (short operations end here).
const QUICK_POLLS: u32 = 64;

fn ms(d: Duration) -> u64 {
    d.as_millis().min(u128::from(u64::MAX)) as u64
}

impl<E: Event + 'static, A: CommAbort> Work<E, A> {
    /// The work of an operation issued at `created_ns` (the caller's one clock read).
    pub(crate) fn new(
        info: WorkInfo,
        created_ns: u64,
        (start, end): (Option<E>, Option<E>),
        abort: Option<A>,
        trace: TraceSlot,
        watch: Arc<GroupWatch>,
    ) -> Self {
        let mut machine = WorkMachine::new(info, created_ns);
        if end.is_none() {
            // Nothing was issued: complete at once (an empty batch).
            let _ = machine.observe(created_ns, true, true);
        }
        Work {
            inner: Arc::new(Inner {
                cell: Mutex::new(Cell {
                    machine,
                    trace,
                    reported: false,
                }),
                info,
                created_ns,
                start,
                end,
                abort,
                watch,
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
                cell: Mutex::new(Cell {
                    machine,
                    trace: TraceSlot::Off,
                    reported: true,
                }),
                info,
                created_ns: now,
                start: None,
                end: None,
                abort: None,
                watch,
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
            self.inner.poll(now_ns(), None, Hint::Unknown, false),
            Ok(false)
        )
    }

    /// Whether the operation finished successfully (never blocks).
    pub fn is_success(&self) -> bool {
        matches!(
            self.inner.poll(now_ns(), None, Hint::Unknown, false),
            Ok(true)
        )
    }

    /// The first error of the operation, once it failed.
    pub fn error(&self) -> Option<Error> {
        self.inner.lock().machine.error().cloned()
    }

    /// Blocks until the operation completed, bounded by the group's timeout (counted from the
    /// issue). On a timeout the communicator is aborted with the reason (c10d's blocking wait),
    /// and every later operation on it fails fast saying so.
    pub fn wait(&self) -> Result<()> {
        self.wait_timeout(self.timeout())
    }

    /// [`Work::wait`] with its own limit, counted from the issue.
    pub fn wait_timeout(&self, limit: Duration) -> Result<()> {
        let mut polls = 0u32;
        while !self
            .inner
            .poll(now_ns(), Some(ms(limit)), Hint::Unknown, false)?
        {
            polls = polls.saturating_add(1);
            if polls < QUICK_POLLS {
                std::thread::yield_now();
            } else {
                std::thread::sleep(POLL_SLEEP);
            }
        }
        Ok(())
    }

    /// How long the operation ran on its stream; needs timing on ([`super::PgOptions::timing`])
    /// and a completed operation.
    pub fn duration(&self) -> Result<Duration> {
        self.inner.poll(now_ns(), None, Hint::Unknown, false)?;
        let ns = self.inner.lock().machine.duration_ns()?;
        Ok(Duration::from_nanos(ns))
    }
}

impl<E: Event, A: CommAbort> Inner<E, A> {
    fn lock(&self) -> MutexGuard<'_, Cell> {
        self.cell.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What to report of a completion (`completed`) or failure seen now, unless the work's
    /// completion or failure was reported already (the watchdog's part, under the lock).
    fn take_report(&self, c: &mut Cell, now: u64, completed: bool) -> Option<Report> {
        if std::mem::replace(&mut c.reported, true) {
            return None;
        }
        // Recorded now if still pending: the watchdog records before it polls, in queue
        // order, so this only settles an entry it has not reached yet.
        let trace = c.trace.settle(&self.watch.recorder);
        if !completed {
            return Some(Report {
                trace,
                completed: None,
                hook: None,
            });
        }
        let duration = c.machine.duration_ns().ok();
        let hook = duration.map(|ns| CompletedWork {
            group: self.watch.uid,
            op: self.info.kind,
            coalesced: self.info.coalesced,
            seq: self.info.seq,
            created_ns: self.created_ns,
            completed_ns: c.machine.ended_ns().unwrap_or(now),
            duration: Duration::from_nanos(ns),
        });
        Some(Report {
            trace,
            completed: Some(duration),
            hook,
        })
    }

    /// Hands a report to the recorder and the hooks (without the work's lock).
    fn deliver(&self, r: Report, now: u64) {
        match r.completed {
            Some(duration) => self.watch.recorder.complete(r.trace, now, duration),
            // Its entry keeps the state it reached (scheduled or started) for the dumps.
            None => self.watch.recorder.finish(r.trace, None),
        }
        if let Some(done) = r.hook {
            self.watch.run_hooks(&done);
        }
    }

    /// One look at the operation: `Ok(true)` completed, `Ok(false)` still running, or its
    /// first error (the communicator's asynchronous error, an abort, a timeout). With
    /// `wait_limit_ms` (a waiting caller) a timeout aborts the communicator; without it (the
    /// watchdog, a query) the group's timeout applies and the watchdog's plan decides.
    /// `hint`: what the watchdog knows from the group's other works, saving the query.
    /// With `report` (the watchdog), the first completion or failure seen is also handed to
    /// the recorder and the hooks.
    fn poll(&self, now: u64, wait_limit_ms: Option<u64>, hint: Hint, report: bool) -> Result<bool> {
        let mut c = self.lock();
        if c.machine.state().is_final() {
            let r = c.machine.error().map_or(Ok(true), |e| Err(e.clone()));
            let rep = report.then(|| self.take_report(&mut c, now, r.is_ok()));
            drop(c);
            if let Some(rep) = rep.flatten() {
                self.deliver(rep, now);
            }
            return r;
        }
        if hint == Hint::Pending {
            // An earlier work of the stream still runs: only the deadline can end this one.
            drop(c);
            return self.check_deadline(now, wait_limit_ms, report);
        }
        let completed = match (&self.end, hint) {
            (None, _) | (_, Hint::Done) => Ok(true),
            (Some(end), _) => end.query(),
        };
        // A stream that passed the operation may still have cut it short (an abort, a peer's
        // failure): the communicator's error decides.
        let outcome = completed.and_then(|c| match &self.abort {
            Some(a) => match (c, a.state()) {
                // Passed on a healthy communicator: done, without asking the library.
                (true, oxccl_core::CommState::Ready) => Ok(true),
                // A destroyed communicator's stream may have dropped the work unrun.
                (_, oxccl_core::CommState::Destroyed) => Err(Error::Aborted {
                    reason: oxccl_core::text!("the communicator was destroyed"),
                }),
                _ => a.poll().map(|_| c),
            },
            None => Ok(c),
        });
        let completed = match outcome {
            Ok(done) => done,
            Err(e) => {
                let _ = c.machine.fail(now, e.clone());
                let rep = if report {
                    self.take_report(&mut c, now, false)
                } else {
                    None
                };
                let id = c.trace.recorded();
                drop(c);
                match rep {
                    Some(rep) => self.deliver(rep, now),
                    None => self.watch.recorder.finish(id, None),
                }
                return Err(e);
            }
        };
        if completed {
            let _ = c.machine.observe(now, true, true);
            if let (Some(s), Some(e)) = (&self.start, &self.end) {
                if let Ok(ms) = s.elapsed_ms(e) {
                    let _ = c
                        .machine
                        .set_measured_duration((f64::from(ms.max(0.0)) * 1e6) as u64);
                }
            }
            let rep = report.then(|| self.take_report(&mut c, now, true));
            drop(c);
            if let Some(rep) = rep.flatten() {
                self.deliver(rep, now);
            }
            return Ok(true);
        }
        if c.machine.state() == oxccl_core::WorkState::Scheduled {
            if let Some(s) = &self.start {
                if s.query().unwrap_or(false) {
                    let _ = c.machine.observe(now, true, false);
                    self.watch
                        .recorder
                        .update(c.trace.recorded(), TraceState::Started, now);
                }
            }
        }
        drop(c);
        self.check_deadline(now, wait_limit_ms, report)
    }

    /// `Ok(false)` while the work is within its limit (`wait_limit_ms`, else the group's
    /// timeout); its timeout error past it (a waiting caller's timeout aborts the
    /// communicator). With desync debugging on, the error (and the abort's reason) says which
    /// ranks never joined the collective: read from the store without the work's lock.
    /// With `report` (the watchdog), a timeout seen first is reported (see [`Inner::poll`]).
    fn check_deadline(&self, now: u64, wait_limit_ms: Option<u64>, report: bool) -> Result<bool> {
        let limit = wait_limit_ms.unwrap_or(self.info.timeout_ms);
        let c = self.lock();
        let past = c.machine.is_past_deadline(now, limit);
        if !past && !c.machine.state().is_final() {
            return Ok(false);
        }
        drop(c);
        let info = self.info;
        let verdict = past
            .then(|| self.watch.verdict(info.seq, info.kind))
            .flatten();
        let note = verdict.as_ref().map(|v| v.note()).unwrap_or_default();
        let mut c = self.lock();
        let checked = c.machine.check_deadline_noting(now, limit, &note);
        let rep = if report && checked.is_err() {
            self.take_report(&mut c, now, false)
        } else {
            None
        };
        drop(c);
        if let Some(rep) = rep {
            self.deliver(rep, now);
        }
        if let Err(e) = checked {
            if wait_limit_ms.is_some() {
                if let Some(a) = &self.abort {
                    let reason = match verdict.as_ref().and_then(|v| v.headline()) {
                        Some(h) => format!("{h}; {e}"),
                        None => e.to_string(),
                    };
                    a.abort(&reason);
                }
            }
            return Err(e);
        }
        Ok(false)
    }
}

impl<E: Event + 'static, A: CommAbort> Watched for Inner<E, A> {
    fn record_trace(&self) {
        self.lock().trace.settle(&self.watch.recorder);
    }

    fn probe_done(&self) -> Option<bool> {
        // A work that issued nothing (an empty batch) says nothing of its stream.
        self.end.as_ref().map(|end| end.query().unwrap_or(false))
    }

    fn poll(&self, now_ns: u64, hint: Hint) -> Result<bool> {
        Inner::poll(self, now_ns, None, hint, true)
    }

    fn deadline_ns(&self) -> u64 {
        self.created_ns
            .saturating_add(self.info.timeout_ms.saturating_mul(1_000_000))
    }

    fn watch(&self) -> &GroupWatch {
        &self.watch
    }

    fn watch_arc(&self) -> Arc<GroupWatch> {
        self.watch.clone()
    }

    fn info(&self) -> WorkInfo {
        self.info
    }

    fn abort_comm(&self, reason: &str) {
        if let Some(a) = &self.abort {
            a.abort(reason);
        }
    }
}

/// `Work` over a backend's event and abort handle.
pub type WorkOf<B> = Work<super::EventOf<B>, super::AbortOf<B>>;
