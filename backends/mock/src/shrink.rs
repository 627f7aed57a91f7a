//! Shrink and revoke of a mock communicator.
//!
//! A shrink is a new communicator of the ranks that stay, met without the parent's
//! rendezvous, because the parent is usually broken when a shrink is called (a rank died,
//! the survivors revoked): in one process the survivors meet in the parent's hub by the
//! shrink's number, which every survivor counts alike; across processes each survivor derives
//! the child's id from the parent's token, the shrink's number and the excluded ranks, and the
//! process of the child's rank 0 hosts it (every rank learnt every rank's process at init), so
//! a shrink survives the death of the parent's host. It waits for every survivor's call,
//! bounded by the init limit, as NCCL's blocking shrink does; survivors that give different
//! exclusions are told so.
//!
//! A revoke makes the rank gone to its peers (their operations with it end) and drops its
//! queued work; its own operations in flight end with the revoked state's error.

use crate::comm::MockComm;
use crate::sync::lock;
use oxccl_core::traits::ShrinkMode;
use oxccl_core::{check, text, CommConfig, CommState, Feature, Progress, Result};
use std::sync::atomic::Ordering;

impl MockComm {
    /// Stops this rank's operations and refuses new ones (see the module): `Revoked` at once,
    /// since a dead rank's queued work is dropped.
    pub(crate) fn revoke_rank(&self, reason: &str) -> Result<Progress> {
        let (sh, rank) = (self.sh(), self.rk());
        {
            let mut life = lock(&sh.rank(rank).life);
            life.cycle.revoke_begin(reason)?;
        }
        sh.mark_dead(rank, text!("revoked: {reason}"));
        lock(&sh.rank(rank).life).cycle.revoke_done();
        Ok(Progress::Done)
    }

    /// [`oxccl_core::Reshape::shrink`] of the mock (the call lock held by the caller).
    pub(crate) fn shrink_rank(
        &self,
        exclude: &[u32],
        cfg: &CommConfig,
        mode: ShrinkMode,
    ) -> Result<MockComm> {
        let (sh, rank) = (self.sh(), self.rk());
        sh.features.require(Feature::Shrink)?;
        cfg.check_for(sh.features.version())?;
        check::shrink(&self.ctx(), exclude)?;
        if mode == ShrinkMode::AbortInFlight {
            let state = lock(&sh.rank(rank).life).cycle.state();
            if matches!(state, CommState::Ready | CommState::Failed) {
                self.revoke_rank("shrink with its operations in flight stopped")?;
            }
        }
        lock(&sh.rank(rank).life)
            .cycle
            .ensure_reshapable("shrink")?;
        let mut sorted = exclude.to_vec();
        sorted.sort_unstable();
        let seq = sh.rank(rank).split_seq.fetch_add(1, Ordering::Relaxed);
        let limit = self.init_timeout;
        let (child, r) = if crate::mirror::spans::spans(sh) {
            crate::procs::split::shrink(sh, rank, seq, &sorted, limit)?
        } else {
            sh.shrink_join(rank, seq, &sorted, limit)?
        };
        Ok(
            MockComm::from_shared(child, r, self.device, limit).with_signals(
                oxccl_core::one_sided::SignalLimits::from_config(cfg, self.signals),
            ),
        )
    }
}
