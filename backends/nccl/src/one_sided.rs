//! One-sided operations (NCCL 2.29.2+): a put with a signal into a peer's part of a symmetric
//! window, a signal alone, a wait for signals. Checked first (`check::put_signal` and its
//! kin), the window looked up among this communicator's; the callers hold the call lock.

use crate::comm::NcclComm;
use crate::ffi::Put;
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
        self.gated(Feature::OneSided, |a| a.put_signal, "ncclPutSignal")?;
        self.inner.ready_for("put_signal")?;
        let put = Put {
            send: p.send.addr,
            count: p.send.len,
            dtype: p.dtype.code(),
            peer: p.peer as i32,
            window: p.window.raw,
            offset: p.offset,
            signal: p.signal as i32,
            ctx: p.ctx as i32,
        };
        let api = self.inner.lib.api();
        // SAFETY: checked above (the data within the peer's part of a live window of this
        // communicator, peer and numbers in range); a ready communicator; the caller keeps
        // `send` valid until the stream passes the put.
        let code = unsafe { crate::ffi::put_signal(api, &put, self.inner.raw, stream.raw())? };
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
        self.gated(Feature::OneSided, |a| a.signal, "ncclSignal")?;
        self.inner.ready_for("signal")?;
        let (api, raw) = (self.inner.lib.api(), self.inner.raw);
        let (peer, signal, ctx) = (peer as i32, signal as i32, ctx as i32);
        // SAFETY: a ready communicator and its stream; peer and numbers checked.
        let code = unsafe { crate::ffi::signal(api, peer, signal, ctx, raw, stream.raw())? };
        self.finish(code, "ncclSignal")
    }

    /// [`oxccl_core::OneSided::wait_signal`] on NCCL.
    pub(crate) fn wait_signal_comm(&self, waits: &[SignalWait], stream: &NcclStream) -> Result<()> {
        check::wait_signal(&self.check_ctx(), &self.inner.signals, waits)?;
        self.gated(Feature::OneSided, |a| a.wait_signal, "ncclWaitSignal")?;
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
        let (api, raw) = (self.inner.lib.api(), self.inner.raw);
        // SAFETY: a ready communicator and its stream.
        let code = unsafe { crate::ffi::wait_signal(api, &mut descs, raw, stream.raw())? };
        self.finish(code, "ncclWaitSignal")
    }
}
