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
