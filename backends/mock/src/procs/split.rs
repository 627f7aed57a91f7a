//! Split of a communicator spanning processes: the calls are matched where the parent's state
//! lives (its host, see `procs/split_match.rs`), by the in-process mock's own code (colors, keys, order by key then
//! parent rank, a dead rank failing the wait); each rank is then told where its child is: an id
//! hosted by the process of the child's rank 0, which every member joins as in an init. So a
//! child is independent of its parent's host, as an NCCL child is of its parent, and a child
//! spanning processes is one like any other (every op, abort, split again).
//!
//! A blocking split waits on the calling thread; a nonblocking one runs the same steps on a
//! thread of its own (a [`Task`]) and its child binds when polled. Every wait is bounded by the
//! parent's init limit (`Error::Timeout`), and a peer that dies ends it with `Error::Remote`.

use super::host::host_child;
use super::split_match::wait_taken;
use crate::lobby::{Joiner, Lobby};
use crate::mirror::remote::join;
use crate::mirror::split_task::Task;
use crate::shared::{Child, CommShared};
use crate::sync::{lock, TICK};
use crate::transport::child_spec::ChildSpec;
use oxccl_core::{text, Error, Result};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn timeout(rank: u32, seq: u64, start: Instant) -> Error {
    Error::Timeout {
        what: text!("rank {rank} waiting for every rank's call of split {seq}"),
        after_ms: u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX),
    }
}

/// Posts `rank`'s call of split `seq` of `parent`: on the parent's host, or sent to it. Done
/// before a split returns, even a nonblocking one, so the call is in before anything the rank
/// does next (dropping its parent, say) reaches the host.
fn post_call(parent: &CommShared, rank: u32, seq: u64, call: (Option<u32>, u32)) -> Result<()> {
    match parent.link.get() {
        None => {
            parent.split_post(rank, seq, call.0, call.1, true);
            Ok(())
        }
        Some(link) => link.split_call(seq, call.0, call.1),
    }
}

/// Waits (up to `limit` from `start`) for where `rank`'s child of split `seq` is, its call
/// posted.
fn wait_spec(
    parent: &CommShared,
    rank: u32,
    seq: u64,
    start: Instant,
    limit: Duration,
) -> Result<Option<ChildSpec>> {
    let Some(link) = parent.link.get() else {
        // The parent's host: matched here.
        return wait_taken(parent, rank, seq, start.checked_add(limit))
            .unwrap_or_else(|| Err(timeout(rank, seq, start)));
    };
    loop {
        if let Some(r) = link.split_answer(seq) {
            return r;
        }
        if lock(&parent.hub)
            .dead
            .get(rank as usize)
            .is_some_and(Option::is_some)
        {
            // Aborted meanwhile (its abort told the host, so the peers stop waiting too).
            return Err(parent.own_error(rank));
        }
        if start.elapsed() >= limit {
            return Err(timeout(rank, seq, start));
        }
        link.wait_reply(TICK);
    }
}

/// Joins the child `spec` names (none for NOCOLOR), with the parent's settings: hosts it when
/// this process is its rank 0's, else connects to that process. Waits up to `limit` for the
/// other members. The blocking split and a nonblocking one's thread both end here.
pub(crate) fn join_child(
    parent: &CommShared,
    spec: Option<ChildSpec>,
    limit: Duration,
) -> Result<Option<Child>> {
    let Some(spec) = spec else { return Ok(None) };
    let make = || {
        Arc::new(Lobby::new(
            parent.features,
            parent.plan.children(),
            parent.nb_polls,
            limit,
        ))
    };
    let shared = if spec.id.pid == std::process::id() {
        let host = host_child(&spec.id, limit, make)?;
        host.join(
            &spec.id.to_id(),
            spec.rank,
            spec.size,
            Joiner::elsewhere(None),
            limit,
        )?
    } else {
        join(&make(), &spec.id, spec.rank, spec.size, false, limit)?
    };
    Ok(Some((shared, spec.rank)))
}

/// A blocking split of `rank` of `parent` (a communicator spanning processes) with
/// `color` (None = NOCOLOR) and `key`. A failed match (a peer died, or the calls did not all
/// come within `limit`) fails the rank in the parent, as in-process, so its peers stop waiting.
pub(crate) fn split(
    parent: &CommShared,
    rank: u32,
    seq: u64,
    color: Option<u32>,
    key: u32,
    limit: Duration,
) -> Result<Option<Child>> {
    let start = Instant::now();
    let spec = post_call(parent, rank, seq, (color, key))
        .and_then(|()| wait_spec(parent, rank, seq, start, limit));
    let spec = match spec {
        Ok(s) => s,
        Err(e) => {
            parent.fail(rank, e.clone());
            return Err(e);
        }
    };
    join_child(parent, spec, limit)
}

/// A nonblocking split of `rank` of `parent`: posts its call of split `seq`, then waits for
/// the match and joins the child on a new thread, whose outcome the returned [`Task`] holds.
pub(crate) fn spawn(
    parent: Arc<CommShared>,
    rank: u32,
    seq: u64,
    color: Option<u32>,
    key: u32,
    limit: Duration,
) -> Result<Arc<Task>> {
    let start = Instant::now();
    post_call(&parent, rank, seq, (color, key))?;
    let task = Arc::new(Task::new());
    let t2 = task.clone();
    std::thread::Builder::new()
        .name("oxccl-mock-split".into())
        .spawn(move || {
            let r = wait_spec(&parent, rank, seq, start, limit)
                .and_then(|spec| join_child(&parent, spec, limit));
            t2.finish(r);
        })
        .map_err(|e| Error::Remote {
            detail: text!("starting the thread of nonblocking split {seq}: {e}"),
        })?;
    Ok(task)
}

/// Shrink `seq` of `parent` (spanning processes) by parent rank `rank`, leaving out `exclude`
/// (sorted, checked): the child's id is derived alike by every survivor (see `shrink`) and
/// hosted by the process of its rank 0, so no step goes through the parent's host.
pub(crate) fn shrink(
    parent: &CommShared,
    rank: u32,
    seq: u64,
    exclude: &[u32],
    limit: Duration,
) -> Result<Child> {
    let stay = crate::shrink_match::survivors(parent.size, exclude);
    let me = stay.iter().position(|r| *r == rank);
    let (Some(me), Some(rank0)) = (me, stay.first()) else {
        return Err(Error::invalid(
            "exclude",
            format_args!("ranks other than the caller's own ({rank})"),
        ));
    };
    let Some(parent_token) = parent.token.get() else {
        return Err(Error::Remote {
            detail: text!("shrink {seq}: the communicator has no process-spanning id"),
        });
    };
    let pid = lock(&parent.pids)
        .get(*rank0 as usize)
        .copied()
        .unwrap_or(0);
    let spec = ChildSpec {
        id: crate::transport::proc_id::ProcId {
            pid,
            token: crate::shrink_match::child_token(parent_token, seq, exclude),
        },
        rank: me as u32,
        size: stay.len() as u32,
    };
    join_child(parent, Some(spec), limit)?.ok_or_else(|| Error::Remote {
        detail: text!("shrink {seq}: no child made"),
    })
}
