//! The running elastic world's public record in the store: who its members are at which
//! epoch, and a beat that shows it is alive. A process that wants in reads it before it
//! counts itself anywhere: a join as a member (or outside the world) is refused from it, and
//! [`ProcessGroup::new`](crate::pg::ProcessGroup::new) on a store whose world of that size
//! still beats is refused, so nothing a refused process does moves the world's counters.

use super::super::backend::PgBackend;
use super::successor::last;
use crate::pg::inner::PgInner;
use crate::pg::keys;
use crate::pg::keys::ELASTIC_PREFIX as PREFIX;
use crate::store::{PrefixStore, Store};
use oxccl_core::{Error, Result};
use oxccl_rules::elastic::survivors::{decode, encode, encoded_len};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// How often the world's first members add to the beat.
const BEAT_EVERY: Duration = Duration::from_millis(250);

/// How long a `new` watches the beat of a world that may still run: four beats of two
/// members, so one late beat does not pass for a dead world.
const BEAT_WATCH: Duration = Duration::from_millis(1500);

/// How many members (the first of the member list) beat.
const BEATERS: usize = 2;

/// The members of the world at its epoch, as the first members publish them.
pub(crate) fn members_key() -> String {
    format!("{PREFIX}/members")
}

/// The counter the first members add to while the world runs.
fn beat_key() -> String {
    format!("{PREFIX}/beat")
}

/// The world's members at their epoch, if an elastic world published them on `store`.
pub(crate) fn read(store: &dyn Store) -> Result<Option<(u64, Vec<u32>)>> {
    let key = members_key();
    if !store.check(&[&key])? {
        return Ok(None);
    }
    parse(&store.get(&key, Duration::from_secs(1))?).map(Some)
}

fn parse(bytes: &[u8]) -> Result<(u64, Vec<u32>)> {
    let mut members = vec![0; bytes.len() / 4 + 1];
    let (epoch, n) = decode(bytes, &mut members)?;
    members.truncate(n);
    Ok((epoch, members))
}

/// Publishes `members` at `epoch` when the record holds an earlier epoch (or none): a late
/// writer of an older epoch never overwrites a newer one.
pub(crate) fn publish(store: &dyn Store, epoch: u64, members: &[u32]) -> Result<()> {
    let key = members_key();
    let mut new = vec![0; encoded_len(members.len())];
    encode(epoch, members, &mut new)?;
    let mut held = match store.check(&[&key])? {
        true => store.get(&key, Duration::from_secs(1))?,
        false => Vec::new(),
    };
    // Each round either writes or reads a newer record; epochs only grow, so few rounds.
    for _ in 0..64 {
        if !held.is_empty() && parse(&held).is_ok_and(|(e, _)| e >= epoch) {
            return Ok(());
        }
        let got = store.compare_set(&key, &held, &new)?;
        if got == new {
            return Ok(());
        }
        held = got;
    }
    Ok(())
}

/// Whether global rank `me` is among the first members of `members`, who publish and beat.
pub(crate) fn keeps_record(members: &[u32], me: u32) -> bool {
    members.iter().take(BEATERS).any(|&r| r == me)
}

/// Starts the beat of `root`'s world on a thread of its own (a survivors' decision on the
/// monitor must not pause it); it ends with the group or once this rank is out.
pub(crate) fn start_beat<B: PgBackend>(root: &Arc<PgInner<B>>) {
    let weak = Arc::downgrade(root);
    let started = std::thread::Builder::new()
        .name("oxccl-beat".into())
        .spawn(move || beat(&weak));
    if let Err(e) = started {
        log::warn!(
            "oxccl elastic: no beat thread ({e}); a `new` on this store cannot see the world runs"
        );
    }
}

fn beat<B: PgBackend>(weak: &Weak<PgInner<B>>) {
    loop {
        std::thread::sleep(BEAT_EVERY);
        let Some(root) = weak.upgrade() else { return };
        let Some(el) = root.family.elastic.as_ref() else {
            return;
        };
        let at = last(&root);
        if at.destroyed.load(Ordering::Acquire) || el.left_out.load(Ordering::Acquire) {
            return;
        }
        if keeps_record(&at.ranks, at.global_rank) {
            let _ = root.store.add(&beat_key(), 1);
        }
    }
}

/// Refuses [`ProcessGroup::new`](crate::pg::ProcessGroup::new) of a world of `size` on
/// `store` (the store as given, before any namespace) while an elastic world of that size
/// runs there: its incarnation is complete, it published its members, and its beat moves.
/// Reads only: a refused process leaves every counter as it was.
pub(crate) fn refuse_new_while_running(store: &Arc<dyn Store>, size: u32, rank: u32) -> Result<()> {
    // One call on the common path: every rank of a forming world makes it.
    let count = store.add(&keys::incarnations(size), 0)?;
    let Ok(count) = u64::try_from(count) else {
        return Ok(());
    };
    if count == 0 || count % u64::from(size) != 0 {
        // None made, or an incarnation still gathering its ranks: this rank is one of it.
        return Ok(());
    }
    let running = PrefixStore::new(
        keys::namespace(size, count / u64::from(size) - 1),
        store.clone(),
    );
    let Some((epoch, members)) = read(&running)? else {
        return Ok(());
    };
    let first = running.add(&beat_key(), 0)?;
    let began = Instant::now();
    while began.elapsed() < BEAT_WATCH {
        std::thread::sleep(BEAT_EVERY / 2);
        if running.add(&beat_key(), 0)? != first {
            return Err(Error::invalid(
                "store",
                format_args!(
                    "a store with no running world of {size} ranks: an elastic world of {size} runs there (epoch {epoch}, members {members:?}); rank {rank} rejoins it with `ProcessGroup::join`"
                ),
            ));
        }
    }
    Ok(())
}
