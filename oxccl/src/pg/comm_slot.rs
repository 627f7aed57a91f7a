//! A group's communicator: made on first use (or at once), by init through the store or by a
//! split of the parent's; closed by destroy.

use super::arrival::Arrival;
use super::backend::PgBackend;
use super::keys;
use super::tune::reg_cache::RegCache;
use super::work::home::{OnFailure, WorkHome};
use super::work::ring::WorkRing;
use super::work::EventOf;
use crate::buffer::StreamOf;
use crate::deadline::deadline_after;
use oxccl_core::text::Escaped;
use oxccl_core::traits::{AbortOf, CommOf};
use oxccl_core::{text, CommConfig, Communicator, Error, Result, UniqueId};
use std::sync::Arc;
use std::time::Duration;

/// A communicator with the stream the group issues on. In declaration order, aligned, so
/// that what an operation reads (the handles, the ring, whether any buffer is in a window)
/// lies on the first cache line for a backend with small handles.
#[repr(C, align(64))]
pub(crate) struct Entry<B: PgBackend> {
    pub comm: CommOf<B>,
    pub stream: StreamOf<B>,
    pub abort: AbortOf<B>,
    /// The works in flight on `comm` that live as slots (see `work::ring`), and through it
    /// what every work issued on `comm` shares (`ring.home`: the group's watch, `abort`,
    /// their places).
    pub ring: Arc<WorkRing<EventOf<B>, AbortOf<B>>>,
    /// Registrations and windows of buffers on `comm` (after it: dropped once it is gone).
    pub regs: RegCache,
}

impl<B: PgBackend> Entry<B> {
    /// The entry of `comm`, with a stream of `priority` made on it; its works report to
    /// `watch`.
    /// `on_failure`: what a failed wait of its works asks (an elastic group's survivors).
    pub fn new(
        comm: CommOf<B>,
        priority: oxccl_core::traits::StreamPriority,
        watch: Arc<crate::watchdog::group_watch::GroupWatch>,
        on_failure: Option<Arc<dyn OnFailure>>,
    ) -> Result<Entry<B>> {
        let stream = comm.new_stream_with(priority)?;
        let abort = comm.abort_handle();
        let home = Arc::new(WorkHome::new(watch, Some(abort.clone()), on_failure));
        Ok(Entry {
            comm,
            stream,
            abort,
            ring: Arc::new(WorkRing::new(home)),
            regs: RegCache::default(),
        })
    }
}

/// Where a group's communicator is.
pub(crate) enum Slot<B: PgBackend> {
    /// Not made yet (made by the first operation).
    Empty,
    /// Usable (or failed: the communicator itself reports that). Shared, so copies to and
    /// from the stream can run without the slot lock.
    Ready(std::sync::Arc<Entry<B>>),
    /// This rank is not a member: nothing is ever made.
    NotMember,
    /// To be made at the first operation by shrinking `from`, a predecessor's communicator,
    /// without its group ranks `exclude` (a loss took them): collective over the survivors.
    Shrink {
        from: Arc<Entry<B>>,
        exclude: Vec<u32>,
    },
    /// To be made at the first operation by growing `from`, a predecessor's communicator,
    /// to the group's members (the joiners after it): collective with the joiners.
    Grow { from: Arc<Entry<B>> },
    /// A joiner's, to be made at the first operation by joining the running members' grow.
    JoinGrown,
    /// Destroyed; the reason says by whom.
    Closed,
}

impl<B: PgBackend> Slot<B> {
    /// Aborts the communicator, if any, and leaves the slot closed. Never waits for peers.
    pub fn close(&mut self, reason: &str) {
        match std::mem::replace(self, Slot::Closed) {
            Slot::Ready(e) | Slot::Shrink { from: e, .. } | Slot::Grow { from: e } => {
                oxccl_core::CommAbort::abort(&e.abort, reason);
            }
            _ => {}
        }
    }
}

/// The parts of a communicator init through the store.
pub(crate) struct InitParams<'a> {
    pub store: &'a dyn crate::store::Store,
    /// The group's uid and description (for the error texts).
    pub uid: u64,
    pub desc: &'a str,
    /// Which init of the group this is (a key per attempt).
    pub attempt: u64,
    pub rank: u32,
    /// The members' global ranks, by group rank (rank 0 writes the id).
    pub ranks: &'a [u32],
    pub global_rank: u32,
    pub device: oxccl_core::Device,
    pub config: &'a CommConfig,
    pub timeout: Duration,
}

/// Rank 0 makes the unique id and sets it in the store; every member then marks its arrival
/// and waits for the others' ([`Arrival`]), and all init. The group's timeout bounds the whole:
/// a member that never arrives is named by the others' timeouts (from the marks that are
/// missing), and the backend's init gets what is left of the timeout (where the backend can
/// bound it: [`oxccl_core::Backend::init_rank_within`]).
pub(crate) fn init_through_store<B: PgBackend>(
    backend: &B,
    p: &InitParams<'_>,
) -> Result<CommOf<B>> {
    let arrival = Arrival {
        store: p.store,
        prefix: keys::init(p.uid, p.attempt),
        index: p.rank,
        ranks: p.ranks,
        deadline: deadline_after(p.timeout),
        what: format!("the init of group {} ({})", p.uid, Escaped(p.desc)),
    };
    let key = keys::unique_id(p.uid, p.attempt);
    let writer = p.ranks.first().copied().unwrap_or(0);
    let id = if p.rank == 0 {
        let id = backend.unique_id()?;
        p.store.set(&key, id.as_bytes())?;
        Some(id)
    } else {
        None
    };
    arrival.arrive()?;
    let waited_for_id = format!(
        "rank {} waited for the unique id at store key `{}`, which rank {writer} writes",
        p.global_rank,
        p.store.full_key(&key)
    );
    arrival.wait_all((p.rank != 0).then_some(waited_for_id.as_str()))?;
    let id = match id {
        Some(id) => id,
        // Rank 0 set it before it arrived, so it is there.
        None => UniqueId::from_bytes(&p.store.get(&key, arrival.left().max(MIN_STEP))?)?,
    };
    let limit = arrival.left();
    backend
        .init_rank_within(&id, p.rank, p.size(), p.device, p.config, limit)
        .map_err(|e| arrival.explain(e))
}

impl InitParams<'_> {
    fn size(&self) -> u32 {
        self.ranks.len() as u32
    }
}

/// The shortest limit a store read after the barrier is given (the value is there already).
const MIN_STEP: Duration = Duration::from_millis(100);

/// Waits for a nonblocking communicator's init or split to finish, polling its abort handle,
/// bounded by `limit` (`OXCCL_NONBLOCKING_TIMEOUT_MS`; `None`: unbounded). Past the limit the
/// communicator is aborted (its later operations fail fast saying why) and the wait is a
/// timeout naming the variable, returned at once: the library's abort of the half-made
/// communicator runs on a thread of its own ([`oxccl_core::CommAbort::abort_in_background`]),
/// the group's [`super::ProcessGroup::comm_state`] is `Aborting` until it returns, then
/// `Aborted`, and [`crate::wait_for_aborts`] waits for it. An abort from another thread ends the
/// wait with its error.
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
            abort.abort_in_background(&why);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_an_operation_reads_of_an_nccl_entry_lies_on_its_first_line() {
        use std::mem::offset_of;
        type E = Entry<crate::Nccl>;
        assert_eq!(std::mem::align_of::<E>(), 64);
        assert!(offset_of!(E, ring) + 8 <= 64);
        // The window flag is the cache's first field.
        assert!(
            offset_of!(E, regs) + RegCache::HOT_BYTES <= 64,
            "{}",
            offset_of!(E, regs)
        );
    }
}
