//! The handle of an operation in flight: c10d's `Work`, over the core's work state machine.

use super::recorder::now_ns;
use super::trace_slot::TraceSlot;
use super::watch::{CompletedWork, GroupWatch};
use crate::watchdog::{Hint, Watched};
use oxccl_core::state::work::{Work as WorkMachine, WorkInfo};
use oxccl_core::trace::TraceState;
use oxccl_core::{CommAbort, Error, Event, OpKind, Result};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

pub(crate) struct Inner<E, A> {
    /// Recorded before the operation when timing is on.
    start: Option<E>,
    /// Recorded after the operation; `None` for work that issued nothing.
    end: Option<E>,
    abort: Option<A>,
    state: Mutex<WorkMachine>,
    /// The flight-recorder entry (recorded by the watchdog, off the hot path).
    trace: Mutex<TraceSlot>,
    watch: Arc<GroupWatch>,
    /// Whether the completion was handed to hooks and the recorder (once).
    reported: AtomicBool,
    /// Issued inside a graph capture: it runs only at the graph's launches.
    captured: bool,
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
        let st = self
            .inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        f.debug_struct("Work")
            .field("info", st.info())
            .field("state", &st.state())
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
    pub(crate) fn new(
        info: WorkInfo,
        start: Option<E>,
        end: Option<E>,
        abort: Option<A>,
        trace: TraceSlot,
        watch: Arc<GroupWatch>,
    ) -> Self {
        let mut state = WorkMachine::new(info, now_ns());
        if end.is_none() {
            // Nothing was issued: complete at once (an empty batch).
            let _ = state.observe(now_ns(), true, true);
        }
        Work {
            inner: Arc::new(Inner {
                start,
                end,
                abort,
                state: Mutex::new(state),
                trace: Mutex::new(trace),
                watch,
                reported: AtomicBool::new(false),
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
        let mut state = WorkMachine::new(info, now);
        let _ = state.fail(
            now,
            oxccl_core::CaptureError::Forbidden.error(format_args!(
                "waiting on {} (seq {}), which was captured into a graph: it runs at each \
                 launch of the graph; wait on the work PgGraph::launch returns",
                info.kind, info.seq
            )),
        );
        Work {
            inner: Arc::new(Inner {
                start: None,
                end: None,
                abort: None,
                state: Mutex::new(state),
                trace: Mutex::new(TraceSlot::Off),
                watch,
                reported: AtomicBool::new(true),
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
        *self.inner.lock().info()
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
        !matches!(self.inner.poll(now_ns(), None, Hint::Unknown), Ok(false))
    }

    /// Whether the operation finished successfully (never blocks).
    pub fn is_success(&self) -> bool {
        matches!(self.inner.poll(now_ns(), None, Hint::Unknown), Ok(true))
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
        let mut polls = 0u32;
        while !self.inner.poll(now_ns(), Some(ms(limit)), Hint::Unknown)? {
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
        self.inner.poll(now_ns(), None, Hint::Unknown)?;
        let ns = self.inner.lock().duration_ns()?;
        Ok(Duration::from_nanos(ns))
    }
}

impl<E: Event, A: CommAbort> Inner<E, A> {
    fn lock(&self) -> MutexGuard<'_, WorkMachine> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The work's recorder entry, recorded now if still pending (the watchdog's call: it
    /// records in queue order, which is issue order).
    fn trace_id(&self) -> Option<u64> {
        self.trace
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .settle(&self.watch.recorder)
    }

    /// The work's recorder entry if already recorded (any thread; records nothing).
    fn recorded_id(&self) -> Option<u64> {
        match *self.trace.lock().unwrap_or_else(PoisonError::into_inner) {
            TraceSlot::Recorded(id) => Some(id),
            _ => None,
        }
    }

    /// One look at the operation: `Ok(true)` completed, `Ok(false)` still running, or its
    /// first error (the communicator's asynchronous error, an abort, a timeout). With
    /// `wait_limit_ms` (a waiting caller) a timeout aborts the communicator; without it (the
    /// watchdog, a query) the group's timeout applies and the watchdog's plan decides.
    /// `hint`: what the watchdog knows from the group's other works, saving the query.
    fn poll(&self, now: u64, wait_limit_ms: Option<u64>, hint: Hint) -> Result<bool> {
        let mut st = self.lock();
        if st.state().is_final() {
            return st.error().map_or(Ok(true), |e| Err(e.clone()));
        }
        if hint == Hint::Pending {
            // An earlier work of the stream still runs: only the deadline can end this one.
            drop(st);
            return self.check_deadline(now, wait_limit_ms);
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
            Ok(c) => c,
            Err(e) => {
                let _ = st.fail(now, e.clone());
                drop(st);
                self.watch.recorder.finish(self.recorded_id(), None);
                return Err(e);
            }
        };
        if completed {
            let _ = st.observe(now, true, true);
            if let (Some(s), Some(e)) = (&self.start, &self.end) {
                if let Ok(ms) = s.elapsed_ms(e) {
                    let _ = st.set_measured_duration((f64::from(ms.max(0.0)) * 1e6) as u64);
                }
            }
            return Ok(true);
        }
        if st.state() == oxccl_core::WorkState::Scheduled {
            if let Some(s) = &self.start {
                if s.query().unwrap_or(false) {
                    let _ = st.observe(now, true, false);
                    self.watch
                        .recorder
                        .update(self.recorded_id(), TraceState::Started, now);
                }
            }
        }
        drop(st);
        self.check_deadline(now, wait_limit_ms)
    }

    /// `Ok(false)` while the work is within its limit (`wait_limit_ms`, else the group's
    /// timeout); its timeout error past it (a waiting caller's timeout aborts the
    /// communicator). With desync debugging on, the error (and the abort's reason) says which
    /// ranks never joined the collective: read from the store without the work's lock.
    fn check_deadline(&self, now: u64, wait_limit_ms: Option<u64>) -> Result<bool> {
        let st = self.lock();
        let limit = wait_limit_ms.unwrap_or(st.info().timeout_ms);
        let past = st.is_past_deadline(now, limit);
        if !past && !st.state().is_final() {
            return Ok(false);
        }
        let info = *st.info();
        drop(st);
        let verdict = past
            .then(|| self.watch.verdict(info.seq, info.kind))
            .flatten();
        let note = verdict.as_ref().map(|v| v.note()).unwrap_or_default();
        let checked = self.lock().check_deadline_noting(now, limit, &note);
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
        self.trace_id();
    }

    fn probe_done(&self) -> Option<bool> {
        // A work that issued nothing (an empty batch) says nothing of its stream.
        self.end.as_ref().map(|end| end.query().unwrap_or(false))
    }

    fn poll(&self, now_ns: u64, hint: Hint) -> Result<bool> {
        let r = Inner::poll(self, now_ns, None, hint);
        if matches!(r, Ok(true)) && !self.reported.swap(true, Ordering::AcqRel) {
            let st = self.lock();
            let duration = st.duration_ns().ok();
            let done = duration.map(|ns| CompletedWork {
                group: self.watch.uid,
                op: st.info().kind,
                coalesced: st.info().coalesced,
                seq: st.info().seq,
                created_ns: st.created_ns(),
                completed_ns: st.ended_ns().unwrap_or(now_ns),
                duration: Duration::from_nanos(ns),
            });
            drop(st);
            self.watch
                .recorder
                .update(self.trace_id(), TraceState::Completed, now_ns);
            self.watch.recorder.finish(self.trace_id(), duration);
            if let Some(done) = done {
                self.watch.run_hooks(&done);
            }
        }
        if r.is_err() && !self.reported.swap(true, Ordering::AcqRel) {
            // Its entry keeps the state it reached (scheduled or started) for the dumps.
            self.watch.recorder.finish(self.trace_id(), None);
        }
        r
    }

    fn deadline_ns(&self) -> u64 {
        let st = self.lock();
        st.created_ns()
            .saturating_add(st.info().timeout_ms.saturating_mul(1_000_000))
    }

    fn watch(&self) -> &GroupWatch {
        &self.watch
    }

    fn watch_arc(&self) -> Arc<GroupWatch> {
        self.watch.clone()
    }

    fn info(&self) -> WorkInfo {
        *self.lock().info()
    }

    fn abort_comm(&self, reason: &str) {
        if let Some(a) = &self.abort {
            a.abort(reason);
        }
    }
}

/// `Work` over a backend's event and abort handle.
pub type WorkOf<B> = Work<super::EventOf<B>, super::AbortOf<B>>;
