use crate::coll_config::CollConfig;
use crate::error::Result;
use crate::op::CommOp;
use crate::traits::communicator::Communicator;

/// A communicator that takes a configuration for one call (NCCL 2.31+: the `nccl…Config`
/// entry points). A backend offers it by implementing it; the loaded library's version still
/// decides at run time.
pub trait PerCallConfig: Communicator {
    /// [`Communicator::issue`] with a configuration for this call alone (NCCL 2.31+: the
    /// `nccl…Config` entry points): all_reduce, broadcast, reduce, all_gather,
    /// reduce_scatter, all-to-all, gather and scatter; other operations are refused
    /// (`op`). `cfg` is checked first ([`CollConfig::check`]); the
    /// library's own kernels stand aside (the call asks NCCL for its resources). A library
    /// without it refuses with [`crate::Error::Unsupported`].
    ///
    /// # Safety
    /// As [`Communicator::issue`].
    unsafe fn issue_configured(
        &self,
        op: &CommOp<'_>,
        stream: &Self::Stream,
        cfg: &CollConfig,
    ) -> Result<()>;
}
