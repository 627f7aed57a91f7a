//! Revoke, shrink and grow: what a survivor of a lost peer does to its communicator (NCCL
//! 2.28.7's `ncclCommRevoke`, 2.27's `ncclCommShrink`), and how running ranks take in new ones
//! (2.29's `ncclCommGrow`). The callers ([`oxccl_core::Communicator`]'s methods) hold the call
//! lock.

use crate::comm::NcclComm;
use crate::comm_inner::poll_raw;
use crate::create::{config, create, none_made, OutHandle};
use crate::peer::PeerMemory;
use crate::wait::Deadline;
use oxccl_core::traits::ShrinkMode;
use oxccl_core::{
    text, CommConfig, CommState, Error, Feature, Progress, Result, ResultCode, UniqueId,
};

impl NcclComm {
    /// Takes this rank's peer kernels out of service with their abort flag raised (a kernel
    /// waiting for a lost peer gives up); the caller drops the group once NCCL has stopped
    /// the operations its stream may hold before a kernel.
    fn stop_peer_kernels(&self) -> Option<PeerMemory> {
        let group = self.inner.peer.write().take();
        if let Some(g) = &group {
            g.raise_abort();
        }
        group
    }

    /// [`oxccl_core::Reshape::revoke`] on NCCL: `ncclCommRevoke`, then polled until the
    /// communicator is quiescent (bounded by its time limit).
    pub(crate) fn revoke_comm(&self, reason: &str) -> Result<Progress> {
        self.gated(Feature::Revoke, |a| a.comm_revoke, "ncclCommRevoke")?;
        if self.inner.state() == CommState::Revoked {
            return Ok(Progress::Done);
        }
        self.transition(|l| l.revoke_begin(reason))?;
        let stopped = self.stop_peer_kernels();
        let lib = &self.inner.lib;
        let outcome = {
            let _live = self.inner.use_raw();
            if self.inner.is_released() {
                Err(Error::Aborted {
                    reason: text!("released while revoking"),
                })
            } else {
                // SAFETY: a live communicator (released is false under `use_raw`).
                unsafe { crate::ffi::comm_revoke(lib.api(), self.inner.raw) }
                    .and_then(|code| {
                        if code == ResultCode::IN_PROGRESS.0 {
                            Ok(())
                        } else {
                            lib.check(code, self.inner.raw)
                        }
                    })
                    .and_then(|()| {
                        Deadline::after(self.timeout())
                            .poll("ncclCommRevoke", || poll_raw(lib, self.inner.raw))
                    })
            }
        };
        drop(stopped);
        outcome?;
        self.transition(|l| l.revoke_done());
        Ok(Progress::Done)
    }

    /// [`oxccl_core::Reshape::shrink`] on NCCL.
    pub(crate) fn shrink_comm(
        &self,
        exclude: &[u32],
        cfg: &CommConfig,
        mode: ShrinkMode,
    ) -> Result<NcclComm> {
        self.gated(Feature::Shrink, |a| a.comm_shrink, "ncclCommShrink")?;
        oxccl_core::check::shrink(&self.check_ctx(), exclude)?;
        let state = self.inner.state();
        match mode {
            ShrinkMode::Default => self.transition(|l| l.ensure_reshapable("shrink"))?,
            ShrinkMode::AbortInFlight => {
                if !matches!(
                    state,
                    CommState::Ready | CommState::Failed | CommState::Revoking | CommState::Revoked
                ) {
                    self.transition(|l| l.ensure_reshapable("shrink"))?;
                }
            }
        }
        // Ranks below the communicator's size, itself at most i32::MAX (checked at creation).
        let mut list: Vec<i32> = exclude.iter().map(|&r| r as i32).collect();
        let mut buf = config(&self.inner.lib, cfg)?;
        let new = OutHandle::new();
        // With the abort flag this rank's kernels stop too, as NCCL stops the parent's
        // operations: waits for excluded ranks give up, and the parent's all-reduces go to NCCL
        // from here. Its peer memory is released after the shrink (the release waits for the
        // stream, where a parent operation NCCL stops may sit before a kernel).
        let abort_parent = mode == ShrinkMode::AbortInFlight;
        let stopped = if abort_parent {
            self.stop_peer_kernels()
        } else {
            None
        };
        let code = create(&mut buf, &new, |new, cfg_ptr| {
            // SAFETY: live communicator; `create` hands a valid out-pointer and a config null
            // or built for the loaded version, alive for the call.
            unsafe {
                crate::ffi::comm_shrink(
                    self.inner.lib.api(),
                    self.inner.raw,
                    &mut list,
                    new,
                    cfg_ptr,
                    abort_parent,
                )
            }
        })?;
        let child = self.adopt_child("shrink", code, &new, false, cfg);
        drop(stopped);
        child?.ok_or_else(|| none_made("shrink"))
    }
}

impl NcclComm {
    /// [`oxccl_core::Reshape::grow_id`] on NCCL: `ncclCommGetUniqueId`.
    pub(crate) fn grow_id_comm(&self) -> Result<UniqueId> {
        self.gated(
            Feature::Grow,
            |a| a.comm_get_unique_id,
            "ncclCommGetUniqueId",
        )?;
        self.ensure_ready("make a grow id")?;
        let _live = self.inner.use_raw();
        // SAFETY: a ready (so live) communicator.
        let (code, id) =
            unsafe { crate::ffi::comm_get_unique_id(self.inner.lib.api(), self.inner.raw)? };
        self.finish(code, "ncclCommGetUniqueId")?;
        // This rank is the grow's root: it alone passes the id to ncclCommGrow.
        *self.inner.grow_root.lock() = Some(id);
        Ok(id)
    }

    /// [`oxccl_core::Reshape::grow`] on NCCL: `ncclCommGrow` from this communicator.
    pub(crate) fn grow_comm(&self, size: u32, id: &UniqueId, cfg: &CommConfig) -> Result<NcclComm> {
        self.gated(Feature::Grow, |a| a.comm_grow, "ncclCommGrow")?;
        oxccl_core::check::grow(&self.check_ctx(), size)?;
        self.ensure_ready("grow")?;
        let mut buf = config(&self.inner.lib, cfg)?;
        let new = OutHandle::new();
        // NCCL's running ranks other than the root pass no id.
        let root = *self.inner.grow_root.lock() == Some(*id);
        let root_id = root.then_some(id);
        let code = create(&mut buf, &new, |new, cfg_ptr| {
            // SAFETY: a ready communicator; `size` fits an int (checked); rank -1 marks a
            // running rank; `create` hands a valid out-pointer and a config null or built for
            // the loaded version, alive for the call.
            unsafe {
                crate::ffi::comm_grow(
                    self.inner.lib.api(),
                    self.inner.raw,
                    size as i32,
                    root_id,
                    -1,
                    new,
                    cfg_ptr,
                )
            }
        })?;
        let child = self.adopt_child("grow", code, &new, false, cfg);
        if root {
            // The id is spent: the next grow needs a new one.
            *self.inner.grow_root.lock() = None;
        }
        child?.ok_or_else(|| none_made("grow"))
    }
}
