//! What the case suites (`tests/pg_cases`, `tests/capture_cases`) share: a case's shape and
//! the two macros its body checks with. Each suite includes this file as a module.
#![allow(dead_code)]

use oxccl::mock::MockBackend;
use oxccl::pg::{PgOptions, ProcessGroup};
use oxccl::store::{MemStore, PrefixStore, Store};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// A case's verdict on one rank.
pub type Verdict = Result<(), String>;

/// Makes this rank's default group of the case with the given options.
pub type MakeGroup<'a, B> = &'a dyn Fn(PgOptions) -> oxccl::Result<ProcessGroup<B>>;

/// A case's body for one rank.
pub type Body<B> = fn(MakeGroup<'_, B>, u32) -> Verdict;

/// A case: its name and its body for one rank.
pub type Case<B> = (&'static str, Body<B>);

macro_rules! ensure {
    ($cond:expr, $($fmt:tt)*) => {
        if !$cond {
            return Err(format!("{}:{}: {}", file!(), line!(), format!($($fmt)*)));
        }
    };
}

/// `r` unwrapped, or the error as a verdict.
macro_rules! ok {
    ($r:expr) => {
        $r.map_err(|e| format!("{}:{}: {e}", file!(), line!()))?
    };
}

/// Runs `body` on `n` ranks (a thread each) of `backend`; each default group a rank makes
/// gets its own store prefix (the k-th group of every rank shares the k-th prefix).
pub fn run_on(backend: MockBackend, n: u32, body: Body<MockBackend>) {
    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    let threads: Vec<_> = (0..n)
        .map(|r| {
            let (backend, store) = (backend.clone(), store.clone());
            std::thread::spawn(move || {
                let made = AtomicU32::new(0);
                let mk = |opts: PgOptions| {
                    let k = made.fetch_add(1, Ordering::Relaxed);
                    let store: Arc<dyn Store> =
                        Arc::new(PrefixStore::new(format!("group{k}"), store.clone()));
                    ProcessGroup::new(backend.clone(), store, r, n, opts)
                };
                body(&mk, r)
            })
        })
        .collect();
    for (r, t) in threads.into_iter().enumerate() {
        if let Err(e) = t.join().expect("rank thread") {
            panic!("rank {r}: {e}");
        }
    }
}

/// [`run_on`] a fresh mock world.
pub fn run(n: u32, body: Body<MockBackend>) {
    run_on(MockBackend::new(), n, body)
}
