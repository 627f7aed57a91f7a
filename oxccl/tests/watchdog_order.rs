//! The flight recorder numbers entries in issue order across groups, though each group hands
//! its works to the watchdog through a ring of its own (src/watchdog): works of two groups
//! issued alternately are recorded alternately, on the mock world.

use oxccl::mock::MockBackend;
use oxccl::pg::{PgOptions, ProcessGroup};
use oxccl::recorder::Recorder;
use oxccl::rules::env::ErrorHandling;
use oxccl::store::{MemStore, Store};
use oxccl::ReduceOp;
use std::sync::Arc;
use std::time::Duration;

#[test]
fn entries_of_two_groups_are_numbered_in_issue_order() {
    let recorder = Recorder::new(100);
    let store: Arc<dyn Store> = Arc::new(MemStore::new());
    let opts = PgOptions {
        timeout: Duration::from_secs(30),
        error_handling: ErrorHandling::NoHandling,
        recorder: Some(recorder.clone()),
        ..PgOptions::default()
    };
    let a = ProcessGroup::new(MockBackend::new(), store, 0, 1, opts).unwrap();
    let b = a.new_group(&[0], None).unwrap();
    let (mut x, mut y) = (
        a.upload(&[1.0f32; 4]).unwrap(),
        b.upload(&[1.0f32; 4]).unwrap(),
    );
    // Six works, alternating groups, queued between two passes of the watchdog (the first
    // flush leaves it asleep for its period: nothing wakes it before 64 works).
    assert!(oxccl::watchdog::Watchdog::global().flush(Duration::from_secs(10)));
    let mut works = Vec::new();
    for _ in 0..3 {
        works.push(a.all_reduce(&mut x, ReduceOp::Sum).unwrap());
        works.push(b.all_reduce(&mut y, ReduceOp::Sum).unwrap());
    }
    for w in &works {
        w.wait().unwrap();
    }
    assert!(oxccl::watchdog::Watchdog::global().flush(Duration::from_secs(10)));
    let (ua, ub) = (a.uid(), b.uid());
    assert_ne!(ua, ub);
    let groups: Vec<u64> = recorder
        .lock()
        .entries()
        .filter(|e| e.record.pg_id == ua || e.record.pg_id == ub)
        .map(|e| e.record.pg_id)
        .collect();
    assert_eq!(groups, [ua, ub, ua, ub, ua, ub], "pg ids by record id");
    b.destroy();
    a.destroy();
}
