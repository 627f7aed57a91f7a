//! Set-up that several of this package's test files share (each includes this file as
//! `mod common;`): a mock backend with a fault plan, ranks as threads that all_reduce once
//! before the part a test is about, a one-rank group the watchdog already watches, a capture
//! error's kind, and GPU ranks as child processes (`children`). What the CLI's tests share
//! with these (ranks as processes, launchers' variables) is the package `oxccl-testkit`.
#![allow(dead_code)]

pub mod children;

use oxccl::buffer::HostBuf;
use oxccl::core::CaptureError;
use oxccl::mock::{FaultPlan, MockBackend};
use oxccl::pg::{PgOptions, ProcessGroup};
use oxccl::recorder::Recorder;
use oxccl::store::{MemStore, Store};
use oxccl::watchdog::Watchdog;
use oxccl::{Error, ReduceOp};
use std::sync::{Arc, Barrier};
use std::time::Duration;

/// A mock backend imitating NCCL [`oxccl::mock::DEFAULT_VERSION`] whose communicators follow
/// `plan`, with `polls` polls of `InProgress` for nonblocking inits and a 60 s init limit.
pub fn mock_with(plan: FaultPlan, polls: u32) -> MockBackend {
    MockBackend::with_options(
        oxccl::FeatureSet::for_version(oxccl::mock::DEFAULT_VERSION),
        plan,
        polls,
        Duration::from_secs(60),
    )
}

/// A one-rank mock group (60 s timeout) recording into a new recorder of `capacity`
/// entries, and its buffer `[1.0, 2.0]`, after one all_reduce waited for and the watchdog
/// flushed: the communicator is made and the watchdog runs and has recorded that work.
pub fn watched_one_rank(capacity: usize) -> (ProcessGroup<MockBackend>, Recorder, HostBuf<f32>) {
    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    let recorder = Recorder::new(capacity);
    let opts = PgOptions {
        timeout: Duration::from_secs(60),
        recorder: Some(recorder.clone()),
        ..PgOptions::default()
    };
    let pg = ProcessGroup::new(MockBackend::new(), store, 0, 1, opts).unwrap();
    let mut buf = pg.upload(&[1.0f32, 2.0]).unwrap();
    pg.all_reduce(&mut buf, ReduceOp::Sum)
        .unwrap()
        .wait()
        .unwrap();
    assert!(Watchdog::global().flush(Duration::from_secs(10)));
    (pg, recorder, buf)
}

/// Runs `n` ranks of `backend` as threads sharing one store, rank r's group made with
/// `opts(r)`. Each all_reduces 8 ones (collective #1) and waits; once every rank's completion
/// of #1 is published, each runs `then` on its group and buffer; then all abort, and each
/// rank's result of `then` is returned, rank 0's first. A rank that panics fails the caller.
pub fn after_one_all_reduce<T, O, F>(backend: MockBackend, n: u32, opts: O, then: F) -> Vec<T>
where
    T: Send + 'static,
    O: Fn(u32) -> PgOptions + Clone + Send + 'static,
    F: Fn(&ProcessGroup<MockBackend>, &mut HostBuf<f32>, u32) -> T + Clone + Send + 'static,
{
    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    let barrier = Arc::new(Barrier::new(n as usize));
    // Plain threads, not a scope: a panicking rank fails the test at its join while the
    // others still wait at a barrier, where a scope would wait for them for ever.
    let threads: Vec<_> = (0..n)
        .map(|r| {
            let (backend, store, barrier) = (backend.clone(), store.clone(), barrier.clone());
            let (opts, then) = (opts.clone(), then.clone());
            std::thread::spawn(move || {
                let pg = ProcessGroup::new(backend, store, r, n, opts(r)).unwrap();
                let mut b = pg.upload(&[1.0f32; 8]).unwrap();
                pg.all_reduce(&mut b, ReduceOp::Sum)
                    .unwrap()
                    .wait()
                    .unwrap();
                // Every rank's completion of #1 is published before anyone goes on.
                assert!(oxccl::watchdog::Watchdog::global().flush(Duration::from_secs(10)));
                barrier.wait();
                let out = then(&pg, &mut b, r);
                barrier.wait();
                pg.abort("test over");
                out
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

/// The kind and text of a capture error; panics on anything else.
pub fn capture_error<T: std::fmt::Debug>(r: oxccl::Result<T>) -> (CaptureError, String) {
    match r {
        Err(e @ Error::Capture { kind, .. }) => (kind, e.to_string()),
        other => panic!("expected Error::Capture, got {other:?}"),
    }
}

/// NCCL with symmetric windows when `need` GPUs are configured and the library has them;
/// otherwise `None`, saying why (the test then skips).
pub fn nccl_with_windows(need: u32) -> Option<oxccl::Nccl> {
    use oxccl::core::Backend as _;
    if !gpus_at_least(need) {
        return None;
    }
    let lib = oxccl::Nccl::load().unwrap_or_else(|e| panic!("loading NCCL: {e}"));
    if !lib.features().has(oxccl::Feature::WindowRegistration) {
        eprintln!("skipped: NCCL {} has no symmetric windows", lib.version());
        return None;
    }
    Some(lib)
}

/// Whether `OXCCL_TEST_GPUS` says this machine has at least `need` GPUs for the GPU tests;
/// when not, says on stderr that the test is skipped and how to run it.
pub fn gpus_at_least(need: u32) -> bool {
    let have = std::env::var("OXCCL_TEST_GPUS")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .unwrap_or(0);
    if have < need {
        eprintln!(
            "skipped: needs {need} GPU(s) (set OXCCL_TEST_GPUS=<n> on a machine with them to run the GPU tests)"
        );
    }
    have >= need
}
