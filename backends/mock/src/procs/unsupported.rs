//! Where the transport does not exist (it needs Linux: abstract Unix sockets, memfd), the mock
//! stays in one process: ids that span processes are refused with an error saying why, and
//! nothing else changes.

/// The host side, absent.
pub(crate) mod host {
    use crate::procs::ProcId;
    use crate::shared::CommShared;
    use crate::MockBackend;
    use oxccl_core::{Error, Result, UniqueId};

    fn refused() -> Error {
        Error::invalid(
            "backend",
            format_args!("an in-process mock: the mock across processes needs Linux (abstract Unix sockets, memfd)"),
        )
    }

    /// Refused: no transport here.
    pub(crate) fn start(_: &MockBackend, _: std::time::Duration) -> Result<UniqueId> {
        Err(refused())
    }

    /// No id is hosted here.
    pub(crate) fn local_host(_: &ProcId) -> Option<MockBackend> {
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
    use crate::procs::ProcId;
    use oxccl_core::Result;

    /// Never constructed here.
    pub(crate) struct Link(());

    impl Link {
        /// Refused: no transport here.
        pub(crate) fn connect(_: &ProcId, _: u32, _: u32, _: std::time::Duration) -> Result<Link> {
            Err(super::host::refused_join())
        }

        /// Never called (no link exists).
        pub(crate) fn tell_dead(&self, _: &str) {}
    }
}

/// The rank side, absent: no communicator has a link.
pub(crate) mod remote {
    use crate::job::Job;

    /// Never called with jobs (no communicator has a link); counts them done regardless.
    pub(crate) fn run_batch(jobs: Vec<Job>) {
        for j in jobs {
            j.comm.job_done(j.rank);
        }
    }
}

/// Split across processes, absent: no communicator spans processes here, so none is called.
pub(crate) mod split {
    use crate::shared::{Child, CommShared};
    use oxccl_core::Result;
    use std::sync::Arc;
    use std::time::Duration;

    /// Never constructed here.
    pub(crate) struct Task(());

    impl Task {
        /// Refused: no transport here.
        pub(crate) fn start(
            _: Arc<CommShared>,
            _: u32,
            _: u64,
            _: Option<u32>,
            _: u32,
            _: Duration,
        ) -> Result<Arc<Task>> {
            Err(super::host::refused_join())
        }

        /// Never called (no task exists).
        pub(crate) fn try_take(&self) -> Option<Result<Option<Child>>> {
            None
        }

        /// Never called (no task exists).
        pub(crate) fn abandon(&self, _: &str) -> Option<Child> {
            None
        }
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
