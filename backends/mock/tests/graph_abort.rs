//! A communicator whose operations a live graph captured is aborted or dropped without
//! waiting for that graph (NCCL's own release waits for it; the NCCL backend then releases on
//! a detached thread): abort returns at once on every rank, the graph's launch is refused
//! (with the abort's reason), and dropping the graph afterwards is fine.

mod common;

use common::*;
use oxccl_core::{Capture, CommState, Communicator, DataType, Error, Graph, ReduceOp, Stream};
use oxccl_mock::World;
use std::time::{Duration, Instant};

#[test]
fn abort_and_drop_with_a_live_graph_do_not_wait_for_it() {
    let out = on_ranks(World::new(2).unwrap(), |c| {
        let s = stream();
        let mut b = Buf::from_bytes(&i64s(&[1]));
        s.begin_capture().unwrap();
        // SAFETY: `b` outlives every launch of the graph (none runs: the launch is refused).
        unsafe { all_reduce_in_place(&c, &s, &mut b, DataType::Int64, ReduceOp::Sum) }.unwrap();
        let g = s.end_capture().unwrap();
        let t = Instant::now();
        c.abort("case: aborted with a live graph");
        let aborted_in = t.elapsed();
        assert_eq!(c.state(), CommState::Aborted);
        // SAFETY: as above.
        let r = unsafe { g.replay(&s) };
        assert!(
            matches!(
                r,
                Err(Error::Aborted { .. }
                    | Error::InvalidState {
                        state: CommState::Aborted,
                        ..
                    })
            ),
            "{r:?}"
        );
        let t = Instant::now();
        drop(c);
        let dropped_in = t.elapsed();
        drop(g);
        s.synchronize().unwrap();
        aborted_in.max(dropped_in)
    });
    for took in out {
        assert!(took < Duration::from_secs(5), "took {took:?}");
    }
}
