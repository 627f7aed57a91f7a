//! A group's communicator: made on first use (or at once), by init through the store or by a
//! split of the parent's; closed by destroy.

use super::{AbortOf, CommOf};
use crate::buffer::{Memory, StreamOf};
use oxccl_core::{text, CommConfig, Communicator, Error, Result, UniqueId};
use std::time::Duration;

/// A communicator with the stream the group issues on.
pub(crate) struct Entry<B: Memory> {
    pub comm: CommOf<B>,
    pub stream: StreamOf<B>,
    pub abort: AbortOf<B>,
    /// Registrations and windows of buffers on `comm` (after it: dropped once it is gone).
    pub regs: super::tuned::RegCache,
}

impl<B: Memory> Entry<B> {
    /// The entry of `comm`, with a stream of `priority` made on it.
    pub fn new(comm: CommOf<B>, priority: oxccl_core::traits::StreamPriority) -> Result<Entry<B>> {
        let stream = comm.new_stream_with(priority)?;
        let abort = comm.abort_handle();
        Ok(Entry {
            comm,
            stream,
            abort,
            regs: super::tuned::RegCache::default(),
        })
    }
}

/// Where a group's communicator is.
pub(crate) enum Slot<B: Memory> {
    /// Not made yet (made by the first operation).
    Empty,
    /// Usable (or failed: the communicator itself reports that). Shared, so copies to and
    /// from the stream can run without the slot lock.
    Ready(std::sync::Arc<Entry<B>>),
    /// This rank is not a member: nothing is ever made.
    NotMember,
    /// Destroyed; the reason says by whom.
    Closed,
}

impl<B: Memory> Slot<B> {
    /// Aborts the communicator, if any, and leaves the slot closed. Never waits for peers.
    pub fn close(&mut self, reason: &str) {
        if let Slot::Ready(e) = std::mem::replace(self, Slot::Closed) {
            oxccl_core::CommAbort::abort(&e.abort, reason);
        }
    }
}

/// The parts of a communicator init through the store.
pub(crate) struct InitParams<'a> {
    pub store: &'a dyn crate::store::Store,
    pub key: String,
    pub rank: u32,
    pub size: u32,
    /// The global rank of group rank 0, which writes the id.
    pub writer: u32,
    pub global_rank: u32,
    pub device: oxccl_core::Device,
    pub config: &'a CommConfig,
    pub timeout: Duration,
}

/// Rank 0 makes the unique id and sets it in the store; the others wait for it (bounded by the
/// group's timeout: a rank that waits in vain is told which key and which rank it waited for).
pub(crate) fn init_through_store<B: Memory>(backend: &B, p: &InitParams<'_>) -> Result<CommOf<B>> {
    let id = if p.rank == 0 {
        let id = backend.unique_id()?;
        p.store.set(&p.key, id.as_bytes())?;
        id
    } else {
        let bytes = p.store.get(&p.key, p.timeout).map_err(|e| match e {
            Error::Timeout { after_ms, .. } => Error::Timeout {
                what: text!(
                    "rank {} waited for the unique id at store key `{}`, which rank {} writes (did it fail?)",
                    p.global_rank,
                    p.key,
                    p.writer
                ),
                after_ms,
            },
            other => other,
        })?;
        UniqueId::from_bytes(&bytes)?
    };
    // The group's timeout bounds the wait for missing ranks too (where the backend can).
    backend.init_rank_within(&id, p.rank, p.size, p.device, p.config, p.timeout)
}

/// Waits for a nonblocking communicator's init or split to finish, polling its abort handle,
/// bounded by `limit` (`OXCCL_NONBLOCKING_TIMEOUT_MS`; `None`: unbounded). Past the limit the
/// communicator is aborted (its later operations fail fast saying why) and the wait is a
/// timeout naming the variable. An abort from another thread ends the wait with its error.
pub(crate) fn await_ready<A: oxccl_core::CommAbort>(
    abort: &A,
    limit: Option<Duration>,
    what: &str,
) -> Result<()> {
    let began = std::time::Instant::now();
    let mut polls = 0u32;
    loop {
        match abort.poll()? {
            oxccl_core::Progress::Done => return Ok(()),
            oxccl_core::Progress::InProgress => {}
        }
        let waited = began.elapsed();
        if let Some(limit) = limit.filter(|l| waited >= *l) {
            let after_ms = waited.as_millis().min(u128::from(u64::MAX)) as u64;
            let why = format!(
                "{what} still in progress after {after_ms} ms (OXCCL_NONBLOCKING_TIMEOUT_MS = {})",
                limit.as_millis()
            );
            abort.abort(&why);
            return Err(Error::Timeout {
                what: text!("{why}"),
                after_ms,
            });
        }
        // Quick polls first (a split or init that is nearly done), then gentle ones.
        polls = polls.saturating_add(1);
        if polls < 64 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}
