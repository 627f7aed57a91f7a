//! The live CUDA graphs that captured a communicator's operations, counted per communicator,
//! and releasing a communicator that some still reference without waiting for them.
//!
//! NCCL keeps a communicator whose operations a CUDA graph captured until that graph is
//! destroyed: `ncclCommAbort`, `ncclCommDestroy` and `ncclCommFinalize` all wait "until all
//! graphs referencing us die" (`commDestroySync` polls while `localPersistentRefs != 0`). A
//! rank that aborts while it still holds such a graph would wait forever in the abort. So each
//! stream notes the communicators issued on it while a capture it began is open
//! ([`CaptureRefs`]), the graph the capture makes keeps one [`GraphRef`] per communicator, and
//! a release with graphs live runs on a detached thread ([`detach`]): NCCL sets the abort flag
//! before it waits, so peers blocked on this rank are woken at once, and the thread ends when
//! the last graph is dropped.
//!
//! Only captures begun with [`oxccl_core::Capture::begin_capture`] on an [`crate::NcclStream`]
//! are seen: a capture begun by other means on the raw stream is not counted.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// How many graphs (and open captures) hold operations of one communicator.
#[derive(Debug, Default)]
pub(crate) struct GraphCount(AtomicUsize);

impl GraphCount {
    /// Graphs live now (and open captures that issued on the communicator).
    pub(crate) fn live(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// What a graph reference points to: something with a [`GraphCount`].
pub(crate) trait Counted: Send + Sync + 'static {
    fn graph_count(&self) -> &GraphCount;
}

/// One graph's (or open capture's) reference to a communicator: counted while it lives. It
/// keeps the communicator's shared state alive, so the count outlives every handle.
pub(crate) struct GraphRef<T: Counted>(Arc<T>);

impl<T: Counted> GraphRef<T> {
    pub(crate) fn new(of: Arc<T>) -> GraphRef<T> {
        of.graph_count().0.fetch_add(1, Ordering::SeqCst);
        GraphRef(of)
    }

    /// What the graph holds.
    pub(crate) fn held(&self) -> &T {
        &self.0
    }
}

impl<T: Counted> Drop for GraphRef<T> {
    fn drop(&mut self) {
        self.0.graph_count().0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl<T: Counted> std::fmt::Debug for GraphRef<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GraphRef")
    }
}

/// The communicators issued on one stream while a capture begun on it is open: one
/// [`GraphRef`] each, taken at the first issue (before NCCL makes its persistent plan), handed
/// to the graph the capture makes.
pub(crate) struct CaptureRefs<T: Counted> {
    on: AtomicBool,
    refs: Mutex<Vec<GraphRef<T>>>,
}

impl<T: Counted> Default for CaptureRefs<T> {
    fn default() -> Self {
        CaptureRefs {
            on: AtomicBool::new(false),
            refs: Mutex::new(Vec::new()),
        }
    }
}

impl<T: Counted> std::fmt::Debug for CaptureRefs<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaptureRefs")
            .field("on", &self.on.load(Ordering::Relaxed))
            .finish()
    }
}

impl<T: Counted> CaptureRefs<T> {
    fn refs(&self) -> std::sync::MutexGuard<'_, Vec<GraphRef<T>>> {
        self.refs.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A capture begins: later issues are noted.
    pub(crate) fn begin(&self) {
        self.refs().clear();
        self.on.store(true, Ordering::SeqCst);
    }

    /// The capture failed to begin.
    pub(crate) fn cancel(&self) {
        self.end();
    }

    /// Notes that `comm` issues on the stream (one relaxed load when no capture is open);
    /// whether a capture is open. Called before the communicator's state is checked, so that
    /// an abort from another thread either sees the reference or is seen by the state
    /// check.
    pub(crate) fn note(&self, comm: &Arc<T>) -> bool {
        if !self.on.load(Ordering::Relaxed) {
            return false;
        }
        {
            let mut refs = self.refs();
            if !refs.iter().any(|r| Arc::ptr_eq(&r.0, comm)) {
                refs.push(GraphRef::new(comm.clone()));
            }
        }
        std::sync::atomic::fence(Ordering::SeqCst);
        true
    }

    /// The capture ends: its references, for the graph it made (dropped when none was made).
    pub(crate) fn end(&self) -> Vec<GraphRef<T>> {
        self.on.store(false, Ordering::SeqCst);
        std::mem::take(&mut *self.refs())
    }
}

/// Whether a communicator `live_graphs` reference may be released on the caller's thread:
/// only when none does (NCCL's release would wait for them to be destroyed).
pub(crate) fn release_inline(live_graphs: usize) -> bool {
    live_graphs == 0
}

/// Runs `release` on a detached thread named `oxccl-abort` (it ends when NCCL's release
/// returns, once the last graph referencing the communicator is dropped). When no thread can
/// be made, the communicator is left unreleased (logged) rather than block the caller.
pub(crate) fn detach(rank: u32, release: impl FnOnce() + Send + 'static) {
    let spawned = std::thread::Builder::new()
        .name("oxccl-abort".into())
        .spawn(release);
    if let Err(e) = spawned {
        log::error!(
            "rank {rank}: no thread to release an NCCL communicator that live CUDA graphs \
             reference ({e}); it is left unreleased"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    /// A communicator stand-in whose "release" waits, as NCCL's does, until no graph
    /// references it.
    #[derive(Default)]
    struct Fake {
        count: GraphCount,
        released: AtomicUsize,
    }

    impl Counted for Fake {
        fn graph_count(&self) -> &GraphCount {
            &self.count
        }
    }

    impl Fake {
        fn release(&self) {
            while self.count.live() != 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
            self.released.fetch_add(1, Ordering::SeqCst);
        }

        /// What `CommInner::release` decides: inline with no graph, detached otherwise.
        fn release_from(self: &Arc<Self>) {
            if release_inline(self.count.live()) {
                self.release();
            } else {
                let me = self.clone();
                detach(0, move || me.release());
            }
        }
    }

    #[test]
    fn inline_only_without_live_graphs() {
        assert!(release_inline(0));
        assert!(!release_inline(1));
        assert!(!release_inline(usize::MAX));
    }

    #[test]
    fn captures_count_each_communicator_once_until_the_graph_drops() {
        let (a, b) = (Arc::new(Fake::default()), Arc::new(Fake::default()));
        let cap = CaptureRefs::default();
        cap.note(&a);
        assert_eq!(a.count.live(), 0, "no capture open: nothing noted");
        cap.begin();
        cap.note(&a);
        cap.note(&a);
        cap.note(&b);
        assert_eq!((a.count.live(), b.count.live()), (1, 1));
        let graph = cap.end();
        cap.note(&a);
        assert_eq!(a.count.live(), 1, "capture over: nothing more noted");
        let graph2 = {
            cap.begin();
            cap.note(&a);
            cap.end()
        };
        assert_eq!(a.count.live(), 2);
        drop(graph);
        assert_eq!((a.count.live(), b.count.live()), (1, 0));
        drop(graph2);
        assert_eq!(a.count.live(), 0);
        cap.begin();
        cap.note(&b);
        cap.cancel();
        assert_eq!(b.count.live(), 0, "a failed capture keeps nothing");
    }

    #[test]
    fn release_with_a_live_graph_returns_at_once_and_finishes_when_it_drops() {
        let comm = Arc::new(Fake::default());
        let cap = CaptureRefs::default();
        cap.begin();
        cap.note(&comm);
        let graph = cap.end();
        let (tx, rx) = mpsc::channel();
        let c = comm.clone();
        std::thread::spawn(move || {
            c.release_from();
            let _ = tx.send(());
        });
        rx.recv_timeout(Duration::from_secs(10))
            .expect("the release returned while a graph lives");
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(comm.released.load(Ordering::SeqCst), 0, "still waiting");
        drop(graph);
        for _ in 0..10_000 {
            if comm.released.load(Ordering::SeqCst) == 1 {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(comm.released.load(Ordering::SeqCst), 1, "released once");
    }

    #[test]
    fn release_without_graphs_is_inline() {
        let comm = Arc::new(Fake::default());
        comm.release_from();
        assert_eq!(comm.released.load(Ordering::SeqCst), 1);
    }
}
