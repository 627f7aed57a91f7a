//! A stopped watchdog (c10d's shutdown) starts again with the next work of a group it watched
//! before: the group's ring, let go when it stopped, enrolls itself again, and the work is
//! recorded and seen complete. Alone in its binary: it stops the process's watchdog.

mod common;

use oxccl::watchdog::Watchdog;
use oxccl::ReduceOp;
use std::time::{Duration, Instant};

#[test]
fn a_stopped_watchdog_starts_again_with_the_next_work() {
    let (pg, recorder, mut buf) = common::watched_one_rank(64);
    let dog = Watchdog::global();
    dog.stop(Duration::from_secs(5));
    // Stopped: no pass is made.
    let stopped_at = dog.passes();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(dog.passes(), stopped_at);
    // One work (not a wake point of the ring): the watchdog runs again and records it.
    pg.all_reduce(&mut buf, ReduceOp::Sum)
        .unwrap()
        .wait()
        .unwrap();
    let began = Instant::now();
    while dog.passes() == stopped_at && began.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(
        dog.passes() > stopped_at,
        "the watchdog did not start again"
    );
    assert!(dog.flush(Duration::from_secs(10)));
    assert_eq!(dog.in_flight(), 0);
    let entries = recorder.lock().entries().count();
    assert_eq!(entries, 2, "both works recorded");
    assert_eq!(pg.download(&buf).unwrap(), vec![1.0f32, 2.0]);
}
