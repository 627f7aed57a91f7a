//! The bound on making a communicator, on real NCCL with one GPU: a world of 2 where only
//! rank 0 exists. Runs when `OXCCL_TEST_GPUS=<n>` is set and skips, saying so, otherwise; run
//! each test alone, under a time limit, and check that the process exits (no hang in Drop).
//!
//! - the process group's init: rank 1 never arrives, so the store's arrival marks name it
//!   within the group's timeout and NCCL's init is never called;
//! - the process group's init with rank 1 present in the store only (its marks written here):
//!   NCCL's init runs (blocking, on a thread of its own) and cannot complete; past the rest of
//!   the timeout it is abandoned (its communicator aborted if it ever returns) and the error
//!   says every rank arrived but NCCL did not finish.
//!
//! - a nonblocking init whose peer never comes, with a 1 s limit, through the backend's
//!   `wait_ready` and through the process group's first operation: the timeout returns within
//!   the limit and 0.3 s (NCCL's abort of the half-made communicator runs on a thread of its
//!   own), the communicator is seen aborting, and ends aborted once `oxccl::wait_for_aborts`
//!   returns.
//!
//! The backend's own bound (`init_rank_within` alone) is tested in `gpu_init_blocking.rs`.

mod common;

use oxccl::core::{Backend, CommAbort, Communicator};
use oxccl::pg::{PgOptions, ProcessGroup};
use oxccl::rules::env::ErrorHandling;
use oxccl::store::{MemStore, Store};
use oxccl::{CommConfig, CommState, Device, Error, Nccl};
use std::sync::Arc;
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(3);
/// How late past the group's timeout its init may return (making the device's context, which
/// can take a good part of a second, counts against the timeout).
const SLACK: Duration = Duration::from_millis(300);

fn nccl() -> Nccl {
    Nccl::load().unwrap_or_else(|e| panic!("loading NCCL: {e}"))
}

fn opts() -> PgOptions {
    PgOptions {
        timeout: TIMEOUT,
        bound_device: Some(Device(0)),
        error_handling: ErrorHandling::NoHandling,
        ..PgOptions::default()
    }
}

/// Rank 0 of 2 makes its group; the variant, the time, and the text.
fn make_rank0(store: Arc<dyn Store>) -> (String, Duration) {
    let began = Instant::now();
    let made = ProcessGroup::new(nccl(), store, 0, 2, opts()).map(|_| ());
    let took = began.elapsed();
    println!("RESULT took_ms={} outcome={made:?}", took.as_millis());
    match made {
        Err(Error::Timeout { what, .. }) => (what.to_string(), took),
        other => panic!("expected Error::Timeout, got {other:?}"),
    }
}

#[test]
fn gpu_pg_init_names_the_rank_that_never_arrived() {
    if !common::gpus_at_least(1) {
        return;
    }
    let (text, took) = make_rank0(Arc::new(MemStore::new()));
    assert!(took >= TIMEOUT && took < TIMEOUT + SLACK, "{took:?}");
    assert!(
        text.starts_with("ranks [1] never arrived at the init of group 0 (default_pg)"),
        "{text}"
    );
}

#[test]
fn gpu_pg_init_that_nccl_cannot_complete_is_aborted_in_time() {
    if !common::gpus_at_least(1) {
        return;
    }
    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    // Rank 1 arrives in the store, and never calls NCCL.
    // In the namespace of the first world of 2 on the store (src/pg/keys.rs).
    store
        .set("oxccl/world/2/0/oxccl/pg/0/init/0/arrived/1", b"1")
        .unwrap();
    store
        .add("oxccl/world/2/0/oxccl/pg/0/init/0/count", 1)
        .unwrap();
    let (text, took) = make_rank0(store);
    let nonblocking = nccl().features().has(oxccl::Feature::NonBlocking);
    println!(
        "RESULT version={} nonblocking_init={nonblocking}",
        nccl().version()
    );
    assert!(took >= TIMEOUT && took < TIMEOUT + SLACK, "{took:?}");
    assert_eq!(
        text,
        "every rank arrived at the init of group 0 (default_pg); the backend did not complete it in time on rank 0: NCCL's init of rank 0 of 2 still in progress (ranks missing?)"
    );
}

/// A group made within its timeout works as before: its communicator (blocking, its init
/// bounded on a thread of its own) and its operations, a coalesced block and a subgroup split
/// from it give the right values (one rank: what one GPU can show).
#[test]
fn gpu_pg_made_within_its_timeout_runs() {
    if !common::gpus_at_least(1) {
        return;
    }
    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    let pg = ProcessGroup::new(nccl(), store, 0, 1, opts()).unwrap();
    assert_eq!(pg.comm_state(), Some(oxccl::CommState::Ready));
    let mut b = pg.upload(&[1.0f32, 2.0, 3.0]).unwrap();
    pg.all_reduce(&mut b, oxccl::ReduceOp::Sum)
        .unwrap()
        .wait()
        .unwrap();
    let mut c = pg.upload(&[5i64; 4]).unwrap();
    pg.coalesced(|g| {
        g.all_reduce(&mut b, oxccl::ReduceOp::Max)?;
        g.all_reduce(&mut c, oxccl::ReduceOp::Sum)
    })
    .unwrap()
    .wait()
    .unwrap();
    let sub = pg.new_group(&[0], None).unwrap();
    let mut d = sub.upload(&[7.0f64]).unwrap();
    sub.all_reduce(&mut d, oxccl::ReduceOp::Sum)
        .unwrap()
        .wait()
        .unwrap();
    assert_eq!(pg.download(&b).unwrap(), vec![1.0, 2.0, 3.0]);
    assert_eq!(pg.download(&c).unwrap(), vec![5; 4]);
    assert_eq!(sub.download(&d).unwrap(), vec![7.0]);
    assert_eq!(pg.split_count(), 1);
    println!("RESULT one-rank group ok, split_count=1");
    sub.destroy();
    pg.destroy();
}

/// The limit of the nonblocking inits below, and how late past it their timeout may return.
const NB_LIMIT: Duration = Duration::from_secs(1);
const NB_SLACK: Duration = Duration::from_millis(300);
/// How long NCCL's abort of a half-made communicator may take before the test gives up.
const ABORT_BOUND: Duration = Duration::from_secs(60);

/// NCCL when it has nonblocking init (2.14+), else `None`, saying so.
fn nonblocking_nccl() -> Option<Nccl> {
    let b = nccl();
    if b.features().has(oxccl::Feature::NonBlocking) {
        Some(b)
    } else {
        println!("skipped: NCCL {} has no nonblocking init", b.version());
        None
    }
}

/// The state while the abort may still run, then the end: aborted once every background abort
/// returned.
fn ends_aborted(state: impl Fn() -> Option<CommState>) {
    let now = state();
    println!("RESULT state at the timeout: {now:?}");
    assert!(now.is_some_and(CommState::is_aborted), "{now:?}");
    let began = Instant::now();
    assert!(oxccl::wait_for_aborts(ABORT_BOUND), "abort still running");
    println!(
        "RESULT the abort ended {} ms after the timeout",
        began.elapsed().as_millis()
    );
    assert_eq!(state(), Some(CommState::Aborted));
}

#[test]
fn gpu_nonblocking_init_past_its_limit_returns_in_time_and_ends_aborted() {
    if !common::gpus_at_least(1) {
        return;
    }
    let Some(b) = nonblocking_nccl() else { return };
    let b = b.with_timeout(NB_LIMIT);
    let id = b.unique_id().unwrap();
    // Rank 0 of 2 alone: its init can never complete.
    let nb = CommConfig::new().blocking(false);
    let comm = b.init_rank(&id, 0, 2, Device(0), &nb).unwrap();
    assert_eq!(comm.state(), CommState::Initializing);
    let handle = comm.abort_handle();
    let began = Instant::now();
    let r = comm.wait_ready("nonblocking init");
    let took = began.elapsed();
    println!("RESULT took_ms={} outcome={r:?}", took.as_millis());
    assert!(matches!(r, Err(Error::Timeout { .. })), "{r:?}");
    assert!(took >= NB_LIMIT && took < NB_LIMIT + NB_SLACK, "{took:?}");
    ends_aborted(|| Some(handle.state()));
    assert!(handle.poll().is_err());
    // Dropping it after the abort neither waits nor panics.
    let began = Instant::now();
    drop(comm);
    assert!(began.elapsed() < Duration::from_secs(1));
}

#[test]
fn gpu_pg_nonblocking_init_past_its_limit_returns_in_time_and_ends_aborted() {
    if !common::gpus_at_least(1) {
        return;
    }
    let Some(b) = nonblocking_nccl() else { return };
    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    // Rank 1 arrives in the store and never calls NCCL (the keys of the first world of 2).
    store
        .set("oxccl/world/2/0/oxccl/pg/0/init/0/arrived/1", b"1")
        .unwrap();
    store
        .add("oxccl/world/2/0/oxccl/pg/0/init/0/count", 1)
        .unwrap();
    let opts = PgOptions {
        config: CommConfig::new().blocking(false),
        nonblocking_timeout: Some(NB_LIMIT),
        ..opts()
    };
    // The nonblocking init returns at once; the first operation waits for it.
    let pg = ProcessGroup::new(b, store, 0, 2, opts).unwrap();
    let mut x = pg.upload(&[1.0f32]).unwrap();
    let began = Instant::now();
    let r = pg.all_reduce(&mut x, oxccl::ReduceOp::Sum).map(|_| ());
    let took = began.elapsed();
    println!("RESULT took_ms={} outcome={r:?}", took.as_millis());
    match &r {
        Err(Error::Timeout { what, .. }) => {
            assert!(what.contains("OXCCL_NONBLOCKING_TIMEOUT_MS"), "{what}")
        }
        other => panic!("expected Error::Timeout, got {other:?}"),
    }
    assert!(took >= NB_LIMIT && took < NB_LIMIT + NB_SLACK, "{took:?}");
    ends_aborted(|| pg.comm_state());
    pg.destroy();
}
