//! Graph capture of the process group on the mock world (ranks as threads): the cases of
//! `capture_cases/` (values after launches, refusals with their exact variants, coalescing,
//! graphs dropped, work states), and the mock stream's own capture rules, which mirror CUDA's
//! so that a forbidden call inside a capture fails here in CI, not first on a GPU.

mod capture_cases;
mod common;

use capture_cases::{run, Body};
use oxccl::core::{Capture, CaptureError, Communicator, Event, Graph, Stream};
use oxccl::mock::{FaultPlan, MockBackend, MockStream, World};
use oxccl::{CommOp, CommState, DataType, Error, RawBufMut, ReduceOp, ResultCode};

fn case(name: &str) -> Body<MockBackend> {
    capture_cases::all::<MockBackend>()
        .into_iter()
        .find(|(n, _)| *n == name)
        .map(|(_, b)| b)
        .expect("case exists")
}

#[test]
fn values_after_launches_two_and_three_ranks() {
    run(2, case("values_after_launches"));
    run(3, case("values_after_launches"));
}

#[test]
fn values_after_launches_one_rank() {
    run(1, case("values_after_launches"));
}

#[test]
fn premul_sum_doubles_per_launch() {
    run(1, case("premul_sum_doubles_per_launch"));
    run(2, case("premul_sum_doubles_per_launch"));
}

#[test]
fn coalesced_block_in_a_capture() {
    run(2, case("coalesced_block_in_a_capture"));
}

#[test]
fn mixed_dtypes_bound_one_by_one() {
    run(2, case("mixed_dtypes_bound_one_by_one"));
}

#[test]
fn comm_buffers_in_their_mode() {
    run(1, case("comm_buffers_in_their_mode"));
    run(2, case("comm_buffers_in_their_mode"));
    run(3, case("comm_buffers_in_their_mode"));
}

#[test]
fn refusals() {
    run(2, case("refusals"));
}

#[test]
fn graph_dropped_before_and_after_launch() {
    run(2, case("graph_dropped_before_and_after_launch"));
}

#[test]
fn lazy_communicator_made_before_capture() {
    run(2, case("lazy_communicator_made_before_capture"));
}

#[test]
fn launch_work_timed_and_watched() {
    run(2, case("launch_work_timed_and_watched"));
}

#[test]
fn launch_on_aborted_or_destroyed_group() {
    run(1, case("launch_on_aborted_or_destroyed_group"));
}

fn kind<T: std::fmt::Debug>(r: oxccl::Result<T>) -> CaptureError {
    common::capture_error(r).0
}

#[test]
fn mock_stream_capture_rules() {
    let s = MockStream::new().unwrap();
    assert_eq!(kind(s.end_capture()), CaptureError::NotCapturing);
    s.begin_capture().unwrap();
    assert!(s.is_capturing());
    assert_eq!(kind(s.begin_capture()), CaptureError::AlreadyCapturing);
    // An event recorded inside is captured: the host may not ask it.
    let ev = s.record(false).unwrap();
    assert_eq!(kind(ev.query()), CaptureError::Forbidden);
    assert_eq!(kind(ev.synchronize()), CaptureError::Forbidden);
    // Waiting on it from the capturing stream is its own order: allowed.
    s.wait_event(&ev).unwrap();
    let g = s.end_capture().unwrap();
    assert_eq!(g.ops(), 0);
    assert!(!s.is_capturing());
    // SAFETY: the graph has no operation, so no buffer.
    unsafe { g.replay(&s).unwrap() };
    s.synchronize().unwrap();
}

#[test]
fn forbidden_calls_invalidate_the_capture() {
    let outside = MockStream::new().unwrap();
    let before = outside.record(false).unwrap();
    let s = MockStream::new().unwrap();
    // A synchronize.
    s.begin_capture().unwrap();
    assert_eq!(kind(s.synchronize()), CaptureError::Forbidden);
    assert_eq!(kind(s.end_capture()), CaptureError::Invalidated);
    assert!(!s.is_capturing(), "ended even though invalidated");
    // A wait on an event recorded outside the capture (cudarc's tracking would do this).
    s.begin_capture().unwrap();
    assert_eq!(kind(s.wait_event(&before)), CaptureError::Forbidden);
    assert_eq!(kind(s.end_capture()), CaptureError::Invalidated);
    // A host callback (cannot be replayed).
    s.begin_capture().unwrap();
    assert_eq!(kind(s.host_fn(|| ())), CaptureError::Forbidden);
    assert_eq!(kind(s.end_capture()), CaptureError::Invalidated);
    // Launching on a capturing stream.
    s.begin_capture().unwrap();
    let empty = outside.end_capture();
    assert_eq!(kind(empty), CaptureError::NotCapturing);
    outside.begin_capture().unwrap();
    let g = outside.end_capture().unwrap();
    // SAFETY: no operation, no buffer.
    assert_eq!(kind(unsafe { g.replay(&s) }), CaptureError::Forbidden);
    s.end_capture().unwrap();
    s.synchronize().unwrap();
}

/// The raw communicator captured directly: a graph of one all-reduce on two ranks, launched
/// three times, renumbers its collective at each launch (the ranks meet every time).
#[test]
fn raw_comm_graph_replays_renumbered() {
    let comms = World::new(2).unwrap();
    let threads: Vec<_> = comms
        .into_iter()
        .map(|c| {
            std::thread::spawn(move || {
                let s = c.new_stream().unwrap();
                let mut data = vec![1.0f32 + c.rank() as f32; 4];
                let op = CommOp::AllReduce {
                    send: RawBufMut::new(data.as_mut_ptr() as usize, 4).as_read(),
                    recv: RawBufMut::new(data.as_mut_ptr() as usize, 4),
                    dtype: DataType::Float32,
                    op: ReduceOp::Sum,
                };
                s.begin_capture().unwrap();
                // SAFETY: `data` outlives every launch below, which are synchronized.
                unsafe { c.issue(&op, &s).unwrap() };
                let g = s.end_capture().unwrap();
                assert_eq!(g.ops(), 1);
                s.synchronize().unwrap();
                assert_eq!(
                    data,
                    vec![1.0f32 + c.rank() as f32; 4],
                    "not run at capture"
                );
                for _ in 0..3 {
                    // SAFETY: as above.
                    unsafe { g.replay(&s).unwrap() };
                }
                s.synchronize().unwrap();
                c.poll().unwrap();
                data
            })
        })
        .collect();
    for t in threads {
        // 3, then 6, then 12.
        assert_eq!(t.join().unwrap(), vec![12.0f32; 4]);
    }
}

/// The fault plan numbers a graph's operations at each launch, as if issued then: op 0 is the
/// capture's issue, ops 1 and 2 the first two launches. Failing op 2 fails the second launch
/// with the planned code and the communicator with it; a third launch is refused.
#[test]
fn fault_plan_reaches_graph_launches() {
    let code = ResultCode(6);
    let mut comms = World::builder(1)
        .faults(FaultPlan::new().fail_op(0, 2, code))
        .build()
        .unwrap();
    let c = comms.remove(0);
    let s = c.new_stream().unwrap();
    let mut data = vec![5i32; 3];
    let op = CommOp::AllReduce {
        send: RawBufMut::new(data.as_mut_ptr() as usize, 3).as_read(),
        recv: RawBufMut::new(data.as_mut_ptr() as usize, 3),
        dtype: DataType::Int32,
        op: ReduceOp::Sum,
    };
    s.begin_capture().unwrap();
    // SAFETY: `data` outlives the launches, which are synchronized below.
    unsafe { c.issue(&op, &s).unwrap() };
    let g = s.end_capture().unwrap();
    // SAFETY: as above.
    unsafe { g.replay(&s).unwrap() };
    s.synchronize().unwrap();
    // SAFETY: as above.
    let second = unsafe { g.replay(&s) };
    assert!(
        matches!(&second, Err(Error::Backend { code: c2, .. }) if *c2 == code),
        "{second:?}"
    );
    assert_eq!(c.state(), CommState::Failed);
    // SAFETY: as above.
    let third = unsafe { g.replay(&s) };
    assert!(
        matches!(third, Err(Error::InvalidState { .. })),
        "{third:?}"
    );
    s.synchronize().unwrap();
    assert_eq!(data, vec![5i32; 3], "one rank: the sum is the value");
}
