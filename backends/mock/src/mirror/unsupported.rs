//! Where the transport does not exist (it needs Linux), the rank side is absent: joining an id
//! that spans processes is refused, and no communicator has a link.

/// The rank side, absent: no communicator has a link.
pub(crate) mod remote {
    use crate::job::Job;
    use crate::lobby::Lobby;
    use crate::shared::CommShared;
    use crate::transport::proc_id::ProcId;
    use crate::transport::unsupported::refused_join;
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
        Err(refused_join())
    }

    /// Never called with jobs (no communicator has a link); counts them done regardless.
    pub(crate) fn run_batch(jobs: Vec<Job>) {
        for j in jobs {
            j.comm.job_done(j.rank);
        }
    }
}

/// One-sided calls across processes, absent: no communicator has a link, so none is made.
pub(crate) mod one_sided {
    use crate::delivery::Delivery;
    use crate::shared::CommShared;
    use crate::transport::link::Link;
    use crate::transport::unsupported::refused_join;
    use oxccl_core::one_sided::SignalWait;
    use oxccl_core::Result;
    use std::time::Duration;

    /// Refused: no transport here.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn put(
        _: &Link,
        _: &CommShared,
        _: u32,
        _: u32,
        _: (usize, usize),
        _: &[u8],
        _: (u32, u32),
        _: Duration,
    ) -> Result<()> {
        Err(refused_join())
    }

    /// Refused: no transport here.
    pub(crate) fn signal(_: &Link, _: &CommShared, _: u32, _: u32, _: (u32, u32)) -> Result<()> {
        Err(refused_join())
    }

    /// Refused: no transport here.
    pub(crate) fn wait(
        _: &Link,
        _: &CommShared,
        _: u32,
        _: &[SignalWait],
        _: Duration,
    ) -> Result<Vec<Delivery>> {
        Err(refused_join())
    }
}
