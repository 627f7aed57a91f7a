//! The mock world: `n` ranks as threads over one `MockBackend`, a thread and a process group
//! each, stopped together when one fails; or this process's rank of a launched job, the
//! processes sharing one communicator hosted by rank 0's.

use super::stop::Stopper;
use oxccl::launch::Bootstrap;
use oxccl::mock::MockBackend;
use oxccl::pg::{PgOptions, ProcessGroup};
use oxccl::store::{MemStore, Store};
use std::sync::{Arc, Barrier};

/// Runs `body` on `n` ranks over `backend` (a mock of some NCCL release), a thread and a
/// process group each; the ranks' results.
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

/// Runs `body` as this process's rank of a launched job on the mock world spanning the
/// launched processes.
pub fn mock_process<R>(
    boot: &Bootstrap,
    body: impl Fn(&ProcessGroup<MockBackend>, u32) -> oxccl::Result<R>,
) -> Result<R, String> {
    let (r, n) = (boot.rank, boot.world_size);
    let in_rank = |e: oxccl::Error| format!("rank {r}: {e}");
    let store = oxccl::pg::world_namespace(boot.group_store(), n).map_err(in_rank)?;
    let opts = PgOptions {
        bound_device: Some(boot.device),
        ..PgOptions::default()
    };
    let pg = ProcessGroup::new(MockBackend::for_processes(), store, r, n, opts).map_err(in_rank)?;
    let out = body(&pg, r);
    pg.destroy();
    out.map_err(in_rank)
}
