//! Groups, per thread as in NCCL: the depth (the core's [`GroupState`]) and the ops queued since
//! the outermost `group_start`. They may belong to any communicators of any worlds; the outermost
//! `group_end` hands each stream its share as one batch (see `exec`), in issue order.
//!
//! An op refused at issue (bad arguments, a dead communicator) is never queued, so the group
//! stays usable and the rest of it runs at group end.

use crate::exec;
use crate::job::Job;
use crate::shared::CommShared;
use crate::stream::StreamShared;
use oxccl_core::{text, Ended, Error, GroupKind, GroupState, Result, ResultCode};
use std::cell::RefCell;
use std::sync::Arc;

/// A thread's group: the depth by the core's rules ([`GroupState`]; no operation summaries are
/// kept there, hence capacity 0) and the jobs queued since the outermost start.
#[derive(Default)]
struct Group {
    depth: GroupState<0>,
    queued: Vec<(Arc<StreamShared>, Job)>,
}

thread_local! {
    static GROUP: RefCell<Group> = RefCell::new(Group::default());
}

fn tls_gone() -> Error {
    Error::Backend {
        code: ResultCode::INTERNAL_ERROR,
        text: text!("internal error"),
        last: text!("thread-local group state is gone (thread exiting)"),
    }
}

/// Runs `f` on this thread's group (an error when the thread is exiting, or when `f` is
/// reentered, which the mock never does).
fn with_group<T>(f: impl FnOnce(&mut Group) -> Result<T>) -> Result<T> {
    GROUP
        .try_with(|g| match g.try_borrow_mut() {
            Ok(mut g) => f(&mut g),
            Err(_) => Err(tls_gone()),
        })
        .map_err(|_| tls_gone())?
}

/// Opens a group on this thread.
pub(crate) fn start() -> Result<()> {
    with_group(|g| {
        g.depth.start(GroupKind::Group)?;
        Ok(())
    })
}

/// Queues `job` for `stream` when a group is open; gives it back otherwise.
pub(crate) fn queue(stream: &Arc<StreamShared>, job: Job) -> Option<Job> {
    let mut job = Some(job);
    let _ = GROUP.try_with(|g| {
        if let Ok(mut g) = g.try_borrow_mut() {
            if g.depth.is_open() {
                if let Some(j) = job.take() {
                    g.queued.push((stream.clone(), j));
                }
            }
        }
    });
    job
}

/// The ranks (communicator, rank) whose operations a group end submitted.
pub(crate) type Members = Vec<(Arc<CommShared>, u32)>;

/// Closes the innermost group; an end without a start is refused by [`GroupState`]. The
/// outermost close submits and returns the ranks it submitted work of (none for an inner close).
pub(crate) fn end() -> Result<Members> {
    let queued = with_group(|g| {
        Ok(match g.depth.end(GroupKind::Group)? {
            Ended::Nested { .. } => Vec::new(),
            Ended::Empty { .. } | Ended::Flushed { .. } => std::mem::take(&mut g.queued),
        })
    })?;
    let mut members: Members = Vec::new();
    for (_, j) in &queued {
        if !members
            .iter()
            .any(|(c, r)| Arc::ptr_eq(c, &j.comm) && *r == j.rank)
        {
            members.push((j.comm.clone(), j.rank));
        }
    }
    // One batch per stream, keeping issue order within each.
    let mut batches: Vec<(Arc<StreamShared>, Vec<Job>)> = Vec::new();
    for (s, j) in queued {
        match batches.iter_mut().find(|(b, _)| Arc::ptr_eq(b, &s)) {
            Some((_, v)) => v.push(j),
            None => batches.push((s, vec![j])),
        }
    }
    let mut first_err = None;
    for (s, jobs) in batches {
        let victims: Vec<_> = jobs.iter().map(|j| (j.comm.clone(), j.rank)).collect();
        if let Err(e) = exec::submit(&s, jobs) {
            for (c, r) in victims {
                c.fail(r, e.clone());
            }
            first_err.get_or_insert(e);
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(members),
    }
}
