//! A buffer used by an operation is in use until the operation's work has run, whatever
//! path issued it: a copy to the host right after the call (no wait on the work) sees the
//! result. Coalesced operations run only when their block ends, so their buffers' stream
//! order is recorded then, not at the call that queued them; eager ones share the work's end
//! event with their buffers. Each operation under test is delayed by the mock's fault plan,
//! so a copy ordered before it would read the old values.

mod common;

use oxccl::buffer::HostBuf;
use oxccl::mock::{FaultPlan, MockBackend};
use oxccl::pg::{PgOptions, ProcessGroup};
use oxccl::{Device, ReduceOp};
use std::time::Duration;

const DELAY: Duration = Duration::from_millis(300);

fn opts(rank: u32) -> PgOptions {
    PgOptions {
        timeout: Duration::from_secs(30),
        device: Device(rank),
        ..PgOptions::default()
    }
}

/// Two ranks whose second operation (the one under test, after `after_one_all_reduce`'s
/// first) is delayed; `then` runs it on the buffer (2.0 everywhere after the first) and
/// returns what a download right after shows.
fn two_ranks_delayed<F>(then: F) -> Vec<Vec<f32>>
where
    F: Fn(&ProcessGroup<MockBackend>, &mut HostBuf<f32>, u32) -> Vec<f32> + Clone + Send + 'static,
{
    let plan = FaultPlan::new().delay_op(0, 1, DELAY).delay_op(1, 1, DELAY);
    common::after_one_all_reduce(common::mock_with(plan, 1), 2, opts, then)
}

#[test]
fn a_download_after_a_coalescing_block_sees_its_result() {
    let got = two_ranks_delayed(|pg, b, _| {
        let mut block = pg.start_coalescing().unwrap();
        block.all_reduce(b, ReduceOp::Sum).unwrap();
        let work = block.end().unwrap();
        let got = pg.download(b).unwrap();
        drop(work);
        got
    });
    assert_eq!(got, vec![vec![4.0f32; 8]; 2]);
}

#[test]
fn a_download_after_a_dropped_block_sees_its_result() {
    // Dropping the block without `end` still launches the batch (the backend group is
    // closed): its buffers are in use until that work ran.
    let got = two_ranks_delayed(|pg, b, _| {
        let mut block = pg.start_coalescing().unwrap();
        block.all_reduce(b, ReduceOp::Sum).unwrap();
        drop(block);
        pg.download(b).unwrap()
    });
    assert_eq!(got, vec![vec![4.0f32; 8]; 2]);
}

#[test]
fn a_download_after_an_eager_operation_sees_its_result() {
    // The work (whose end event the buffer shares) is dropped before the copy.
    let got = two_ranks_delayed(|pg, b, _| {
        drop(pg.all_reduce(b, ReduceOp::Sum).unwrap());
        pg.download(b).unwrap()
    });
    assert_eq!(got, vec![vec![4.0f32; 8]; 2]);
}

#[test]
fn a_batch_of_sends_and_receives_orders_its_buffers() {
    let got = two_ranks_delayed(|pg, b, rank| {
        let peer = 1 - rank;
        let mut out = pg.upload(&[0.0f32; 8]).unwrap();
        {
            let mut ops = [
                oxccl::pg::P2pOp::Send(&*b, peer),
                oxccl::pg::P2pOp::Recv(&mut out, peer),
            ];
            drop(pg.batch_isend_irecv(&mut ops).unwrap());
        }
        pg.download(&out).unwrap()
    });
    assert_eq!(got, vec![vec![2.0f32; 8]; 2]);
}
