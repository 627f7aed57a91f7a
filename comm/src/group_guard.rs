//! A scope in which operations are issued together.

use oxccl_core::traits::AbortOf;
use oxccl_core::{Backend, CommAbort, Communicator, Progress, Result};
use std::time::Duration;

/// An open group on the calling thread, through backend `B` (NCCL as loaded by default).
/// Operations issued until [`GroupGuard::end`] (or the drop) are launched together; p2p pairs
/// inside never deadlock, and one thread may drive several communicators of the backend.
/// Guards nest. If an operation inside fails, the group is still closed exactly once when the
/// guard ends or drops.
#[must_use = "the group is launched when the guard ends"]
pub struct GroupGuard<B: Backend = oxccl_nccl::NcclBackend> {
    backend: B,
    /// The communicator whose launch `end` waits for when the group end is in progress, and
    /// how long it may take.
    watch: Option<(AbortOf<B>, Duration)>,
    open: bool,
}

impl<B: Backend> std::fmt::Debug for GroupGuard<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupGuard")
            .field("open", &self.open)
            .field("watching", &self.watch.is_some())
            .finish()
    }
}

impl<B: Backend> GroupGuard<B> {
    /// Opens a group on this thread through `backend` ([`Backend::group_start`]).
    pub fn start(backend: B) -> Result<GroupGuard<B>> {
        backend.group_start()?;
        Ok(GroupGuard {
            backend,
            watch: None,
            open: true,
        })
    }

    /// Opens a group whose [`GroupGuard::end`] waits, up to `limit`, for `comm`'s launch when
    /// the group end is still in progress (a nonblocking communicator).
    pub fn watching(backend: B, comm: &B::Comm, limit: Duration) -> Result<GroupGuard<B>> {
        let mut g = GroupGuard::start(backend)?;
        g.watch = Some((comm.abort_handle(), limit));
        Ok(g)
    }

    /// Closes the group. `Done` once it is launched: when the backend reports the end in
    /// progress, the watched communicator (if any) is polled until it is, bounded by its limit
    /// ([`oxccl_core::Error::Timeout`] past it); without one, `InProgress` is returned and the
    /// caller polls the group's communicators.
    pub fn end(mut self) -> Result<Progress> {
        self.open = false;
        match self.backend.group_end()? {
            Progress::Done => Ok(Progress::Done),
            Progress::InProgress => match &self.watch {
                Some((comm, limit)) => oxccl_nccl::Deadline::after(*limit)
                    .poll("group end", || comm.poll())
                    .map(|()| Progress::Done),
                None => Ok(Progress::InProgress),
            },
        }
    }
}

impl<B: Backend> Drop for GroupGuard<B> {
    fn drop(&mut self) {
        if self.open {
            if let Err(e) = self.backend.group_end() {
                log::warn!("closing a group on drop: {e}");
            }
        }
    }
}
