//! The mock world as threads: `n` ranks over one `MockBackend`, a thread and a process group
//! each, stopped together when one fails.

use super::stop::Stopper;
use oxccl::mock::MockBackend;
use oxccl::pg::{PgOptions, ProcessGroup};
use oxccl::store::{MemStore, Store};
use std::sync::{Arc, Barrier};

/// Runs `body` on `n` mock ranks, a thread and a process group each; the ranks' results.
pub fn mock_world<R: Send>(
    n: u32,
    body: impl Fn(&ProcessGroup<MockBackend>, u32) -> oxccl::Result<R> + Sync,
) -> Result<Vec<R>, String> {
    mock_world_of(MockBackend::new(), n, body)
}

/// [`mock_world`] over `backend` (a mock of another NCCL release, say).
pub fn mock_world_of<R: Send>(
    backend: MockBackend,
    n: u32,
    body: impl Fn(&ProcessGroup<MockBackend>, u32) -> oxccl::Result<R> + Sync,
) -> Result<Vec<R>, String> {
    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    let start = Arc::new(Barrier::new(n as usize));
    let stopper = Stopper::default();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|r| {
                let (backend, store, body, start, stopper) = (
                    backend.clone(),
                    store.clone(),
                    &body,
                    start.clone(),
                    &stopper,
                );
                s.spawn(move || {
                    let opts = PgOptions {
                        bound_device: Some(oxccl::Device(r)),
                        ..PgOptions::default()
                    };
                    start.wait();
                    let pg = ProcessGroup::new(backend, store, r, n, opts)?;
                    let aborts = pg.clone();
                    stopper.on_stop(Box::new(move |why| aborts.abort(why)));
                    let out = body(&pg, r);
                    if let Err(e) = &out {
                        stopper.stop(&format!("rank {r} failed: {e}"));
                    }
                    pg.destroy();
                    out
                })
            })
            .collect();
        handles
            .into_iter()
            .enumerate()
            .map(|(r, h)| match h.join() {
                Ok(Ok(v)) => Ok(v),
                Ok(Err(e)) => Err(format!("rank {r}: {e}")),
                Err(_) => Err(format!("rank {r}: its thread panicked")),
            })
            .collect()
    })
}
