//! The mock world the buffer-mode suites run on (tests/pg_tune.rs, tests/pg_tune_graphs.rs):
//! a thread and a process group per rank, each with its own tune table.

use oxccl::mock::MockBackend;
use oxccl::pg::{PgOptions, ProcessGroup, TuneTable};
use oxccl::store::{MemStore, Store};
use oxccl::Device;
use std::sync::Arc;
use std::time::Duration;

/// Runs `body` on `n` mock ranks (a thread and a group each, rank r with table `tables[r]`).
pub fn world<R: Send>(
    backend: MockBackend,
    tables: &[Option<TuneTable>],
    body: impl Fn(&ProcessGroup<MockBackend>, u32) -> oxccl::Result<R> + Sync,
) -> Vec<oxccl::Result<R>> {
    let n = tables.len() as u32;
    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..n)
            .map(|r| {
                let (backend, store, body) = (backend.clone(), store.clone(), &body);
                let tune = tables[r as usize].clone().map(Arc::new);
                s.spawn(move || {
                    let opts = PgOptions {
                        timeout: Duration::from_secs(20),
                        device: Device(r),
                        error_handling: oxccl::rules::env::ErrorHandling::CleanUpOnly,
                        watchdog: false,
                        tune,
                        ..PgOptions::default()
                    };
                    let pg = ProcessGroup::new(backend, store, r, n, opts)?;
                    let out = body(&pg, r);
                    pg.destroy();
                    out
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("rank thread panicked"))
            .collect()
    })
}
