//! Streams as ordered executors: one worker thread per stream runs boxed tasks in issue order;
//! events are tasks that stamp the time they are reached.
//!
//! Dropping a stream lets the worker finish what was queued, waiting up to [`DROP_GRACE`]. Work
//! blocked in a collective that cannot complete (a peer never joins) only ends when a rank of
//! that communicator is aborted; if the grace passes first, the drop returns and the worker is
//! left detached, to end when it is woken (never a hang in `drop`). Abort before dropping.

use crate::sync::{lock, wait_for, TICK};
use oxccl_core::{text, Error, Result, ResultCode};
use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long dropping a stream waits for its queued work before detaching its worker.
pub const DROP_GRACE: Duration = Duration::from_secs(5);

pub(crate) type Thunk = Box<dyn FnOnce() + Send + 'static>;

struct Queue {
    tasks: VecDeque<Thunk>,
    closing: bool,
    finished: bool,
    submitted: u64,
    completed: u64,
}

/// The part of a stream its worker and its submitters share.
pub(crate) struct StreamShared {
    q: Mutex<Queue>,
    cv: Condvar,
    /// What the stream records while it captures a graph (see `capture`).
    pub(crate) rec: Mutex<crate::capture::Recording>,
}

impl StreamShared {
    /// Queues `task` after everything queued so far.
    pub(crate) fn push(&self, task: Thunk) -> Result<()> {
        self.push_numbered(task).map(|_| ())
    }

    /// [`StreamShared::push`], returning how many tasks were submitted including this one.
    fn push_numbered(&self, task: Thunk) -> Result<u64> {
        let mut q = lock(&self.q);
        if q.closing {
            return Err(Error::Backend {
                code: ResultCode::INVALID_USAGE,
                text: text!("invalid usage"),
                last: text!("the stream was destroyed"),
            });
        }
        q.tasks.push_back(task);
        q.submitted += 1;
        let n = q.submitted;
        drop(q);
        self.cv.notify_all();
        Ok(n)
    }

    /// Blocks until the worker has finished the first `n` tasks (counted, not just run).
    fn wait_completed(&self, n: u64) {
        let mut q = lock(&self.q);
        while q.completed < n && !q.finished {
            q = wait_for(&self.cv, q, TICK);
        }
    }

    fn work(&self) {
        let mut q = lock(&self.q);
        loop {
            if let Some(task) = q.tasks.pop_front() {
                drop(q);
                // A panicking task must not kill the worker (synchronize would then hang).
                let _ = catch_unwind(AssertUnwindSafe(task));
                q = lock(&self.q);
                q.completed += 1;
                self.cv.notify_all();
            } else if q.closing {
                q.finished = true;
                self.cv.notify_all();
                return;
            } else {
                q = wait_for(&self.cv, q, TICK);
            }
        }
    }
}

/// An ordered queue of work with its own worker thread: the mock's CUDA stream.
pub struct MockStream {
    shared: Arc<StreamShared>,
    worker: Option<JoinHandle<()>>,
    /// The priority it was made with (recorded only: one worker thread per stream either way).
    priority: oxccl_core::traits::StreamPriority,
}

impl std::fmt::Debug for MockStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockStream")
            .field("idle", &self.query())
            .finish()
    }
}

impl MockStream {
    /// A new stream and its worker thread.
    pub fn new() -> Result<MockStream> {
        let shared = Arc::new(StreamShared {
            q: Mutex::new(Queue {
                tasks: VecDeque::new(),
                closing: false,
                finished: false,
                submitted: 0,
                completed: 0,
            }),
            cv: Condvar::new(),
            rec: Mutex::default(),
        });
        let s = shared.clone();
        let worker = std::thread::Builder::new()
            .name("oxccl-mock-stream".into())
            .spawn(move || s.work())
            .map_err(|e| Error::Backend {
                code: ResultCode::SYSTEM_ERROR,
                text: text!("unhandled system error"),
                last: text!("cannot start a stream thread: {e}"),
            })?;
        Ok(MockStream {
            shared,
            worker: Some(worker),
            priority: oxccl_core::traits::StreamPriority::Normal,
        })
    }

    /// A new stream recording `priority` (what [`MockStream::priority`] reports).
    pub fn with_priority(priority: oxccl_core::traits::StreamPriority) -> Result<MockStream> {
        let mut s = MockStream::new()?;
        s.priority = priority;
        Ok(s)
    }

    /// The priority the stream was made with.
    pub fn priority(&self) -> oxccl_core::traits::StreamPriority {
        self.priority
    }

    /// Whether everything queued so far has run (never blocks).
    pub fn query(&self) -> bool {
        let q = lock(&self.shared.q);
        q.completed == q.submitted
    }

    /// Runs `f` on the stream's worker after everything queued so far (CUDA's
    /// `cuLaunchHostFunc`): how buffers keep their memory alive until the work using it ran.
    ///
    /// Refused while the stream captures a graph (a one-shot closure cannot be replayed).
    pub fn host_fn(&self, f: impl FnOnce() + Send + 'static) -> Result<()> {
        crate::capture::refuse_while_capturing(&self.shared.rec, "a host callback")?;
        self.shared.push(Box::new(f))
    }

    pub(crate) fn shared(&self) -> &Arc<StreamShared> {
        &self.shared
    }
}

impl Drop for MockStream {
    fn drop(&mut self) {
        // `None` only if the clock is at its end: then the worker is detached at once.
        let deadline = Instant::now().checked_add(DROP_GRACE);
        let mut q = lock(&self.shared.q);
        q.closing = true;
        self.shared.cv.notify_all();
        while !q.finished && deadline.is_some_and(|d| Instant::now() < d) {
            q = wait_for(&self.shared.cv, q, TICK);
        }
        let finished = q.finished;
        drop(q);
        if let Some(w) = self.worker.take() {
            if finished {
                let _ = w.join();
            }
            // Otherwise the worker is detached: it holds its own Arc and ends when woken.
        }
    }
}

struct EventState {
    at: Mutex<Option<Instant>>,
    cv: Condvar,
    timing: bool,
    /// Recorded while its stream captured a graph: never completes, and the host may not ask.
    captured: bool,
}

/// A point in a stream's work, completed when the stream reaches it.
#[derive(Clone)]
pub struct MockEvent {
    state: Arc<EventState>,
}

impl std::fmt::Debug for MockEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockEvent")
            .field("timing", &self.state.timing)
            .field("done", &self.is_done())
            .finish()
    }
}

impl MockEvent {
    fn is_done(&self) -> bool {
        lock(&self.state.at).is_some()
    }

    fn complete(&self) {
        let mut at = lock(&self.state.at);
        if at.is_none() {
            *at = Some(Instant::now());
        }
        self.state.cv.notify_all();
    }

    fn wait(&self) -> Instant {
        let mut at = lock(&self.state.at);
        loop {
            if let Some(t) = *at {
                return t;
            }
            at = wait_for(&self.state.cv, at, TICK);
        }
    }

    /// Whether the event was recorded while its stream captured a graph.
    pub fn is_captured(&self) -> bool {
        self.state.captured
    }

    /// The refusal of `what` on an event recorded inside a capture.
    fn refuse_captured(&self, what: &str) -> Result<()> {
        if self.state.captured {
            return Err(oxccl_core::CaptureError::Forbidden.error(format_args!(
                "{what} an event recorded while its stream captured a graph"
            )));
        }
        Ok(())
    }

    /// When the stream reached the event, once it has.
    pub fn time(&self) -> Option<Instant> {
        *lock(&self.state.at)
    }
}

impl oxccl_core::Stream for MockStream {
    type Event = MockEvent;

    fn record(&self, timing: bool) -> Result<MockEvent> {
        let captured = crate::capture::capturing(&self.shared.rec);
        let ev = MockEvent {
            state: Arc::new(EventState {
                at: Mutex::new(None),
                cv: Condvar::new(),
                timing,
                captured,
            }),
        };
        if captured {
            // A point inside the graph: the stream's own order already keeps it.
            return Ok(ev);
        }
        let e = ev.clone();
        self.shared.push(Box::new(move || e.complete()))?;
        Ok(ev)
    }

    fn wait_event(&self, event: &MockEvent) -> Result<()> {
        if crate::capture::capturing(&self.shared.rec) {
            if event.state.captured {
                // An event of this capture: the stream's order already keeps it.
                return Ok(());
            }
            // CUDA: waiting on an event recorded outside the capture invalidates it.
            crate::capture::refuse_while_capturing(
                &self.shared.rec,
                "waiting on an event recorded outside the capture",
            )?;
        }
        event.refuse_captured("waiting on")?;
        let e = event.clone();
        self.shared.push(Box::new(move || {
            e.wait();
        }))
    }

    fn synchronize(&self) -> Result<()> {
        crate::capture::refuse_while_capturing(&self.shared.rec, "synchronizing the stream")?;
        // Waits for the worker's count, not only for an event task to have run: `query()` is
        // true as soon as this returns.
        let n = self.shared.push_numbered(Box::new(|| {}))?;
        self.shared.wait_completed(n);
        Ok(())
    }
}

impl oxccl_core::Event for MockEvent {
    fn query(&self) -> Result<bool> {
        self.refuse_captured("querying")?;
        Ok(self.is_done())
    }

    fn synchronize(&self) -> Result<()> {
        self.refuse_captured("synchronizing")?;
        self.wait();
        Ok(())
    }

    fn elapsed_ms(&self, end: &MockEvent) -> Result<f32> {
        if !self.state.timing || !end.state.timing {
            return Err(Error::invalid(
                "event",
                format_args!("events recorded with timing on (record(true))"),
            ));
        }
        match (self.time(), end.time()) {
            (Some(a), Some(b)) => Ok(match b.checked_duration_since(a) {
                Some(d) => d.as_secs_f32() * 1000.0,
                None => -(a.duration_since(b).as_secs_f32() * 1000.0),
            }),
            _ => Err(Error::invalid(
                "event",
                format_args!("events the stream has reached (query() is true)"),
            )),
        }
    }
}
