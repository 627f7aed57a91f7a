//! Going on without a lost rank: the elastic process group ([`super::PgOptions::elastic`]).
//!
//! When an operation fails in a way that may mean a lost peer (a remote error, a timeout, a
//! library failure), the failing wait — or this process's monitor, once another member has
//! started — runs the **decision** (`decide`): it stops what is in flight on the world's
//! communicator (revoke where the library has it, else abort), marks its arrival in the store
//! at the family's current epoch and, with every member that arrives within the window, agrees
//! on who goes on ([`Survivors`]: one decision, read alike by every survivor; a
//! member that arrives after it is refused). The family's **book** then records the epoch and
//! the ranks lost, and the wait reports [`oxccl_core::Error::MembersLost`].
//!
//! Groups **catch up** lazily (`successor`): the next time a group is used, a group that
//! held a lost rank gets a successor without it (renumbered; its communicator made at its
//! first operation by shrinking the old one, collective over the survivors, or, where the
//! library cannot shrink, a new one through the store under the epoch's own keys); a group
//! that lost nobody only notes the epoch. Handles follow the successors
//! (`ProcessGroup::inner`), so the next operation runs on the smaller group.
//!
//! The store must outlive the ranks (a launcher's store, torchrun's agent store), since the
//! survivors meet there. A newcomer joins through `calls` (`ProcessGroup::join`) and the
//! members' `admit`. The rules all of this follows are the core's, pure and fuzzed
//! ([`oxccl_rules::elastic`]).

pub(crate) mod admit;
mod calls;
mod decide;
pub(crate) mod monitor;
pub(crate) mod roster;
mod successor;
mod survivors;

pub use oxccl_rules::elastic::survivors::Verdict;
pub use survivors::{Outcome, Survivors};

pub(crate) use successor::current;

use super::backend::PgBackend;
use super::comm_slot::Entry;
use super::inner::PgInner;
use super::work::home::OnFailure;
use oxccl_core::traits::{CommOf, ShrinkMode};
use oxccl_core::Reshape;
use oxccl_core::{CommAbort, CommState, Communicator, Error, Result, UniqueId};
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError, Weak};

/// The default group of `g`'s family, as it was made (subgroups name their parent).
fn world_root<B: PgBackend>(g: &Arc<PgInner<B>>) -> Arc<PgInner<B>> {
    let mut at = g.clone();
    while let Some(p) = at.parent.clone() {
        at = p;
    }
    at
}

/// A call of `g` reaching its communicator, by any path: in an elastic family, notes the
/// rank at work (the alive rule, [`oxccl_rules::elastic::LastActive`]) and
/// returns the error the family gives every call once it left this rank out, if it did.
#[inline]
pub(crate) fn enter<B: PgBackend>(g: &PgInner<B>) -> Option<Error> {
    match g.hot.facts.elastic {
        true => elastic_enter(g),
        false => None,
    }
}

/// [`enter`] in an elastic family.
fn elastic_enter<B: PgBackend>(g: &PgInner<B>) -> Option<Error> {
    let el = g.family.elastic.as_ref()?;
    el.note_active();
    // One load per operation; the lock only once this rank is out.
    if !el.left_out.load(Ordering::Acquire) {
        return None;
    }
    el.book
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .out
        .clone()
}

/// The hook a work of `g`'s communicator asks when its wait fails: `None` unless elastic.
pub(crate) fn on_failure<B: PgBackend>(g: &PgInner<B>) -> Option<Arc<dyn OnFailure>> {
    g.family.elastic.as_ref()?;
    let world = match &g.parent {
        Some(p) => Arc::downgrade(&world_root(p)),
        // A default group (or a successor of one): itself.
        None => g.me.clone(),
    };
    Some(Arc::new(Settle {
        world,
        epoch: g.epoch.load(Ordering::Acquire),
    }))
}

/// What an operation of `g` refused at issue with `e` reports: as a failed wait of `g`
/// would (see [`on_failure`]); `e` itself outside elastic groups.
pub(crate) fn settle_refusal<B: PgBackend>(g: &PgInner<B>, e: Error) -> Error {
    match on_failure(g) {
        Some(hook) => hook.settle(&e),
        None => e,
    }
}

/// A failed wait's answer in group `group` of epoch `epoch`.
struct Settle<B: PgBackend> {
    world: Weak<PgInner<B>>,
    epoch: u64,
}

impl<B: PgBackend> OnFailure for Settle<B> {
    fn settle(&self, cause: &Error) -> Error {
        match self.world.upgrade() {
            Some(world) => decide::after_failure(&world, self.epoch, cause),
            None => cause.clone(),
        }
    }
}

/// The communicator of a successor, made from `from` (its predecessor's) without the group
/// ranks `exclude`; `from` is released once shrunk.
pub(crate) fn shrunk<B: PgBackend>(
    g: &PgInner<B>,
    from: &Entry<B>,
    exclude: &[u32],
) -> Result<CommOf<B>> {
    let mode = match from.comm.state() {
        CommState::Revoked => ShrinkMode::Default,
        _ => ShrinkMode::AbortInFlight,
    };
    let made = from.comm.shrink(exclude, &g.opts.config, mode);
    from.abort.abort(&format!(
        "replaced by the survivors' group of epoch {}",
        g.epoch.load(Ordering::Acquire)
    ));
    made
}

/// The communicator of a successor that admitted ranks by a grow, made from `from` (its
/// predecessor's): the predecessor's rank 0 is the grow's root (it makes the id and puts it
/// in the store for the others and the joiners); `from` is released once grown.
pub(crate) fn grown<B: PgBackend>(g: &PgInner<B>, from: &Entry<B>) -> Result<CommOf<B>> {
    let epoch = g.epoch.load(Ordering::Acquire);
    let key = admit::grow_id_key(epoch);
    let id = if from.comm.rank() == 0 {
        let id = from.comm.grow_id()?;
        g.store.set(&key, id.as_bytes())?;
        id
    } else {
        UniqueId::from_bytes(&g.store.get(&key, g.timeout())?)?
    };
    let size = g.ranks.len() as u32;
    log::info!(
        "oxccl elastic: epoch {epoch} grows the communicator from {} to {size} ranks",
        from.comm.size()
    );
    let made = from.comm.grow(size, &id, &g.opts.config);
    from.abort
        .abort(&format!("replaced by the grown group of epoch {epoch}"));
    made
}

/// A joiner's communicator: its part of the running members' grow, the id from the store.
pub(crate) fn joined_grown<B: PgBackend>(g: &PgInner<B>) -> Result<CommOf<B>> {
    let epoch = g.epoch.load(Ordering::Acquire);
    let id = UniqueId::from_bytes(&g.store.get(&admit::grow_id_key(epoch), g.timeout())?)?;
    let rank = g.member_rank()?;
    g.backend.join_grown(
        &id,
        rank,
        g.ranks.len() as u32,
        g.opts.device(),
        &g.opts.config,
    )
}
