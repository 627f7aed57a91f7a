//! The bound on NCCL's blocking init (a blocking config, on every release): `init_rank_within`
//! runs the init on a thread of its own and gives up on it past the limit. On real NCCL with one
//! GPU; runs when
//! `OXCCL_TEST_GPUS=<n>` is set and skips, saying so, otherwise. Run each test alone (its own
//! process, under a time limit, e.g. `OXCCL_NCCL_LIBRARY=<2.13.4>`), and check that the process
//! exits: an abandoned init still runs on its thread when the test ends.
//!
//! - rank 0 of 2 whose peer never comes: `Timeout` at the limit, the init left on its thread;
//! - an init that completes after its caller stopped waiting (limit 0, one rank): its thread
//!   aborts the communicator (seen in the backend's debug log), and a later init on the same
//!   GPU works.
//!
//! NCCL's own threads, started from the init's thread, inherit its name (NCCL names them only
//! with `NCCL_SET_THREAD_NAME=1`, and some, like 2.24+'s RAS thread, live as long as the
//! process): the name tells that the init's thread exists, not that it ended.

mod common;

use oxccl::core::Backend;
use oxccl::{CommConfig, CommState, Device, Error, Nccl};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const SLACK: Duration = Duration::from_secs(2);
const THREAD: &str = "oxccl-init-r0";

/// Keeps the backend's log (and prints it): the late path is seen in it.
struct Kept;

static KEPT: Mutex<Vec<String>> = Mutex::new(Vec::new());

impl log::Log for Kept {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.target().starts_with("oxccl")
    }

    fn log(&self, r: &log::Record<'_>) {
        if self.enabled(r.metadata()) {
            let line = format!("{}", r.args());
            println!("LOG {} {line}", r.level());
            KEPT.lock().unwrap_or_else(|p| p.into_inner()).push(line);
        }
    }

    fn flush(&self) {}
}

/// Whether a line of the backend's log so far contains `part`.
fn logged(part: &str) -> bool {
    KEPT.lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .any(|l| l.contains(part))
}

/// NCCL as loaded, its log kept.
fn blocking_nccl() -> Nccl {
    if log::set_logger(&Kept).is_ok() {
        log::set_max_level(log::LevelFilter::Debug);
    }
    let b = Nccl::load().unwrap_or_else(|e| panic!("loading NCCL: {e}"));
    println!(
        "RESULT version={} path={}",
        b.version(),
        b.library().path().display()
    );
    b
}

/// How many threads of this process are named `name` (Linux: `/proc/self/task/*/comm`).
fn threads_named(name: &str) -> usize {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .filter_map(|t| t.ok())
        .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
        .filter(|c| c.trim_end() == name)
        .count()
}

#[test]
fn gpu_blocking_init_of_a_missing_peer_times_out_at_the_limit() {
    if !common::gpus_at_least(1) {
        return;
    }
    let b = blocking_nccl();
    let id = b.unique_id().unwrap();
    let limit = Duration::from_secs(2);
    let began = Instant::now();
    let r = b.init_rank_within(&id, 0, 2, Device(0), &CommConfig::new(), limit);
    let took = began.elapsed();
    println!("RESULT took_ms={} outcome={r:?}", took.as_millis());
    match r {
        Err(Error::Timeout { what, after_ms }) => {
            assert_eq!(
                what.as_str(),
                "NCCL's init of rank 0 of 2 still in progress (ranks missing?)"
            );
            assert!(after_ms >= 2_000, "{after_ms}");
        }
        other => panic!("expected Error::Timeout, got {other:?}"),
    }
    assert!(took >= limit && took < limit + SLACK, "{took:?}");
    // Abandoned, not stopped: NCCL's blocking init still waits for rank 1 on its thread.
    let left = threads_named(THREAD);
    println!("RESULT threads named {THREAD}: {left}");
    assert!(left >= 1, "{left}");
}

#[test]
fn gpu_blocking_init_completing_late_is_aborted_on_its_thread() {
    if !common::gpus_at_least(1) {
        return;
    }
    let b = blocking_nccl();
    let id = b.unique_id().unwrap();
    let began = Instant::now();
    // A limit of 0: the caller gives up at once, the one-rank init completes later on its
    // thread, which then aborts the communicator nobody took.
    let r = b.init_rank_within(&id, 0, 1, Device(0), &CommConfig::new(), Duration::ZERO);
    println!(
        "RESULT limit 0: took_ms={} outcome={r:?}",
        began.elapsed().as_millis()
    );
    assert!(
        matches!(r, Err(Error::Timeout { ref what, .. }) if what.as_str() == "NCCL's init of rank 0 of 1 still in progress (ranks missing?)"),
        "{r:?}"
    );
    // The late path: the init's thread got the communicator and aborted it.
    let aborted = "the late communicator of rank 0 of 1 is aborted";
    let waited = Instant::now();
    while !logged(aborted) && waited.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(10));
    }
    println!(
        "RESULT the late communicator aborted: {} ({} ms after the call began)",
        logged(aborted),
        began.elapsed().as_millis()
    );
    assert!(logged(aborted));
    // The GPU is free again: an init with room to complete gives a ready communicator.
    let id = b.unique_id().unwrap();
    let began = Instant::now();
    let c = b
        .init_rank_within(
            &id,
            0,
            1,
            Device(0),
            &CommConfig::new(),
            Duration::from_secs(60),
        )
        .unwrap();
    println!(
        "RESULT limit 60 s: ready in {} ms",
        began.elapsed().as_millis()
    );
    assert_eq!(oxccl::core::Communicator::state(&c), CommState::Ready);
    assert_eq!(
        (
            oxccl::core::Communicator::rank(&c),
            oxccl::core::Communicator::size(&c)
        ),
        (0, 1)
    );
    c.destroy().unwrap();
}
