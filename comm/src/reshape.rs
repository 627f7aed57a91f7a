//! A [`Comm`]'s members after a loss or for a newcomer: revoke what is in flight, shrink the
//! lost ranks away, grow by new ranks (NCCL 2.28.7+ for revoke, 2.27+ for shrink, 2.29.2+ for
//! grow; each refused with the reason on an older library), and suspend / resume with the
//! memory statistics that show what a suspend gives back (2.29.7+).

use crate::comm::Comm;
use oxccl_core::{
    CommConfig, Device, MemStats, Progress, Reshape, ReshapeBackend, Result, ShrinkMode, Suspend,
    UniqueId,
};
use oxccl_nccl::NcclBackend;

impl Comm {
    /// Stops the operations in flight without destroying the communicator (`ncclCommRevoke`):
    /// their waits end, the state is `Revoked`, and the communicator can still be shrunk.
    pub fn revoke(&self, reason: &str) -> Result<Progress> {
        self.backend().revoke(reason)
    }

    /// A communicator of the ranks but `exclude` (ranks of this one: each once, not this
    /// rank's own, checked before NCCL), renumbered in order, with a new stream; every
    /// survivor calls it. `mode` says whether operations in flight are aborted first.
    pub fn shrink(&mut self, exclude: &[u32], cfg: &CommConfig, mode: ShrinkMode) -> Result<Comm> {
        let c = self.backend().shrink(exclude, cfg, mode)?;
        Comm::made(c)
    }

    /// The id new ranks join a grow of this communicator with (made by one running rank and
    /// handed to the others and to the newcomers, as a unique id is).
    pub fn grow_id(&mut self) -> Result<UniqueId> {
        self.backend().grow_id()
    }

    /// This communicator grown to `size` ranks by the newcomers that join `id`
    /// ([`Comm::join_grown`]); every running rank calls it and keeps its rank.
    pub fn grow(&mut self, size: u32, id: &UniqueId, cfg: &CommConfig) -> Result<Comm> {
        let c = self.backend().grow(size, id, cfg)?;
        Comm::made(c)
    }

    /// A newcomer's part of a grow: rank `rank` of `size` of the communicator the running
    /// ranks grow with `id`, on `device`.
    pub fn join_grown(
        nccl: &NcclBackend,
        id: &UniqueId,
        rank: u32,
        size: u32,
        device: u32,
        cfg: &CommConfig,
    ) -> Result<Comm> {
        let c = nccl.join_grown(id, rank, size, Device(device), cfg)?;
        Comm::made(c)
    }

    /// Suspends the communicator (its operations refused until [`Comm::resume`]); with
    /// `release_memory` the library gives back the memory [`Comm::mem_stats`] calls
    /// suspendable.
    pub fn suspend(&mut self, release_memory: bool) -> Result<()> {
        self.backend().suspend(release_memory)
    }

    /// Resumes a suspended communicator.
    pub fn resume(&mut self) -> Result<()> {
        self.backend().resume()
    }

    /// The device memory the library holds for this communicator.
    pub fn mem_stats(&self) -> Result<MemStats> {
        self.backend().mem_stats()
    }
}
