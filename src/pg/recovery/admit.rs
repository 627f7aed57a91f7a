//! New processes joining a running elastic world, and the members admitting them.
//!
//! A joiner takes a ticket (`PREFIX/joiners`, counted) and writes the global rank it asks
//! for under it; at a step boundary every member calls [`admit`] (collectively, in the same
//! order as its other calls): the first to arrive proposes the waiting tickets and the next
//! epoch's members by compare-and-set on the round's decision, every member reads that one
//! decision and writes it under each admitted ticket, where the joiner waits. Both sides then
//! make the next epoch's communicator through the store under its own keys (a new
//! communicator: the state the joiner needs comes from the others by broadcast, which the
//! program does, see `examples/elastic_step.rs`).

use super::{current, PREFIX};
use crate::buffer::Memory;
use crate::pg::comm::Slot;
use crate::pg::family::{Change, Elastic};
use crate::pg::inner::{lock, PgInner};
use crate::store::Store;
use oxccl_core::membership::survivors::{decode, encode, encoded_len};
use oxccl_core::{text, CommState, Communicator, Error, Feature, Result};
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

/// The counter of join tickets.
pub(crate) fn joiners_key() -> String {
    format!("{PREFIX}/joiners")
}

/// Where ticket `t`'s rank is written.
pub(crate) fn ticket_key(t: u64) -> String {
    format!("{PREFIX}/joiner/{t}")
}

/// Where the decision that admitted ticket `t` is copied for its joiner.
pub(crate) fn admitted_key(t: u64) -> String {
    format!("{PREFIX}/joiner/{t}/admitted")
}

/// An admission decision: the tickets taken up to `upto`, the next epoch's members (the
/// running ones in their order, then the joiners), and whether the communicator grows (the
/// library's grow) or is made anew through the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Admission {
    pub upto: u64,
    pub epoch: u64,
    pub members: Vec<u32>,
    pub grow: bool,
}

impl Admission {
    pub(crate) fn encode(&self) -> Result<Vec<u8>> {
        let mut out = vec![0; 9 + encoded_len(self.members.len())];
        out[..8].copy_from_slice(&self.upto.to_le_bytes());
        out[8] = u8::from(self.grow);
        encode(self.epoch, &self.members, &mut out[9..])?;
        Ok(out)
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<Admission> {
        let bad = || Error::Remote {
            detail: text!(
                "a malformed admission decision in the store ({} bytes)",
                bytes.len()
            ),
        };
        let head: [u8; 8] = bytes
            .get(..8)
            .ok_or_else(bad)?
            .try_into()
            .map_err(|_| bad())?;
        let grow = match bytes.get(8) {
            Some(0) => false,
            Some(1) => true,
            _ => return Err(bad()),
        };
        let rest = &bytes[9..];
        let mut members = vec![0; rest.len() / 4 + 1];
        let (epoch, n) = decode(rest, &mut members)?;
        members.truncate(n);
        Ok(Admission {
            upto: u64::from_le_bytes(head),
            epoch,
            members,
            grow,
        })
    }
}

/// Where the root of a grow at `epoch` puts the grow's id for the other ranks.
pub(crate) fn grow_id_key(epoch: u64) -> String {
    format!("{PREFIX}/grow/{epoch}")
}

/// Parses the rank a joiner wrote under its ticket.
fn ticket_rank(bytes: &[u8]) -> Option<u32> {
    Some(u32::from_le_bytes(bytes.try_into().ok()?))
}

/// The members' part (see the module): how many processes joined; the family is at the next
/// epoch when any did (its groups catch up at their next use).
pub(crate) fn admit<B: Memory>(world: &Arc<PgInner<B>>) -> Result<u32> {
    let Some(el) = world.family.elastic.as_ref() else {
        return Err(Error::invalid(
            "group",
            format_args!("an elastic group (PgOptions::elastic) to admit processes"),
        ));
    };
    let world = current(world).clone();
    let mut book = el.book.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(out) = &book.out {
        return Err(out.clone());
    }
    let now = el.epoch.load(Ordering::Acquire);
    let store = &*world.store;
    let wait = world.timeout();
    let decision = format!("{PREFIX}/admit/{now}/{}/decision", book.admit_round);
    book.admit_round += 1;
    let bytes = if store.check(&[&decision])? {
        store.get(&decision, wait)?
    } else {
        let proposal = propose(store, &world, book.taken, now, wait)?;
        store.compare_set(&decision, b"", &proposal.encode()?)?
    };
    let Admission {
        upto,
        epoch,
        members,
        grow,
    } = Admission::decode(&bytes)?;
    for t in book.taken + 1..=upto {
        store.set(&admitted_key(t), &bytes)?;
    }
    book.taken = book.taken.max(upto);
    let joined: Vec<u32> = members
        .iter()
        .filter(|r| !world.ranks.contains(r))
        .copied()
        .collect();
    if joined.is_empty() {
        return Ok(0);
    }
    log::warn!(
        "oxccl elastic: epoch {epoch} admits rank(s) {joined:?}; {} members",
        members.len()
    );
    book.changes.push(Change {
        epoch,
        lost: Vec::new(),
        joined: joined.clone(),
        grow,
    });
    book.admit_round = 0;
    // Every member and joiner numbers the groups it makes from here alike.
    world.family.next_uid.store(1, Ordering::Relaxed);
    el.epoch.store(epoch, Ordering::Release);
    Ok(joined.len() as u32)
}

/// The first member's proposal: the tickets after `taken`, their ranks after `world`'s
/// members (a rank already a member, or asked twice, is not; its joiner is told by the
/// decision); a grow where the library has one and the world's communicator is ready for it.
fn propose<B: Memory>(
    store: &dyn Store,
    world: &PgInner<B>,
    taken: u64,
    now: u64,
    wait: Duration,
) -> Result<Admission> {
    let upto = u64::try_from(store.add(&joiners_key(), 0)?)
        .unwrap_or(0)
        .max(taken);
    let mut members = world.ranks.clone();
    let mut changed = false;
    for t in taken + 1..=upto {
        if let Some(r) = ticket_rank(&store.get(&ticket_key(t), wait)?) {
            if !members.contains(&r) {
                members.push(r);
                changed = true;
            }
        }
    }
    let grow = match &*lock(&world.slot) {
        Slot::Ready(e) => {
            e.comm.features().has(Feature::Grow) && e.comm.state() == CommState::Ready
        }
        _ => false,
    };
    Ok(Admission {
        upto,
        epoch: if changed { now + 1 } else { now },
        members,
        grow,
    })
}

/// The joiner's part: takes a ticket for global rank `rank`, waits (up to `wait`) for the
/// decision that admits it.
pub(crate) fn wait_admitted(store: &dyn Store, rank: u32, wait: Duration) -> Result<Admission> {
    let t = u64::try_from(store.add(&joiners_key(), 1)?).unwrap_or(0);
    store.set(&ticket_key(t), &rank.to_le_bytes())?;
    let bytes = store.get(&admitted_key(t), wait).map_err(|e| match e {
        Error::Timeout { after_ms, .. } => Error::Timeout {
            what: text!(
                "rank {rank} waited for the members to admit it (ticket {t}; they admit at `ProcessGroup::admit`)"
            ),
            after_ms,
        },
        e => e,
    })?;
    let a = Admission::decode(&bytes)?;
    if !a.members.contains(&rank) {
        return Err(Error::invalid(
            "rank",
            format_args!(
                "a rank not already in the running group; {rank} is one of {:?}",
                a.members
            ),
        ));
    }
    Ok(a)
}

/// A joiner's family record at `epoch`, `upto` tickets taken.
pub(crate) fn joined_family(window: Duration, epoch: u64, upto: u64) -> Elastic {
    let el = Elastic::new(window);
    el.epoch.store(epoch, Ordering::Release);
    let mut book = el.book.lock().unwrap_or_else(PoisonError::into_inner);
    book.taken = upto;
    drop(book);
    el
}
