//! One-sided operations on the mock, ranks in one process: a put copies into the peer's window
//! (the one with the same handle: windows are collective, registered in the same order on
//! every rank) and raises its signal; a signal alone raises it; a wait holds the stream until
//! the signals came and consumes them, bounded by the communicator's init limit, and ends
//! with a remote error when the rank or a peer it waits for is gone. All run on the stream,
//! ordered after what was queued before, as NCCL's. Across processes the peer's memory is not
//! here: refused.

use crate::comm::MockComm;
use crate::shared::CommShared;
use crate::stream::MockStream;
use crate::sync::{lock, wait_for, TICK};
use oxccl_core::signal::{PutSignal, SignalWait};
use oxccl_core::{check, text, Error, Result};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Refuses a communicator spanning processes.
fn one_process(comm: &MockComm) -> Result<()> {
    if crate::mirror::spans::spans(comm.sh()) {
        return Err(Error::invalid(
            "comm",
            format_args!(
                "a mock communicator within one process: its one-sided operations write the peer's host memory directly"
            ),
        ));
    }
    Ok(())
}

impl CommShared {
    /// The address of rank `peer`'s window `raw` of at least `bytes`: NCCL registers a window
    /// collectively, so a peer that has not registered it yet is waited for (up to `limit`),
    /// as NCCL's registration would have held this rank.
    fn peer_window(&self, peer: u32, raw: usize, bytes: usize, limit: Duration) -> Result<usize> {
        let start = Instant::now();
        loop {
            let found = lock(&self.rank(peer).windows)
                .0
                .values()
                .find(|w| w.raw == raw)
                .map(|w| (w.addr, w.bytes));
            match found {
                Some((addr, len)) if bytes <= len => return Ok(addr),
                Some((_, len)) => {
                    return Err(Error::Mismatch {
                        what: "window",
                        detail: text!("a put of {bytes} bytes into rank {peer}'s window of {len}"),
                    })
                }
                None => {}
            }
            if lock(&self.hub)
                .dead
                .get(peer as usize)
                .is_some_and(Option::is_some)
            {
                return Err(Error::Remote {
                    detail: text!("rank {peer} is gone before it registered window {raw:#x}"),
                });
            }
            if start.elapsed() >= limit {
                return Err(Error::Timeout {
                    what: text!("rank {peer} registering window {raw:#x}"),
                    after_ms: u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX),
                });
            }
            std::thread::sleep(TICK.min(Duration::from_millis(1)));
        }
    }

    /// Raises signal (`from`, `signal`, `ctx`) on rank `to`.
    fn raise(&self, to: u32, from: u32, signal: u32, ctx: u32) {
        *lock(&self.hub)
            .signals
            .entry((to, from, signal, ctx))
            .or_default() += 1;
        self.cv.notify_all();
    }

    /// Waits (up to `limit`) until rank `me` has every signal of `waits`, and consumes them.
    fn take(&self, me: u32, waits: &[SignalWait], limit: Duration) -> Result<()> {
        let start = Instant::now();
        let mut hub = lock(&self.hub);
        loop {
            let have = |w: &SignalWait| {
                hub.signals
                    .get(&(me, w.peer, w.signal, w.ctx))
                    .copied()
                    .unwrap_or(0)
            };
            if waits.iter().all(|w| have(w) >= u64::from(w.count)) {
                for w in waits {
                    if let Some(n) = hub.signals.get_mut(&(me, w.peer, w.signal, w.ctx)) {
                        *n -= u64::from(w.count);
                    }
                }
                return Ok(());
            }
            let gone = std::iter::once(me)
                .chain(waits.iter().map(|w| w.peer))
                .find(|r| hub.dead.get(*r as usize).is_some_and(Option::is_some));
            if let Some(r) = gone {
                return Err(Error::Remote {
                    detail: text!("rank {me} waited for signals from rank {r}, which is gone"),
                });
            }
            let waited = start.elapsed();
            if waited >= limit {
                return Err(Error::Timeout {
                    what: text!("rank {me} waiting for signals {waits:?}"),
                    after_ms: u64::try_from(waited.as_millis()).unwrap_or(u64::MAX),
                });
            }
            hub = wait_for(&self.cv, hub, TICK.min(limit - waited));
        }
    }
}

impl MockComm {
    /// [`oxccl_core::Communicator::put_signal`] of the mock (the call lock held).
    ///
    /// # Safety
    /// `p.send` valid host memory of its length until the stream passed the put.
    pub(crate) unsafe fn put_signal_rank(&self, p: &PutSignal, stream: &MockStream) -> Result<()> {
        check::put_signal(&self.ctx(), &self.signals, p)?;
        if !lock(&self.rank_state().windows)
            .0
            .values()
            .any(|w| *w == p.window)
        {
            return Err(Error::invalid(
                "window",
                format_args!(
                    "a window this communicator registered, {:#x} ({} bytes) is not",
                    p.window.addr, p.window.bytes
                ),
            ));
        }
        let bytes = p.send.len * p.dtype.size();
        let in_window = lock(&self.rank_state().windows).0.values().any(|w| {
            p.send.addr >= w.addr && p.send.addr.saturating_add(bytes) <= w.addr + w.bytes
        });
        if !in_window {
            // NCCL refuses it ("srcWinHost is not in a valid symmetric window").
            return Err(Error::invalid(
                "send",
                format_args!(
                    "data in one of this rank's symmetric windows (NCCL reads a put's data through its window), got {bytes} bytes at {:#x} in none",
                    p.send.addr
                ),
            ));
        }
        one_process(self)?;
        lock(&self.rank_state().life)
            .cycle
            .ensure_ready("put_signal")?;
        let (sh, me) = (Arc::clone(self.sh()), self.rk());
        let (peer, raw, offset) = (p.peer, p.window.raw, p.offset);
        let src = p.send.addr;
        let (signal, ctx) = (p.signal, p.ctx);
        let limit = self.init_timeout;
        stream.host_fn(move || {
            let dst = match sh.peer_window(peer, raw, offset + bytes, limit) {
                Ok(w) => w + offset,
                Err(e) => {
                    sh.fail(me, e);
                    return;
                }
            };
            if bytes > 0 {
                // SAFETY: `src` is valid for `bytes` until the stream passed this function
                // (the caller's promise); `dst..dst + bytes` lies within the peer's window
                // (found above), host memory the peer registered and keeps while registered.
                unsafe {
                    std::ptr::copy(src as *const u8, dst as *mut u8, bytes);
                }
            }
            sh.raise(peer, me, signal, ctx);
        })
    }

    /// [`oxccl_core::Communicator::signal`] of the mock.
    pub(crate) fn signal_rank(
        &self,
        peer: u32,
        signal: u32,
        ctx: u32,
        stream: &MockStream,
    ) -> Result<()> {
        check::signal(&self.ctx(), &self.signals, peer, signal, ctx)?;
        one_process(self)?;
        lock(&self.rank_state().life).cycle.ensure_ready("signal")?;
        let (sh, me) = (Arc::clone(self.sh()), self.rk());
        stream.host_fn(move || sh.raise(peer, me, signal, ctx))
    }

    /// [`oxccl_core::Communicator::wait_signal`] of the mock.
    pub(crate) fn wait_signal_rank(&self, waits: &[SignalWait], stream: &MockStream) -> Result<()> {
        check::wait_signal(&self.ctx(), &self.signals, waits)?;
        one_process(self)?;
        lock(&self.rank_state().life)
            .cycle
            .ensure_ready("wait_signal")?;
        let (sh, me, limit) = (Arc::clone(self.sh()), self.rk(), self.init_timeout);
        let waits = waits.to_vec();
        stream.host_fn(move || {
            if let Err(e) = sh.take(me, &waits, limit) {
                sh.fail(me, e);
            }
        })
    }
}
