//! The rules of a group that goes on without a lost rank (an elastic process group): which
//! failures show a loss, what the watchdog may do meanwhile, how a group's ranks shrink, and
//! how each epoch's groups are numbered. The decision of who is alive is
//! [`survivors`]'s; who may join, [`admission`]'s.

pub mod admission;
pub mod survivors;

use crate::env::ErrorHandling;
use oxccl_core::comm_state::CommState;
use oxccl_core::error::Error;

/// What a failure of an operation says about the group's members.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureSign {
    /// A peer may be lost (it died, stopped answering, or failed): the survivors decide.
    Loss,
    /// The communicator was stopped here (aborted, revoked): a loss only when a decision has
    /// already been made (the stop was the survivors' own); otherwise the caller's own act.
    Stopped,
    /// A failure of the call itself (arguments, capture, a missing feature): not a loss.
    Call,
}

/// What a failure `e` of an operation shows.
pub fn failure_sign(e: &Error) -> FailureSign {
    match e {
        Error::Remote { .. } | Error::Timeout { .. } | Error::Backend { .. } => FailureSign::Loss,
        Error::Aborted { .. } | Error::MembersLost { .. } => FailureSign::Stopped,
        Error::InvalidState { state, .. } if state.is_dead() || is_revoked(*state) => {
            FailureSign::Stopped
        }
        _ => FailureSign::Call,
    }
}

fn is_revoked(s: CommState) -> bool {
    matches!(s, CommState::Revoking | CommState::Revoked)
}

/// The alive rule: when a rank was last at work in its family, as the milliseconds of a
/// clock that only the rank reads.
///
/// Every call that reaches one of the family's communicators counts, by whatever path: a
/// single operation, an operation inside a coalescing block and the block's end, a batch of
/// sends and receives, a barrier, a graph's launch, a one-sided operation, a registration, a
/// group's first use (its init or split). The shell notes it at the one place all of them
/// pass, so no path can be forgotten. A rank stays in a survivors' decision while its last
/// work began within the group's timeout plus the decision's window ([`LastActive::stays_in`]):
/// that work (an init waiting for a stopped peer, a collective) may hold it until the timeout,
/// and the others' decision gathers for a window, so a rank blocked in the very call that
/// showed the loss is never taken for idle. One that issued nothing for longer (hung in its
/// own code, its process still answering) is left out as a dead one would be, rather than kept
/// as a member that times the survivors out again.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct LastActive {
    /// The clock's reading at the rank's last work.
    pub at_ms: u64,
}

impl LastActive {
    /// The record after work at `now_ms`: a clock read late by one thread never moves it back.
    pub fn note(self, now_ms: u64) -> LastActive {
        LastActive {
            at_ms: self.at_ms.max(now_ms),
        }
    }

    /// How long the rank has issued nothing at `now_ms` (zero when `now_ms` is earlier).
    pub fn idle_ms(self, now_ms: u64) -> u64 {
        now_ms.saturating_sub(self.at_ms)
    }

    /// Whether the rank takes part in a decision begun at `now_ms` under a group timeout of
    /// `timeout_ms` and a decision window of `window_ms`.
    pub fn stays_in(self, now_ms: u64, timeout_ms: u64, window_ms: u64) -> bool {
        monitor_joins(self.idle_ms(now_ms), timeout_ms, window_ms)
    }
}

/// Whether a rank's monitor joins a decision other members began, `idle_ms` after the rank's
/// last work began (see [`LastActive`]): within the group's timeout plus the window.
pub fn monitor_joins(idle_ms: u64, timeout_ms: u64, window_ms: u64) -> bool {
    idle_ms <= timeout_ms.saturating_add(window_ms)
}

/// The error-handling mode an elastic group runs under, whatever was asked: record the
/// failure and let the wait report it. Never one that ends the process (the survivors go
/// on), nor one that aborts the communicator: the survivors' decision stops what is in flight
/// itself, by a revoke where the library has one, so the communicator can still be shrunk.
pub fn error_handling(asked: ErrorHandling) -> ErrorHandling {
    let _ = asked;
    ErrorHandling::NoHandling
}

/// Bits of a group's uid below the epoch: a process makes fewer groups than this per epoch.
pub const UID_EPOCH_SHIFT: u32 = 40;

/// The uid of the group numbered `uid` at `epoch` (its store keys never meet an earlier
/// epoch's): `uid` itself at epoch 0.
pub fn uid_at(uid: u64, epoch: u64) -> u64 {
    let low = uid & ((1 << UID_EPOCH_SHIFT) - 1);
    low | (epoch.min((1 << (64 - UID_EPOCH_SHIFT)) - 1) << UID_EPOCH_SHIFT)
}

/// Writes into `out` the group ranks (indices into `ranks`) of the members of `ranks` that
/// are in `lost`, in order; returns how many. `out` must hold `ranks.len()`; extra are
/// dropped.
pub fn lost_indices(ranks: &[u32], lost: &[u32], out: &mut [u32]) -> usize {
    let mut n = 0;
    for (i, r) in ranks.iter().enumerate() {
        if lost.contains(r) {
            if let Some(slot) = out.get_mut(n) {
                *slot = i as u32;
                n += 1;
            }
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxccl_core::text;

    #[test]
    fn a_monitor_joins_only_for_a_rank_at_work_within_the_timeout_and_window() {
        assert!(monitor_joins(0, 1000, 0));
        assert!(monitor_joins(1000, 1000, 0));
        assert!(!monitor_joins(1001, 1000, 0));
        assert!(monitor_joins(1300, 1000, 300));
        assert!(!monitor_joins(1301, 1000, 300));
        assert!(!monitor_joins(u64::MAX, 0, 0));
        assert!(monitor_joins(u64::MAX, u64::MAX, 1));
    }

    #[test]
    fn work_by_any_path_keeps_a_rank_in_until_the_timeout_and_window_pass() {
        let born = LastActive::default();
        assert!(born.stays_in(1000, 1000, 0));
        assert!(!born.stays_in(1001, 1000, 0));
        let a = born.note(5000);
        assert_eq!(a.idle_ms(5400), 400);
        assert!(a.stays_in(6300, 1000, 300));
        assert!(!a.stays_in(6301, 1000, 300));
        // A reading taken before the last one never moves the record back.
        assert_eq!(a.note(4000), a);
        assert_eq!(a.idle_ms(10), 0);
    }

    #[test]
    fn failures_are_sorted_by_what_they_show() {
        let remote = Error::Remote {
            detail: text!("rank 2 exited"),
        };
        assert_eq!(failure_sign(&remote), FailureSign::Loss);
        let t = Error::Timeout {
            what: text!("all_reduce"),
            after_ms: 5,
        };
        assert_eq!(failure_sign(&t), FailureSign::Loss);
        let a = Error::Aborted { reason: text!("x") };
        assert_eq!(failure_sign(&a), FailureSign::Stopped);
        let revoked = Error::InvalidState {
            state: CommState::Revoked,
            attempted: "all_reduce",
            reason: text!("x"),
        };
        assert_eq!(failure_sign(&revoked), FailureSign::Stopped);
        assert_eq!(
            failure_sign(&Error::invalid("root", format_args!("x"))),
            FailureSign::Call
        );
        let ready = Error::InvalidState {
            state: CommState::Ready,
            attempted: "x",
            reason: text!("x"),
        };
        assert_eq!(failure_sign(&ready), FailureSign::Call);
    }

    #[test]
    fn elastic_groups_never_end_the_process() {
        use ErrorHandling::*;
        for asked in [TearDown, SkipCleanUp, CleanUpOnly, NoHandling] {
            assert_eq!(error_handling(asked), NoHandling);
        }
    }

    #[test]
    fn uids_of_epochs_never_meet() {
        assert_eq!(uid_at(5, 0), 5);
        assert_ne!(uid_at(5, 1), uid_at(5, 2));
        assert_ne!(uid_at(0, 1), uid_at(1, 1));
        assert_eq!(uid_at(5, 1) >> UID_EPOCH_SHIFT, 1);
        // Saturates instead of wrapping.
        assert_eq!(uid_at(1, u64::MAX), uid_at(1, (1 << 24) - 1));
    }

    #[test]
    fn lost_members_are_named_by_group_rank() {
        let mut out = [0u32; 4];
        let n = lost_indices(&[0, 2, 5, 7], &[5, 3, 0], &mut out);
        assert_eq!(&out[..n], &[0, 2]);
        assert_eq!(lost_indices(&[1], &[2], &mut out), 0);
    }
}
