//! A process group whose nonblocking init (or split) outlives `nonblocking_timeout`: the
//! operation that waited gets its timeout within the limit and 0.3 s, although aborting the
//! half-made communicator takes a second (the mock's fault plan); the group's communicator is
//! `Aborting` until that abort returns, then `Aborted`, and `oxccl::wait_for_aborts` returns
//! true once it has.

mod common;

use oxccl::mock::{FaultPlan, MockBackend};
use oxccl::pg::{PgOptions, ProcessGroup};
use oxccl::rules::env::ErrorHandling;
use oxccl::store::{MemStore, Store};
use oxccl::{CommConfig, CommState, Device, Error, ReduceOp};
use std::sync::Arc;
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(1);
const SLOW_ABORT: Duration = Duration::from_secs(1);
/// How late past its limit a timeout may return.
const SLACK: Duration = Duration::from_millis(300);

fn one_rank(backend: MockBackend) -> ProcessGroup<MockBackend> {
    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    let opts = PgOptions {
        timeout: Duration::from_secs(30),
        device: Device(0),
        error_handling: ErrorHandling::NoHandling,
        config: CommConfig::new().blocking(false),
        nonblocking_timeout: Some(LIMIT),
        ..PgOptions::default()
    };
    ProcessGroup::new(backend, store, 0, 1, opts).unwrap()
}

/// The first all_reduce on `pg` waits for its communicator and times out in time; then the
/// abort is seen running, and ending.
fn times_out_then_aborts(pg: &ProcessGroup<MockBackend>) {
    let mut b = pg.upload(&[1.0f32]).unwrap();
    let began = Instant::now();
    let r = pg.all_reduce(&mut b, ReduceOp::Sum).map(|_| ());
    let took = began.elapsed();
    match &r {
        Err(Error::Timeout { what, .. }) => {
            assert!(what.contains("OXCCL_NONBLOCKING_TIMEOUT_MS"), "{what}")
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(
        took >= LIMIT && took < LIMIT + SLACK,
        "returned after {took:?}"
    );
    // The abort still runs: the caller can see it, and nothing waits for it.
    assert_eq!(pg.comm_state(), Some(CommState::Aborting));
    assert!(oxccl::pending_aborts() >= 1);
    assert!(!oxccl::wait_for_aborts(Duration::ZERO));
    // Operations meanwhile fail fast, saying why.
    let began = Instant::now();
    let again = pg.all_reduce(&mut b, ReduceOp::Sum).map(|_| ());
    assert!(began.elapsed() < Duration::from_millis(200));
    let text = format!("{:?}", again.unwrap_err());
    assert!(text.contains("OXCCL_NONBLOCKING_TIMEOUT_MS"), "{text}");
    // Then it ends, aborted.
    let began = Instant::now();
    assert!(oxccl::wait_for_aborts(Duration::from_secs(10)));
    let rest = began.elapsed();
    assert_eq!(pg.comm_state(), Some(CommState::Aborted));
    assert!(
        took + rest >= LIMIT + SLOW_ABORT - Duration::from_millis(50),
        "the abort ended {rest:?} after the timeout"
    );
}

#[test]
fn an_init_past_its_limit_returns_in_time_and_ends_aborted() {
    let plan = FaultPlan::new()
        .init_never_completes(0)
        .slow_abort(0, SLOW_ABORT);
    let pg = one_rank(common::mock_with(plan, 1));
    times_out_then_aborts(&pg);
    // Destroying and dropping the group after the abort neither waits nor panics.
    let began = Instant::now();
    pg.destroy();
    drop(pg);
    assert!(began.elapsed() < Duration::from_millis(200));
}

#[test]
fn a_split_past_its_limit_returns_in_time_and_ends_aborted() {
    let children = FaultPlan::new()
        .init_never_completes(0)
        .slow_abort(0, SLOW_ABORT);
    let pg = one_rank(common::mock_with(FaultPlan::new().in_children(children), 1));
    let mut b = pg.upload(&[1.0f32]).unwrap();
    pg.all_reduce(&mut b, ReduceOp::Sum)
        .unwrap()
        .wait()
        .unwrap();
    let sub = pg.new_group(&[0], None).unwrap();
    times_out_then_aborts(&sub);
    assert_eq!(pg.comm_state(), Some(CommState::Ready));
    sub.destroy();
    pg.destroy();
}

const CHILD: &str = "OXCCL_ABORT_EXIT_CHILD";

/// In a child process (`OXCCL_ABORT_EXIT_CHILD` set): starts an abort that would take a
/// minute, and returns while it runs, so the process exits with it running.
#[test]
fn child_exits_while_an_abort_runs() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let plan = FaultPlan::new()
        .init_never_completes(0)
        .slow_abort(0, Duration::from_secs(60));
    let pg = ProcessGroup::new(
        common::mock_with(plan, 1),
        Arc::new(MemStore::new()),
        0,
        1,
        PgOptions {
            config: CommConfig::new().blocking(false),
            nonblocking_timeout: Some(Duration::from_millis(100)),
            error_handling: ErrorHandling::NoHandling,
            ..PgOptions::default()
        },
    )
    .unwrap();
    let mut b = pg.upload(&[1.0f32]).unwrap();
    assert!(pg.all_reduce(&mut b, ReduceOp::Sum).is_err());
    assert_eq!(pg.comm_state(), Some(CommState::Aborting));
    println!(
        "CHILD leaving with {} abort(s) running",
        oxccl::pending_aborts()
    );
}

#[test]
fn a_process_exits_while_an_abort_runs() {
    let began = Instant::now();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_exits_while_an_abort_runs", "--nocapture"])
        .env(CHILD, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("CHILD leaving with"), "{stdout}");
    assert!(began.elapsed() < Duration::from_secs(30), "the exit waited");
}
