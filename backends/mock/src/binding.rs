//! What a mock communicator shares with its abort handles: the communicator and rank it is
//! bound to (a placeholder until a nonblocking split resolves), and the calls allowed from any
//! thread at any time: state, poll, abort.

use crate::shared::{CommShared, Life, RankState};
use crate::sync::lock;
use oxccl_core::state::lifecycle::Lifecycle;
use oxccl_core::text::text_str;
use oxccl_core::{text, CommAbort, CommState, Error, Progress, Result};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

/// How long dropping a communicator waits for its queued work before it gives up on it.
const DROP_GRACE: Duration = Duration::from_secs(2);

/// One rank's binding to its communicator.
pub(crate) struct Binding {
    /// The communicator and this rank in it; for a nonblocking split still in progress, a
    /// one-rank placeholder in `Initializing` until the child is bound (see `resolved`).
    pub(crate) shared: Arc<CommShared>,
    pub(crate) rank: u32,
    /// The child a pending nonblocking split resolved to (set once, by `poll`).
    pub(crate) resolved: OnceLock<(Arc<CommShared>, u32)>,
    pub(crate) pending: Option<PendingSplit>,
}

/// A nonblocking split whose rendezvous is completed by polling the child.
pub(crate) struct PendingSplit {
    pub(crate) parent: Arc<CommShared>,
    pub(crate) parent_rank: u32,
    pub(crate) seq: u64,
    /// `InProgress` answers still owed (the configured polls, counted from the split call).
    pub(crate) polls: AtomicU32,
    /// Serializes binding.
    pub(crate) bind: Mutex<()>,
    /// For a parent spanning processes: the split's own thread, which the child binds to.
    pub(crate) task: Option<Arc<crate::mirror::split_task::Task>>,
}

impl Binding {
    /// A rank already bound to its communicator.
    pub(crate) fn bound(shared: Arc<CommShared>, rank: u32) -> Binding {
        Binding {
            shared,
            rank,
            resolved: OnceLock::new(),
            pending: None,
        }
    }

    /// The communicator this handle is bound to now.
    pub(crate) fn sh(&self) -> &Arc<CommShared> {
        self.resolved.get().map_or(&self.shared, |b| &b.0)
    }

    /// This rank in [`Binding::sh`].
    pub(crate) fn rk(&self) -> u32 {
        self.resolved.get().map_or(self.rank, |b| b.1)
    }

    /// This rank's state.
    pub(crate) fn rs(&self) -> &RankState {
        self.sh().rank(self.rk())
    }

    /// Where the communicator is in its life.
    pub(crate) fn state(&self) -> CommState {
        lock(&self.rs().life).cycle.state()
    }

    /// For a pending nonblocking split: `Some(Ok(()))` while the other ranks have not all
    /// called, `Some(Err)` when it failed; `None` once bound (or never pending).
    fn resolve(&self) -> Option<Result<()>> {
        let p = self.pending.as_ref()?;
        let _g = lock(&p.bind);
        if self.resolved.get().is_some() {
            return None;
        }
        {
            // The placeholder holds an abort or a failure of the pending split.
            let life = lock(&self.shared.rank(0).life);
            if let Some(e) = &life.error {
                return Some(Err(e.clone()));
            }
            if let Err(e) = life.cycle.ensure_ready("poll") {
                if life.cycle.state() != CommState::Initializing {
                    return Some(Err(e));
                }
            }
        }
        let taken = match &p.task {
            Some(task) => task.try_take(),
            None => p.parent.split_try_take(p.parent_rank, p.seq),
        };
        let Some(taken) = taken else {
            return Some(Ok(()));
        };
        let err = match taken {
            Ok(Some((child, r))) => {
                {
                    let mut life = lock(&child.rank(r).life);
                    life.cycle = Lifecycle::initializing();
                    life.init_polls = child
                        .plan
                        .init_polls(r)
                        .unwrap_or(p.polls.load(Ordering::Relaxed));
                    life.nonblocking = true;
                }
                let _ = self.resolved.set((child, r));
                return None;
            }
            Ok(None) => Error::Remote {
                detail: text!("split {}: no child for rank {}", p.seq, p.parent_rank),
            },
            Err(e) => e,
        };
        self.shared.fail(0, err.clone());
        Some(Err(err))
    }

    /// [`oxccl_core::Communicator::poll`] of the mock.
    pub(crate) fn poll(&self) -> Result<Progress> {
        match (self.resolve(), &self.pending) {
            (Some(Err(e)), _) => return Err(e),
            (Some(Ok(())), Some(p)) => {
                // Still waiting for the other ranks' split calls; spend one configured poll.
                let _ = p
                    .polls
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| v.checked_sub(1));
                return Ok(Progress::InProgress);
            }
            _ => {}
        }
        let mut life = lock(&self.rs().life);
        if life.cycle.state() == CommState::Revoked {
            // Quiescent after a revoke: NCCL's poll says success, whatever failed before
            // (the failure stays the reason).
            return Ok(Progress::Done);
        }
        if let Some(e) = &life.error {
            return Err(e.clone());
        }
        match life.cycle.state() {
            CommState::Aborted | CommState::Aborting => Err(Error::Aborted {
                reason: text_str(life.cycle.reason()),
            }),
            CommState::Initializing => {
                if life.init_polls > 0 {
                    if life.init_polls != crate::fault::INIT_NEVER {
                        life.init_polls -= 1;
                    }
                    return Ok(Progress::InProgress);
                }
                if self.sh().joined.load(Ordering::Acquire) < self.sh().size {
                    return Ok(Progress::InProgress);
                }
                life.cycle.init_done()?;
                Ok(Progress::Done)
            }
            CommState::Ready | CommState::Finalizing if life.op_polls > 0 => {
                life.op_polls -= 1;
                Ok(Progress::InProgress)
            }
            CommState::Finalizing => {
                drop(life);
                self.finish_finalize()
            }
            _ => Ok(Progress::Done),
        }
    }

    /// Ends a nonblocking finalize once its polls are spent and its work has drained.
    fn finish_finalize(&self) -> Result<Progress> {
        if !self.sh().drained(self.rk()) {
            return Ok(Progress::InProgress);
        }
        let life = lock(&self.rs().life);
        if life.cycle.state() != CommState::Finalizing {
            return Ok(Progress::Done);
        }
        self.end_finalize(life)
    }

    /// The end of a finalize whose work has drained (`life` locked): the asynchronous error if
    /// any, else `Finalized`, and the peers see the rank gone.
    pub(crate) fn end_finalize(&self, mut life: MutexGuard<'_, Life>) -> Result<Progress> {
        if let Some(e) = &life.error {
            return Err(e.clone());
        }
        life.cycle.finalize_done()?;
        drop(life);
        self.sh().mark_dead(self.rk(), text!("finalized"));
        Ok(Progress::Done)
    }

    /// [`oxccl_core::Communicator::abort`] of the mock.
    pub(crate) fn abort(&self, reason: &str) {
        self.leave_pending(reason);
        self.sh().abort(self.rk(), reason);
    }

    /// [`oxccl_core::CommAbort::abort_in_background`] of the mock: with a slow abort planned
    /// ([`crate::FaultPlan::slow_abort`]) the rank is `Aborting` (dead to its peers at once)
    /// while a thread named `oxccl-abort` spends the delay, then `Aborted`; without one the
    /// abort has nothing to wait for and is done here.
    pub(crate) fn abort_in_background(&self, reason: &str) {
        self.leave_pending(reason);
        let (sh, rank) = (Arc::clone(self.sh()), self.rk());
        let delay = sh.plan.abort_delay(rank).unwrap_or_default();
        if delay.is_zero() {
            sh.abort(rank, reason);
            return;
        }
        if !sh.abort_begin(rank, reason) {
            return;
        }
        let counted = oxccl_core::AbortInFlight::begin();
        let theirs = Arc::clone(&sh);
        let spawned = std::thread::Builder::new()
            .name("oxccl-abort".into())
            .spawn(move || {
                let _counted = counted;
                std::thread::sleep(delay);
                theirs.abort_done(rank);
            });
        if spawned.is_err() {
            std::thread::sleep(delay);
            sh.abort_done(rank);
        }
    }

    /// Leaves the communicator, as a dropped handle does: queued work finishes (bounded by
    /// [`DROP_GRACE`]), the host's rank waits for the ranks of other processes (see
    /// [`CommShared::linger`]), then the rank is destroyed and marked dead so that its peers
    /// fail instead of hanging.
    pub(crate) fn leave(&self) {
        self.leave_pending("destroyed before its nonblocking split completed");
        if self.sh().alive(self.rk()) {
            self.sh().wait_drained(self.rk(), Some(DROP_GRACE));
        }
        // Ranks of other processes get their last results through this process.
        self.sh().linger(self.rk());
        lock(&self.rs().life).cycle.destroy();
        self.sh().mark_dead(self.rk(), text!("destroyed"));
    }

    /// A pending nonblocking split's child is aborted or dropped before it was bound: its rank
    /// in the child (now, or once every rank called) is aborted, so its peers do not hang.
    pub(crate) fn leave_pending(&self, why: &str) {
        let Some(p) = &self.pending else { return };
        let _g = lock(&p.bind);
        if self.resolved.get().is_some() {
            return;
        }
        if let Some(task) = &p.task {
            // The task aborts the child rank (now, or once joined).
            if let Some(c) = task.abandon(why) {
                let _ = self.resolved.set(c);
            }
            return;
        }
        if let Some((child, r)) = p.parent.split_abandon(p.parent_rank, p.seq, why) {
            child.abort(r, why);
            let _ = self.resolved.set((child, r));
        }
    }
}

/// Aborts, watches and polls one rank of a mock communicator from any thread (made by
/// [`oxccl_core::Communicator::abort_handle`]); it allows nothing else. It may outlive the
/// communicator: its calls then report the final state (`Destroyed`).
#[derive(Clone)]
pub struct MockAbort {
    pub(crate) b: Arc<Binding>,
}

impl std::fmt::Debug for MockAbort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockAbort")
            .field("rank", &self.b.rk())
            .field("state", &self.b.state())
            .finish()
    }
}

impl CommAbort for MockAbort {
    fn abort(&self, reason: &str) {
        self.b.abort(reason);
    }

    fn abort_in_background(&self, reason: &str) {
        self.b.abort_in_background(reason);
    }

    fn state(&self) -> CommState {
        self.b.state()
    }

    fn poll(&self) -> Result<Progress> {
        self.b.poll()
    }
}
