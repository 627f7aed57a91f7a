use crate::config::CommConfig;
use crate::error::Result;
use crate::feature::FeatureSet;
use crate::id::UniqueId;
use crate::traits::communicator::Communicator;
use crate::traits::device::Device;
use crate::traits::progress::Progress;
use crate::version::Version;

/// A source of communicators: the NCCL library as loaded, or a mock world.
///
/// A backend is a cheap handle (`Clone` is an `Arc` clone in both backends), so process groups
/// and group guards keep their own copy.
pub trait Backend: Clone + Send + Sync {
    /// The communicator type it creates.
    type Comm: Communicator;

    /// The version of the library (the mock reports the version it imitates).
    fn version(&self) -> Version;

    /// What the library can do, with the reason for each missing feature.
    fn features(&self) -> &FeatureSet;

    /// A new rendezvous token; one rank makes it and shares it with the others.
    fn unique_id(&self) -> Result<UniqueId>;

    /// How many devices this process can put ranks on, one rank a device (NCCL refuses two
    /// ranks of one communicator on one GPU): the GPUs CUDA sees on NCCL, no limit
    /// (`u32::MAX`) on the mock, whose devices are names.
    fn device_count(&self) -> Result<u32>;

    /// Joins the communicator of `id` as `rank` of `size` on `device`. With a nonblocking
    /// config the communicator comes back in [`crate::CommState::Initializing`]: poll it, or
    /// just issue (see [`Communicator::issue`]).
    fn init_rank(
        &self,
        id: &UniqueId,
        rank: u32,
        size: u32,
        device: Device,
        cfg: &CommConfig,
    ) -> Result<Self::Comm>;

    /// [`Backend::init_rank`] whose wait for the other ranks is bounded by `limit`, where the
    /// backend can bound it: a blocking init still incomplete after `limit` fails with
    /// [`crate::Error::Timeout`], its communicator aborted, or, where the library's init
    /// cannot be stopped, abandoned (it may run on, and what it makes is aborted when it
    /// completes). A process group passes what is left of its timeout here, after its
    /// members' arrival in the store (which names a missing rank: a backend may not know
    /// which). The mock honours `limit` and names the missing ranks; NCCL 2.14+ inits
    /// nonblocking, polls up to `limit` and aborts; before 2.14 NCCL's blocking init runs on a
    /// thread of its own, abandoned past `limit` (a blocking NCCL call cannot be interrupted).
    /// A nonblocking config returns `Initializing` at once, as `init_rank`; the caller's wait
    /// bounds it. The default ignores `limit`.
    fn init_rank_within(
        &self,
        id: &UniqueId,
        rank: u32,
        size: u32,
        device: Device,
        cfg: &CommConfig,
        limit: core::time::Duration,
    ) -> Result<Self::Comm> {
        let _ = limit;
        self.init_rank(id, rank, size, device, cfg)
    }

    /// Opens a group on the calling thread: operations issued until the matching
    /// [`Backend::group_end`] are launched together. Groups are per thread, nest, and may span
    /// every communicator of this backend (NCCL: of the loaded library; the mock: every mock
    /// communicator). The depth is tracked with the core's
    /// [`GroupState`](crate::state::group_call::GroupState) in a thread-local.
    fn group_start(&self) -> Result<()>;

    /// Closes the innermost group of the calling thread; the outermost close launches the
    /// queued operations. An end without a start is refused with
    /// [`crate::Error::InvalidState`] before the library is called. `InProgress` when a
    /// nonblocking communicator of the group is still being launched: poll each communicator
    /// of the group ([`Communicator::poll`]) until `Done`.
    fn group_end(&self) -> Result<Progress>;
}

/// The communicator type of a backend.
pub type CommOf<B> = <B as Backend>::Comm;

/// The abort handle of a backend's communicators.
pub type AbortOf<B> = <CommOf<B> as Communicator>::Abort;
