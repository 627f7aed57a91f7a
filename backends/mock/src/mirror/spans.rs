//! Whether a communicator spans processes.

use crate::shared::CommShared;
use std::sync::atomic::Ordering;

/// Whether `sh` spans processes: a rank process's mirror (it has a link to the host), or the
/// host's communicator once a rank of another process joined it. A split of such a
/// communicator makes children that span processes too.
pub(crate) fn spans(sh: &CommShared) -> bool {
    sh.link.get().is_some() || sh.hosted.load(Ordering::Acquire)
}
