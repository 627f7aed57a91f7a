//! The handle of an operation in flight: c10d's `Work`.

use super::{AbortOf, EventOf};
use oxccl_core::{text, CommAbort, Error, Event, Result};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// What one operation of a process group is, for its work's messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkMeta {
    /// Sequence number: from 1 per group, equal across the group's ranks (p2p operations
    /// count separately from collectives).
    pub seq: u64,
    /// The operation (`"all_reduce"`, `"send"`, `"coalesced"`, …).
    pub op: &'static str,
    /// Elements read by this rank.
    pub numel_in: usize,
    /// Elements written on this rank.
    pub numel_out: usize,
}

#[derive(Debug, Clone)]
enum Status {
    Pending,
    Done,
    /// Boxed: the error is large and rare; the status is read on every poll.
    Failed(Box<Error>),
}

struct Inner<E, A> {
    meta: WorkMeta,
    timeout: Duration,
    created: Instant,
    /// Recorded before the operation when timing is on.
    start: Option<E>,
    /// Recorded after the operation; `None` for work that issued nothing (a non-member's
    /// call, an empty batch).
    end: Option<E>,
    abort: Option<A>,
    status: Mutex<Status>,
}

/// An operation in flight: wait for it, ask whether it completed, read its first error and its
/// duration. Cheap to clone (a watchdog may hold a clone). Dropping it never waits: the
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
        f.debug_struct("Work")
            .field("meta", &self.inner.meta)
            .field("timeout", &self.inner.timeout)
            .finish()
    }
}

/// How long a waiting thread sleeps between polls once the first quick polls found nothing.
const POLL_SLEEP: Duration = Duration::from_micros(200);
/// Polls that only yield before the waiting thread starts to sleep (short operations end here).
const QUICK_POLLS: u32 = 64;

impl<E: Event, A: CommAbort> Work<E, A> {
    pub(crate) fn new(
        meta: WorkMeta,
        timeout: Duration,
        start: Option<E>,
        end: Option<E>,
        abort: Option<A>,
    ) -> Self {
        let done = end.is_none();
        Work {
            inner: Arc::new(Inner {
                meta,
                timeout,
                created: Instant::now(),
                start,
                end,
                abort,
                status: Mutex::new(if done { Status::Done } else { Status::Pending }),
            }),
        }
    }

    /// The operation's sequence number, op type and element counts.
    pub fn meta(&self) -> WorkMeta {
        self.inner.meta
    }

    /// The sequence number (from 1 per group, equal across ranks).
    pub fn seq(&self) -> u64 {
        self.inner.meta.seq
    }

    /// The time limit [`Work::wait`] applies.
    pub fn timeout(&self) -> Duration {
        self.inner.timeout
    }

    fn status(&self) -> std::sync::MutexGuard<'_, Status> {
        self.inner
            .status
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// One look at the operation: completed, failed (the communicator's asynchronous error, or
    /// an abort), timed out (then the communicator is aborted with the reason), or still
    /// running (`Ok(false)`). The first cause is kept: later looks report the same error.
    fn poll_once(&self, limit: Duration) -> Result<bool> {
        let mut st = self.status();
        match &*st {
            Status::Done => return Ok(true),
            Status::Failed(e) => return Err((**e).clone()),
            Status::Pending => {}
        }
        let outcome = self.look(limit);
        match outcome {
            Ok(true) => *st = Status::Done,
            Ok(false) => {}
            Err(ref e) => *st = Status::Failed(Box::new(e.clone())),
        }
        outcome
    }

    fn look(&self, limit: Duration) -> Result<bool> {
        // An operation whose stream passed it may still have failed (an abort or a peer's
        // failure ends it early): the communicator's error decides, once either way.
        let passed = match &self.inner.end {
            Some(end) => end.query()?,
            None => true,
        };
        if let Some(a) = &self.inner.abort {
            a.poll()?;
        }
        if passed {
            return Ok(true);
        }
        let ran = self.inner.created.elapsed();
        if ran >= limit {
            let m = self.inner.meta;
            let e = Error::Timeout {
                what: text!(
                    "work seq {} ({}, numel in {}, out {}, timeout {} ms) ran for {} ms",
                    m.seq,
                    m.op,
                    m.numel_in,
                    m.numel_out,
                    limit.as_millis(),
                    ran.as_millis()
                ),
                after_ms: ran.as_millis() as u64,
            };
            if let Some(a) = &self.inner.abort {
                a.abort(&e.to_string());
            }
            return Err(e);
        }
        Ok(false)
    }

    /// Whether the operation has finished, successfully or not (never blocks).
    pub fn is_completed(&self) -> bool {
        !matches!(self.poll_once(self.inner.timeout), Ok(false))
    }

    /// Whether the operation finished successfully (never blocks).
    pub fn is_success(&self) -> bool {
        matches!(self.poll_once(self.inner.timeout), Ok(true))
    }

    /// The first error of the operation, once it failed.
    pub fn error(&self) -> Option<Error> {
        match &*self.status() {
            Status::Failed(e) => Some((**e).clone()),
            _ => None,
        }
    }

    /// Blocks until the operation completed, bounded by the group's timeout (counted from the
    /// issue). On a timeout the communicator is aborted with the reason, and every later
    /// operation on it fails fast saying so.
    pub fn wait(&self) -> Result<()> {
        self.wait_timeout(self.inner.timeout)
    }

    /// [`Work::wait`] with its own limit, counted from the issue.
    pub fn wait_timeout(&self, limit: Duration) -> Result<()> {
        let mut polls = 0u32;
        while !self.poll_once(limit)? {
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
        let (Some(start), Some(end)) = (&self.inner.start, &self.inner.end) else {
            return Err(Error::invalid(
                "timing",
                format_args!("a work of a group with timing on (PgOptions::timing)"),
            ));
        };
        if !self.is_success() {
            return Err(Error::invalid(
                "work",
                format_args!("a completed work (wait for it first)"),
            ));
        }
        let ms = start.elapsed_ms(end)?;
        Ok(Duration::from_secs_f64(f64::from(ms.max(0.0)) / 1000.0))
    }
}

/// `Work` over a backend's event and abort handle.
pub type WorkOf<B> = Work<EventOf<B>, AbortOf<B>>;
