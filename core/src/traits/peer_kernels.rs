use crate::error::Result;
use crate::peer_kernels::{PeerPolicy, PeerTable};
use crate::traits::communicator::Communicator;

/// A communicator that can run oxccl's own all-reduce, all-gather and reduce-scatter kernels
/// on peer memory ([`crate::peer_kernels`]) where every rank maps every other's memory.
pub trait PeerKernels: Communicator {
    /// Makes the peer memory of oxccl's own all-reduce kernels
    /// ([`crate::peer_kernels`]) under `policy` and `table`, when every rank of the group
    /// can map every other's memory (one node, peer access); returns whether the kernels are
    /// on. From then on each all-reduce runs on the kernel the policy picks, or on NCCL.
    /// Collective: every rank calls it at the same point among its collectives. A backend
    /// without the kernels (the mock world) answers `false`, as NCCL's path does for a group
    /// spanning nodes, and every call keeps its results.
    fn enable_peer_kernels(
        &self,
        stream: &Self::Stream,
        policy: PeerPolicy,
        table: &PeerTable,
    ) -> Result<bool>;

    /// The policy oxccl's all-reduce kernels run under on this communicator, once
    /// [`PeerKernels::enable_peer_kernels`] turned them on; `None` (NCCL runs every
    /// all-reduce) otherwise, and always on a backend without them.
    fn peer_policy(&self) -> Option<PeerPolicy>;
}
