//! Split of a communicator spanning processes: the calls are matched where the parent's state
//! lives (its host), by the in-process mock's own code (colors, keys, order by key then
//! parent rank, a dead rank failing the wait); each rank is then told where its child is: an id
//! hosted by the process of the child's rank 0, which every member joins as in an init. So a
//! child is independent of its parent's host, as an NCCL child is of its parent, and a child
//! spanning processes is one like any other (every op, abort, split again).
//!
//! A blocking split waits on the calling thread; a nonblocking one runs the same steps on a
//! thread of its own (a [`Task`]) and its child binds when polled. Every wait is bounded by the
//! parent's init limit (`Error::Timeout`), and a peer that dies ends it with `Error::Remote`.

use super::chan::Tx;
use super::wire::Msg;
use super::{random_token, ChildSpec, ProcId};
use crate::shared::{Child, CommShared, SplitSlot};
use crate::sync::{lock, wait_for, TICK};
use crate::MockBackend;
use oxccl_core::{text, Error, Result};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
fn wait_taken(
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
fn join_child(
    parent: &CommShared,
    spec: Option<ChildSpec>,
    limit: Duration,
) -> Result<Option<Child>> {
    let Some(spec) = spec else { return Ok(None) };
    let make = || {
        MockBackend::with_options(
            parent.features,
            parent.plan.children(),
            parent.nb_polls,
            limit,
        )
        .across_processes()
    };
    let shared = if spec.id.pid == std::process::id() {
        let host = super::host::host_child(&spec.id, limit, make)?;
        host.join_shared(
            &spec.id.to_id(),
            spec.rank,
            spec.size,
            crate::backend::Joiner::elsewhere(None),
            limit,
        )?
    } else {
        make().join_remote(&spec.id, spec.rank, spec.size, false, limit)?
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

/// Where a nonblocking split's thread is.
enum State {
    /// Still matching or joining; `Some` once the child was abandoned (aborted or dropped
    /// first), with why: its rank in the child is aborted once joined.
    Running(Option<String>),
    /// The outcome, not yet taken (boxed: an error is large, and the enum lives long).
    Done(Box<Result<Option<Child>>>),
    /// Taken (or abandoned).
    Gone,
}

/// A nonblocking split of one rank across processes: its steps run on a thread of their own, so
/// the call returns at once and one thread can drive several ranks' splits.
pub(crate) struct Task {
    state: Mutex<State>,
}

impl Task {
    /// Posts `rank`'s call of split `seq` of `parent`, then waits for the match and joins
    /// the child on a new thread.
    pub(crate) fn start(
        parent: Arc<CommShared>,
        rank: u32,
        seq: u64,
        color: Option<u32>,
        key: u32,
        limit: Duration,
    ) -> Result<Arc<Task>> {
        let start = Instant::now();
        post_call(&parent, rank, seq, (color, key))?;
        let task = Arc::new(Task {
            state: Mutex::new(State::Running(None)),
        });
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

    fn finish(&self, r: Result<Option<Child>>) {
        let mut st = lock(&self.state);
        match &*st {
            State::Running(Some(why)) => {
                if let Ok(Some((child, rank))) = &r {
                    child.abort(*rank, why);
                }
                *st = State::Gone;
            }
            _ => *st = State::Done(Box::new(r)),
        }
    }

    /// The outcome once the thread finished (`None` while it runs).
    pub(crate) fn try_take(&self) -> Option<Result<Option<Child>>> {
        let mut st = lock(&self.state);
        match std::mem::replace(&mut *st, State::Gone) {
            State::Done(r) => Some(*r),
            State::Running(a) => {
                *st = State::Running(a);
                None
            }
            State::Gone => Some(Err(Error::Remote {
                detail: text!("the nonblocking split's child was already taken or abandoned"),
            })),
        }
    }

    /// The child is gone before it was taken (`why`): its rank in the child is aborted now
    /// (returned, when it exists) or once joined, so its peers do not wait for it.
    pub(crate) fn abandon(&self, why: &str) -> Option<Child> {
        let mut st = lock(&self.state);
        match std::mem::replace(&mut *st, State::Gone) {
            State::Running(_) => {
                *st = State::Running(Some(why.to_string()));
                None
            }
            State::Done(r) => match *r {
                Ok(Some((child, rank))) => {
                    child.abort(rank, why);
                    Some((child, rank))
                }
                _ => None,
            },
            State::Gone => None,
        }
    }
}
