//! One-sided operations (NCCL 2.29.2+): a put with a signal into a peer's part of a symmetric
//! window, a signal alone, a wait for signals. Checked first (`check::put_signal` and its
//! kin), the window looked up among this communicator's; the callers hold the call lock.

use crate::comm::NcclComm;
use crate::stream::NcclStream;
use oxccl_core::one_sided::{PutSignal, SignalWait};
use oxccl_core::{check, Feature, Result};
use oxccl_loader::raw::RawWaitSignalDesc;

impl NcclComm {
    /// [`oxccl_core::OneSided::put_signal`] on NCCL.
    ///
    /// # Safety
    /// As the trait's: `p.send` valid device memory of this communicator's device until the
    /// work on `stream` completed.
    pub(crate) unsafe fn put_signal_comm(&self, p: &PutSignal, stream: &NcclStream) -> Result<()> {
        check::put_signal(&self.check_ctx(), &self.inner.signals, p)?;
        let reg = &self.inner.registry;
        check::put_windows(p, |w| reg.has_window(w), |a, b| reg.in_window(a, b))?;
        let f = self.gated(Feature::Signals, |a| a.put_signal, "ncclPutSignal")?;
        self.inner.ready_for("put_signal")?;
        // SAFETY: checked above (the data within the peer's part of a live window of this
        // communicator, peer and numbers in range); the caller keeps `send` valid until the
        // stream passes the put; flags 0, the only value NCCL defines.
        let code = unsafe {
            f(
                p.send.addr as *const std::ffi::c_void,
                p.send.len,
                p.dtype.code(),
                p.peer as i32,
                p.window.raw as oxccl_loader::raw::RawWindow,
                p.offset,
                p.signal as i32,
                p.ctx as i32,
                0,
                self.inner.raw,
                stream.raw(),
            )
        };
        self.finish(code, "ncclPutSignal")
    }

    /// [`oxccl_core::OneSided::signal`] on NCCL.
    pub(crate) fn signal_comm(
        &self,
        peer: u32,
        signal: u32,
        ctx: u32,
        stream: &NcclStream,
    ) -> Result<()> {
        check::signal(&self.check_ctx(), &self.inner.signals, peer, signal, ctx)?;
        let f = self.gated(Feature::Signals, |a| a.signal, "ncclSignal")?;
        self.inner.ready_for("signal")?;
        // SAFETY: a ready communicator; peer and numbers checked; flags 0.
        let code = unsafe {
            f(
                peer as i32,
                signal as i32,
                ctx as i32,
                0,
                self.inner.raw,
                stream.raw(),
            )
        };
        self.finish(code, "ncclSignal")
    }

    /// [`oxccl_core::OneSided::wait_signal`] on NCCL.
    pub(crate) fn wait_signal_comm(&self, waits: &[SignalWait], stream: &NcclStream) -> Result<()> {
        check::wait_signal(&self.check_ctx(), &self.inner.signals, waits)?;
        let f = self.gated(Feature::Signals, |a| a.wait_signal, "ncclWaitSignal")?;
        self.inner.ready_for("wait_signal")?;
        // Numbers checked to fit an int.
        let mut descs: Vec<RawWaitSignalDesc> = waits
            .iter()
            .map(|w| RawWaitSignalDesc {
                op_cnt: w.count as i32,
                peer: w.peer as i32,
                sig_idx: w.signal as i32,
                ctx: w.ctx as i32,
            })
            .collect();
        // SAFETY: a ready communicator; `descs` holds `waits.len()` (checked to fit an int)
        // descriptors and outlives the call.
        let code = unsafe {
            f(
                descs.len() as i32,
                descs.as_mut_ptr(),
                self.inner.raw,
                stream.raw(),
            )
        };
        self.finish(code, "ncclWaitSignal")
    }
}
