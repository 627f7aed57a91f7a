//! A collective's arguments as NCCL's calls take them, shaped once from the checked op: which
//! buffer's length is the count (the send buffer's for all_reduce, reduce, all_gather and
//! gather; the receive buffer's for broadcast, reduce_scatter and scatter; one peer's share
//! for all-to-all), the element type's code and the root. The plain calls ([`super::native`])
//! and the configured ones ([`super::configured`]) both take this shape.

use crate::codes::data_type;
use crate::ffi::Bufs;
use oxccl_core::CommOp;

/// The collectives NCCL has one call for (plain and, from 2.31, configured).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Coll {
    AllReduce,
    Broadcast,
    Reduce,
    AllGather,
    ReduceScatter,
    AllToAll,
    Gather,
    Scatter,
}

/// One call's arguments (the reduction handle and the communicator come from the issue).
#[derive(Debug, Clone, Copy)]
pub(super) struct Shaped {
    pub(super) coll: Coll,
    /// The buffers, count and element type.
    pub(super) bufs: Bufs,
    /// The root (0 where the call takes none).
    pub(super) root: i32,
}

/// `op` shaped for its NCCL call, on a communicator of `size` ranks; `None` for an operation
/// with no such call (send, recv, the barrier, the uneven variants).
pub(super) fn shape(op: &CommOp<'_>, size: usize) -> Option<Shaped> {
    let (coll, send, recv, count, dtype, root) = match *op {
        CommOp::AllReduce {
            send, recv, dtype, ..
        } => (Coll::AllReduce, send, recv, send.len, dtype, 0),
        CommOp::Broadcast {
            send,
            recv,
            dtype,
            root,
        } => (Coll::Broadcast, send, recv, recv.len, dtype, root),
        CommOp::Reduce {
            send,
            recv,
            dtype,
            root,
            ..
        } => (Coll::Reduce, send, recv, send.len, dtype, root),
        CommOp::AllGather { send, recv, dtype } => {
            (Coll::AllGather, send, recv, send.len, dtype, 0)
        }
        CommOp::ReduceScatter {
            send, recv, dtype, ..
        } => (Coll::ReduceScatter, send, recv, recv.len, dtype, 0),
        CommOp::AllToAll { send, recv, dtype } => {
            (Coll::AllToAll, send, recv, send.len / size.max(1), dtype, 0)
        }
        CommOp::Gather {
            send,
            recv,
            dtype,
            root,
        } => (Coll::Gather, send, recv, send.len, dtype, root),
        CommOp::Scatter {
            send,
            recv,
            dtype,
            root,
        } => (Coll::Scatter, send, recv, recv.len, dtype, root),
        _ => return None,
    };
    Some(Shaped {
        coll,
        bufs: Bufs {
            send: send.addr,
            recv: recv.addr,
            count,
            dtype: data_type(dtype),
        },
        // Checked against the size, which fits an i32.
        root: root as i32,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxccl_core::{DataType, RawBuf, RawBufMut, ReduceOp};

    #[test]
    fn the_count_is_the_buffer_nccl_counts_by() {
        let (s, r) = (RawBuf::new(0x100, 8), RawBufMut::new(0x200, 32));
        let dtype = DataType::Float32;
        let of = |op: CommOp<'_>| {
            let sh = shape(&op, 4).unwrap();
            (sh.coll, sh.bufs.count, sh.root)
        };
        let op = ReduceOp::Sum;
        assert_eq!(
            of(CommOp::AllReduce {
                send: s,
                recv: r,
                dtype,
                op
            }),
            (Coll::AllReduce, 8, 0)
        );
        assert_eq!(
            of(CommOp::AllGather {
                send: s,
                recv: r,
                dtype
            }),
            (Coll::AllGather, 8, 0)
        );
        assert_eq!(
            of(CommOp::Broadcast {
                send: s,
                recv: r,
                dtype,
                root: 3
            }),
            (Coll::Broadcast, 32, 3)
        );
        assert_eq!(
            of(CommOp::ReduceScatter {
                send: s,
                recv: r,
                dtype,
                op
            }),
            (Coll::ReduceScatter, 32, 0)
        );
        assert_eq!(
            of(CommOp::AllToAll {
                send: RawBuf::new(0x100, 32),
                recv: r,
                dtype
            }),
            (Coll::AllToAll, 8, 0)
        );
        assert_eq!(
            of(CommOp::Scatter {
                send: s,
                recv: r,
                dtype,
                root: 2
            }),
            (Coll::Scatter, 32, 2)
        );
        assert!(shape(&CommOp::Barrier, 4).is_none());
    }
}
