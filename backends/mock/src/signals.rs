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

use crate::comm::MockComm;
use crate::shared::{CommShared, Hub};
use crate::stream::MockStream;
use crate::sync::{lock, wait_for, TICK};
use oxccl_core::signal::{PutSignal, SignalWait};
use oxccl_core::{check, text, Error, Result};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A put into a window of a rank in another process, kept on the host until that rank's wait
/// takes it: the window (its handle, the same on every rank), where in it, and the data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Delivery {
    pub window: usize,
    pub offset: usize,
    pub data: Vec<u8>,
}

/// The most a put carries across processes (its data travels in one message).
pub(crate) const MAX_PUT_ACROSS: usize = 32 << 20;

/// Raises signal (`from`, `signal`, `ctx`) on rank `to` in `hub`.
fn raise_in(hub: &mut Hub, to: u32, from: u32, signal: u32, ctx: u32) {
    *hub.signals.entry((to, from, signal, ctx)).or_default() += 1;
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
    pub(crate) fn raise(&self, to: u32, from: u32, signal: u32, ctx: u32) {
        raise_in(&mut lock(&self.hub), to, from, signal, ctx);
        self.cv.notify_all();
    }

    /// Whether rank `rank` lives in this process.
    fn here(&self, rank: u32) -> bool {
        lock(&self.pids)
            .get(rank as usize)
            .is_none_or(|p| *p == std::process::id())
    }

    /// A put of `data` from rank `from` into rank `to`'s window `raw` at byte `offset`, then
    /// signal (`signal`, `ctx`) raised on `to`: written into the window where `to` lives in
    /// this process (waiting up to `limit` for its registration), else kept for `to`'s wait.
    pub(crate) fn put_from(
        &self,
        from: u32,
        to: u32,
        (raw, offset): (usize, usize),
        data: &[u8],
        (signal, ctx): (u32, u32),
        limit: Duration,
    ) -> Result<()> {
        if !self.here(to) {
            let mut hub = lock(&self.hub);
            hub.deliveries.entry(to).or_default().push(Delivery {
                window: raw,
                offset,
                data: data.to_vec(),
            });
            raise_in(&mut hub, to, from, signal, ctx);
            drop(hub);
            self.cv.notify_all();
            return Ok(());
        }
        let dst = self.peer_window(to, raw, offset + data.len(), limit)? + offset;
        if !data.is_empty() {
            // SAFETY: `dst..dst + len` lies within the peer's window (found above), host
            // memory the peer registered and keeps while registered; `data` is other memory.
            unsafe {
                std::ptr::copy(data.as_ptr(), dst as *mut u8, data.len());
            }
        }
        self.raise(to, from, signal, ctx);
        Ok(())
    }

    /// Writes puts another process's rank made into rank `me`'s windows (its wait took them
    /// from the host); a put outside every window of `me` is a mismatch of the window sizes.
    pub(crate) fn write_deliveries(&self, me: u32, puts: Vec<Delivery>) -> Result<()> {
        let wins = lock(&self.rank(me).windows);
        for d in puts {
            let w = wins.0.values().find(|w| w.raw == d.window);
            let Some(w) = w.filter(|w| d.offset.saturating_add(d.data.len()) <= w.bytes) else {
                return Err(Error::Mismatch {
                    what: "window",
                    detail: text!(
                        "a put of {} bytes at byte {} into rank {me}'s window {:#x}, which is smaller or absent",
                        d.data.len(),
                        d.offset,
                        d.window
                    ),
                });
            };
            // SAFETY: within the window (checked above), host memory this rank registered and
            // keeps while registered; the wait that brought the data holds the stream.
            unsafe {
                std::ptr::copy(
                    d.data.as_ptr(),
                    (w.addr + d.offset) as *mut u8,
                    d.data.len(),
                );
            }
        }
        Ok(())
    }

    /// Waits (up to `limit`) until rank `me` has every signal of `waits`, consumes them, and
    /// returns the puts kept for `me` (rank of another process; none for a rank here).
    pub(crate) fn take(
        &self,
        me: u32,
        waits: &[SignalWait],
        limit: Duration,
    ) -> Result<Vec<Delivery>> {
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
                return Ok(hub.deliveries.remove(&me).unwrap_or_default());
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

    /// [`oxccl_core::Communicator::signal`] of the mock.
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

    /// [`oxccl_core::Communicator::wait_signal`] of the mock.
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
