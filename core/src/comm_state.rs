//! Where a communicator is in its life: the states a [`Lifecycle`](crate::state::lifecycle::Lifecycle)
//! moves through, named on their own so that errors can report a state without knowing the
//! transitions.

use core::fmt;

/// Where a communicator is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CommState {
    /// A nonblocking init or split has not finished.
    Initializing,
    /// Usable.
    Ready,
    /// An operation or the library failed; only abort and destroy remain.
    Failed,
    /// Aborted by the user, a watchdog or a fault; only destroy remains.
    Aborted,
    /// Aborted, and the library's release of the communicator still runs on a thread of its
    /// own (an init or split past its time limit is aborted so, and its caller not kept
    /// waiting): dead like [`CommState::Aborted`], which it becomes when the release returns.
    Aborting,
    /// A nonblocking finalize is flushing.
    Finalizing,
    /// Finalized cleanly; only destroy remains.
    Finalized,
    /// A revoke (NCCL 2.28.7+) is stopping the operations in flight; new ones are refused.
    Revoking,
    /// Revoked and quiescent: no operation runs any more; split, shrink, abort and destroy
    /// remain (a finalize does not).
    Revoked,
    /// Suspended (NCCL 2.29.7+: `ncclCommSuspend`): operations are refused until a resume;
    /// abort and destroy remain. Not dead.
    Suspended,
    /// Resources released.
    Destroyed,
}

impl CommState {
    /// Lower-case name.
    pub const fn name(self) -> &'static str {
        match self {
            CommState::Initializing => "initializing",
            CommState::Ready => "ready",
            CommState::Failed => "failed",
            CommState::Aborted => "aborted",
            CommState::Aborting => "aborting",
            CommState::Finalizing => "finalizing",
            CommState::Finalized => "finalized",
            CommState::Revoking => "revoking",
            CommState::Revoked => "revoked",
            CommState::Suspended => "suspended",
            CommState::Destroyed => "destroyed",
        }
    }

    /// Whether no more operations can run on it.
    pub const fn is_dead(self) -> bool {
        matches!(
            self,
            CommState::Failed
                | CommState::Aborted
                | CommState::Aborting
                | CommState::Finalized
                | CommState::Revoking
                | CommState::Revoked
                | CommState::Destroyed
        )
    }

    /// Whether it was aborted ([`CommState::Aborted`], or [`CommState::Aborting`] while the
    /// release still runs).
    pub const fn is_aborted(self) -> bool {
        matches!(self, CommState::Aborted | CommState::Aborting)
    }
}

impl fmt::Display for CommState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
