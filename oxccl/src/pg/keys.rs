//! Every store key a process group writes, in one list, and the namespace they all live in.
//!
//! # The namespace: one per incarnation of a world on a store
//!
//! A store can outlive the groups made on it: torchrun's agent store survives a restart of
//! its workers, and a program may destroy its default group and make another on the same
//! store (a server re-forming its world, tests). Keys read by one incarnation must never be
//! the previous one's (a stale unique id joins a dead bootstrap), so [`ProcessGroup::new`]
//! puts everything a default group and its subgroups write under a namespace of their own,
//! `oxccl/world/<size>/<incarnation>/` (a [`PrefixStore`] over the store it is given, which
//! [`ProcessGroup::store`] returns), that every rank computes alike without agreeing first:
//!
//! - every rank adds 1 to the counter `oxccl/world/<size>/incarnations` when it makes its
//!   default group, and its incarnation is `(value - 1) / size`;
//! - the adds of incarnation k all happen before any of incarnation k + 1: a rank of k + 1
//!   starts only after every rank of k made its group (a restart follows the failure of
//!   running ranks; a re-formed world follows the destruction of the last one), so the
//!   values 1..=size fall to incarnation 0, size+1..=2 size to 1, and so on, whatever the
//!   order within one incarnation;
//! - the world size is part of the counter's key, so a world re-formed with another size
//!   counts apart and the arithmetic stays whole.
//!
//! What it cannot see: an incarnation in which a rank died *before* making its group leaves
//! the count short, and every later incarnation on that store is then split between two
//! namespaces (their inits time out naming the missing ranks). Under torchrun on one node,
//! the launch scopes the store by its restart count first (see `launch::Bootstrap`), so a
//! restart starts a fresh count; elsewhere a fresh store (or a [`PrefixStore`] per
//! incarnation, named by the program) is the way out. Worlds made at the same time on one
//! store must each have a [`PrefixStore`] of their own: their adds would interleave.
//!
//! # The keys, relative to the namespace
//!
//! | key | written by | for |
//! | --- | --- | --- |
//! | `oxccl/pg/<uid>/unique_id/<attempt>` | group rank 0 ([`unique_id`]) | the backend's unique id of init `attempt` of group `uid` (0: the default group) |
//! | `oxccl/pg/<uid>/init/<attempt>/arrived/<group rank>`, `…/count`, `…/all` | every member ([`init`]) | arrival before an init: who came, how many, all came |
//! | `…/missing/claim`, `…/missing` under any arrival prefix | the first participant that timed out | who never arrived, read from the marks once for all |
//! | `oxccl/pg/<uid>/split/<k>/arrived/<group rank>`, `…/count`, `…/all` | every member of the parent ([`split`]) | arrival before split `k` of group `uid`'s communicator |
//! | `oxccl/tune/<uid>/0`, `…/verdict`, `…/arrival/…` | group rank 0 its value; a member that differs the verdict; every member its arrival ([`agreement`]) | the tune tables agree |
//! | `oxccl/release/<call>/<uid>/0`, `…/verdict`, `…/arrival/…` | likewise ([`agreement`], from `buffer_modes.rs`) | the windows release call `call` frees agree |
//! | `oxccl/desync/<uid>/<group rank>` | the watchdog ([`desync_key`]) | progress read by a desync report |
//! | `oxccl/desync/<uid>/seq/<seq>`, `…/claim` | the first rank whose collective `seq` timed out | every member's progress as it read it, for the others' reports |
//! | `oxccl/timeout_dump` | a rank whose failure dumps (`oxccl_rules::watchdog::DUMP_REQUEST_KEY`) | the signal for every rank to dump |
//! | `oxccl/dumped/rank/<global rank>`, `oxccl/dumped/count`, `oxccl/dumped/all` | every rank that dumped for a failure, once; the last one `…/all` (`DUMP_REPORT_PREFIX`, `DUMP_REPORT_COUNT_KEY`, `DUMP_ALL_REPORTED_KEY`) | the failing rank waits on `…/all`, then reads the count; the keys name who never reported |
//!
//! Outside the namespace: the counter `oxccl/world/<size>/incarnations` ([`incarnations`]);
//! and, under torchrun's agent store on one node, everything above sits under
//! `oxccl/restart/<TORCHELASTIC_RESTART_COUNT>/` too. Keys the program itself sets through
//! [`ProcessGroup::store`] share the namespace. Error texts and logs name keys whole, as the
//! store underneath holds them ([`Store::full_key`]), so a person can look them up with
//! another client.
//!
//! [`ProcessGroup::new`]: super::ProcessGroup::new
//! [`ProcessGroup::store`]: super::ProcessGroup::store
//! [`PrefixStore`]: crate::store::PrefixStore
//! [`desync_key`]: crate::watchdog::desync::desync_key

use crate::store::{PrefixStore, Store};
use oxccl_core::{text, Error, Result};
use std::sync::Arc;

/// Where group rank 0 of group `uid` writes the unique id of its init `attempt`.
pub(crate) fn unique_id(uid: u64, attempt: u64) -> String {
    format!("oxccl/pg/{uid}/unique_id/{attempt}")
}

/// The arrival prefix of init `attempt` of group `uid`.
pub(crate) fn init(uid: u64, attempt: u64) -> String {
    format!("oxccl/pg/{uid}/init/{attempt}")
}

/// The arrival prefix of split `k` of group `uid`'s communicator.
pub(crate) fn split(uid: u64, k: u64) -> String {
    format!("oxccl/pg/{uid}/split/{k}")
}

/// Where `who` (a group rank, or `verdict`) of group `uid` writes its value for the
/// agreement on `topic` (`tune`, `release/<call>`).
pub(crate) fn agreement(topic: &str, uid: u64, who: &str) -> String {
    format!("oxccl/{topic}/{uid}/{who}")
}

/// The counter of default groups of `size` ranks made on a store.
pub(crate) fn incarnations(size: u32) -> String {
    format!("oxccl/world/{size}/incarnations")
}

/// The namespace of incarnation `k` of a world of `size` ranks.
pub(crate) fn namespace(size: u32, k: u64) -> String {
    format!("oxccl/world/{size}/{k}")
}

/// The incarnation a rank belongs to whose add to the counter returned `count`, in a world
/// of `size` ranks: `(count - 1) / size`. A count below 1 (someone else wrote the key) is
/// an error naming the counter's key as the store holds it (`full_key`).
pub(crate) fn incarnation_of(count: i64, size: u32, full_key: &str) -> Result<u64> {
    match u64::try_from(count) {
        Ok(c) if c >= 1 && size > 0 => Ok((c - 1) / u64::from(size)),
        _ => Err(Error::Remote {
            detail: text!(
                "store key `{full_key}` counted {count} after this rank's add: not a counter oxccl keeps (set by something else?)"
            ),
        }),
    }
}

/// Counts this rank into the next incarnation of a world of `size` on `store`: the
/// namespace's view of `store`, its incarnation, and its name as the store underneath holds
/// it (see the module documentation).
pub(crate) fn enter(store: Arc<dyn Store>, size: u32) -> Result<(Arc<dyn Store>, u64, String)> {
    let counter = incarnations(size);
    let k = incarnation_of(store.add(&counter, 1)?, size, &store.full_key(&counter))?;
    let ns = namespace(size, k);
    let full = store.full_key(&ns);
    Ok((Arc::new(PrefixStore::new(ns, store)), k, full))
}

/// The namespace of the incarnation of a world of `size` now running on `store`, without
/// counting the caller in: where a process that joins a running elastic world meets it.
pub(crate) fn running(store: Arc<dyn Store>, size: u32) -> Result<Arc<dyn Store>> {
    let counter = incarnations(size);
    if !store.check(&[&counter])? {
        return Err(Error::invalid(
            "size",
            format_args!(
                "the size of a world made on this store; none of {size} ranks was (no `{}`)",
                store.full_key(&counter)
            ),
        ));
    }
    let k = incarnation_of(store.add(&counter, 0)?, size, &store.full_key(&counter))?;
    Ok(Arc::new(PrefixStore::new(namespace(size, k), store)))
}

/// A fresh namespace on `store` for one incarnation of a world of `size` ranks, counted as
/// [`ProcessGroup::new`] counts its own (see the module documentation): for keys a program
/// exchanges beside its groups, such as the unique id of a communicator it makes outside
/// them. Every rank of the world calls it once per incarnation, in the same order relative
/// to its other entries.
///
/// [`ProcessGroup::new`]: super::ProcessGroup::new
pub fn world_namespace(store: Arc<dyn Store>, size: u32) -> Result<Arc<dyn Store>> {
    enter(store, size).map(|(view, _, _)| view)
}

/// Where the survivors of an elastic world make their decisions, under the world's namespace.
pub(crate) const ELASTIC_PREFIX: &str = "oxccl/elastic";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemStore;
    use std::time::Duration;

    #[test]
    fn each_block_of_size_adds_is_one_incarnation() {
        let key = "p/oxccl/world/3/incarnations";
        let got: Vec<u64> = (1..=7)
            .map(|c| incarnation_of(c, 3, key).unwrap())
            .collect();
        assert_eq!(got, [0, 0, 0, 1, 1, 1, 2]);
        assert_eq!(incarnation_of(1, 1, key).unwrap(), 0);
        assert_eq!(incarnation_of(2, 1, key).unwrap(), 1);
        for bad in [0, -1, i64::MIN] {
            let e = incarnation_of(bad, 3, key).unwrap_err().to_string();
            assert!(e.contains("`p/oxccl/world/3/incarnations`"), "{e}");
        }
    }

    #[test]
    fn two_incarnations_write_apart_and_sizes_count_apart() {
        let raw: Arc<dyn Store> = Arc::new(MemStore::new());
        let first: Vec<_> = (0..2).map(|_| enter(raw.clone(), 2).unwrap()).collect();
        let other = enter(raw.clone(), 3).unwrap();
        let second = enter(raw.clone(), 2).unwrap();
        assert_eq!((first[0].1, first[1].1, other.1, second.1), (0, 0, 0, 1));
        first[0].0.set(&unique_id(0, 0), b"old").unwrap();
        second.0.set(&unique_id(0, 0), b"new").unwrap();
        let t = Duration::from_secs(1);
        assert_eq!(first[1].0.get(&unique_id(0, 0), t).unwrap(), b"old");
        assert_eq!(
            raw.get("oxccl/world/2/1/oxccl/pg/0/unique_id/0", t)
                .unwrap(),
            b"new"
        );
        assert_eq!(second.2, "oxccl/world/2/1");
        assert!(!other.0.check(&[&unique_id(0, 0)]).unwrap());
    }

    #[test]
    fn names_are_the_keys_the_store_underneath_holds() {
        let raw: Arc<dyn Store> = Arc::new(MemStore::new());
        let scoped: Arc<dyn Store> = Arc::new(PrefixStore::new("oxccl/restart/1", raw.clone()));
        let (view, k, name) = enter(scoped.clone(), 2).unwrap();
        assert_eq!((k, name.as_str()), (0, "oxccl/restart/1/oxccl/world/2/0"));
        assert_eq!(
            view.full_key(&unique_id(0, 0)),
            "oxccl/restart/1/oxccl/world/2/0/oxccl/pg/0/unique_id/0"
        );
        view.set(&unique_id(0, 0), b"id").unwrap();
        let t = Duration::from_secs(1);
        assert_eq!(raw.get(&view.full_key(&unique_id(0, 0)), t).unwrap(), b"id");
        // A counter someone else wrote is named where it is.
        raw.set("oxccl/restart/1/oxccl/world/3/incarnations", b"-5")
            .unwrap();
        let e = enter(scoped, 3).map(|_| ()).unwrap_err().to_string();
        assert!(
            e.contains("`oxccl/restart/1/oxccl/world/3/incarnations`"),
            "{e}"
        );
    }
}
