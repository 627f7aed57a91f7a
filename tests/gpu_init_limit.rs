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
//! The backend's own bound (`init_rank_within` alone) is tested in `gpu_init_blocking.rs`.

mod common;

use oxccl::core::env::ErrorHandling;
use oxccl::core::Backend;
use oxccl::pg::{PgOptions, ProcessGroup};
use oxccl::store::{MemStore, Store};
use oxccl::{Device, Error, Nccl};
use std::sync::Arc;
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(3);
const SLACK: Duration = Duration::from_secs(2);

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
