use crate::config::CommConfig;
use crate::error::Result;
use crate::id::UniqueId;
use crate::traits::backend::Backend;
use crate::traits::communicator::Communicator;
use crate::traits::device::Device;
use crate::traits::progress::Progress;

/// How [`Reshape::shrink`] treats the operations of the communicator it shrinks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ShrinkMode {
    /// Nothing is in flight (a healthy or a revoked communicator): NCCL_SHRINK_DEFAULT.
    #[default]
    Default,
    /// Stop the operations in flight first (a peer died while they waited for it; the
    /// communicator need not be revoked): NCCL_SHRINK_ABORT.
    AbortInFlight,
}

/// A communicator whose ranks can change: revoked, shrunk to the ranks that remain, grown by
/// ranks that join (NCCL's `ncclCommRevoke`, `ncclCommShrink`, `ncclCommGrow`). A backend
/// offers it by implementing it; the loaded library's version still decides at run time
/// (a release without the call refuses with [`crate::Error::Unsupported`]).
pub trait Reshape: Communicator {
    /// Stops every operation in flight and refuses new ones, keeping the communicator for a
    /// split or a [`Reshape::shrink`] (NCCL 2.28.7+: `ncclCommRevoke`): state
    /// [`crate::CommState::Revoking`], then [`crate::CommState::Revoked`] once quiescent (`Done`; waited
    /// for, bounded by the communicator's time limit). Allowed on a ready or a failed
    /// communicator (a survivor of a lost peer revokes before it shrinks); again, nothing
    /// changes. Operations it stopped leave their outputs undefined; a revoked communicator is
    /// not finalized, only destroyed (or aborted). Not collective: each rank revokes its own.
    /// A library without it refuses with [`crate::Error::Unsupported`].
    fn revoke(&self, reason: &str) -> Result<Progress>;

    /// A communicator of this one's ranks without `exclude` (NCCL 2.27+: `ncclCommShrink`),
    /// the remaining ranks renumbered in their order (rank `r` becomes `r` minus the excluded
    /// ranks below it). Collective over the ranks that remain, which all give the same
    /// `exclude`; the excluded ranks do not call it. `exclude` is checked first
    /// ([`crate::check::shrink`]: at least one rank of this communicator, each once, not the
    /// caller's).
    /// With [`ShrinkMode::Default`] the communicator must be ready or revoked; with
    /// [`ShrinkMode::AbortInFlight`] it may also have failed, and this rank's operations in
    /// flight are stopped first. The communicator shrunk stays as it was otherwise: the caller
    /// destroys (or aborts) it. A library without it refuses with
    /// [`crate::Error::Unsupported`].
    fn shrink(&self, exclude: &[u32], cfg: &CommConfig, mode: ShrinkMode) -> Result<Self>;

    /// The id of a grow of this communicator (NCCL 2.29+: `ncclCommGetUniqueId`): one running
    /// rank, the grow's root, makes it and gives it to the ranks that join
    /// ([`crate::ReshapeBackend::join_grown`]). One at a time: a second before the grow completes is
    /// refused by the library.
    fn grow_id(&self) -> Result<UniqueId>;

    /// A communicator of `size` ranks (NCCL 2.29+: `ncclCommGrow`): this one's ranks, each
    /// keeping its rank, and `size - self.size()` new ones joining through
    /// [`crate::ReshapeBackend::join_grown`]. Collective over the running ranks and the joiners, every
    /// one of them passing the grow's `id` (the running rank that made it with
    /// [`Reshape::grow_id`] is the grow's root; NCCL's other running ranks get it from
    /// their communicator and are given none, which the backend does for them). `size`
    /// above the current size and within `i32` is checked first ([`crate::check::grow`]). The
    /// communicator grown stays as it was: the caller destroys it. A library without it
    /// refuses with [`crate::Error::Unsupported`].
    fn grow(&self, size: u32, id: &UniqueId, cfg: &CommConfig) -> Result<Self>;
}

/// A backend whose new ranks can join a grow of a running communicator
/// ([`Reshape::grow`]).
pub trait ReshapeBackend: Backend<Comm: Reshape> {
    /// Joins a grow of a running communicator as new rank `rank` of its `size` (NCCL 2.29+:
    /// `ncclCommGrow` with no parent): `id` is the grow's id, made by the running
    /// communicator's root ([`Reshape::grow_id`]) and passed here out of band; the running
    /// ranks call [`Reshape::grow`] at the same time. New ranks are numbered from the
    /// running communicator's size up. `rank` below `size` and `size` within `i32` are
    /// checked first. A library without it refuses with [`crate::Error::Unsupported`].
    fn join_grown(
        &self,
        id: &UniqueId,
        rank: u32,
        size: u32,
        device: Device,
        cfg: &CommConfig,
    ) -> Result<Self::Comm>;
}
