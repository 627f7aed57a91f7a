//! Releasing one rank's NCCL communicator exactly once: destroy after a clean finalize, abort
//! otherwise, on the caller's thread, on a detached thread while live CUDA graphs hold its
//! operations, or in the background when a time limit ran out (`Aborting`, then `Aborted`).

use crate::comm_inner::CommInner;
use crate::graph_refs;
use oxccl_core::CommState;
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl CommInner {
    /// Claims the release (the caller holds `raw_use` exclusively): `true` for the one caller
    /// that releases; from then on poll and op destroys no longer touch `raw`.
    fn claim(&self) -> bool {
        !self.released.swap(true, Ordering::AcqRel)
    }

    /// Releases the raw communicator once: destroy after a clean finalize, abort otherwise
    /// (abort never waits for peers, so this never hangs). Registrations go first.
    ///
    /// While live CUDA graphs hold operations of this communicator, NCCL's release waits until
    /// the last of them is destroyed, so it runs on a detached thread (`oxccl-abort`) and this
    /// returns at once: an abort sets NCCL's abort flag (waking peers) before that wait, and
    /// the thread ends when the last graph is dropped. The communicator counts as released
    /// from here on either way (poll and op destroys no longer touch it).
    pub(crate) fn release(self: &Arc<Self>, destroy: bool) {
        if !destroy {
            // Kernels waiting for peers give up now, even while graphs hold the release.
            if let Some(g) = self.peer.read().as_ref() {
                g.raise_abort();
            }
        }
        {
            let _excl = self.raw_use.write();
            if !self.claim() {
                return;
            }
            if graph_refs::release_inline(self.graphs.live()) {
                self.release_raw(destroy);
                return;
            }
        }
        log::info!(
            "rank {}: live CUDA graphs hold operations of this NCCL communicator: it is {} on \
             a detached thread, which ends when the last of them is dropped",
            self.rank,
            if destroy { "destroyed" } else { "aborted" }
        );
        let me = Arc::clone(self);
        graph_refs::detach(self.rank, move || me.release_raw(destroy));
    }

    /// The release itself, once `released` is set by the caller (so nothing else uses `raw`
    /// any more: poll and op destroys check it under `raw_use`).
    pub(crate) fn release_raw(&self, destroy: bool) {
        // Peer memory last: its release waits for this rank's streams (its kernels end, or
        // give up on the abort flag raised here), where an NCCL operation waiting for a peer
        // that died may sit before a kernel until NCCL's abort below stops it.
        let peer = self.peer.write().take();
        if let (Some(g), false) = (&peer, destroy) {
            g.raise_abort();
        }
        // An abort never waits for peers: the collective window deregistrations are left to
        // NCCL's abort (on a blocking communicator ncclCommWindowDeregister waits for the
        // peers' matching calls, which a failed or departed peer never makes).
        self.registry.release_all(&self.lib, self.raw, destroy);
        let api = self.lib.api();
        // SAFETY: `raw` is a live communicator: the caller set `released` (its swap saw it
        // unset), so this runs once; no poll or op destroy uses it (they check `released`
        // under `raw_use`, which the caller held exclusively while setting it).
        let code = unsafe {
            if destroy {
                crate::ffi::comm_destroy(api, self.raw)
            } else {
                crate::ffi::comm_abort(api, self.raw)
            }
        };
        if let Some(code) = code {
            if code != 0 {
                log::warn!(
                    "releasing NCCL communicator (rank {}): code {code}",
                    self.rank
                );
            }
        }
        drop(peer);
    }

    /// Aborts: the state is Aborted at once for every handle, then the release (see
    /// [`CommInner::release`]: with live graphs the library's release finishes when the last
    /// graph is dropped). An abort already running in the background is left to finish.
    pub(crate) fn abort(self: &Arc<Self>, reason: &str) {
        self.transition(|l| l.abort(reason));
        self.release(false);
    }

    /// Aborts without waiting for NCCL's release (see
    /// [`oxccl_core::CommAbort::abort_in_background`]): `Aborting` at once, the release on a
    /// thread named `oxccl-abort`, `Aborted` when it returns. The thread holds the shared
    /// state, so dropping every handle meanwhile neither waits for it nor frees the
    /// communicator under it; a process that exits meanwhile simply ends it.
    pub(crate) fn abort_in_background(self: &Arc<Self>, reason: &str) {
        if !self.transition(|l| l.abort_begin(reason)) {
            // Aborted or destroyed already: that released it, or is releasing it.
            return;
        }
        let claimed = {
            let _excl = self.raw_use.write();
            self.claim()
        };
        if !claimed {
            // A drop or destroy released it meanwhile.
            self.transition(|l| l.abort_done());
            return;
        }
        // From here `released` is set: poll and op destroys no longer touch `raw`, and no
        // other path releases it.
        let counted = oxccl_core::AbortInFlight::begin();
        let me = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name("oxccl-abort".into())
            .spawn(move || {
                let _counted = counted;
                me.release_raw(false);
                me.transition(|l| l.abort_done());
                log::debug!(
                    "rank {}: NCCL communicator aborted (in background)",
                    me.rank
                );
            });
        if let Err(e) = spawned {
            log::warn!(
                "rank {}: no thread to abort an NCCL communicator in the background ({e}); \
                 aborting it here",
                self.rank
            );
            self.release_raw(false);
            self.transition(|l| l.abort_done());
        }
    }
}

impl Drop for CommInner {
    /// The last handle: no graph references the communicator any more (each holds a handle),
    /// so the release runs here and never waits for one.
    fn drop(&mut self) {
        let finalized = self.life.lock().state() == CommState::Finalized;
        if !self.released.swap(true, Ordering::AcqRel) {
            self.release_raw(finalized);
        }
    }
}
