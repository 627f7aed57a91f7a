//! What a process group needs of its backend: memory for its buffers, and the capabilities
//! its safety nets run on (revoke, shrink and grow for going on after a lost rank, one-sided
//! operations, symmetric windows, oxccl's peer kernels). Both backends have them all; a
//! backend of a user's own offers a process group once it implements them.

use oxccl_comm::buffer::Memory;
use oxccl_core::{OneSided, PeerKernels, Reshape, ReshapeBackend, Windows};

/// A backend a [`ProcessGroup`](super::ProcessGroup) runs on. Implemented for every backend
/// with the capabilities named here; nothing to implement by hand.
pub trait PgBackend:
    Memory + ReshapeBackend<Comm: Reshape + OneSided + Windows + PeerKernels>
{
}

impl<B> PgBackend for B where
    B: Memory + ReshapeBackend<Comm: Reshape + OneSided + Windows + PeerKernels>
{
}
