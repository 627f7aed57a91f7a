//! The survivors' decision after a failure: stop what is in flight, agree through the store on
//! who goes on, record the epoch.

use super::super::backend::PgBackend;
use super::successor::current;
use super::survivors::{Outcome, Survivors};
use crate::pg::comm_slot::Slot;
use crate::pg::family::{Book, Change, Elastic};
use crate::pg::inner::{lock, PgInner};
use crate::pg::keys::ELASTIC_PREFIX as PREFIX;
use oxccl_core::Reshape;
use oxccl_core::{text, CommAbort, Communicator, Error, Feature};
use oxccl_rules::elastic::survivors::Verdict;
use oxccl_rules::elastic::{failure_sign, FailureSign};
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};

/// What a wait that failed with `cause`, on a communicator of epoch `epoch` of the family of
/// `world` (any of the default group's inners), reports: [`Error::MembersLost`] once the
/// survivors decided (made here when this failure is the first to show the loss), the
/// refusal of a rank left out, or `cause` itself when it shows no loss.
pub(crate) fn after_failure<B: PgBackend>(
    world: &Arc<PgInner<B>>,
    epoch: u64,
    cause: &Error,
) -> Error {
    let Some(el) = world.family.elastic.as_ref() else {
        return cause.clone();
    };
    let sign = failure_sign(cause);
    if sign == FailureSign::Call {
        return cause.clone();
    }
    // Caught up first: the catch-up takes the book's lock, which the decision holds.
    let world = current(world).clone();
    let mut book = el.book.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(out) = &book.out {
        return out.clone();
    }
    let now = el.epoch.load(Ordering::Acquire);
    if now > epoch || world.epoch.load(Ordering::Acquire) < now {
        // Decided already (by another wait, or the monitor).
        return book.members_lost(epoch, now, cause);
    }
    if sign == FailureSign::Stopped {
        // Stopped here, with no decision: the caller's own abort, not a loss.
        return cause.clone();
    }
    decide(&world, el, &mut book, now, cause)
}

/// Leaves this rank out of the decision other members began at `epoch` of `world`'s family:
/// it issued nothing for `idle_ms`, over the group's timeout (see
/// [`oxccl_rules::elastic::monitor_joins`]). Its communicator is aborted and its
/// operations refused from now on, so it never takes part late. Nothing when the family
/// moved past `epoch` meanwhile (this rank took part) or it is out already.
pub(crate) fn stay_out<B: PgBackend>(world: &Arc<PgInner<B>>, epoch: u64, idle_ms: u64) {
    let Some(el) = world.family.elastic.as_ref() else {
        return;
    };
    let world = current(world).clone();
    let mut book = el.book.lock().unwrap_or_else(PoisonError::into_inner);
    if book.out.is_some() || el.epoch.load(Ordering::Acquire) > epoch {
        return;
    }
    let out = Error::Aborted {
        reason: text!(
            "rank {} stayed out of the survivors' decision at epoch {epoch}: it had issued nothing for {idle_ms} ms, over the group's timeout",
            world.global_rank
        ),
    };
    log::warn!("oxccl elastic: {out}");
    if let Slot::Ready(e) = &*lock(&world.slot) {
        e.abort.abort(&out.to_string());
    }
    book.out = Some(out);
    el.left_out.store(true, Ordering::Release);
}

/// Runs the decision at epoch `now` for `world` (caught up to it), the book locked.
fn decide<B: PgBackend>(
    world: &PgInner<B>,
    el: &Elastic,
    book: &mut Book,
    now: u64,
    cause: &Error,
) -> Error {
    log::warn!(
        "oxccl elastic: rank {} saw a possible loss at epoch {now} ({cause}); deciding who goes on",
        world.global_rank
    );
    stop_in_flight(world, &format!("a loss at epoch {now}: {cause}"));
    let decided = Survivors {
        prefix: PREFIX,
        view: now,
        members: &world.ranks,
        me: world.global_rank,
        window: el.window,
    }
    .decide(&*world.store);
    let out = match decided {
        Ok(Outcome {
            verdict: Verdict::Member { .. },
            members,
        }) => {
            let lost: Vec<u32> = world
                .ranks
                .iter()
                .filter(|r| !members.contains(r))
                .copied()
                .collect();
            log::warn!(
                "oxccl elastic: epoch {} goes on with {} of {} ranks; lost {lost:?}",
                now + 1,
                members.len(),
                world.ranks.len()
            );
            book.changes.push(Change {
                epoch: now + 1,
                lost,
                joined: Vec::new(),
                grow: false,
            });
            el.epoch.store(now + 1, Ordering::Release);
            if super::roster::keeps_record(&members, world.global_rank) {
                if let Err(e) = super::roster::publish(&*world.store, now + 1, &members) {
                    log::warn!("oxccl elastic: the members of epoch {} are not published: {e}", now + 1);
                }
            }
            return book.members_lost(now, now + 1, cause);
        }
        Ok(Outcome { members, .. }) => Error::Aborted {
            reason: text!(
                "rank {} was left out by the survivors of epoch {now} (they go on as {members:?}); it had seen: {cause}",
                world.global_rank
            ),
        },
        Err(e) => Error::Aborted {
            reason: text!(
                "the survivors' decision at epoch {now} failed on rank {}: {e}; it had seen: {cause}",
                world.global_rank
            ),
        },
    };
    if let Slot::Ready(e) = &*lock(&world.slot) {
        e.abort.abort(&out.to_string());
    }
    book.out = Some(out.clone());
    el.left_out.store(true, Ordering::Release);
    out
}

/// Stops the operations in flight on `world`'s communicator: revoked where the library can
/// (it stays for the shrink), else aborted. Its operations waiting for the lost rank end.
fn stop_in_flight<B: PgBackend>(world: &PgInner<B>, reason: &str) {
    let entry = match &*lock(&world.slot) {
        Slot::Ready(e) => e.clone(),
        _ => return,
    };
    let revoked = entry.comm.features().has(Feature::Revoke)
        && !entry.comm.state().is_aborted()
        && entry.comm.revoke(reason).is_ok();
    if !revoked {
        entry.abort.abort(reason);
    }
}
