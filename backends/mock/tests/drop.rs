//! Dropping streams and communicators never hangs, even with work that can never complete.

mod common;

use common::*;
use oxccl_core::{CommOp, Communicator};
use oxccl_mock::World;
use std::time::{Duration, Instant};

#[test]
fn dropping_a_stream_and_comm_blocked_in_a_collective_returns() {
    let mut comms = World::new(2).unwrap();
    let lonely = comms.remove(0);
    let s = stream();
    // SAFETY: a barrier has no buffers. Rank 1 never joins, so it can never complete.
    unsafe { lonely.issue(&CommOp::Barrier, &s) }.unwrap();
    let start = Instant::now();
    drop(s);
    drop(lonely);
    let took = start.elapsed();
    assert!(
        took < oxccl_mock::DROP_GRACE + Duration::from_secs(3),
        "{took:?}"
    );
    // The surviving rank sees its peer gone instead of hanging.
    let s = stream();
    // SAFETY: as above.
    unsafe { comms[0].issue(&CommOp::Barrier, &s) }.unwrap();
    let ok = eventually(Duration::from_secs(2), || comms[0].poll().is_err());
    assert!(ok, "{:?}", comms[0].poll());
}
