//! One-sided operations on the mock: a put copies into the peer's window (the one with the
//! same handle: windows are collective, registered in the same order on every rank) and
//! raises its signal; a signal alone raises it; a wait holds the stream until the signals came
//! and consumes them, bounded by the communicator's init limit, and ends with a remote error
//! when the rank or a peer it waits for is gone. All run on the stream, ordered after what was
//! queued before, as NCCL's.
//!
//! Across processes the signals live on the host (rank 0's process), where a rank process's
//! one-sided calls go as messages (`mirror::one_sided`, `procs::one_sided`): a put into a
//! window of a rank in the host's process is written there at once; one into a rank of
//! another process is kept on the host with its data, and that rank's next wait takes it and
//! writes it into its window before the wait ends. What a program sees of a put is the same
//! as on NCCL: its data, once the wait for its signal has returned.

mod state;

use crate::comm::MockComm;
use crate::stream::MockStream;
use crate::sync::lock;
use oxccl_core::one_sided::{PutSignal, SignalWait};
use oxccl_core::{check, Error, Result};
use std::sync::Arc;

/// The most a put carries across processes (its data travels in one message).
pub(crate) const MAX_PUT_ACROSS: usize = 32 << 20;

impl MockComm {
    /// [`oxccl_core::OneSided::put_signal`] of the mock (the call lock held).
    ///
    /// # Safety
    /// `p.send` valid host memory of its length until the stream passed the put.
    pub(crate) unsafe fn put_signal_rank(&self, p: &PutSignal, stream: &MockStream) -> Result<()> {
        check::put_signal(&self.ctx(), &self.signals, p)?;
        {
            let wins = lock(&self.rank_state().windows);
            check::put_windows(
                p,
                |h| wins.0.values().any(|w| *w == h),
                |addr, bytes| {
                    wins.0
                        .values()
                        .any(|w| addr >= w.addr && addr.saturating_add(bytes) <= w.addr + w.bytes)
                },
            )?;
        }
        let bytes = p.send.len * p.dtype.size();
        let link = self.sh().link.get().cloned();
        if link.is_some() && bytes > MAX_PUT_ACROSS {
            return Err(Error::invalid(
                "send",
                format_args!(
                    "at most {MAX_PUT_ACROSS} bytes in a put across processes on the mock, got {bytes}"
                ),
            ));
        }
        lock(&self.rank_state().life)
            .cycle
            .ensure_ready("put_signal")?;
        let (sh, me) = (Arc::clone(self.sh()), self.rk());
        let (peer, at) = (p.peer, (p.window.raw, p.offset));
        let src = p.send.addr;
        let sig = (p.signal, p.ctx);
        let limit = self.init_timeout;
        stream.host_fn(move || {
            // SAFETY: `src` is valid for `bytes` until the stream passed this function (the
            // caller's promise).
            let data = unsafe { std::slice::from_raw_parts(src as *const u8, bytes) };
            let put = match &link {
                Some(link) => {
                    crate::mirror::one_sided::put(link, &sh, me, peer, at, data, sig, limit)
                }
                None => sh.put_from(me, peer, at, data, sig, limit),
            };
            if let Err(e) = put {
                sh.fail(me, e);
            }
        })
    }

    /// [`oxccl_core::OneSided::signal`] of the mock.
    pub(crate) fn signal_rank(
        &self,
        peer: u32,
        signal: u32,
        ctx: u32,
        stream: &MockStream,
    ) -> Result<()> {
        check::signal(&self.ctx(), &self.signals, peer, signal, ctx)?;
        lock(&self.rank_state().life).cycle.ensure_ready("signal")?;
        let (sh, me) = (Arc::clone(self.sh()), self.rk());
        let link = sh.link.get().cloned();
        stream.host_fn(move || match &link {
            Some(link) => {
                if let Err(e) = crate::mirror::one_sided::signal(link, &sh, me, peer, (signal, ctx))
                {
                    sh.fail(me, e);
                }
            }
            None => sh.raise(peer, me, signal, ctx),
        })
    }

    /// [`oxccl_core::OneSided::wait_signal`] of the mock.
    pub(crate) fn wait_signal_rank(&self, waits: &[SignalWait], stream: &MockStream) -> Result<()> {
        check::wait_signal(&self.ctx(), &self.signals, waits)?;
        lock(&self.rank_state().life)
            .cycle
            .ensure_ready("wait_signal")?;
        let (sh, me, limit) = (Arc::clone(self.sh()), self.rk(), self.init_timeout);
        let link = sh.link.get().cloned();
        let waits = waits.to_vec();
        stream.host_fn(move || {
            let taken = match &link {
                Some(link) => crate::mirror::one_sided::wait(link, &sh, me, &waits, limit),
                None => sh.take(me, &waits, limit),
            };
            if let Err(e) = taken.and_then(|puts| sh.write_deliveries(me, puts)) {
                sh.fail(me, e);
            }
        })
    }
}
