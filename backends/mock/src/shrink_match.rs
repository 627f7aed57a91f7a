//! Where the survivors of a shrink meet: which ranks stay, the child's id token across
//! processes, and the rendezvous in one process (see `shrink` for the whole).

use crate::shared::{Child, CommShared, ShrinkSlot};
use crate::sync::{lock, wait_for, TICK};
use oxccl_core::fnv::Fnv;
use oxccl_core::{text, Error, Result};
use std::time::{Duration, Instant};

/// The ranks of a parent of `size` that stay when `exclude` (sorted) leaves.
pub(crate) fn survivors(size: u32, exclude: &[u32]) -> Vec<u32> {
    (0..size)
        .filter(|r| exclude.binary_search(r).is_err())
        .collect()
}

/// The child's id token across processes: equal on every survivor of one shrink.
// Used by the transport across processes (Linux only).
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) fn child_token(parent: &[u8; 16], seq: u64, exclude: &[u32]) -> [u8; 16] {
    let mut h = Fnv::default();
    h.bytes(b"oxccl-mock-shrink");
    h.bytes(parent);
    h.bytes(&seq.to_le_bytes());
    for r in exclude {
        h.bytes(&r.to_le_bytes());
    }
    let a = h.finish();
    h.bytes(&a.to_le_bytes());
    let b = h.finish();
    let mut t = [0u8; 16];
    t[..8].copy_from_slice(&a.to_le_bytes());
    t[8..].copy_from_slice(&b.to_le_bytes());
    t
}

impl CommShared {
    /// Joins shrink `seq` of this in-process communicator as parent rank `rank` leaving out
    /// `exclude` (sorted, checked): the child and this rank's rank in it once every survivor
    /// called, or a timeout past `limit` naming the survivors that did not.
    pub(crate) fn shrink_join(
        &self,
        rank: u32,
        seq: u64,
        exclude: &[u32],
        limit: Duration,
    ) -> Result<Child> {
        let stay = survivors(self.size, exclude);
        let n = stay.len() as u32;
        let me = stay.iter().position(|r| *r == rank).ok_or_else(|| {
            Error::invalid(
                "exclude",
                format_args!("ranks other than the caller's own ({rank})"),
            )
        })?;
        let start = Instant::now();
        let mut hub = lock(&self.hub);
        let slot = hub.shrinks.entry(seq).or_insert_with(|| ShrinkSlot {
            exclude: exclude.to_vec(),
            child: CommShared::new(n, self.features, self.plan.children(), self.nb_polls, false),
            seen: vec![false; n as usize],
            count: 0,
            taken: 0,
        });
        if slot.exclude != exclude {
            return Err(Error::Mismatch {
                what: "exclude",
                detail: text!(
                    "shrink {seq}: rank {rank} leaves out {:?}, an earlier survivor {:?}",
                    exclude,
                    slot.exclude
                ),
            });
        }
        if let Some(s) = slot.seen.get_mut(me).filter(|s| !**s) {
            *s = true;
            slot.count += 1;
        }
        self.cv.notify_all();
        loop {
            let Some(slot) = hub.shrinks.get_mut(&seq) else {
                return Err(Error::Remote {
                    detail: text!("shrink {seq} vanished"),
                });
            };
            if slot.count == n {
                let child = slot.child.clone();
                slot.taken += 1;
                if slot.taken == n {
                    hub.shrinks.remove(&seq);
                }
                return Ok((child, me as u32));
            }
            let waited = start.elapsed();
            if waited >= limit {
                let missing: Vec<u32> = stay
                    .iter()
                    .zip(&slot.seen)
                    .filter(|(_, s)| !**s)
                    .map(|(r, _)| *r)
                    .collect();
                // This rank leaves: a survivor calling later waits for it in vain too.
                if let Some(s) = slot.seen.get_mut(me) {
                    *s = false;
                    slot.count -= 1;
                }
                return Err(Error::Timeout {
                    what: text!(
                        "shrink {seq}: rank {rank} waited for rank(s) {} to call it",
                        crate::messages::rank_list(&missing)
                    ),
                    after_ms: u64::try_from(waited.as_millis()).unwrap_or(u64::MAX),
                });
            }
            hub = wait_for(&self.cv, hub, TICK.min(limit - waited));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn survivors_keep_their_order_and_tokens_name_one_shrink() {
        assert_eq!(survivors(5, &[1, 3]), vec![0, 2, 4]);
        let p = [7u8; 16];
        assert_eq!(child_token(&p, 2, &[1]), child_token(&p, 2, &[1]));
        assert_ne!(child_token(&p, 2, &[1]), child_token(&p, 3, &[1]));
        assert_ne!(child_token(&p, 2, &[1]), child_token(&p, 2, &[2]));
        assert_ne!(child_token(&p, 2, &[1]), child_token(&[8u8; 16], 2, &[1]));
    }
}
