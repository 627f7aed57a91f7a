//! Where the transport does not exist (it needs Linux: abstract Unix sockets, memfd), the mock
//! stays in one process: ids that span processes are refused with an error saying why, and
//! nothing else changes.

/// The host side, absent.
pub(crate) mod host {
    use crate::lobby::Lobby;
    use crate::transport::proc_id::ProcId;
    use crate::transport::unsupported::refused_join;
    use oxccl_core::{Result, UniqueId};
    use std::sync::Arc;

    /// Refused: no transport here.
    pub(crate) fn start(_: &Arc<Lobby>, _: std::time::Duration) -> Result<UniqueId> {
        Err(refused_join())
    }

    /// No id is hosted here.
    pub(crate) fn local_host(_: &ProcId) -> Option<Arc<Lobby>> {
        None
    }
}

/// Split across processes, absent: no communicator spans processes here, so none is called.
pub(crate) mod split {
    use crate::mirror::split_task::Task;
    use crate::shared::{Child, CommShared};
    use crate::transport::unsupported::refused_join;
    use oxccl_core::Result;
    use std::sync::Arc;
    use std::time::Duration;

    /// Refused: no transport here.
    pub(crate) fn spawn(
        _: Arc<CommShared>,
        _: u32,
        _: u64,
        _: Option<u32>,
        _: u32,
        _: Duration,
    ) -> Result<Arc<Task>> {
        Err(refused_join())
    }

    /// Refused: no transport here.
    pub(crate) fn shrink(_: &CommShared, _: u32, _: u64, _: &[u32], _: Duration) -> Result<Child> {
        Err(refused_join())
    }

    /// Refused: no transport here.
    pub(crate) fn split(
        _: &CommShared,
        _: u32,
        _: u64,
        _: Option<u32>,
        _: u32,
        _: Duration,
    ) -> Result<Option<Child>> {
        Err(refused_join())
    }
}
