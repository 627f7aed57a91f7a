//! A split across processes on the parent's host: the calls of every rank meet in the real
//! communicator, where the in-process mock matches them, and each rank is answered with where
//! its child is (see `procs/split.rs` for the ranks' side).

use crate::shared::{CommShared, SplitSlot};
use crate::sync::{lock, wait_for, TICK};
use crate::transport::chan::Tx;
use crate::transport::child_spec::ChildSpec;
use crate::transport::proc_id::{random_token, ProcId};
use crate::transport::wire::Msg;
use oxccl_core::{text, Error, Result};
use std::sync::Arc;
use std::time::Instant;

/// Where `rank`'s child of a split whose calls all arrived is: `None` for NOCOLOR (or a rank
/// that did not call, which cannot happen once the result exists).
fn spec_of(real: &CommShared, slot: &SplitSlot, rank: u32) -> Option<ChildSpec> {
    let (color, _) = slot.calls.get(rank as usize).copied().flatten()?;
    let color = color?;
    let mut members: Vec<(u32, u32)> = slot
        .calls
        .iter()
        .enumerate()
        .filter_map(|(r, c)| match c {
            Some((Some(c), k)) if *c == color => Some((*k, r as u32)),
            _ => None,
        })
        .collect();
    // The in-process order: key, then parent rank.
    members.sort_unstable();
    let me = members.iter().position(|m| m.1 == rank)?;
    let (_, rank0) = *members.first()?;
    // The child made by the matching stands for the color: its token is the child's id.
    let (child, _) = slot.result.as_ref()?.get(rank as usize)?.as_ref()?;
    let token = *child.token.get_or_init(random_token);
    let pid = lock(&real.pids).get(rank0 as usize).copied()?;
    Some(ChildSpec {
        id: ProcId { pid, token },
        rank: me as u32,
        size: members.len() as u32,
    })
}

/// On the parent's host: `rank`'s answer to split `seq` once every rank called (consumed), or
/// the error that ends the wait (a rank died first); `None` while neither.
fn take_spec(real: &CommShared, rank: u32, seq: u64) -> Option<Result<Option<ChildSpec>>> {
    let mut hub = lock(&real.hub);
    let spec = hub
        .splits
        .get(&seq)
        .filter(|s| s.result.is_some())
        .map(|slot| spec_of(real, slot, rank));
    let taken = crate::split::take_locked(&mut hub, rank, seq)?;
    Some(match (taken, spec) {
        (Err(e), _) => Err(e),
        (Ok(_), Some(spec)) => Ok(spec),
        (Ok(_), None) => Err(Error::Remote {
            detail: text!("split {seq}: no result for rank {rank}"),
        }),
    })
}

/// On the parent's host: waits for `rank`'s answer to split `seq` until `deadline`.
pub(super) fn wait_taken(
    real: &CommShared,
    rank: u32,
    seq: u64,
    deadline: Option<Instant>,
) -> Option<Result<Option<ChildSpec>>> {
    loop {
        if let Some(r) = take_spec(real, rank, seq) {
            return Some(r);
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return None;
        }
        let hub = lock(&real.hub);
        drop(wait_for(&real.cv, hub, TICK));
    }
}

/// The host's proxy of `rank` got its split call: posts it and answers on a thread of its own
/// once every rank called or one died (the proxy keeps reading meanwhile, so an abort of the
/// rank still arrives).
pub(crate) fn serve_split(
    real: &Arc<CommShared>,
    rank: u32,
    seq: u64,
    color: Option<u32>,
    key: u32,
    tx: &Arc<Tx>,
) {
    real.split_post(rank, seq, color, key, true);
    let (r2, t2) = (real.clone(), tx.clone());
    let spawned = std::thread::Builder::new()
        .name("oxccl-mock-split".into())
        .spawn(move || {
            // Ends once all called or a rank of the parent died (destroying it counts).
            if let Some(result) = wait_taken(&r2, rank, seq, None) {
                let _ = t2.send(&Msg::SplitDone { seq, result }, None);
            }
        });
    if let Err(e) = spawned {
        let result = Err(Error::Remote {
            detail: text!("the mock host could not start a thread for split {seq}: {e}"),
        });
        let _ = tx.send(&Msg::SplitDone { seq, result }, None);
    }
}
