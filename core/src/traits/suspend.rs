use crate::error::Result;
use crate::traits::communicator::Communicator;

/// What a communicator holds of device memory ([`Suspend::mem_stats`], NCCL 2.29.7+:
/// `ncclCommMemStats`), in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct MemStats {
    /// Memory a suspend with `release_memory` frees.
    pub suspendable: u64,
    /// Memory kept while suspended.
    pub persistent: u64,
    /// Every byte the library tracks for the communicator.
    pub total: u64,
    /// Whether the suspendable memory is released now.
    pub suspended: bool,
}

/// A communicator that can be suspended, its dynamic device memory released, and resumed
/// (NCCL 2.29.7+). A backend offers it by implementing it; the loaded library's version
/// still decides at run time.
pub trait Suspend: Communicator {
    /// Suspends the communicator (NCCL 2.29.7+: `ncclCommSuspend`), releasing its dynamic
    /// device memory with `release_memory`: [`crate::CommState::Suspended`], every operation refused
    /// until [`Suspend::resume`]. Only a ready communicator with nothing in flight is
    /// suspended (the caller synchronizes its streams first).
    fn suspend(&self, release_memory: bool) -> Result<()>;

    /// Resumes a suspended communicator (NCCL 2.29.7+: `ncclCommResume`): ready again.
    fn resume(&self) -> Result<()>;

    /// The device memory the library holds for this communicator (NCCL 2.29.7+).
    fn mem_stats(&self) -> Result<MemStats>;
}
