//! A communicator's life: initializing → ready → failed / aborted / finalized → destroyed.
//! An abort whose release runs on a thread of its own passes through aborting first; a revoke
//! (ready or failed → revoking → revoked) stops the operations in flight and leaves a
//! communicator that can still be split or shrunk.
//!
//! The first failure reason sticks; abort is idempotent; every operation on a dead
//! communicator fails fast with the reason it died.

use crate::comm_state::CommState;
use crate::error::{Error, Result};
use crate::text::{text_str, Text};

/// The lifecycle state with the reason that put it there.
#[derive(Debug, Clone, PartialEq)]
pub struct Lifecycle {
    state: CommState,
    reason: Text,
}

impl Lifecycle {
    /// A communicator whose init returned at once (blocking) is ready.
    pub fn ready() -> Lifecycle {
        Lifecycle {
            state: CommState::Ready,
            reason: Text::new(),
        }
    }

    /// A communicator whose nonblocking init is still running.
    pub fn initializing() -> Lifecycle {
        Lifecycle {
            state: CommState::Initializing,
            reason: Text::new(),
        }
    }

    /// The current state.
    pub fn state(&self) -> CommState {
        self.state
    }

    /// Why the communicator left `Ready` (empty while it has not).
    pub fn reason(&self) -> &str {
        &self.reason
    }

    /// A nonblocking init (or split) finished.
    pub fn init_done(&mut self) -> Result<()> {
        match self.state {
            CommState::Initializing => {
                self.state = CommState::Ready;
                Ok(())
            }
            CommState::Ready => Ok(()),
            s => Err(self.refuse(s, "complete init")),
        }
    }

    /// The communicator failed. The first reason is kept; a dead communicator stays as it is.
    pub fn fail(&mut self, reason: &str) {
        if matches!(
            self.state,
            CommState::Initializing | CommState::Ready | CommState::Finalizing
        ) {
            self.state = CommState::Failed;
            self.reason = text_str(reason);
        }
    }

    /// Aborts. Idempotent; a failure reason already recorded is kept as the cause. An abort
    /// already under way ([`CommState::Aborting`]) is left to finish.
    pub fn abort(&mut self, reason: &str) {
        self.enter(CommState::Aborted, reason);
    }

    /// Starts an abort whose release runs elsewhere: [`CommState::Aborting`] until
    /// [`Lifecycle::abort_done`]. Whether the caller is to release the communicator: false when
    /// it was aborted (or destroyed) already, so the release is never run twice.
    pub fn abort_begin(&mut self, reason: &str) -> bool {
        self.enter(CommState::Aborting, reason)
    }

    /// The release an [`Lifecycle::abort_begin`] started has returned: `Aborted` (a
    /// communicator destroyed meanwhile stays destroyed).
    pub fn abort_done(&mut self) {
        if self.state == CommState::Aborting {
            self.state = CommState::Aborted;
        }
    }

    /// Starts a revoke: the operations in flight stop and new ones are refused, until
    /// [`Lifecycle::revoke_done`]. From ready, or failed (what a survivor of a lost peer
    /// revokes before it shrinks; the failure stays the reason); again while revoking or
    /// revoked, nothing changes.
    pub fn revoke_begin(&mut self, reason: &str) -> Result<()> {
        match self.state {
            CommState::Ready => {
                self.state = CommState::Revoking;
                self.reason = text_str(reason);
                Ok(())
            }
            CommState::Failed => {
                self.state = CommState::Revoking;
                Ok(())
            }
            CommState::Revoking | CommState::Revoked => Ok(()),
            s => Err(self.refuse(s, "revoke")),
        }
    }

    /// Suspends a ready communicator: `Suspended` until [`Lifecycle::resume`].
    pub fn suspend(&mut self) -> Result<()> {
        match self.state {
            CommState::Ready => {
                self.state = CommState::Suspended;
                Ok(())
            }
            s => Err(self.refuse(s, "suspend")),
        }
    }

    /// Resumes a suspended communicator: `Ready` again.
    pub fn resume(&mut self) -> Result<()> {
        match self.state {
            CommState::Suspended => {
                self.state = CommState::Ready;
                Ok(())
            }
            s => Err(self.refuse(s, "resume")),
        }
    }

    /// The revoked communicator is quiescent: `Revoked`.
    pub fn revoke_done(&mut self) {
        if self.state == CommState::Revoking {
            self.state = CommState::Revoked;
        }
    }

    /// Enters `to` (Aborted or Aborting) unless already aborted or destroyed; whether it did.
    /// The reason a failure or a revoke recorded is kept as the cause.
    fn enter(&mut self, to: CommState, reason: &str) -> bool {
        match self.state {
            CommState::Aborted | CommState::Aborting | CommState::Destroyed => false,
            CommState::Failed | CommState::Revoking | CommState::Revoked => {
                self.state = to;
                true
            }
            _ => {
                self.state = to;
                self.reason = text_str(reason);
                true
            }
        }
    }

    /// Starts a finalize (nonblocking finalize stays `Finalizing` until [`Lifecycle::finalize_done`]).
    pub fn finalize_start(&mut self) -> Result<()> {
        match self.state {
            CommState::Ready => {
                self.state = CommState::Finalizing;
                Ok(())
            }
            s => Err(self.refuse(s, "finalize")),
        }
    }

    /// The finalize finished.
    pub fn finalize_done(&mut self) -> Result<()> {
        match self.state {
            CommState::Finalizing => {
                self.state = CommState::Finalized;
                self.reason = text_str("finalized");
                Ok(())
            }
            s => Err(self.refuse(s, "complete finalize")),
        }
    }

    /// Resources released. Always allowed (drop must never fail); idempotent.
    pub fn destroy(&mut self) {
        if self.state != CommState::Destroyed {
            if self.reason.is_empty() {
                self.reason = text_str("destroyed");
            }
            self.state = CommState::Destroyed;
        }
    }

    /// `Ok` when an operation may be issued now; otherwise the error the caller gets: an abort
    /// gives [`Error::Aborted`] with its reason, other states [`Error::InvalidState`].
    pub fn ensure_ready(&self, attempted: &'static str) -> Result<()> {
        match self.state {
            CommState::Ready => Ok(()),
            CommState::Aborted | CommState::Aborting => Err(Error::Aborted {
                reason: self.reason.clone(),
            }),
            s => Err(self.refuse(s, attempted)),
        }
    }

    /// `Ok` when the communicator may be split or shrunk now: ready, or revoked and quiescent.
    /// Otherwise the error [`Lifecycle::ensure_ready`] would give.
    pub fn ensure_reshapable(&self, attempted: &'static str) -> Result<()> {
        match self.state {
            CommState::Revoked => Ok(()),
            _ => self.ensure_ready(attempted),
        }
    }

    fn refuse(&self, state: CommState, attempted: &'static str) -> Error {
        let reason = if self.reason.is_empty() {
            text_str(state.name())
        } else {
            self.reason.clone()
        };
        Error::InvalidState {
            state,
            attempted,
            reason,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn all_states() -> [Lifecycle; 11] {
        let ready = Lifecycle::ready();
        let init = Lifecycle::initializing();
        let mut failed = Lifecycle::ready();
        failed.fail("boom");
        let mut aborted = Lifecycle::ready();
        aborted.abort("user");
        let mut aborting = Lifecycle::ready();
        assert!(aborting.abort_begin("limit"));
        let mut finalizing = Lifecycle::ready();
        finalizing.finalize_start().unwrap();
        let mut finalized = finalizing.clone();
        finalized.finalize_done().unwrap();
        let mut destroyed = Lifecycle::ready();
        destroyed.destroy();
        let mut revoking = Lifecycle::ready();
        revoking.revoke_begin("peer lost").unwrap();
        let mut revoked = revoking.clone();
        revoked.revoke_done();
        let mut suspended = Lifecycle::ready();
        suspended.suspend().unwrap();
        [
            init, ready, failed, aborted, aborting, finalizing, finalized, destroyed, revoking,
            revoked, suspended,
        ]
    }

    #[test]
    fn init_done_only_from_initializing_or_ready() {
        for mut l in all_states() {
            let before = l.state();
            let r = l.init_done();
            match before {
                CommState::Initializing | CommState::Ready => {
                    assert!(r.is_ok());
                    assert_eq!(l.state(), CommState::Ready);
                }
                s => {
                    assert!(
                        matches!(r, Err(Error::InvalidState { state, attempted: "complete init", .. }) if state == s)
                    );
                    assert_eq!(l.state(), s);
                }
            }
        }
    }

    #[test]
    fn first_failure_reason_sticks_through_abort() {
        let mut l = Lifecycle::ready();
        l.fail("nccl said no");
        l.fail("second");
        assert_eq!(l.reason(), "nccl said no");
        l.abort("watchdog");
        assert_eq!(l.state(), CommState::Aborted);
        assert_eq!(l.reason(), "nccl said no");
        match l.ensure_ready("all_reduce") {
            Err(Error::Aborted { reason }) => assert_eq!(reason.as_str(), "nccl said no"),
            e => panic!("{e:?}"),
        }
    }

    #[test]
    fn abort_is_idempotent_and_never_revives() {
        for mut l in all_states() {
            let before = l.state();
            l.abort("x");
            l.abort("y");
            let expect = match before {
                CommState::Destroyed | CommState::Aborting => before,
                _ => CommState::Aborted,
            };
            assert_eq!(l.state(), expect, "from {before}");
            assert!(l.ensure_ready("op").is_err());
        }
    }

    #[test]
    fn an_abort_in_background_is_aborting_until_done_and_released_once() {
        for mut l in all_states() {
            let before = l.state();
            let first = l.abort_begin("limit");
            let fresh = !matches!(
                before,
                CommState::Aborted | CommState::Aborting | CommState::Destroyed
            );
            assert_eq!(first, fresh, "from {before}");
            if fresh {
                assert_eq!(l.state(), CommState::Aborting, "from {before}");
                assert!(l.state().is_dead() && l.state().is_aborted());
                // Only one caller releases.
                assert!(!l.abort_begin("again"));
                l.abort("inline meanwhile");
                assert_eq!(l.state(), CommState::Aborting);
                l.fail("late failure");
                assert_eq!(l.state(), CommState::Aborting);
                assert!(l.init_done().is_err() && l.finalize_start().is_err());
                match l.ensure_ready("op") {
                    Err(Error::Aborted { reason }) => {
                        let want = match before {
                            CommState::Failed => "boom",
                            CommState::Revoking | CommState::Revoked => "peer lost",
                            _ => "limit",
                        };
                        assert_eq!(reason.as_str(), want, "from {before}");
                    }
                    e => panic!("{e:?}"),
                }
                l.abort_done();
                assert_eq!(l.state(), CommState::Aborted, "from {before}");
            } else {
                assert_eq!(l.state(), before);
            }
        }
        // Destroyed while the release ran: stays destroyed.
        let mut l = Lifecycle::initializing();
        l.abort_begin("limit");
        l.destroy();
        l.abort_done();
        assert_eq!(l.state(), CommState::Destroyed);
    }

    #[test]
    fn fail_only_from_live_states() {
        for mut l in all_states() {
            let before = l.state();
            l.fail("f");
            let live = matches!(
                before,
                CommState::Initializing | CommState::Ready | CommState::Finalizing
            );
            assert_eq!(l.state(), if live { CommState::Failed } else { before });
        }
    }

    #[test]
    fn finalize_transitions() {
        for mut l in all_states() {
            let before = l.state();
            assert_eq!(
                l.finalize_start().is_ok(),
                before == CommState::Ready,
                "{before}"
            );
        }
        for mut l in all_states() {
            let before = l.state();
            assert_eq!(
                l.finalize_done().is_ok(),
                before == CommState::Finalizing,
                "{before}"
            );
        }
    }

    #[test]
    fn only_ready_accepts_operations() {
        for mut l in all_states() {
            let s = l.state();
            assert_eq!(l.ensure_ready("op").is_ok(), s == CommState::Ready);
            l.destroy();
            l.destroy();
            assert_eq!(l.state(), CommState::Destroyed);
            assert!(matches!(
                l.ensure_ready("op"),
                Err(Error::InvalidState {
                    state: CommState::Destroyed,
                    ..
                }) | Err(Error::Aborted { .. })
            ));
        }
    }
}

#[cfg(test)]
mod revoke_tests {
    use super::*;

    #[test]
    fn a_revoke_stops_operations_but_not_reshaping() {
        let mut l = Lifecycle::ready();
        l.revoke_begin("rank 3 lost").unwrap();
        assert_eq!(l.state(), CommState::Revoking);
        assert!(l.state().is_dead() && !l.state().is_aborted());
        // Nothing runs while revoking, nor splits yet.
        for r in [l.ensure_ready("all_reduce"), l.ensure_reshapable("shrink")] {
            assert!(matches!(
                r,
                Err(Error::InvalidState {
                    state: CommState::Revoking,
                    ..
                })
            ));
        }
        // Idempotent; failures reported meanwhile change nothing.
        l.revoke_begin("again").unwrap();
        l.fail("stopped op");
        assert_eq!(
            (l.state(), l.reason()),
            (CommState::Revoking, "rank 3 lost")
        );
        l.revoke_done();
        assert_eq!(l.state(), CommState::Revoked);
        assert!(l.ensure_reshapable("shrink").is_ok());
        match l.ensure_ready("all_reduce") {
            Err(Error::InvalidState {
                state: CommState::Revoked,
                attempted: "all_reduce",
                reason,
            }) => assert_eq!(reason.as_str(), "rank 3 lost"),
            e => panic!("{e:?}"),
        }
        // No finalize after a revoke (NCCL forbids it); abort and destroy remain.
        assert!(l.finalize_start().is_err());
        l.abort("cleanup");
        assert_eq!((l.state(), l.reason()), (CommState::Aborted, "rank 3 lost"));
    }

    #[test]
    fn a_failed_communicator_can_be_revoked_and_keeps_its_cause() {
        let mut l = Lifecycle::ready();
        l.fail("remote error");
        l.revoke_begin("survivors").unwrap();
        l.revoke_done();
        assert_eq!(
            (l.state(), l.reason()),
            (CommState::Revoked, "remote error")
        );
    }

    #[test]
    fn only_ready_or_failed_can_be_revoked() {
        for (mut l, ok) in [
            (Lifecycle::initializing(), false),
            (Lifecycle::ready(), true),
            (
                {
                    let mut a = Lifecycle::ready();
                    a.abort("x");
                    a
                },
                false,
            ),
            (
                {
                    let mut f = Lifecycle::ready();
                    f.finalize_start().unwrap();
                    f
                },
                false,
            ),
            (
                {
                    let mut d = Lifecycle::ready();
                    d.destroy();
                    d
                },
                false,
            ),
        ] {
            let before = l.state();
            let r = l.revoke_begin("r");
            assert_eq!(r.is_ok(), ok, "from {before}");
            if !ok {
                assert!(
                    matches!(r, Err(Error::InvalidState { state, attempted: "revoke", .. }) if state == before),
                    "from {before}: {r:?}"
                );
                assert_eq!(l.state(), before);
            }
        }
    }

    #[test]
    fn suspend_only_from_ready_and_resume_only_from_suspended() {
        for l in super::tests::all_states() {
            let mut x = l.clone();
            let got = x.suspend();
            if l.state() == CommState::Ready {
                assert_eq!(got, Ok(()));
                assert_eq!(x.state(), CommState::Suspended);
                assert!(x.ensure_ready("all_reduce").is_err());
                assert!(!x.state().is_dead());
                assert_eq!(x.resume(), Ok(()));
                assert_eq!(x.state(), CommState::Ready);
            } else {
                assert!(matches!(
                    got,
                    Err(Error::InvalidState {
                        attempted: "suspend",
                        ..
                    })
                ));
                assert_eq!(x, l);
            }
            let mut y = l.clone();
            if l.state() != CommState::Suspended {
                assert!(matches!(
                    y.resume(),
                    Err(Error::InvalidState {
                        attempted: "resume",
                        ..
                    })
                ));
                assert_eq!(y, l);
            }
        }
        // A suspended communicator aborts, with the abort's reason.
        let mut s = Lifecycle::ready();
        s.suspend().unwrap();
        s.abort("user");
        assert_eq!((s.state(), s.reason()), (CommState::Aborted, "user"));
    }
}
