//! A limit that expires on a nonblocking init in progress returns its timeout at once, while
//! the abort of the half-made communicator (slow, by the fault plan, as NCCL's is) runs on a
//! thread of its own: the state is `Aborting` until it returns, then `Aborted`, and
//! `pending_aborts` counts it meanwhile. An abort on the caller's thread still takes its time.

use oxccl_core::{
    pending_aborts, Backend, CommAbort, CommConfig, CommState, Communicator, Device, Error,
    FeatureSet,
};
use oxccl_mock::{FaultPlan, MockBackend, MockComm, DEFAULT_VERSION};
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(1);
const SLOW_ABORT: Duration = Duration::from_secs(1);
/// How late past its limit a timeout may return.
const SLACK: Duration = Duration::from_millis(300);

/// Rank 0 of 2, nonblocking, whose init never completes (its peer never comes) and whose
/// abort takes [`SLOW_ABORT`]; the backend's init limit is [`LIMIT`].
fn stuck_init() -> MockComm {
    let plan = FaultPlan::new()
        .init_never_completes(0)
        .slow_abort(0, SLOW_ABORT);
    let b = MockBackend::with_options(FeatureSet::for_version(DEFAULT_VERSION), plan, 1, LIMIT);
    let id = b.unique_id().unwrap();
    let nb = CommConfig::new().blocking(false);
    let c = b.init_rank(&id, 0, 2, Device(0), &nb).unwrap();
    assert_eq!(c.state(), CommState::Initializing);
    c
}

/// Polls `state` until it is `Aborted`, at most `limit`; how long that took.
fn until_aborted(state: impl Fn() -> CommState, limit: Duration) -> Duration {
    let began = Instant::now();
    while state() != CommState::Aborted {
        assert!(began.elapsed() < limit, "still {} after {limit:?}", state());
        assert_eq!(state(), CommState::Aborting);
        std::thread::sleep(Duration::from_millis(5));
    }
    began.elapsed()
}

#[test]
fn the_timeout_returns_within_its_limit_and_the_abort_ends_after() {
    let c = stuck_init();
    let handle = c.abort_handle();
    let began = Instant::now();
    let e = c.wait_ready().unwrap_err();
    let took = began.elapsed();
    assert!(
        matches!(e, Error::Timeout { ref what, after_ms } if what.contains("init") && after_ms >= 1_000),
        "{e:?}"
    );
    assert!(
        took >= LIMIT && took < LIMIT + SLACK,
        "returned after {took:?}"
    );
    // The abort runs on: aborting, dead already (operations fail fast with its reason).
    assert_eq!(c.state(), CommState::Aborting);
    assert_eq!(handle.state(), CommState::Aborting);
    assert!(pending_aborts() >= 1);
    assert!(matches!(handle.poll(), Err(Error::Aborted { .. })));
    assert!(c.reason().contains("timed out"), "{}", c.reason());
    let began = Instant::now();
    assert!(
        matches!(c.wait_ready(), Ok(())),
        "not initializing any more"
    );
    assert!(began.elapsed() < Duration::from_millis(100));
    // Then aborted, about the slow abort's time after the timeout.
    let rest = until_aborted(|| handle.state(), Duration::from_secs(10));
    assert!(
        took + rest >= LIMIT + SLOW_ABORT - Duration::from_millis(50),
        "aborted {rest:?} after the timeout"
    );
    assert_eq!(c.state(), CommState::Aborted);
    assert!(c.reason().contains("timed out"), "{}", c.reason());
}

#[test]
fn an_abort_on_the_callers_thread_takes_its_time() {
    let c = stuck_init();
    let began = Instant::now();
    c.abort("by hand");
    let took = began.elapsed();
    assert!(took >= SLOW_ABORT, "{took:?}");
    assert_eq!(c.state(), CommState::Aborted);
    // Idempotent, and no second wait.
    let began = Instant::now();
    c.abort("again");
    c.abort_handle().abort_in_background("again");
    assert!(began.elapsed() < Duration::from_millis(100));
    assert_eq!(c.state(), CommState::Aborted);
    assert_eq!(c.reason(), "by hand");
}

#[test]
fn dropping_an_aborting_communicator_neither_waits_nor_panics() {
    let c = stuck_init();
    let handle = c.abort_handle();
    let _ = c.wait_ready().unwrap_err();
    assert_eq!(handle.state(), CommState::Aborting);
    let began = Instant::now();
    drop(c);
    assert!(began.elapsed() < Duration::from_millis(200), "drop waited");
    // The handle outlives it; the abort thread ends on its own.
    let _ = handle.state();
    let began = Instant::now();
    while handle.state() == CommState::Aborting {
        assert!(began.elapsed() < Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(handle.state().is_dead());
}

#[test]
fn without_a_slow_abort_the_background_abort_is_done_at_once() {
    let plan = FaultPlan::new().init_never_completes(0);
    let b = MockBackend::with_options(
        FeatureSet::for_version(DEFAULT_VERSION),
        plan,
        1,
        Duration::from_millis(100),
    );
    let id = b.unique_id().unwrap();
    let c = b
        .init_rank(&id, 0, 2, Device(0), &CommConfig::new().blocking(false))
        .unwrap();
    assert!(matches!(c.wait_ready(), Err(Error::Timeout { .. })));
    assert_eq!(c.state(), CommState::Aborted);
}
