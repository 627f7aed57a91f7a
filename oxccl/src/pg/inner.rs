//! A process group's state, shared by its handles, its operations, its capture and its tune
//! table: who is in it, its options, its communicator's slot, and what every operation reads
//! or writes.

use super::backend::PgBackend;
use super::capture_state::CaptureState;
use super::comm_slot::Slot;
use super::family::GroupFamily;
use super::options::PgOptions;
use super::tune::agree::AgreeingGroup;
use crate::store::Store;
use crate::watchdog::group_watch::GroupWatch;
use oxccl_core::text::Escaped;
use oxccl_core::traits::AbortOf;
use oxccl_core::{text, CommState, Error, Feature, Result};
use oxccl_rules::membership::{self, CommPlan};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// The state every operation of a group reads or writes, kept on one cache line: between
/// two operations the driver's and NCCL's calls evict the issuing core's nearer caches, so
/// each line the issue path touches costs a miss, and these fields would otherwise lie
/// wherever the compiler placed them among the group's cold ones.
#[repr(C, align(64))]
pub(crate) struct IssueState {
    /// What every operation asks of the group's options and family, fixed when it is made.
    pub(super) facts: IssueFacts,
    /// A coalescing block is open on this group.
    pub(super) coalescing: AtomicBool,
    /// Whether the communicator's init was seen finished (see [`PgInner::await_init`]): one
    /// load on the hot path after that.
    pub(super) init_awaited: AtomicBool,
    /// The process clock's zero ([`crate::recorder::clock_zero`]), so an operation's clock
    /// reading touches no static.
    pub(super) clock_zero: u64,
    /// The collective sequence number (the last one used).
    pub(super) seq: AtomicU64,
    /// The p2p sequence number (the last one used).
    pub(super) p2p_seq: AtomicU64,
    /// Every operation, both kinds (the recorder's op id).
    pub(super) op_id: AtomicU64,
    /// The group's timeout in ms (changeable at run time).
    pub(super) timeout_ms: AtomicU64,
}

/// The group's options and family as an operation reads them, copied on the operation's own
/// line when the group is made (the options themselves, the family and the recorder each
/// lie elsewhere and are read there by everything else). None changes afterwards.
#[derive(Clone, Copy)]
pub(crate) struct IssueFacts {
    /// [`PgOptions::device`].
    pub device: oxccl_core::Device,
    /// Whether the family survives lost ranks (`GroupFamily::elastic`).
    pub elastic: bool,
    /// [`PgOptions::nan_check`].
    pub nan_check: bool,
    /// [`PgOptions::timing`].
    pub timing: bool,
    /// [`PgOptions::watchdog`].
    pub watchdog: bool,
    /// Whether the group's flight recorder records ([`crate::recorder::Recorder::is_enabled`]).
    pub recording: bool,
    /// Whether the group has a tune table ([`PgOptions::tune`]).
    pub tuned: bool,
}

/// In declaration order: what an operation touches first (its line, the slot, the successor
/// link, the capture flag), the rest after.
#[repr(C)]
pub(crate) struct PgInner<B: PgBackend> {
    /// What every operation reads or writes, on a cache line of its own.
    pub(crate) hot: IssueState,
    pub slot: Mutex<Slot<B>>,
    /// The group without the ranks a loss took, once made (see `recovery`).
    pub(crate) next: std::sync::OnceLock<Arc<PgInner<B>>>,
    /// A graph capture open on the group's stream, and what it recorded (see `capture`).
    pub(crate) capture: CaptureState,
    /// This group's own handle (for what must outlive a call: an elastic work's hook).
    pub(crate) me: std::sync::Weak<PgInner<B>>,
    pub backend: B,
    pub store: Arc<dyn Store>,
    pub family: Arc<GroupFamily>,
    pub uid: u64,
    pub desc: String,
    pub global_rank: u32,
    pub world_size: u32,
    /// Global ranks of the members; the index is the group rank.
    pub ranks: Vec<u32>,
    /// This rank in the group; `None` when it is not a member.
    pub rank: Option<u32>,
    pub opts: PgOptions,
    pub parent: Option<Arc<PgInner<B>>>,
    pub plan: CommPlan,
    /// Communicators split from this group's communicator.
    pub splits: AtomicU64,
    /// Communicators this group made through the store (numbers their id keys).
    pub(crate) inits: AtomicU64,
    /// The watchdog's view of the group.
    pub watch: Arc<GroupWatch>,
    /// The communicator's abort handle, once made: abort and destroy use it without the slot
    /// lock, which a thread blocked inside an operation holds.
    pub(crate) abort: std::sync::OnceLock<AbortOf<B>>,
    /// Set by destroy, before it waits for the slot.
    pub(crate) destroyed: AtomicBool,
    /// See [`PgInner::copy_stream`].
    pub(crate) copy_stream: std::sync::OnceLock<crate::buffer::StreamOf<B>>,
    /// The survivors' epoch the group has caught up with (see `recovery`): raised in place
    /// when a loss left its members whole, else the successor carries the next.
    pub(crate) epoch: AtomicU64,
}

impl<B: PgBackend> Drop for PgInner<B> {
    fn drop(&mut self) {
        let slot = self.slot.get_mut().unwrap_or_else(PoisonError::into_inner);
        slot.close("process group dropped");
        self.watch.close_graveyard();
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<B: PgBackend> PgInner<B> {
    /// The stream buffers are allocated and copied on, made on first use without the
    /// communicator (whose creation is collective): a buffer is ordered against the
    /// operations that use it by its own tracking, whatever stream they run on.
    pub fn copy_stream(&self) -> Result<&crate::buffer::StreamOf<B>> {
        if let Some(st) = self.copy_stream.get() {
            return Ok(st);
        }
        let made = self.backend.stream(self.opts.device())?;
        // Another thread may have made one meanwhile: keep the first.
        let _ = self.copy_stream.set(made);
        self.copy_stream.get().ok_or_else(|| Error::InvalidState {
            state: CommState::Ready,
            attempted: "copy",
            reason: text!("the group's copy stream could not be kept"),
        })
    }

    /// The members, as an agreement through the store needs them.
    pub(crate) fn members(&self) -> AgreeingGroup<'_> {
        AgreeingGroup {
            store: &*self.store,
            uid: self.uid,
            rank: self.rank,
            ranks: &self.ranks,
            timeout: self.timeout(),
        }
    }

    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.hot.timeout_ms.load(Ordering::Relaxed))
    }

    /// The refusal for a call on a non-member or destroyed group.
    pub(crate) fn unusable(&self, slot: &Slot<B>, attempted: &'static str) -> Error {
        match slot {
            Slot::NotMember => Error::invalid(
                "group",
                format_args!(
                    "a group this rank is a member of: rank {} is not part of group {} ({})",
                    self.global_rank,
                    self.uid,
                    Escaped(&self.desc)
                ),
            ),
            _ => Error::InvalidState {
                state: CommState::Destroyed,
                attempted,
                reason: text!(
                    "process group {} ({}) was destroyed",
                    self.uid,
                    Escaped(&self.desc)
                ),
            },
        }
    }

    /// This process's rank in the group; the refusal a non-member gets otherwise (callers
    /// are reached only through a member's entry, so it is a guard, not a path).
    pub(crate) fn member_rank(&self) -> Result<u32> {
        self.rank
            .ok_or_else(|| self.unusable(&Slot::NotMember, "use"))
    }

    /// Whether the backend can split communicators.
    pub fn can_split(&self) -> bool {
        self.backend.features().check(Feature::Split).is_ok()
    }

    /// The group rank of global rank `global`, as rooted operations and peers are given.
    pub fn to_group_rank(&self, arg: &'static str, global: u32) -> Result<u32> {
        membership::group_rank(&self.ranks, global).ok_or_else(|| {
            Error::invalid(
                arg,
                format_args!(
                    "a global rank of group {} ({:?}), got {global}",
                    self.uid, self.ranks
                ),
            )
        })
    }
}

/// A process group over backend `B`: c10d's `ProcessGroup`. Cheap to clone (the clones share
/// the group). Dropping the last clone aborts its communicator (never waits for peers).
///
/// Made by [`crate::launch::init_process_group`] under a launcher, by
/// [`crate::launch::spawn`] as threads, or by [`ProcessGroup::new`] with a backend and a
/// store of your own, as here: two ranks of the mock world, as threads sharing a store.
///
/// ```
/// use oxccl::mock::MockBackend;
/// use oxccl::pg::{PgOptions, ProcessGroup};
/// use oxccl::store::{MemStore, Store};
/// use oxccl::{Device, ReduceOp};
/// use std::sync::Arc;
///
/// fn main() -> oxccl::Result<()> {
///     let backend = MockBackend::new();
///     let store: Arc<dyn Store> = Arc::new(MemStore::new());
///     let ranks: Vec<_> = (0..2u32)
///         .map(|rank| {
///             let (backend, store) = (backend.clone(), store.clone());
///             std::thread::spawn(move || -> oxccl::Result<Vec<i64>> {
///                 let opts = PgOptions { device: Device(rank), ..PgOptions::default() };
///                 let pg = ProcessGroup::new(backend, store, rank, 2, opts)?;
///                 let mut x = pg.upload(&[i64::from(rank) + 1; 3])?;
///                 pg.all_reduce(&mut x, ReduceOp::Max)?.wait()?;
///                 pg.download(&x)
///             })
///         })
///         .collect();
///     for r in ranks {
///         assert_eq!(r.join().unwrap()?, [2, 2, 2]);
///     }
///     Ok(())
/// }
/// ```
pub struct ProcessGroup<B: PgBackend> {
    /// The group as it was made; after a loss its successors follow it (see
    /// [`ProcessGroup::inner`]).
    pub(crate) root: Arc<PgInner<B>>,
}

impl<B: PgBackend> Clone for ProcessGroup<B> {
    fn clone(&self) -> Self {
        ProcessGroup {
            root: self.root.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_an_operation_touches_lies_on_its_first_lines() {
        use std::mem::offset_of;
        type G = PgInner<crate::Nccl>;
        assert_eq!(std::mem::size_of::<IssueState>(), 64);
        assert_eq!(offset_of!(G, hot), 0);
        // The slot's lock and communicator, the successor link and the capture flag: the
        // next line and the start of the one after.
        let capture_flag = offset_of!(G, capture) + offset_of!(CaptureState, on);
        assert!(offset_of!(G, slot) >= 64);
        assert!(capture_flag < 192, "{capture_flag}");
    }
}
