//! The outcome of a nonblocking split across processes: its steps run on a thread of their own
//! (see `procs/split.rs`), and the split's pending communicator polls this for the child.

use crate::shared::Child;
use crate::sync::lock;
use oxccl_core::{text, Error, Result};
use std::sync::Mutex;

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
    /// A task whose thread is still running.
    // Made by the transport (Linux only).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(crate) fn new() -> Task {
        Task {
            state: Mutex::new(State::Running(None)),
        }
    }

    /// Keeps the thread's outcome `r` for the poll that takes it; a child abandoned meanwhile
    /// is aborted instead.
    // Called by the transport (Linux only).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(crate) fn finish(&self, r: Result<Option<Child>>) {
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
