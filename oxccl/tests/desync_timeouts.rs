//! A timed-out work's own error carries PyTorch's timeout text and, with desync debugging on,
//! the verdict: which ranks never joined the collective. Whoever sees the timeout first (the
//! user's blocking `wait`, or the watchdog), `Work::wait`, `Work::error` and the next
//! operation on the aborted group all say it. On the mock world, ranks as threads of this
//! process sharing one store; the fault plan makes a rank hang inside the collective.

mod common;

use oxccl::buffer::HostBuf;
use oxccl::mock::{FaultPlan, MockBackend};
use oxccl::pg::{PgOptions, ProcessGroup};
use oxccl::rules::env::ErrorHandling;
use oxccl::{CommState, Device, Error, ReduceOp};
use std::time::{Duration, Instant};

const N: u32 = 3;
const TIMEOUT: Duration = Duration::from_millis(600);

/// What rank 0 saw of its timed-out collective #2.
struct Seen {
    waited: Result<(), Error>,
    error: Option<Error>,
    next: Result<(), Error>,
    took: Duration,
}

/// Three ranks all_reduce once; then ranks 0 and 1 issue a second all_reduce, rank 2 only
/// when `rank2_joins` (under `plan`, which may hang it there). Rank 0 runs `see` on its work.
fn run(
    plan: FaultPlan,
    rank2_joins: bool,
    mode: ErrorHandling,
    see: fn(&ProcessGroup<MockBackend>, &oxccl::pg::WorkOf<MockBackend>) -> Result<(), Error>,
) -> Seen {
    let opts = move |r| PgOptions {
        timeout: TIMEOUT,
        device: Device(r),
        desync_debug: true,
        // Only rank 0's failure handling acts (one abort, the one observed).
        error_handling: if r == 0 {
            mode
        } else {
            ErrorHandling::NoHandling
        },
        ..PgOptions::default()
    };
    let second = move |pg: &ProcessGroup<MockBackend>, b: &mut HostBuf<f32>, r: u32| {
        let work = (r < 2 || rank2_joins).then(|| pg.all_reduce(b, ReduceOp::Sum));
        (r == 0).then(|| {
            let w = work.unwrap().unwrap();
            let began = Instant::now();
            let waited = see(pg, &w);
            let took = began.elapsed();
            let error = w.error();
            let next = pg.all_reduce(b, ReduceOp::Sum).and_then(|w| w.wait());
            Seen {
                waited,
                error,
                next,
                took,
            }
        })
    };
    let mut seen = common::after_one_all_reduce(common::mock_with(plan, N), N, opts, second);
    seen.swap_remove(0).unwrap()
}

/// The user's blocking wait.
fn wait(_: &ProcessGroup<MockBackend>, w: &oxccl::pg::WorkOf<MockBackend>) -> Result<(), Error> {
    w.wait()
}

/// The watchdog's timeout: the user never waits, only looks until the group is aborted.
fn watchdog(
    pg: &ProcessGroup<MockBackend>,
    w: &oxccl::pg::WorkOf<MockBackend>,
) -> Result<(), Error> {
    let began = Instant::now();
    while pg.comm_state() != Some(CommState::Aborted) {
        assert!(began.elapsed() < Duration::from_secs(20), "not aborted");
        std::thread::sleep(Duration::from_millis(10));
    }
    w.error().map_or(Ok(()), Err)
}

/// PyTorch's timeout text of rank 0's second all_reduce (8 floats), then `note`.
fn assert_timeout(e: &Error, note: &str) {
    let Error::Timeout { what, after_ms } = e else {
        panic!("expected Error::Timeout, got {e:?}")
    };
    assert!(*after_ms >= TIMEOUT.as_millis() as u64, "{e}");
    let head = format!(
        "WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=8, NumelOut=8, Timeout(ms)={}) ran for {after_ms} milliseconds before timing out; ",
        TIMEOUT.as_millis()
    );
    assert_eq!(what.as_str(), format!("{head}{note}"), "{e}");
}

/// The next operation on the aborted group fails fast, its reason naming the verdict first.
fn assert_aborted(next: &Result<(), Error>, headline: &str) {
    let Err(Error::Aborted { reason }) = next else {
        panic!("expected Error::Aborted, got {next:?}")
    };
    assert!(reason.contains(headline), "{reason}");
    assert!(reason.contains("SeqNum=2"), "{reason}");
}

#[test]
fn a_blocking_wait_names_the_rank_that_skipped_the_collective() {
    let s = run(FaultPlan::new(), false, ErrorHandling::NoHandling, wait);
    let e = s.waited.unwrap_err();
    assert_timeout(&e, "ranks [2] never joined it");
    assert_eq!(
        s.error.as_ref(),
        Some(&e),
        "Work::error is the same first cause"
    );
    // The store reads are bounded: the wait ends soon after the timeout.
    assert!(s.took < TIMEOUT + Duration::from_secs(3), "{:?}", s.took);
    assert_aborted(&s.next, "ranks [2] never joined collective #2");
}

#[test]
fn the_watchdogs_timeout_names_the_rank_that_skipped_the_collective() {
    let s = run(
        FaultPlan::new(),
        false,
        ErrorHandling::CleanUpOnly,
        watchdog,
    );
    let e = s.waited.unwrap_err();
    assert_timeout(&e, "ranks [2] never joined it");
    assert_eq!(s.error.as_ref(), Some(&e));
    assert_aborted(&s.next, "ranks [2] never joined collective #2");
}

/// Rank 2 joins collective #2 but hangs inside it (the fault plan: its op 1): no rank lagged,
/// and the verdict says so instead of blaming one.
#[test]
fn a_rank_hung_inside_the_collective_is_not_called_lagging() {
    let s = run(
        FaultPlan::new().hang_op(2, 1),
        true,
        ErrorHandling::NoHandling,
        wait,
    );
    let e = s.waited.unwrap_err();
    assert_timeout(&e, "every rank joined it (desync debug)");
    // No headline: the abort's reason is the timeout itself.
    let Err(Error::Aborted { reason }) = &s.next else {
        panic!("expected Error::Aborted, got {:?}", s.next)
    };
    assert!(reason.starts_with("timed out after"), "{reason}");
    assert!(!reason.contains("never joined"), "{reason}");
}
