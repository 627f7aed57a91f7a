use crate::config::CommConfig;
use crate::error::Result;
use crate::feature::FeatureSet;
use crate::id::UniqueId;
use crate::traits::{Communicator, Device};
use crate::version::Version;

/// A source of communicators: the NCCL library as loaded, or a mock world.
pub trait Backend: Send + Sync {
    /// The communicator type it creates.
    type Comm: Communicator;

    /// The version of the library (the mock reports the version it imitates).
    fn version(&self) -> Version;

    /// What the library can do, with the reason for each missing feature.
    fn features(&self) -> &FeatureSet;

    /// A new rendezvous token; one rank makes it and shares it with the others.
    fn unique_id(&self) -> Result<UniqueId>;

    /// Joins the communicator of `id` as `rank` of `size` on `device`. With a nonblocking
    /// config the communicator comes back in [`crate::CommState::Initializing`]: poll it.
    fn init_rank(
        &self,
        id: &UniqueId,
        rank: u32,
        size: u32,
        device: Device,
        cfg: &CommConfig,
    ) -> Result<Self::Comm>;
}
