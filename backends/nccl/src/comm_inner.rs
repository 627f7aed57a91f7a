//! What every handle to one NCCL communicator shares (the communicator itself, its abort
//! handles, its streams' captures, its graphs, its reduction operators): the raw handle, the
//! lifecycle, the call locks, the registrations.

use crate::graph_refs::{Counted, GraphCount};
use crate::peer::PeerMemory;
use crate::registry::Registry;
use cudarc::driver::{CudaContext, CudaSlice};
use oxccl_core::one_sided::SignalLimits;
use oxccl_core::state::lifecycle::Lifecycle;
use oxccl_core::{text, CheckCtx, CommState, Device, FeatureSet, Progress, Result};
use oxccl_loader::{Library, RawComm};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// What every handle to one NCCL communicator shares. The raw communicator is released exactly
/// once: by abort, by destroy, or when the last handle drops.
pub(crate) struct CommInner {
    pub(crate) lib: Arc<Library>,
    pub(crate) raw: RawComm,
    pub(crate) rank: u32,
    pub(crate) size: u32,
    pub(crate) device: Device,
    pub(crate) ctx: Arc<CudaContext>,
    pub(crate) life: spin::Mutex<Lifecycle>,
    /// Mirrors `life.state() == Ready` so the hot path checks one atomic instead of a lock.
    pub(crate) ready: AtomicBool,
    pub(crate) registry: Registry,
    pub(crate) nonblocking: bool,
    /// The signal indices and contexts one-sided calls may name (see [`SignalLimits`]).
    pub(crate) signals: SignalLimits,
    pub(crate) settings: Settings,
    pub(crate) scratch: OnceLock<CudaSlice<f32>>,
    /// Set once by whichever path releases the raw communicator (see `release`).
    pub(crate) released: AtomicBool,
    /// Serializes every call that reaches NCCL on this communicator except abort and poll
    /// (NCCL forbids overlapping calls on one communicator): issue, split, shrink, finalize,
    /// registration, windows. Uncontended it costs one atomic exchange each way.
    calls: std::sync::Mutex<()>,
    /// Held shared by the calls that may run during an abort from another thread (poll, a
    /// premul-sum op's destroy) and exclusively by [`CommInner::release`], so the raw
    /// communicator is never freed while one of them uses it.
    pub(crate) raw_use: spin::RwLock<()>,
    /// The live graphs (and open captures) holding operations of this communicator: while
    /// any does, NCCL's release waits for them, so it runs on a detached thread.
    pub(crate) graphs: GraphCount,
    /// The peer memory and kernels of a group on one node, once set up (see `peer`). Read by
    /// each issue (under the call lock) and by abort; taken out by the release.
    pub(crate) peer: spin::RwLock<Option<PeerMemory>>,
    /// The grow id this rank made, while unspent: it is the grow's root (see `reshape`).
    pub(crate) grow_root: spin::Mutex<Option<oxccl_core::UniqueId>>,
}

impl Counted for CommInner {
    fn graph_count(&self) -> &GraphCount {
        &self.graphs
    }
}

// SAFETY: `raw` is an opaque NCCL handle. NCCL allows a communicator to be used from any thread
// (one at a time for operations, which the unsafe `issue` contract and the safe `Comm` enforce),
// and `ncclCommAbort` / `ncclCommGetAsyncError` from any thread at any time.
unsafe impl Send for CommInner {}
// SAFETY: as above; every mutable field is behind a lock or an atomic.
unsafe impl Sync for CommInner {}

impl CommInner {
    /// The shared state of a communicator NCCL made: `Initializing` while a nonblocking init
    /// runs, `Ready` otherwise.
    pub(crate) fn new(
        lib: Arc<Library>,
        ctx: Arc<CudaContext>,
        r: Raw,
        settings: Settings,
    ) -> CommInner {
        let life = if r.initializing {
            Lifecycle::initializing()
        } else {
            Lifecycle::ready()
        };
        CommInner {
            lib,
            raw: r.raw,
            rank: r.rank,
            size: r.size,
            device: r.device,
            ctx,
            ready: AtomicBool::new(life.state() == CommState::Ready),
            life: spin::Mutex::new(life),
            registry: Registry::default(),
            nonblocking: r.nonblocking,
            signals: r.signals,
            settings,
            scratch: OnceLock::new(),
            released: AtomicBool::new(false),
            calls: std::sync::Mutex::new(()),
            raw_use: spin::RwLock::new(()),
            graphs: GraphCount::default(),
            peer: spin::RwLock::new(None),
            grow_root: spin::Mutex::new(None),
        }
    }

    pub(crate) fn is_released(&self) -> bool {
        self.released.load(Ordering::Acquire)
    }

    /// Held while the raw communicator is used by a call that an abort may race with: while
    /// it is held and [`CommInner::is_released`] is false, the communicator stays live.
    pub(crate) fn use_raw(&self) -> spin::RwLockReadGuard<'_, ()> {
        self.raw_use.read()
    }

    /// [`CommInner::use_raw`] for a look that has nothing to do once the communicator is
    /// released: `None` at once when it is released or being released (a destroy can hold
    /// `raw_use` for as long as NCCL takes to free the communicator's memory).
    pub(crate) fn use_unreleased(&self) -> Option<spin::RwLockReadGuard<'_, ()>> {
        read_unless_released(&self.raw_use, &self.released)
    }

    /// The call lock (see `calls`); a poisoned lock only means another call panicked, and
    /// guards no data.
    pub(crate) fn serial(&self) -> std::sync::MutexGuard<'_, ()> {
        self.calls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Runs a lifecycle transition and refreshes the hot-path mirror.
    pub(crate) fn transition<T>(&self, f: impl FnOnce(&mut Lifecycle) -> T) -> T {
        let mut life = self.life.lock();
        let out = f(&mut life);
        self.ready
            .store(life.state() == CommState::Ready, Ordering::Release);
        out
    }

    /// What the argument checks need of this communicator: its place and features.
    pub(crate) fn check_ctx(&self) -> CheckCtx<'_> {
        CheckCtx {
            rank: self.rank,
            size: self.size,
            features: &self.settings.features,
        }
    }

    /// `Ok` when ready; else the lifecycle's refusal of `attempted`.
    pub(crate) fn ensure_ready(&self, attempted: &'static str) -> Result<()> {
        if self.ready.load(Ordering::Acquire) {
            return Ok(());
        }
        self.life.lock().ensure_ready(attempted)
    }

    /// The lifecycle's state; a ready communicator answers from the hot-path mirror, so a
    /// look (the watchdog's, per work) takes no lock the issuing thread's line shares.
    pub(crate) fn state(&self) -> CommState {
        if self.ready.load(Ordering::Acquire) {
            return CommState::Ready;
        }
        self.life.lock().state()
    }

    /// The asynchronous error, and the end of a nonblocking init (see [`Communicator::poll`]).
    pub(crate) fn poll(&self) -> Result<Progress> {
        if let Some(e) = self.peer.read().as_ref().and_then(PeerMemory::failure) {
            // A kernel gave up (a peer never arrived, or the abort): the group's epochs are
            // out of step from here, as after an NCCL failure.
            if !self.life.lock().state().is_dead() {
                self.transition(|l| l.fail(&text!("{e}")));
            }
            return Err(e);
        }
        let polled = {
            let Some(_live) = self.use_unreleased() else {
                return self
                    .life
                    .lock()
                    .ensure_ready("poll")
                    .map(|_| Progress::Done);
            };
            if !self.ready.load(Ordering::Acquire) {
                let life = self.life.lock();
                if life.state() == CommState::Revoked {
                    // Quiescent after a revoke: NCCL's poll says success from here.
                    return Ok(Progress::Done);
                }
                if life.state().is_dead() {
                    return life.ensure_ready("poll").map(|_| Progress::Done);
                }
            }
            poll_raw(&self.lib, self.raw)
        };
        match polled {
            // Ready stays ready: only an init in progress ends here.
            Ok(Progress::Done) if self.ready.load(Ordering::Acquire) => Ok(Progress::Done),
            Ok(Progress::Done) => {
                self.transition(|l| {
                    if l.state() == CommState::Initializing {
                        l.init_done()
                    } else {
                        Ok(())
                    }
                })?;
                Ok(Progress::Done)
            }
            Ok(Progress::InProgress) => Ok(Progress::InProgress),
            Err(e) => {
                self.transition(|l| l.fail(&text!("{e}")));
                Err(e)
            }
        }
    }
}

/// A read guard of `lock` while `released` is unset; `None` once it is set, without waiting for
/// a writer that holds `lock` (the release sets `released` first thing under it).
fn read_unless_released<'a>(
    lock: &'a spin::RwLock<()>,
    released: &AtomicBool,
) -> Option<spin::RwLockReadGuard<'a, ()>> {
    loop {
        if let Some(g) = lock.try_read() {
            return (!released.load(Ordering::Acquire)).then_some(g);
        }
        if released.load(Ordering::Acquire) {
            return None;
        }
        std::hint::spin_loop();
    }
}

/// Parameters of a communicator about to be wrapped.
pub(crate) struct Raw {
    pub(crate) raw: RawComm,
    pub(crate) rank: u32,
    pub(crate) size: u32,
    pub(crate) device: Device,
    pub(crate) nonblocking: bool,
    pub(crate) initializing: bool,
    /// The signals and contexts its config gave it.
    pub(crate) signals: SignalLimits,
}

/// What a backend hands every communicator it makes (and a parent hands its children).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Settings {
    /// How long nonblocking calls may stay in progress.
    pub(crate) timeout: Duration,
    /// The features communicators may use: the library's, less any the user hid.
    pub(crate) features: FeatureSet,
}

/// `ncclCommGetAsyncError` as progress: Done, InProgress, or the communicator's error.
pub(crate) fn poll_raw(lib: &Library, raw: RawComm) -> Result<Progress> {
    // SAFETY: callers pass a live communicator.
    let async_code = unsafe { crate::ffi::comm_get_async_error(lib, raw)? };
    lib.progress(async_code, raw)
}

#[cfg(test)]
mod tests {
    use super::read_unless_released;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::mpsc;
    use std::time::Duration;

    #[test]
    fn a_look_is_let_in_only_while_unreleased() {
        let lock = spin::RwLock::new(());
        let released = AtomicBool::new(false);
        assert!(read_unless_released(&lock, &released).is_some());
        released.store(true, Ordering::Release);
        assert!(read_unless_released(&lock, &released).is_none());
    }

    #[test]
    fn a_look_does_not_wait_out_a_release_in_progress() {
        let lock = spin::RwLock::new(());
        let released = AtomicBool::new(false);
        let (tx, rx) = mpsc::channel();
        std::thread::scope(|s| {
            // The release: holds the lock, marks the communicator released, and lets go only
            // once the look has answered (a look that waited for it would never answer).
            let held = lock.write();
            released.store(true, Ordering::Release);
            s.spawn(|| {
                let answer = read_unless_released(&lock, &released).is_some();
                tx.send(answer).unwrap();
            });
            let answer = rx.recv_timeout(Duration::from_secs(30));
            drop(held);
            assert_eq!(
                answer,
                Ok(false),
                "the look did not answer at once while the release held the lock"
            );
        });
    }
}
