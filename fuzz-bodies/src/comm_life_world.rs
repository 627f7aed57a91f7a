//! The ranks `comm_life` drives, as the driver holds them, and the one collective they run:
//! what the driver and its split event (`comm_life_split`) share.

use oxccl_core::{CommOp, DataType, RawBuf, RawBufMut, ReduceOp};
use oxccl_mock::{MockAbort, MockComm, MockStream};
use std::time::Duration;

/// The bound on any wait the model says ends: past it, a hang.
pub(crate) const BOUND: Duration = Duration::from_secs(10);
/// Elements of each all-reduce.
pub(crate) const LEN: usize = 2;

/// One rank as the driver holds it.
pub(crate) struct Slot {
    /// The communicator, until destroyed.
    pub(crate) comm: Option<MockComm>,
    /// Its abort handle (outlives it: reads the final state).
    pub(crate) abort: MockAbort,
    /// The stream its collectives go on.
    pub(crate) stream: MockStream,
}

/// A collective's buffers: rank `r` contributes `[r + 1, 2 (r + 1)]`.
pub(crate) fn all_reduce_bufs(r: usize) -> (Box<[f32; LEN]>, Box<[f32; LEN]>) {
    let v = (r + 1) as f32;
    (Box::new([v, 2.0 * v]), Box::new([0.0; LEN]))
}

/// The all-reduce (sum) of `bufs`.
pub(crate) fn all_reduce_op(bufs: &mut (Box<[f32; LEN]>, Box<[f32; LEN]>)) -> CommOp<'static> {
    CommOp::AllReduce {
        send: RawBuf::new(bufs.0.as_ptr() as usize, LEN),
        recv: RawBufMut::new(bufs.1.as_mut_ptr() as usize, LEN),
        dtype: DataType::Float32,
        op: ReduceOp::Sum,
    }
}

/// What every rank's output holds after an all-reduce of `n` ranks that succeeded.
pub(crate) fn all_reduce_sum(n: usize) -> [f32; LEN] {
    let s = (n * (n + 1) / 2) as f32;
    [s, 2.0 * s]
}
