//! The group's timeout bounds the making of its communicator, and the process group names the
//! ranks that never came, whatever the backend: each member marks its arrival in the store
//! before the backend's init or split, and a timeout reads which marks are missing. On the
//! mock world, ranks as threads of this process sharing one store (across processes:
//! `tests/mock_processes_split.rs`; on NCCL: `tests/gpu/init_limit.rs`).

use oxccl::mock::{FaultPlan, MockBackend};
use oxccl::pg::{PgOptions, ProcessGroup};
use oxccl::rules::env::ErrorHandling;
use oxccl::store::{MemStore, Store};
use oxccl::{CommState, Device, Error};
use std::sync::Arc;
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_millis(800);

/// A backend whose own init limit is long (60 s): only the group's timeout can end a wait.
fn backend() -> MockBackend {
    MockBackend::with_options(
        oxccl::FeatureSet::for_version(oxccl::mock::DEFAULT_VERSION),
        FaultPlan::new(),
        1,
        Duration::from_secs(60),
    )
}

fn opts(rank: u32) -> PgOptions {
    PgOptions {
        timeout: TIMEOUT,
        device: Device(rank),
        // Made at once, by `ProcessGroup::new`.
        bound_device: Some(Device(rank)),
        error_handling: ErrorHandling::NoHandling,
        ..PgOptions::default()
    }
}

/// Runs `f(rank)` for each of `ranks` on its own thread; their results, by rank.
fn on_threads<T: Send + 'static>(
    ranks: &[u32],
    f: impl Fn(u32) -> T + Send + Sync + 'static,
) -> Vec<T> {
    let f = Arc::new(f);
    let hs: Vec<_> = ranks
        .iter()
        .map(|&r| {
            let f = f.clone();
            std::thread::spawn(move || f(r))
        })
        .collect();
    hs.into_iter().map(|h| h.join().unwrap()).collect()
}

/// The timeout's text, checking the variant and that it came within the timeout (+2 s).
fn timeout_text(r: Result<(), Error>, took: Duration) -> String {
    assert!(
        took >= TIMEOUT && took < TIMEOUT + Duration::from_secs(2),
        "took {took:?}"
    );
    match r {
        Err(Error::Timeout { what, after_ms }) => {
            assert!(after_ms < (TIMEOUT + Duration::from_secs(2)).as_millis() as u64);
            what.to_string()
        }
        other => panic!("expected Error::Timeout, got {other:?}"),
    }
}

/// World of 3 where `absent` never makes its process group: the others' eager init fails.
fn init_without(absent: u32) -> Vec<(u32, String)> {
    let (b, store): (MockBackend, Arc<dyn Store>) = (backend(), Arc::new(MemStore::new()));
    let present: Vec<u32> = (0..3).filter(|r| *r != absent).collect();
    on_threads(&present, move |r| {
        let began = Instant::now();
        let made = ProcessGroup::new(b.clone(), store.clone(), r, 3, opts(r)).map(|_| ());
        (r, timeout_text(made, began.elapsed()))
    })
}

#[test]
fn a_rank_that_never_arrives_is_named_by_the_others_init() {
    for (r, text) in init_without(2) {
        assert_eq!(
            text,
            format!(
                "ranks [2] never arrived at the init of group 0 (default_pg) (seen by rank {r}; store marks `oxccl/world/3/0/oxccl/pg/0/init/0/arrived/<group rank>`)"
            )
        );
    }
}

/// Rank 0 writes the unique id: the others say so too (the key it would be at).
#[test]
fn a_missing_writer_of_the_unique_id_is_named_with_its_key() {
    for (r, text) in init_without(0) {
        assert_eq!(
            text,
            format!(
                "ranks [0] never arrived at the init of group 0 (default_pg); rank {r} waited for the unique id at store key `oxccl/world/3/0/oxccl/pg/0/unique_id/0`, which rank 0 writes"
            )
        );
    }
}

/// Every rank marked its arrival (rank 2 only in the store: it never calls the backend), so
/// the backend's init is what times out, with what was left of the group's timeout; the
/// process group says every rank arrived, and keeps the backend's own words.
#[test]
fn a_backend_init_that_cannot_complete_gets_the_rest_of_the_timeout() {
    let (b, store): (MockBackend, Arc<dyn Store>) = (backend(), Arc::new(MemStore::new()));
    // In the namespace of the first world of 3 on the store (src/pg/keys.rs).
    store
        .set("oxccl/world/3/0/oxccl/pg/0/init/0/arrived/2", b"1")
        .unwrap();
    store
        .add("oxccl/world/3/0/oxccl/pg/0/init/0/count", 1)
        .unwrap();
    let texts = on_threads(&[0, 1], move |r| {
        let began = Instant::now();
        let made = ProcessGroup::new(b.clone(), store.clone(), r, 3, opts(r)).map(|_| ());
        timeout_text(made, began.elapsed())
    });
    for (r, text) in texts.iter().enumerate() {
        assert!(
            text.starts_with(&format!(
                "every rank arrived at the init of group 0 (default_pg); the backend did not complete it in time on rank {r}: rank {r} waiting for rank(s) 2 of 3 to join"
            )),
            "{text}"
        );
    }
}

/// Ranks bound to devices split subgroups at once, collectively over the parent: a rank that
/// never calls `new_group` is named by the others' split, within the timeout, and their
/// parent communicators stay usable (the backend was never called).
#[test]
fn a_rank_that_never_joins_a_split_is_named() {
    let (b, store): (MockBackend, Arc<dyn Store>) = (backend(), Arc::new(MemStore::new()));
    let barrier = Arc::new(std::sync::Barrier::new(3));
    let seen = on_threads(&[0, 1, 2], move |r| {
        let pg = ProcessGroup::new(b.clone(), store.clone(), r, 3, opts(r)).unwrap();
        barrier.wait();
        let out = (r < 2).then(|| {
            let began = Instant::now();
            let made = pg.new_group(&[0, 1, 2], None).map(|_| ());
            (timeout_text(made, began.elapsed()), pg.comm_state())
        });
        // Rank 2 stays until the others are done with its absence.
        barrier.wait();
        pg.abort("test over");
        out
    });
    for (r, (text, state)) in seen.into_iter().take(2).map(Option::unwrap).enumerate() {
        assert_eq!(
            text,
            format!(
                "ranks [2] never arrived at split #0 of group 0 (default_pg) (seen by rank {r}; store marks `oxccl/world/3/0/oxccl/pg/0/split/0/arrived/<group rank>`)"
            )
        );
        assert_eq!(state, Some(CommState::Ready));
    }
}
