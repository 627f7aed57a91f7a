//! Split: the k-th split call of every rank is matched; once all called, ranks of one color form
//! a new communicator ordered by (key, parent rank). Blocking on the calling thread, as NCCL's
//! blocking split is; a peer that dies meanwhile ends the wait with a remote error.

use crate::shared::{first_dead, Child, CommShared, SplitSlot};
use crate::sync::{lock, wait_for, TICK};
use oxccl_core::{text, Error, Result};
use std::collections::BTreeMap;

impl CommShared {
    /// Joins split `seq` as `rank` with `color` (None = NOCOLOR) and `key`; returns the child
    /// and this rank's rank in it (children start ready; the caller applies its config).
    pub(crate) fn split_join(
        &self,
        rank: u32,
        seq: u64,
        color: Option<u32>,
        key: u32,
    ) -> Result<Option<Child>> {
        let mut hub = lock(&self.hub);
        let size = self.size;
        let slot = hub.splits.entry(seq).or_insert_with(|| SplitSlot {
            calls: vec![None; size as usize],
            count: 0,
            result: None,
        });
        if let Some(c) = slot.calls.get_mut(rank as usize) {
            if c.is_none() {
                *c = Some((color, key));
                slot.count += 1;
            }
        }
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
            slot.result = Some(result);
            self.cv.notify_all();
        }
        loop {
            let dead = first_dead(&hub, None);
            let Some(slot) = hub.splits.get_mut(&seq) else {
                return Err(Error::Remote {
                    detail: text!("split {seq} vanished"),
                });
            };
            if let Some(res) = slot.result.as_mut() {
                let mine = res.get_mut(rank as usize).and_then(Option::take);
                slot.count -= 1;
                if slot.count == 0 {
                    hub.splits.remove(&seq);
                }
                return Ok(mine);
            }
            if let Some((d, why)) = dead {
                return Err(Error::Remote {
                    detail: text!("split {seq}: rank {d} {why}"),
                });
            }
            hub = wait_for(&self.cv, hub, TICK);
        }
    }
}
