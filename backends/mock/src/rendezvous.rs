//! Matching the k-th collective of every rank: arrivals are posted without blocking (so a group
//! can post all its ops before waiting on any), the last arrival computes the result for all,
//! and waiters leave with the outcome, or with an error when a participant died.

use crate::collective;
use crate::op_desc::OpDesc;
use crate::shared::{first_dead, Arrivals, CommShared};
use crate::sync::{lock, wait_for, TICK};
use oxccl_core::{text, Error, Result};

impl CommShared {
    /// Posts `rank`'s arrival at collective `seq`; the last arrival runs it.
    ///
    /// # Safety
    /// The buffers of `desc` must stay valid until [`CommShared::coll_wait`] returns for `rank`.
    pub(crate) unsafe fn coll_post(&self, rank: u32, seq: u64, desc: OpDesc) {
        let mut hub = lock(&self.hub);
        let size = self.size;
        // A rank that died after posting has left: its buffers may be gone, so nobody computes.
        let dead = first_dead(&hub, None);
        let slot = hub.colls.entry(seq).or_insert_with(|| Arrivals {
            arrivals: vec![None; size as usize],
            count: 0,
            outcome: None,
            taken: 0,
        });
        let Some(place) = slot.arrivals.get_mut(rank as usize) else {
            return;
        };
        if place.is_some() {
            return;
        }
        *place = Some(desc);
        slot.count += 1;
        if slot.outcome.is_none() && slot.count == size {
            let arr: Vec<OpDesc> = slot.arrivals.iter().flatten().cloned().collect();
            slot.outcome = Some(match dead {
                Some((d, why)) => Err(Error::Remote {
                    detail: text!("rank {d} {why}"),
                }),
                // SAFETY: every rank posted and is alive, and each keeps its buffers valid and
                // untouched until it leaves `coll_wait`, which it cannot do before the outcome
                // is set here.
                None => unsafe { collective::run(&arr, size) },
            });
            drop(hub);
            self.cv.notify_all();
        }
    }

    /// Waits for the outcome of collective `seq` as `rank`.
    pub(crate) fn coll_wait(&self, rank: u32, seq: u64) -> Result<()> {
        let mut hub = lock(&self.hub);
        loop {
            let own_dead = hub.dead.get(rank as usize).cloned().flatten();
            let other_dead = first_dead(&hub, Some(rank));
            let size = self.size;
            let Some(slot) = hub.colls.get_mut(&seq) else {
                return Err(Error::Remote {
                    detail: text!("collective {seq} vanished"),
                });
            };
            if let Some(out) = slot.outcome.clone() {
                slot.taken += 1;
                if slot.taken >= size {
                    hub.colls.remove(&seq);
                }
                return out;
            }
            if let Some(why) = own_dead {
                // Leaving makes the op impossible for the others: they get a remote error.
                slot.outcome = Some(Err(Error::Remote {
                    detail: text!("rank {rank} {why}"),
                }));
                slot.taken += 1;
                drop(hub);
                self.cv.notify_all();
                return Err(self.own_error(rank));
            }
            if let Some((d, why)) = other_dead {
                let e = Error::Remote {
                    detail: text!("rank {d} {why}"),
                };
                slot.outcome = Some(Err(e.clone()));
                slot.taken += 1;
                drop(hub);
                self.cv.notify_all();
                return Err(e);
            }
            hub = wait_for(&self.cv, hub, TICK);
        }
    }
}
