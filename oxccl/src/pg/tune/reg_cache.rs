//! The registrations and windows of one communicator's buffers, by allocation, and what the
//! communicator did with buffers ([`TunedStats`]).

use super::super::op_facts::OpFacts;
use crate::buffer::CommMem;
use oxccl_core::graph_buffers::GraphBuffers;
use oxccl_core::Windows;
use oxccl_core::{text, CaptureError, Communicator, Error, Feature, RegHandle, Result};
use oxccl_rules::tune::RegMode;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// What a group's communicator did with buffers (see [`ProcessGroup::tuned_stats`](crate::pg::ProcessGroup::tuned_stats)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TunedStats {
    /// Operations issued in each mode, by [`RegMode::level`] (plain, registered, window).
    pub ops: [u64; 3],
    /// Allocations registered with the communicator now.
    pub registered: usize,
    /// Allocations in a symmetric window now.
    pub windows: usize,
}

/// The registrations of one communicator, by allocation id.
#[derive(Default)]
#[repr(C)]
pub(crate) struct RegCache {
    /// Whether any allocation is in a window now (read without the lock at every operation:
    /// such groups check every operation's buffers, see the module's documentation). First,
    /// so it lies beside what precedes the cache in its owner.
    any_window: AtomicBool,
    state: Mutex<CacheState>,
}

#[derive(Default)]
pub(crate) struct CacheState {
    pub(crate) bufs: HashMap<u64, Cached>,
    pub(crate) ops: [u64; 3],
    /// Windows made so far: numbers each window in the order it was made, which is the same
    /// on every rank (a window is made collectively), so ranks release them in one order.
    pub(crate) windows_made: u64,
    /// Calls of [`ProcessGroup::release_windows`] so far (numbers their store keys).
    pub(crate) releases: u64,
    /// Allocations in a window now.
    pub(crate) live_windows: usize,
}

pub(crate) struct Cached {
    /// Keeps the allocation alive while registered.
    pub(crate) mem: CommMem,
    pub(crate) local: Option<RegHandle>,
    /// The window and its number (see [`CacheState::windows_made`]).
    pub(crate) window: Option<(RegHandle, u64)>,
}

impl Cached {
    /// Whether only the cache holds the allocation: the program dropped every buffer of it
    /// and no graph ([`super::PgGraph`]) pins it.
    pub(crate) fn orphan(&self) -> bool {
        Arc::strong_count(&self.mem.keep) == 1
    }
}

impl RegCache {
    /// The bytes at its start an operation reads (the window flag).
    #[cfg(test)]
    pub(crate) const HOT_BYTES: usize = std::mem::offset_of!(RegCache, any_window) + 1;

    /// The state, locked; whether it has windows is noted when the lock is let go.
    pub(crate) fn lock(&self) -> CacheGuard<'_> {
        CacheGuard {
            state: self.state.lock().unwrap_or_else(PoisonError::into_inner),
            any_window: &self.any_window,
        }
    }

    /// Whether any allocation is in a window (as of the last lock let go).
    #[inline]
    pub(crate) fn has_windows(&self) -> bool {
        self.any_window.load(Ordering::Relaxed)
    }

    pub(crate) fn stats(&self) -> TunedStats {
        let st = self.lock();
        TunedStats {
            ops: st.ops,
            registered: st.bufs.values().filter(|c| c.local.is_some()).count(),
            windows: st.bufs.values().filter(|c| c.window.is_some()).count(),
        }
    }

    /// The registered allocations a captured graph uses (those overlapping `regions`): the
    /// graph keeps them ([`CommMem::keep`]), so neither the sweep nor
    /// [`ProcessGroup::release_windows`] releases them while it can be launched.
    pub(crate) fn pins(&self, regions: &GraphBuffers) -> Vec<CommMem> {
        let st = self.lock();
        st.bufs
            .values()
            .filter(|c| c.local.is_some() || c.window.is_some())
            .filter(|c| regions.overlaps(c.mem.addr, c.mem.bytes))
            .map(|c| c.mem.clone())
            .collect()
    }
}

/// The locked state of a [`RegCache`]: letting it go notes whether windows are left, so no
/// change can forget to.
pub(crate) struct CacheGuard<'a> {
    state: std::sync::MutexGuard<'a, CacheState>,
    any_window: &'a AtomicBool,
}

impl std::ops::Deref for CacheGuard<'_> {
    type Target = CacheState;
    fn deref(&self) -> &CacheState {
        &self.state
    }
}

impl std::ops::DerefMut for CacheGuard<'_> {
    fn deref_mut(&mut self) -> &mut CacheState {
        &mut self.state
    }
}

impl Drop for CacheGuard<'_> {
    fn drop(&mut self) {
        self.any_window
            .store(self.state.live_windows > 0, Ordering::Relaxed);
    }
}

impl CacheState {
    /// Releases the local registrations of allocations only the cache still holds, once
    /// their work has run (windows stay: see the module's documentation).
    pub(crate) fn sweep<C: Communicator>(&mut self, comm: &C) {
        self.bufs.retain(|_, c| {
            if !c.orphan() || c.window.is_some() || !c.mem.keep.idle() {
                return true;
            }
            if let Some(h) = c.local.take() {
                if let Err(e) = comm.deregister(h) {
                    log::debug!("releasing the registration of a dropped buffer: {e}");
                }
            }
            false
        });
    }

    /// Makes the registration `mode` needs for `m`, if it is not there yet (a window is
    /// collective: every rank reaches this at the same point). `timeout` bounds the wait for
    /// the work on a locally registered buffer that goes into a window.
    pub(crate) fn ensure<C: Communicator + Windows>(
        &mut self,
        comm: &C,
        m: &CommMem,
        mode: RegMode,
        timeout: Duration,
    ) -> Result<()> {
        match mode {
            RegMode::Plain => {}
            RegMode::Registered => {
                comm.features().require(Feature::BufferRegistration)?;
                let c = self.bufs.entry(m.id).or_insert_with(|| cached(m));
                // A window serves as a registration: nothing more to do for it.
                if c.local.is_none() && c.window.is_none() {
                    c.local = Some(comm.register(m.addr, m.bytes)?);
                }
            }
            RegMode::Window => {
                comm.features().require(Feature::WindowRegistration)?;
                let c = self.bufs.entry(m.id).or_insert_with(|| cached(m));
                if c.window.is_none() {
                    // One kind of registration per buffer: a local one goes first (not
                    // collective), once no work uses it, so NCCL never sees both. Waited
                    // for, on every rank alike: a rank whose buffer happened to be busy
                    // must not end up with both kinds while its peers have one.
                    if let Some(h) = c.local.take() {
                        if let Err(e) = wait_idle(&c.mem, timeout) {
                            c.local = Some(h);
                            return Err(e);
                        }
                        comm.deregister(h)?;
                    }
                    let h = comm.register_window(m.addr, m.bytes)?;
                    self.windows_made += 1;
                    self.live_windows += 1;
                    c.window = Some((h, self.windows_made));
                }
            }
        }
        Ok(())
    }

    /// The window allocation `id` is in, if it is.
    pub(crate) fn window_of(&self, id: u64) -> Option<RegHandle> {
        self.bufs.get(&id).and_then(|c| c.window).map(|(h, _)| h)
    }

    /// Whether allocation `id` is in a window.
    pub(crate) fn in_window(&self, id: u64) -> bool {
        self.bufs.get(&id).is_some_and(|c| c.window.is_some())
    }

    /// Whether `mems` mix buffers in windows with others (an absent or plain one counts as
    /// outside).
    pub(crate) fn mixed(&self, mems: &[Option<CommMem>]) -> bool {
        let windowed = |m: &Option<CommMem>| m.as_ref().is_some_and(|m| self.in_window(m.id));
        mems.iter().any(windowed) && !mems.iter().all(windowed)
    }

    /// The mode of an operation on `mems` whose table chose `chosen`: window mode when some
    /// of its buffers are in windows and all can be (see the module's documentation). When
    /// one cannot be, `chosen` stands and the backend refuses the mix at issue.
    pub(crate) fn one_kind(&self, mems: &[Option<CommMem>], chosen: RegMode) -> RegMode {
        if self.mixed(mems) && mems.iter().all(Option::is_some) {
            RegMode::Window
        } else {
            chosen
        }
    }

    /// Inside a capture nothing is registered (a host call; collective for windows): `Ok`
    /// when `m` already has what `mode` needs, else the refusal saying how to prepare it.
    pub(crate) fn check_ready(
        &self,
        m: &CommMem,
        mode: RegMode,
        op: &OpFacts,
        bytes: u64,
    ) -> Result<()> {
        let c = self.bufs.get(&m.id);
        let ready = match mode {
            RegMode::Plain => true,
            RegMode::Registered => c.is_some_and(|c| c.local.is_some() || c.window.is_some()),
            RegMode::Window => c.is_some_and(|c| c.window.is_some()),
        };
        if ready {
            return Ok(());
        }
        // Kept short (errors hold 192 bytes inline): the fix comes before anything cut.
        let state = match mode {
            RegMode::Window => "in a window",
            _ => "registered",
        };
        Err(CaptureError::Unsupported.error(format_args!(
            "{} of {bytes} B needs buffer {:#x} {state} (tune table); a capture cannot \
             register: call ProcessGroup::register_buffer before it, or run the ops once first",
            op.kind.name(),
            m.addr,
        )))
    }
}

/// Waits until no work issued on `m` is pending, up to `timeout` (a [`Error::Timeout`]
/// naming the buffer past it): what must hold before a registration of it is released.
pub(crate) fn wait_idle(m: &CommMem, timeout: Duration) -> Result<()> {
    let began = Instant::now();
    let mut polls = 0u32;
    while !m.keep.idle() {
        if began.elapsed() >= timeout {
            return Err(Error::Timeout {
                what: text!("the work on buffer {:#x} ({} B)", m.addr, m.bytes),
                after_ms: timeout.as_millis().min(u128::from(u64::MAX)) as u64,
            });
        }
        polls = polls.saturating_add(1);
        if polls < 64 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    Ok(())
}

pub(crate) fn cached(m: &CommMem) -> Cached {
    Cached {
        mem: m.clone(),
        local: None,
        window: None,
    }
}
