//! The watchdog's PyTorch settings on the mock world, ranks as threads of this process (one
//! watchdog for all of them, as in a process hosting several ranks): the high-priority stream
//! (`OXCCL_HIGH_PRIORITY`), the bound on nonblocking inits (`OXCCL_NONBLOCKING_TIMEOUT_MS`)
//! and the desync report (`OXCCL_DESYNC_DEBUG`). The dump coordination and the wait for a dump
//! (`OXCCL_COORD_CHECK_MS`, `OXCCL_WAIT_TIMEOUT_DUMP_MS`) need processes:
//! `tests/safety_processes.rs`.

mod common;

use oxccl::buffer::HostBuf;
use oxccl::core::traits::StreamPriority;
use oxccl::mock::{FaultPlan, MockBackend};
use oxccl::pg::{PgOptions, ProcessGroup};
use oxccl::rules::env::{EnvConfig, ErrorHandling};
use oxccl::store::{MemStore, Store};
use oxccl::{CommConfig, CommState, Device, Error, ReduceOp};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn opts(rank: u32) -> PgOptions {
    PgOptions {
        timeout: Duration::from_secs(30),
        device: Device(rank),
        // A failing case must fail, not end the test process.
        error_handling: ErrorHandling::NoHandling,
        ..PgOptions::default()
    }
}

fn one_rank(backend: MockBackend, o: PgOptions) -> ProcessGroup<MockBackend> {
    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    ProcessGroup::new(backend, store, 0, 1, o).unwrap()
}

#[test]
fn the_environment_reaches_the_options() {
    let vars = [
        ("OXCCL_HIGH_PRIORITY", "1"),
        ("OXCCL_DESYNC_DEBUG", "1"),
        ("OXCCL_WAIT_TIMEOUT_DUMP_MS", "1234"),
        ("OXCCL_COORD_CHECK_MS", "250"),
        ("OXCCL_NONBLOCKING_TIMEOUT_MS", "0"),
    ];
    let look = |k: &str| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
    let o = PgOptions::from_config(&EnvConfig::from_lookup(look).unwrap(), None);
    assert!(o.high_priority && o.desync_debug);
    assert_eq!(o.wait_timeout_dump, Duration::from_millis(1234));
    assert_eq!(o.coord_check, Duration::from_millis(250));
    assert_eq!(o.nonblocking_timeout, None, "0 means unbounded");
    // Blocking wait leaves failures to the user's thread, whose `wait` then names the
    // lagging ranks itself: desync debugging stays on.
    let blocking = |k: &str| match k {
        "OXCCL_BLOCKING_WAIT" => Some("1"),
        other => look(other),
    };
    let o = PgOptions::from_config(&EnvConfig::from_lookup(blocking).unwrap(), None);
    assert!(o.desync_debug);
    assert_eq!(o.error_handling, ErrorHandling::NoHandling);
    let d = PgOptions::from_config(&EnvConfig::default(), None);
    assert!(!d.high_priority);
    assert_eq!(d.nonblocking_timeout, Some(Duration::from_secs(1800)));
}

#[test]
fn high_priority_groups_issue_on_a_high_priority_stream() {
    for (high, want) in [
        (true, StreamPriority::High),
        (false, StreamPriority::Normal),
    ] {
        let pg = one_rank(
            MockBackend::new(),
            PgOptions {
                high_priority: high,
                ..opts(0)
            },
        );
        let mut b = pg.upload(&[1.0f32, 2.0]).unwrap();
        pg.all_reduce(&mut b, ReduceOp::Sum)
            .unwrap()
            .wait()
            .unwrap();
        assert_eq!(pg.with_stream(|s| s.priority()).unwrap(), want);
        assert_eq!(pg.download(&b).unwrap(), vec![1.0, 2.0]);
        pg.destroy();
    }
}

#[test]
fn a_nonblocking_init_past_its_limit_is_aborted_naming_the_variable() {
    // The fault plan keeps the init in progress for ever.
    let backend = common::mock_with(FaultPlan::new().init_in_progress(0, u32::MAX), 1);
    let pg = one_rank(
        backend,
        PgOptions {
            config: CommConfig::new().blocking(false),
            nonblocking_timeout: Some(Duration::from_millis(300)),
            ..opts(0)
        },
    );
    let mut b = pg.upload(&[1.0f32]).unwrap();
    let began = Instant::now();
    let r = pg.all_reduce(&mut b, ReduceOp::Sum).map(|_| ());
    let took = began.elapsed();
    match &r {
        Err(Error::Timeout { what, .. }) => {
            assert!(what.contains("OXCCL_NONBLOCKING_TIMEOUT_MS"), "{what}");
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(5),
        "{took:?}"
    );
    assert_eq!(pg.comm_state(), Some(CommState::Aborted));
    // Later operations fail fast, saying why.
    let began = Instant::now();
    let again = pg.all_reduce(&mut b, ReduceOp::Sum).map(|_| ());
    assert!(began.elapsed() < Duration::from_secs(1));
    let text = format!("{:?}", again.unwrap_err());
    assert!(text.contains("OXCCL_NONBLOCKING_TIMEOUT_MS"), "{text}");
}

#[test]
fn a_nonblocking_init_within_its_limit_runs() {
    let backend = common::mock_with(FaultPlan::new().init_in_progress(0, 20), 1);
    let pg = one_rank(
        backend,
        PgOptions {
            config: CommConfig::new().blocking(false),
            bound_device: Some(Device(0)),
            nonblocking_timeout: Some(Duration::from_secs(10)),
            ..opts(0)
        },
    );
    let mut b = pg.upload(&[3.0f32]).unwrap();
    pg.all_reduce(&mut b, ReduceOp::Sum)
        .unwrap()
        .wait()
        .unwrap();
    assert_eq!(pg.comm_state(), Some(CommState::Ready));
}

/// Three ranks all_reduce once; rank 2 then stops issuing while ranks 0 and 1 issue a second
/// all_reduce, which times out: rank 0's desync report names rank 2 as the rank that never
/// joined #2 (it last issued #1), and ranks 0 and 1 as joined but not finished; its watchdog
/// aborts its communicator (clean-up mode) with a reason that names rank 2 first. (Rank 1
/// leaves failures to the user, so that rank 0's abort is the only one.)
#[test]
fn the_desync_report_names_the_rank_that_never_joined() {
    let options = |r| PgOptions {
        timeout: Duration::from_millis(600),
        desync_debug: true,
        error_handling: if r == 0 {
            ErrorHandling::CleanUpOnly
        } else {
            ErrorHandling::NoHandling
        },
        ..opts(r)
    };
    let second = |pg: &ProcessGroup<MockBackend>, b: &mut HostBuf<f32>, r: u32| {
        let _stuck = (r < 2).then(|| pg.all_reduce(b, ReduceOp::Sum).unwrap());
        (r == 0).then(|| {
            let began = Instant::now();
            let rep = loop {
                if let Some(rep) = pg.desync_report() {
                    break rep;
                }
                assert!(began.elapsed() < Duration::from_secs(20), "no report");
                std::thread::sleep(Duration::from_millis(20));
            };
            while pg.comm_state() != Some(CommState::Aborted) {
                assert!(began.elapsed() < Duration::from_secs(20), "not aborted");
                std::thread::sleep(Duration::from_millis(20));
            }
            let later = pg.all_reduce(b, ReduceOp::Sum).map(|_| ());
            (rep, format!("{:?}", later.unwrap_err()))
        })
    };
    let seen = common::after_one_all_reduce(MockBackend::new(), 3, options, second);
    let (rep, later) = seen[0].as_ref().unwrap();
    assert!(
        rep.contains("collective #2 (all_reduce) timed out on rank 0"),
        "{rep}"
    );
    assert!(rep.contains("never joined it: 2 (last issued #1)"), "{rep}");
    assert!(rep.contains("joined but not finished: 0 1"), "{rep}");
    assert!(
        later.contains("ranks [2] never joined collective #2"),
        "{later}"
    );
}

/// The watchdog reads a group's works in stream order (newest done: all done; first running:
/// the later ones too). Behind an all_reduce that hangs (the fault plan), a later one and an
/// empty coalescing block (which still records its event on the stream) stay running through
/// the watchdog's passes, and all three fail once the group is aborted.
#[test]
fn works_behind_a_hung_one_stay_running() {
    let backend = common::mock_with(FaultPlan::new().hang_op(0, 0), 1);
    let pg = one_rank(backend, opts(0));
    let mut b = pg.upload(&[1.0f32]).unwrap();
    let hung = pg.all_reduce(&mut b, ReduceOp::Sum).unwrap();
    let behind = pg.all_reduce(&mut b, ReduceOp::Sum).unwrap();
    let empty = pg.coalesced(|_| Ok(())).unwrap();
    let dog = oxccl::watchdog::Watchdog::global();
    assert!(dog.flush(Duration::from_secs(10)));
    assert!(dog.flush(Duration::from_secs(10)));
    for (what, w) in [("hung", &hung), ("behind", &behind), ("empty", &empty)] {
        assert!(!w.is_completed(), "{what} was taken as done");
    }
    pg.abort("test over");
    for w in [&hung, &behind, &empty] {
        assert!(w.wait_timeout(Duration::from_secs(10)).is_err());
    }
}

/// Works completed by the newest one's event (no query of their own) still each reach the
/// completion hooks, in issue order, with a duration.
#[test]
fn every_work_completed_in_bulk_reaches_the_hooks_in_order() {
    let pg = one_rank(
        MockBackend::new(),
        PgOptions {
            timing: true,
            ..opts(0)
        },
    );
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let s = seen.clone();
    pg.on_completion(Box::new(move |done| {
        s.lock().unwrap().push(done.seq);
        Ok(())
    }))
    .unwrap();
    let mut b = pg.upload(&[1.0f32; 4]).unwrap();
    let works: Vec<_> = (0..300)
        .map(|_| pg.all_reduce(&mut b, ReduceOp::Sum).unwrap())
        .collect();
    works.last().unwrap().wait().unwrap();
    drop(works);
    let dog = oxccl::watchdog::Watchdog::global();
    let began = Instant::now();
    while seen.lock().unwrap().len() < 300 {
        assert!(began.elapsed() < Duration::from_secs(20), "hooks missing");
        assert!(dog.flush(Duration::from_secs(10)));
    }
    assert_eq!(*seen.lock().unwrap(), (1..=300).collect::<Vec<u64>>());
    assert!(pg.hook_errors().is_empty());
}

/// A work the watchdog saw complete stays completed when its communicator is aborted later,
/// though nobody had asked the work itself before the abort (the watchdog notes completions in
/// the group, not in each work).
#[test]
fn a_work_the_watchdog_saw_complete_stays_completed_after_an_abort() {
    let pg = one_rank(MockBackend::new(), opts(0));
    let mut b = pg.upload(&[1.0f32]).unwrap();
    let first = pg.all_reduce(&mut b, ReduceOp::Sum).unwrap();
    // The stream runs in order: once the second is done, so is the first.
    pg.all_reduce(&mut b, ReduceOp::Sum)
        .unwrap()
        .wait()
        .unwrap();
    let dog = oxccl::watchdog::Watchdog::global();
    assert!(dog.flush(Duration::from_secs(10)));
    pg.abort("test over");
    assert!(first.is_success());
    first.wait().unwrap();
    assert_eq!(first.error(), None);
    // A work issued after the abort fails (the abort did take).
    assert!(pg.all_reduce(&mut b, ReduceOp::Sum).is_err());
}
