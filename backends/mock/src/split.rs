//! Split: the k-th split call of every rank is matched; once all called, ranks of one color form
//! a new communicator ordered by (key, parent rank). A blocking split waits on the calling
//! thread, as NCCL's does, bounded by the communicator's init limit (a process group's
//! timeout): past it the error names the ranks that never called and the caller's rank of
//! the parent is aborted; a nonblocking one posts its call and returns, and its child completes
//! the rendezvous when polled (so one thread can split every rank of a world). A peer that dies
//! before its call ends the wait with a remote error; one that dies after it spoils nothing
//! (its rank in its child is aborted, so its child's peers get a remote error there).

use crate::shared::{Child, CommShared, Hub, SplitSlot};
use crate::sync::{lock, wait_for, TICK};
use oxccl_core::text::Text;
use oxccl_core::{text, Error, Result};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

impl CommShared {
    /// Posts `rank`'s call of split `seq` (never blocks); `takes`: the rank will take its
    /// result with [`CommShared::split_try_take`]. The last call makes the children.
    pub(crate) fn split_post(
        &self,
        rank: u32,
        seq: u64,
        color: Option<u32>,
        key: u32,
        takes: bool,
    ) {
        let mut hub = lock(&self.hub);
        let orphans = self.post_locked(&mut hub, rank, seq, color, key, takes);
        drop(hub);
        self.cv.notify_all();
        for ((child, r), why) in orphans {
            child.abort(r, &why);
        }
    }

    /// Returns the children of abandoned ranks, to abort once the hub is unlocked.
    fn post_locked(
        &self,
        hub: &mut Hub,
        rank: u32,
        seq: u64,
        color: Option<u32>,
        key: u32,
        takes: bool,
    ) -> Vec<(Child, Text)> {
        let size = self.size;
        // Ranks gone after their call: their child rank is aborted once made.
        let gone = hub.dead.clone();
        let slot = hub.splits.entry(seq).or_insert_with(|| SplitSlot {
            calls: vec![None; size as usize],
            count: 0,
            takers: 0,
            abandoned: vec![None; size as usize],
            result: None,
        });
        if let Some(c) = slot.calls.get_mut(rank as usize) {
            if c.is_none() {
                *c = Some((color, key));
                slot.count += 1;
                slot.takers += u32::from(takes);
            }
        }
        let mut orphans = Vec::new();
        if slot.count == size && slot.result.is_none() {
            let mut groups: BTreeMap<u32, Vec<(u32, u32)>> = BTreeMap::new();
            for (r, c) in slot.calls.iter().enumerate() {
                if let Some((Some(col), k)) = c {
                    groups.entry(*col).or_default().push((*k, r as u32));
                }
            }
            let mut result: Vec<Option<Child>> = vec![None; size as usize];
            for members in groups.values_mut() {
                members.sort_unstable();
                let child = CommShared::new(
                    members.len() as u32,
                    self.features,
                    self.plan.children(),
                    self.nb_polls,
                    false,
                );
                for (i, (_, r)) in members.iter().enumerate() {
                    if let Some(place) = result.get_mut(*r as usize) {
                        *place = Some((child.clone(), i as u32));
                    }
                }
            }
            for (r, why) in slot.abandoned.iter().enumerate() {
                let Some(why) = why.as_ref().or(gone.get(r).and_then(Option::as_ref)) else {
                    continue;
                };
                if let Some(c) = result.get_mut(r).and_then(Option::take) {
                    orphans.push((c, why.clone()));
                }
            }
            slot.result = Some(result);
        }
        if slot.count == size && slot.result.is_some() && slot.takers == 0 {
            hub.splits.remove(&seq);
        }
        orphans
    }

    /// `rank`'s result of split `seq` once every rank called (`None` while not), or the error
    /// that ends the wait (a rank of this communicator died first).
    pub(crate) fn split_try_take(&self, rank: u32, seq: u64) -> Option<Result<Option<Child>>> {
        let mut hub = lock(&self.hub);
        take_locked(&mut hub, rank, seq)
    }

    /// A pending nonblocking child of `rank` is gone (`why`): its child rank, when it exists
    /// already, is returned for the caller to abort; otherwise it is aborted once made.
    pub(crate) fn split_abandon(&self, rank: u32, seq: u64, why: &str) -> Option<Child> {
        let mut hub = lock(&self.hub);
        let slot = hub.splits.get_mut(&seq)?;
        if slot.result.is_some() {
            return take_locked(&mut hub, rank, seq).and_then(|r| r.ok().flatten());
        }
        if let Some(a) = slot.abandoned.get_mut(rank as usize) {
            if a.is_none() {
                *a = Some(text!("{why}"));
                slot.takers = slot.takers.saturating_sub(1);
            }
        }
        None
    }

    /// Joins split `seq` as `rank` with `color` (None = NOCOLOR) and `key`, blocking until every
    /// rank called; returns the child and this rank's rank in it (children start ready; the
    /// caller applies its config). Past `limit` the call is abandoned (its child, if the
    /// others complete the split later, is aborted for it) and the error is a timeout naming
    /// the ranks that never called; the caller aborts this rank of the parent.
    pub(crate) fn split_join(
        &self,
        rank: u32,
        seq: u64,
        color: Option<u32>,
        key: u32,
        limit: Duration,
    ) -> Result<Option<Child>> {
        self.split_post(rank, seq, color, key, true);
        let start = Instant::now();
        let mut hub = lock(&self.hub);
        loop {
            if let Some(r) = take_locked(&mut hub, rank, seq) {
                return r;
            }
            let waited = start.elapsed();
            if waited >= limit {
                let missing: Vec<u32> = hub
                    .splits
                    .get(&seq)
                    .map(|slot| {
                        (0..self.size)
                            .filter(|r| slot.calls.get(*r as usize).is_some_and(Option::is_none))
                            .collect()
                    })
                    .unwrap_or_default();
                drop(hub);
                let why = format!("split {seq} timed out after {} ms", waited.as_millis());
                // A NOCOLOR call takes no child: nothing to abandon.
                let left = color.and_then(|_| self.split_abandon(rank, seq, &why));
                if let Some((child, r)) = left {
                    // Completed meanwhile: this rank leaves its child anyway.
                    child.abort(r, &why);
                }
                return Err(Error::Timeout {
                    what: text!(
                        "split {seq}: rank {rank} waited for rank(s) {} of {} to call it",
                        crate::messages::rank_list(&missing),
                        self.size
                    ),
                    after_ms: u64::try_from(waited.as_millis()).unwrap_or(u64::MAX),
                });
            }
            hub = wait_for(&self.cv, hub, TICK.min(limit - waited));
        }
    }
}

/// `rank`'s result of split `seq` with the hub locked (see [`CommShared::split_try_take`]).
pub(crate) fn take_locked(hub: &mut Hub, rank: u32, seq: u64) -> Option<Result<Option<Child>>> {
    let Hub { dead, splits, .. } = hub;
    let Some(slot) = splits.get_mut(&seq) else {
        return Some(Err(Error::Remote {
            detail: text!("split {seq} vanished"),
        }));
    };
    if let Some(res) = slot.result.as_mut() {
        let mine = res.get_mut(rank as usize).and_then(Option::take);
        let colored = slot
            .calls
            .get(rank as usize)
            .is_some_and(|c| c.is_some_and(|(color, _)| color.is_some()));
        slot.takers = slot.takers.saturating_sub(1);
        if slot.takers == 0 && slot.count as usize == slot.calls.len() {
            splits.remove(&seq);
        }
        if let (None, true, Some(Some(why))) = (&mine, colored, dead.get(rank as usize)) {
            // Gone before it took its child (which was aborted for it): not a NOCOLOR answer.
            return Some(Err(Error::Remote {
                detail: text!("split {seq}: rank {rank} {why}"),
            }));
        }
        return Some(Ok(mine));
    }
    // The wait ends when this rank is gone, or a rank that has not called yet is (its call
    // will never come); a rank gone after its call (destroyed its parent, say) spoils nothing.
    dead.iter()
        .enumerate()
        .find(|(r, d)| {
            d.is_some() && (*r as u32 == rank || slot.calls.get(*r).is_some_and(Option::is_none))
        })
        .and_then(|(d, why)| why.clone().map(|why| (d, why)))
        .map(|(d, why)| {
            Err(Error::Remote {
                detail: text!("split {seq}: rank {d} {why}"),
            })
        })
}
