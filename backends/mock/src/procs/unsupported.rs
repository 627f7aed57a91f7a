//! Where the transport does not exist (it needs Linux: abstract Unix sockets, memfd), the mock
//! stays in one process: ids that span processes are refused with an error saying why, and
//! nothing else changes.

/// The host side, absent.
pub(crate) mod host {
    use crate::lobby::Lobby;
    use crate::procs::proc_id::ProcId;
    use crate::shared::CommShared;
    use oxccl_core::{Error, Result, UniqueId};
    use std::sync::Arc;

    fn refused() -> Error {
        Error::invalid(
            "backend",
            format_args!("an in-process mock: the mock across processes needs Linux (abstract Unix sockets, memfd)"),
        )
    }

    /// Refused: no transport here.
    pub(crate) fn start(_: &Arc<Lobby>, _: std::time::Duration) -> Result<UniqueId> {
        Err(refused())
    }

    /// No id is hosted here.
    pub(crate) fn local_host(_: &ProcId) -> Option<Arc<Lobby>> {
        None
    }

    /// Nothing to wait for.
    pub(crate) fn linger(_: &CommShared, _: u32) {}

    /// The error a process-spanning id meets here.
    pub(crate) fn refused_join() -> Error {
        refused()
    }
}

/// The connection to a host, absent: no link is ever made.
pub(crate) mod link {
    /// Never constructed here.
    pub(crate) struct Link(());

    impl Link {
        /// Never called (no link exists).
        pub(crate) fn tell_dead(&self, _: &str) {}
    }
}

/// The rank side, absent: no communicator has a link.
pub(crate) mod remote {
    use crate::job::Job;
    use crate::lobby::Lobby;
    use crate::procs::proc_id::ProcId;
    use crate::shared::CommShared;
    use oxccl_core::Result;
    use std::sync::Arc;
    use std::time::Duration;

    /// Refused: no transport here.
    pub(crate) fn join(
        _: &Lobby,
        _: &ProcId,
        _: u32,
        _: u32,
        _: bool,
        _: Duration,
    ) -> Result<Arc<CommShared>> {
        Err(super::host::refused_join())
    }

    /// Never called with jobs (no communicator has a link); counts them done regardless.
    pub(crate) fn run_batch(jobs: Vec<Job>) {
        for j in jobs {
            j.comm.job_done(j.rank);
        }
    }
}

/// Split across processes, absent: no communicator spans processes here, so none is called.
pub(crate) mod split {
    use crate::procs::split_task::Task;
    use crate::shared::{Child, CommShared};
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
        Err(super::host::refused_join())
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
        Err(super::host::refused_join())
    }
}
