//! A group catching up with the survivors' epoch: the successor without the ranks lost since
//! its own epoch (and, for the default group, with the ranks that joined).

use super::super::backend::PgBackend;
use crate::pg::build::GroupSpec;
use crate::pg::comm_slot::Slot;
use crate::pg::family::Elastic;
use crate::pg::inner::{lock, PgInner};
use oxccl_core::{CommAbort, CommState, Communicator, Feature};
use oxccl_rules::elastic::{lost_indices, uid_at};
use oxccl_rules::membership::CommPlan;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};

/// Brings `at` (a last successor) up to the family's epoch: only the epoch when none of its
/// members changed, else its successor (see the module).
pub(super) fn catch_up<B: PgBackend>(at: &Arc<PgInner<B>>, el: &Elastic) {
    let book = el.book.lock().unwrap_or_else(PoisonError::into_inner);
    let from = at.epoch.load(Ordering::Acquire);
    let to = el.epoch.load(Ordering::Acquire);
    if from >= to || at.next.get().is_some() {
        return;
    }
    let lost = book.lost_between(from, to);
    let (joined, by_grow) = if at.parent.is_none() {
        book.joined_between(from, to)
    } else {
        (Vec::new(), false)
    };
    drop(book);
    let mut exclude = vec![0; at.ranks.len()];
    let n = lost_indices(&at.ranks, &lost, &mut exclude);
    exclude.truncate(n);
    // A decision that lost nobody still stopped the world's communicator: a group whose
    // communicator died gets a successor of the same members.
    let stopped = match &*lock(&at.slot) {
        Slot::Ready(e) => e.comm.state().is_dead(),
        Slot::Shrink { .. } => true,
        _ => false,
    };
    if exclude.is_empty() && joined.is_empty() && !stopped {
        at.epoch.store(to, Ordering::Release);
        return;
    }
    let mut ranks: Vec<u32> = at
        .ranks
        .iter()
        .filter(|r| lost.binary_search(r).is_err())
        .copied()
        .collect();
    // Joiners after the members, as a grow numbers them.
    ranks.extend(
        joined
            .iter()
            .filter(|j| !ranks.contains(j))
            .copied()
            .collect::<Vec<_>>(),
    );
    let world_size = ranks
        .iter()
        .map(|r| r + 1)
        .max()
        .unwrap_or(0)
        .max(at.world_size);
    let next = PgInner::build(GroupSpec {
        backend: at.backend.clone(),
        store: at.store.clone(),
        family: at.family.clone(),
        uid: uid_at(at.uid, to),
        global_rank: at.global_rank,
        world_size,
        ranks,
        opts: at.opts.clone(),
        parent: at.parent.clone(),
        plan: CommPlan::InitOnFirstUse,
        epoch: to,
    });
    next.hot
        .timeout_ms
        .store(at.hot.timeout_ms.load(Ordering::Relaxed), Ordering::Relaxed);
    let why = format!("replaced by the survivors' group of epoch {to}");
    match std::mem::replace(&mut *lock(&at.slot), Slot::Closed) {
        Slot::Ready(e)
            if joined.is_empty()
                && !exclude.is_empty()
                && next.rank.is_some()
                && e.comm.features().has(Feature::Shrink)
                && matches!(
                    e.comm.state(),
                    CommState::Ready | CommState::Failed | CommState::Revoking | CommState::Revoked
                ) =>
        {
            // Shrunk at the successor's first operation (collective over the survivors); a
            // stopped communicator that lost nobody is made anew instead (a shrink leaves
            // someone out).
            *lock(&next.slot) = Slot::Shrink { from: e, exclude };
        }
        Slot::Ready(e)
            if by_grow
                && exclude.is_empty()
                && !joined.is_empty()
                && e.comm.state() == CommState::Ready =>
        {
            // Grown at the successor's first operation (collective with the joiners).
            *lock(&next.slot) = Slot::Grow { from: e };
        }
        Slot::Ready(e) | Slot::Shrink { from: e, .. } => e.abort.abort(&why),
        _ => {}
    }
    let _ = at.next.set(next);
}

/// `root` as it is now (see `ProcessGroup::inner`): its last successor, after
/// catching up with the family's epoch.
pub(crate) fn current<B: PgBackend>(root: &Arc<PgInner<B>>) -> &Arc<PgInner<B>> {
    let mut at = root;
    loop {
        at = last(at);
        if !at.hot.facts.elastic {
            return at;
        }
        let Some(el) = at.family.elastic.as_ref() else {
            return at;
        };
        if at.epoch.load(Ordering::Acquire) >= el.epoch.load(Ordering::Acquire) {
            return at;
        }
        catch_up(at, el);
    }
}

/// The last successor of `g`, without catching up.
pub(crate) fn last<B: PgBackend>(g: &Arc<PgInner<B>>) -> &Arc<PgInner<B>> {
    let mut at = g;
    while let Some(next) = at.next.get() {
        at = next;
    }
    at
}
