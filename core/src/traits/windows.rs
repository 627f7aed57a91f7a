use crate::buf::RegHandle;
use crate::error::Result;
use crate::traits::communicator::Communicator;

/// A communicator that puts memory in symmetric windows (NCCL 2.27+), the memory one-sided
/// operations and the symmetric collectives work on. A backend offers it by implementing it;
/// the loaded library's version still decides at run time.
pub trait Windows: Communicator {
    /// Puts `bytes` at `addr` in a symmetric window (NCCL 2.27+: `ncclCommWindowRegister`
    /// with `NCCL_WIN_COLL_SYMMETRIC`). The memory must come from the library's allocator
    /// (`ncclMemAlloc`). Collective: every rank of the communicator registers a buffer of the
    /// same size, in the same order relative to its other collectives, or the ranks hang.
    /// A backend without windows refuses with [`crate::error::Error::Unsupported`].
    fn register_window(&self, addr: usize, bytes: usize) -> Result<RegHandle>;

    /// Releases a window made by [`Windows::register_window`] (collective too, on NCCL).
    fn deregister_window(&self, handle: RegHandle) -> Result<()>;
}
