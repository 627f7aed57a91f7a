//! Suspend, resume and memory statistics (NCCL 2.29.7+): a communicator that gives its dynamic
//! device memory back while idle, and what it holds. The callers hold the call lock.

use crate::comm::NcclComm;
use oxccl_core::traits::MemStats;
use oxccl_core::{Feature, Result};

/// `ncclCommMemStat_t`'s values.
const STAT_SUSPENDABLE: i32 = 0;
const STAT_SUSPENDED: i32 = 1;
const STAT_PERSISTENT: i32 = 2;
const STAT_TOTAL: i32 = 3;
/// `NCCL_SUSPEND_MEM`.
const SUSPEND_MEM: i32 = 0x01;

impl NcclComm {
    /// [`oxccl_core::Suspend::suspend`] on NCCL.
    pub(crate) fn suspend_comm(&self, release_memory: bool) -> Result<()> {
        self.gated(
            Feature::SuspendResume,
            |a| a.comm_suspend,
            "ncclCommSuspend",
        )?;
        self.transition(|l| l.suspend())?;
        let flags = if release_memory { SUSPEND_MEM } else { 0 };
        let _live = self.inner.use_raw();
        // SAFETY: a communicator that was ready (so live) a moment ago, its state now
        // Suspended so no operation of ours reaches it; flags NCCL defines.
        let code =
            unsafe { crate::ffi::comm_suspend(self.inner.lib.api(), self.inner.raw, flags)? };
        let done = self.finish(code, "ncclCommSuspend");
        if done.is_err() {
            // Not suspended: ready again, unless the failure was recorded.
            self.transition(|l| {
                let _ = l.resume();
            });
        }
        done
    }

    /// [`oxccl_core::Suspend::resume`] on NCCL.
    pub(crate) fn resume_comm(&self) -> Result<()> {
        self.gated(Feature::SuspendResume, |a| a.comm_resume, "ncclCommResume")?;
        if self.inner.state() != oxccl_core::CommState::Suspended {
            // Not suspended: the lifecycle's refusal, naming the state.
            return self.transition(|l| l.resume());
        }
        let _live = self.inner.use_raw();
        // SAFETY: a suspended (so live) communicator.
        let code = unsafe { crate::ffi::comm_resume(self.inner.lib.api(), self.inner.raw)? };
        self.finish(code, "ncclCommResume")?;
        self.transition(|l| l.resume())
    }

    /// [`oxccl_core::Suspend::mem_stats`] on NCCL.
    pub(crate) fn mem_stats_comm(&self) -> Result<MemStats> {
        self.gated(Feature::MemStats, |a| a.comm_mem_stats, "ncclCommMemStats")?;
        let _live = self.inner.use_raw();
        if self.inner.is_released() || self.inner.state().is_dead() {
            self.ensure_ready("read memory statistics")?;
        }
        // SAFETY: a live communicator (checked under `use_raw`); `stat` one of the values NCCL
        // defines.
        let read = |stat: i32| unsafe {
            crate::ffi::comm_mem_stats(&self.inner.lib, self.inner.raw, stat)
        };
        Ok(MemStats {
            suspendable: read(STAT_SUSPENDABLE)?,
            persistent: read(STAT_PERSISTENT)?,
            total: read(STAT_TOTAL)?,
            suspended: read(STAT_SUSPENDED)? != 0,
        })
    }
}
