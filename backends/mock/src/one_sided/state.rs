//! The one-sided state of a mock communicator: the signals raised and not yet consumed, the
//! puts kept for ranks of other processes, and the steps every path shares (a put into a
//! window, a raise, a wait that consumes signals). The calls themselves are the parent
//! module's.

use crate::delivery::Delivery;
use crate::shared::{CommShared, Hub};
use crate::sync::{lock, wait_for, TICK};
use oxccl_core::one_sided::SignalWait;
use oxccl_core::{text, Error, Result};
use std::time::{Duration, Instant};

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
