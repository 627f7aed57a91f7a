//! The watchdog's pace under a tight issuing loop, on the mock world: it sleeps between the
//! wakes an issuing thread gives it every 64 works instead of passing without pause while
//! works are queued (each pass queries events beside the issuing threads' driver calls), and
//! still watches every work. Alone in its binary: the process's watchdog counts only these.

use oxccl::mock::MockBackend;
use oxccl::pg::{PgOptions, ProcessGroup};
use oxccl::store::{MemStore, Store};
use oxccl::watchdog::Watchdog;
use oxccl::ReduceOp;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[test]
fn a_tight_loop_wakes_the_watchdog_about_once_per_64_works() {
    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    let opts = PgOptions {
        timeout: Duration::from_secs(60),
        ..PgOptions::default()
    };
    let pg = ProcessGroup::new(MockBackend::new(), store, 0, 1, opts).unwrap();
    let mut buf = pg.upload(&[1.0f32, 2.0]).unwrap();
    // The communicator made and the watchdog running before the count starts.
    pg.all_reduce(&mut buf, ReduceOp::Sum)
        .unwrap()
        .wait()
        .unwrap();
    let dog = Watchdog::global();
    assert!(dog.flush(Duration::from_secs(10)));
    const WORKS: u64 = 4096;
    let before = dog.passes();
    let began = Instant::now();
    for _ in 0..WORKS {
        drop(pg.all_reduce(&mut buf, ReduceOp::Sum).unwrap());
    }
    let passes = dog.passes() - before;
    let took = began.elapsed();
    // A pass per 64 works, one per period (100 ms) the loop lasted, and a few more for wakes
    // that came while a pass ran or a ring was a quarter full. (On this project's 2-core
    // build machine: 53-58 passes; 96-271 when the watchdog passed again whenever a work was
    // queued.)
    let bound = WORKS / 64 + took.as_millis() as u64 / 100 + 16;
    assert!(
        passes <= bound,
        "{passes} passes for {WORKS} works in {took:?} (at most {bound} expected)"
    );
    // It kept up: the values right (a sum of one rank leaves the buffer as it was), and once
    // they ran, a pass finds no work still to watch.
    pg.all_reduce(&mut buf, ReduceOp::Sum)
        .unwrap()
        .wait()
        .unwrap();
    assert_eq!(pg.download(&buf).unwrap(), vec![1.0f32, 2.0]);
    assert!(dog.flush(Duration::from_secs(10)));
    assert_eq!(dog.in_flight(), 0);
    pg.destroy();
}
