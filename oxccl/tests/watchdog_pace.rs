//! The watchdog's pace under a tight issuing loop, on the mock world: it makes about one pass
//! per 64 works (the issuing thread's wakes), sleeping between them even with works queued,
//! and still records and watches every work. A bound, not a race: a watchdog that passes
//! again whenever a work is queued fails it only when the watchdog gets a core to itself,
//! as on an idle build machine. Alone in its binary: the process's watchdog counts only these.

mod common;

use oxccl::watchdog::Watchdog;
use oxccl::ReduceOp;
use std::time::{Duration, Instant};

#[test]
fn a_tight_loop_wakes_the_watchdog_about_once_per_64_works() {
    // The communicator made and the watchdog running before the count starts.
    let (pg, recorder, mut buf) = common::watched_one_rank(8192);
    let dog = Watchdog::global();
    const WORKS: u64 = 4096;
    let before = dog.passes();
    let began = Instant::now();
    for _ in 0..WORKS {
        drop(pg.all_reduce(&mut buf, ReduceOp::Sum).unwrap());
    }
    let passes = dog.passes() - before;
    let took = began.elapsed();
    // A pass per 64 works, one per period (100 ms) the loop lasted, and a few more for wakes
    // that came while a pass ran or a ring was a quarter full.
    let bound = WORKS / 64 + took.as_millis() as u64 / 100 + 16;
    assert!(
        passes <= bound,
        "{passes} passes for {WORKS} works in {took:?} (at most {bound} expected)"
    );
    // It kept up: the values right (a sum of one rank leaves the buffer as it was), and once
    // they ran, a pass finds no work still to watch and every one recorded.
    pg.all_reduce(&mut buf, ReduceOp::Sum)
        .unwrap()
        .wait()
        .unwrap();
    assert_eq!(pg.download(&buf).unwrap(), vec![1.0f32, 2.0]);
    assert!(dog.flush(Duration::from_secs(10)));
    assert_eq!(dog.in_flight(), 0);
    // Every work was taken from the ring and recorded: the warm-up, the loop, the last one.
    assert_eq!(recorder.lock().len() as u64, WORKS + 2);
    pg.destroy();
}
