//! A scope in which NCCL operations are issued together.

use oxccl_core::{Communicator, Progress, Result};
use oxccl_nccl::NcclComm;

/// An open NCCL group on the calling thread. Operations issued until [`GroupGuard::end`] (or the
/// drop) are launched together; p2p pairs inside never deadlock, and one thread may drive
/// several communicators. Guards nest. If an operation inside fails, the group is still closed
/// exactly once when the guard ends or drops.
#[must_use = "the group is launched when the guard ends"]
pub struct GroupGuard {
    comm: NcclComm,
    open: bool,
}

impl GroupGuard {
    pub(crate) fn start(comm: NcclComm) -> Result<GroupGuard> {
        comm.group_start()?;
        Ok(GroupGuard { comm, open: true })
    }

    /// Closes the group and, for a nonblocking communicator, waits until it is launched.
    pub fn end(mut self) -> Result<()> {
        self.open = false;
        match self.comm.group_end()? {
            Progress::Done => Ok(()),
            Progress::InProgress => self.comm.wait_ready("group end"),
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if self.open {
            if let Err(e) = self.comm.group_end() {
                log::warn!("closing an NCCL group on drop: {e}");
            }
        }
    }
}
