//! The handle of an operation in flight: c10d's `Work`. Most works are slots of their
//! communicator's ring (`ring`), which costs the issuing thread a slot's write; the rest, and
//! those a ring hands out when they need a look of their own, carry their own state
//! (`tracked`). The handle answers the same either way.

pub(crate) mod home;
mod prefetch;
pub(crate) mod ring;
pub(crate) mod tracked;

use crate::buffer::StreamOf;
use crate::deadline::ms;
use crate::recorder::now_ns;
use crate::watchdog::{Hint, Watchdog, Watched};
use home::WorkHome;
use oxccl_core::state::work::{WorkError, WorkInfo};
use oxccl_core::traits::AbortOf;
use oxccl_core::{CommAbort, Error, Event, OpKind, Result, Stream, WorkState};
use ring::WorkRing;
use std::sync::Arc;
use std::time::Duration;
use tracked::TrackedWork;

/// An operation in flight: wait for it, ask whether it completed, read its first error and its
/// duration. Cheap to clone. Dropping it never waits: the operation goes on in stream order,
/// and its buffers stay valid until it has run.
///
/// ```
/// use oxccl::launch::{spawn, WithProcessGroup};
/// use oxccl::pg::{PgBackend, ProcessGroup};
/// use std::time::Duration;
///
/// #[derive(Clone)]
/// struct Step;
/// impl WithProcessGroup for Step {
///     type Output = Vec<f32>;
///     fn run<B: PgBackend>(self, pg: ProcessGroup<B>) -> oxccl::Result<Vec<f32>> {
///         let mut x = pg.upload(&[pg.global_rank() as f32; 2])?;
///         let work = pg.broadcast(&mut x, 1)?;        // rank 1's values to every rank
///         work.wait_timeout(Duration::from_secs(60))?; // or wait(), bounded by the group's timeout
///         assert!(work.is_completed() && work.error().is_none());
///         pg.download(&x)
///     }
/// }
///
/// fn main() -> oxccl::Result<()> {
///     # std::env::set_var("OXCCL_BACKEND", "mock");
///     assert_eq!(spawn(2, Step)?, [vec![1.0, 1.0], vec![1.0, 1.0]]);
///     Ok(())
/// }
/// ```
pub struct Work<E, A> {
    of: Of<E, A>,
}

/// Where a work's state is.
enum Of<E, A> {
    /// Its own.
    Tracked(Arc<TrackedWork<E, A>>),
    /// A slot of its communicator's ring, at `place`.
    Ring {
        ring: Arc<WorkRing<E, A>>,
        place: u64,
        info: WorkInfo,
        created_ns: u64,
    },
    /// Issued inside a graph capture: nothing ran, and nothing will until the graph is
    /// launched, so it is final at once and failed (see [`Work::is_captured`]).
    Captured(WorkInfo),
}

impl<E, A> Clone for Work<E, A> {
    fn clone(&self) -> Self {
        let of = match &self.of {
            Of::Tracked(t) => Of::Tracked(t.clone()),
            Of::Ring {
                ring,
                place,
                info,
                created_ns,
            } => Of::Ring {
                ring: ring.clone(),
                place: *place,
                info: *info,
                created_ns: *created_ns,
            },
            Of::Captured(info) => Of::Captured(*info),
        };
        Work { of }
    }
}

impl<E: Event + 'static, A: CommAbort + 'static> std::fmt::Debug for Work<E, A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Work")
            .field("info", &self.info())
            .field("state", &self.state())
            .finish()
    }
}

impl<E: Event + 'static, A: CommAbort + 'static> Work<E, A> {
    /// A work with its own state.
    pub(crate) fn tracked(t: Arc<TrackedWork<E, A>>) -> Self {
        Work { of: Of::Tracked(t) }
    }

    /// The work at `place` of `ring`.
    pub(crate) fn in_ring(
        ring: Arc<WorkRing<E, A>>,
        place: u64,
        info: WorkInfo,
        created_ns: u64,
    ) -> Self {
        Work {
            of: Of::Ring {
                ring,
                place,
                info,
                created_ns,
            },
        }
    }

    /// The work of an operation issued inside a graph capture (nothing allocated).
    pub(crate) fn captured(info: WorkInfo) -> Self {
        Work {
            of: Of::Captured(info),
        }
    }

    /// The work's own state, if it has one (its own from the start, or handed out by its ring).
    fn own(&self) -> Option<Arc<TrackedWork<E, A>>> {
        match &self.of {
            Of::Tracked(t) => Some(t.clone()),
            Of::Ring { ring, place, .. } => ring.handed_out(*place),
            Of::Captured(_) => None,
        }
    }

    /// What the works of its communicator share; `None` for a captured work.
    fn home(&self) -> Option<&WorkHome<A>> {
        match &self.of {
            Of::Tracked(t) => Some(&t.home),
            Of::Ring { ring, .. } => Some(&ring.home),
            Of::Captured(_) => None,
        }
    }

    /// Its state as a look finds it (never blocks).
    fn state(&self) -> WorkState {
        if let Of::Captured(_) = self.of {
            return WorkState::Failed;
        }
        if let Some(t) = self.own() {
            return t.lock().state();
        }
        match self.poll(now_ns(), None) {
            Ok(true) => WorkState::Completed,
            _ => self
                .own()
                .map_or(WorkState::Scheduled, |t| t.lock().state()),
        }
    }

    /// One look (see [`TrackedWork::poll`]).
    fn poll(&self, now: u64, wait_limit_ms: Option<u64>) -> Result<bool> {
        match &self.of {
            Of::Tracked(t) => t.poll(now, wait_limit_ms, Hint::Unknown, None),
            Of::Ring {
                ring,
                place,
                created_ns,
                ..
            } => ring.poll(*place, *created_ns, now, wait_limit_ms),
            Of::Captured(info) => Err(captured_error(info)),
        }
    }

    /// The work as the watchdog holds it, when it has its own state.
    pub(crate) fn watched(&self) -> Option<Arc<dyn Watched>> {
        match &self.of {
            Of::Tracked(t) => Some(t.clone()),
            Of::Ring { .. } | Of::Captured(_) => None,
        }
    }

    /// Whether the operation was issued inside a graph capture
    /// ([`super::ProcessGroup::capture`]): such a work is final at once, not successful, and
    /// [`Work::wait`] returns its [`Error::Capture`]; the operation runs at each launch of
    /// the graph, whose own work ([`super::PgGraph::replay`]) is the one to wait on.
    pub fn is_captured(&self) -> bool {
        matches!(self.of, Of::Captured(_))
    }

    /// What the work is: sequence number, operation, element counts, timeout.
    pub fn info(&self) -> WorkInfo {
        match &self.of {
            Of::Tracked(t) => t.info,
            Of::Ring { info, .. } | Of::Captured(info) => *info,
        }
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
        !matches!(self.poll(now_ns(), None), Ok(false))
    }

    /// Whether the operation finished successfully (never blocks).
    pub fn is_success(&self) -> bool {
        matches!(self.poll(now_ns(), None), Ok(true))
    }

    /// The first error of the operation, once it failed.
    pub fn error(&self) -> Option<Error> {
        if let Of::Captured(info) = &self.of {
            return Some(captured_error(info));
        }
        self.own()?.lock().error().cloned()
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
            match self.poll(now, Some(ms(limit))) {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(e) => {
                    // A captured work's refusal is the caller's mistake, not a failure of
                    // the communicator: nothing to settle.
                    let Some(home) = self.home() else {
                        return Err(e);
                    };
                    Watchdog::instance().settle_failure(&home.watch, &e);
                    return Err(match &home.on_failure {
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
        self.poll(now_ns(), None)?;
        let ns = match self.own() {
            Some(t) => t.lock().duration_ns()?,
            // A work of a ring is never timed.
            None => return Err(WorkError::TimingDisabled.into()),
        };
        Ok(Duration::from_nanos(ns))
    }
}

/// What waiting on a work issued inside a graph capture returns: it runs at each launch of
/// the graph, whose own work is the one to wait on.
fn captured_error(info: &WorkInfo) -> Error {
    oxccl_core::CaptureError::Forbidden.error(format_args!(
        "waiting on {} (seq {}), which was captured into a graph: it runs at each launch of \
         the graph; wait on the work PgGraph::replay returns",
        info.kind, info.seq
    ))
}

/// `Work` over a backend's event and abort handle.
pub type WorkOf<B> = Work<EventOf<B>, AbortOf<B>>;

/// The event type of a backend's streams.
pub type EventOf<B> = <StreamOf<B> as Stream>::Event;
