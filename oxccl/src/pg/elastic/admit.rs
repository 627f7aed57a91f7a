//! New processes joining a running elastic world, and the members admitting them.
//!
//! A joiner first reads the world's record (`roster`): a rank outside the world is refused at
//! once, a rank that is a member is refused unless the members decide it lost within the
//! joiner's timeout; only then does it take a ticket (`PREFIX/joiners`, counted) and write the
//! global rank it asks for under it, by compare-and-set, so a member that proposes meanwhile
//! either reads the rank or voids the ticket, never waits for it. At a step boundary every
//! member calls [`admit`] (collectively, in the same order as its other calls): the first to
//! arrive judges the waiting tickets ([`judge`]: admitted, a member, twice, outside the
//! world, void) and proposes the next epoch's members by compare-and-set on the round's
//! decision; every member reads that one decision and writes it under each ticket, where the
//! joiner reads its own ticket's verdict. Both sides then make the next epoch's communicator
//! through the store under its own keys (a new communicator: the state the joiner needs comes
//! from the others by broadcast, which the program does, see `examples/elastic_step.rs`).

use super::super::backend::PgBackend;
use super::roster;
use super::successor::current;
use crate::pg::comm_slot::Slot;
use crate::pg::family::{Change, Elastic};
use crate::pg::inner::{lock, PgInner};
use crate::pg::keys::ELASTIC_PREFIX as PREFIX;
use crate::store::Store;
use oxccl_core::{text, CommState, Communicator, Error, Feature, Result};
use oxccl_rules::elastic::admission::{check_join, judge, TicketVerdict, VERDICT_LEN};
use oxccl_rules::elastic::survivors::{decode, encode, encoded_len};
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

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

/// An admission decision: the verdicts on the tickets after `from` up to `upto`, the next
/// epoch's members (the running ones in their order, then the admitted joiners), and whether
/// the communicator grows (the library's grow) or is made anew through the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Admission {
    pub from: u64,
    pub upto: u64,
    pub epoch: u64,
    pub members: Vec<u32>,
    pub grow: bool,
    /// One per ticket `from + 1 ..= upto`, in order.
    pub verdicts: Vec<TicketVerdict>,
}

impl Admission {
    pub(crate) fn encode(&self) -> Result<Vec<u8>> {
        let at = 17 + encoded_len(self.members.len());
        let mut out = vec![0; at + VERDICT_LEN * self.verdicts.len()];
        out[..8].copy_from_slice(&self.from.to_le_bytes());
        out[8..16].copy_from_slice(&self.upto.to_le_bytes());
        out[16] = u8::from(self.grow);
        encode(self.epoch, &self.members, &mut out[17..at])?;
        for (v, slot) in self.verdicts.iter().zip(out[at..].chunks_mut(VERDICT_LEN)) {
            slot.copy_from_slice(&v.encode());
        }
        Ok(out)
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<Admission> {
        let bad = || Error::Remote {
            detail: text!(
                "a malformed admission decision in the store ({} bytes)",
                bytes.len()
            ),
        };
        let word = |at: usize| -> Result<u64> {
            let w: [u8; 8] = bytes
                .get(at..at + 8)
                .ok_or_else(bad)?
                .try_into()
                .map_err(|_| bad())?;
            Ok(u64::from_le_bytes(w))
        };
        let (from, upto) = (word(0)?, word(8)?);
        let grow = match bytes.get(16) {
            Some(0) => false,
            Some(1) => true,
            _ => return Err(bad()),
        };
        let tickets =
            usize::try_from(upto.checked_sub(from).ok_or_else(bad)?).map_err(|_| bad())?;
        let rest = &bytes[17..];
        let list_len = rest
            .len()
            .checked_sub(tickets.checked_mul(VERDICT_LEN).ok_or_else(bad)?)
            .ok_or_else(bad)?;
        let mut members = vec![0; list_len / 4 + 1];
        let (epoch, n) = decode(&rest[..list_len], &mut members)?;
        members.truncate(n);
        let verdicts = rest[list_len..]
            .chunks(VERDICT_LEN)
            .map(|c| TicketVerdict::decode(c).ok_or_else(bad))
            .collect::<Result<Vec<_>>>()?;
        Ok(Admission {
            from,
            upto,
            epoch,
            members,
            grow,
            verdicts,
        })
    }

    /// The verdict on ticket `t`, if this decision judged it.
    pub(crate) fn verdict(&self, t: u64) -> Option<TicketVerdict> {
        let i = t.checked_sub(self.from + 1)?;
        self.verdicts.get(usize::try_from(i).ok()?).copied()
    }
}

/// Where the root of a grow at `epoch` puts the grow's id for the other ranks.
pub(crate) fn grow_id_key(epoch: u64) -> String {
    format!("{PREFIX}/grow/{epoch}")
}

/// What a member that found a ticket without a rank writes there: the ticket is void.
const VOID: &[u8] = b"void";

/// The rank under ticket `t`, voiding the ticket when its joiner has not written one yet
/// (a joiner that died between taking and writing it must not hold an admission).
fn ticket_rank(store: &dyn Store, t: u64) -> Result<Option<u32>> {
    let held = store.compare_set(&ticket_key(t), b"", VOID)?;
    Ok(<[u8; 4]>::try_from(held.as_slice())
        .ok()
        .map(u32::from_le_bytes))
}

/// The members' part (see the module): how many processes joined; the family is at the next
/// epoch when any did (its groups catch up at their next use).
pub(crate) fn admit<B: PgBackend>(world: &Arc<PgInner<B>>) -> Result<u32> {
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
        let proposal = propose(store, &world, book.taken, now)?;
        store.compare_set(&decision, b"", &proposal.encode()?)?
    };
    let Admission {
        upto,
        epoch,
        members,
        grow,
        ..
    } = Admission::decode(&bytes)?;
    for t in book.taken + 1..=upto {
        store.set(&admitted_key(t), &bytes)?;
    }
    book.taken = book.taken.max(upto);
    if epoch > now && roster::keeps_record(&members, world.global_rank) {
        roster::publish(store, epoch, &members)?;
    }
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

/// The first member's proposal: the verdicts on the tickets after `taken` ([`judge`] against
/// `world`'s members and size), the admitted ranks after the members; a grow where the
/// library has one and the world's communicator is ready for it.
fn propose<B: PgBackend>(
    store: &dyn Store,
    world: &PgInner<B>,
    taken: u64,
    now: u64,
) -> Result<Admission> {
    let upto = u64::try_from(store.add(&joiners_key(), 0)?)
        .unwrap_or(0)
        .max(taken);
    let tickets = (taken + 1..=upto)
        .map(|t| Ok((t, ticket_rank(store, t)?)))
        .collect::<Result<Vec<_>>>()?;
    let mut verdicts = vec![TicketVerdict::Void; tickets.len()];
    let admitted = judge(world.world_size, &world.ranks, &tickets, &mut verdicts)?;
    let mut members = world.ranks.clone();
    members.extend(
        tickets
            .iter()
            .zip(&verdicts)
            .filter(|(_, v)| **v == TicketVerdict::Admitted)
            .filter_map(|((_, r), _)| *r),
    );
    let grow = match &*lock(&world.slot) {
        Slot::Ready(e) => {
            e.comm.features().has(Feature::Grow) && e.comm.state() == CommState::Ready
        }
        _ => false,
    };
    Ok(Admission {
        from: taken,
        upto,
        epoch: if admitted > 0 { now + 1 } else { now },
        members,
        grow,
        verdicts,
    })
}

/// The joiner's part, for global rank `rank` of a world of `size`, all within `wait`: reads
/// the world's record (refused there when outside the world, or a member the members do not
/// decide lost in time), takes a ticket, and waits for the decision that judges it.
pub(crate) fn wait_admitted(
    store: &dyn Store,
    rank: u32,
    size: u32,
    wait: Duration,
) -> Result<Admission> {
    let deadline = crate::deadline::deadline_after(wait);
    let left = || deadline.saturating_duration_since(Instant::now());
    let timeout = |what: String| Error::Timeout {
        what: text!("{what}"),
        after_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
    };
    // The record first: a refusal here takes no ticket.
    let members_key = roster::members_key();
    store.wait(&[&members_key], left()).map_err(|e| match e {
        Error::Timeout { .. } => timeout(format!(
            "rank {rank} waited for a running elastic world of {size} ranks on this store (none published its members: is the world elastic, and `size` the one it was made with?)"
        )),
        e => e,
    })?;
    loop {
        let (epoch, members) = roster::read(store)?.unwrap_or_default();
        match check_join(rank, size, &members, epoch) {
            Ok(()) => break,
            Err(e) if members.contains(&rank) && !left().is_zero() => {
                // A replacement may start before the members decided the rank lost: it waits
                // for their decision, bounded by its own timeout, taking no ticket meanwhile.
                log::info!("oxccl elastic: {e}; waiting for the members' decision");
                std::thread::sleep(left().min(Duration::from_millis(100)));
            }
            Err(e) => return Err(e),
        }
    }
    // A ticket whose rank a member voided before it was written is dropped for the next.
    let t = loop {
        let t = u64::try_from(store.add(&joiners_key(), 1)?).unwrap_or(0);
        let held = store.compare_set(&ticket_key(t), b"", &rank.to_le_bytes())?;
        if held == rank.to_le_bytes() {
            break t;
        }
        if left().is_zero() {
            return Err(timeout(format!(
                "rank {rank} could not write its join ticket before the members judged it"
            )));
        }
    };
    let bytes = match store.get(&admitted_key(t), left()) {
        Ok(b) => b,
        Err(e) => {
            // Gone before the members judged the ticket: withdrawn, so no later admission
            // takes in a rank that will never come (the members would wait for it at their
            // next init). A decision that read the rank already stands.
            let _ = store.compare_set(&ticket_key(t), &rank.to_le_bytes(), VOID);
            return Err(match e {
                Error::Timeout { .. } => timeout(format!(
                    "rank {rank} waited for the members to admit it (ticket {t}, withdrawn; they admit at `ProcessGroup::admit`)"
                )),
                e => e,
            });
        }
    };
    let a = Admission::decode(&bytes)?;
    let verdict = a.verdict(t).ok_or_else(|| Error::Remote {
        detail: text!(
            "the admission decision under ticket {t} judged tickets {}..={} only",
            a.from + 1,
            a.upto
        ),
    })?;
    verdict.result(t, rank, size, &a.members, a.epoch)?;
    log::info!(
        "oxccl elastic: rank {rank} admitted by ticket {t} at epoch {}",
        a.epoch
    );
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
