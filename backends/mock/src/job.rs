//! An issued operation as owned data, ready to travel to a stream thread.

use crate::fault::FaultKind;
use crate::shared::CommShared;
use oxccl_core::{CommOp, DataType, OpKind, RawBuf, RawBufMut, ReduceOp};
use std::sync::Arc;

/// A [`CommOp`] without its borrowed count slices.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct OpDesc {
    pub kind: OpKind,
    pub dtype: Option<DataType>,
    pub op: Option<ReduceOp>,
    /// The root of a rooted collective.
    pub root: Option<u32>,
    /// The peer of a send or recv.
    pub peer: Option<u32>,
    /// What this rank reads (the buffer of a send).
    pub send: RawBuf,
    /// What this rank writes (the buffer of a recv).
    pub recv: RawBufMut,
    /// `counts` of the v-collectives, `send_counts` of all_to_all_v.
    pub counts: Vec<usize>,
    /// `recv_counts` of all_to_all_v.
    pub recv_counts: Vec<usize>,
}

impl OpDesc {
    /// The owned description of `op`.
    pub(crate) fn of(op: &CommOp<'_>) -> OpDesc {
        let (send, recv) = op.buffers();
        let (counts, recv_counts) = match *op {
            CommOp::AllToAllV {
                send_counts,
                recv_counts,
                ..
            } => (send_counts.to_vec(), recv_counts.to_vec()),
            CommOp::AllGatherV { counts, .. } | CommOp::ReduceScatterV { counts, .. } => {
                (counts.to_vec(), Vec::new())
            }
            _ => (Vec::new(), Vec::new()),
        };
        OpDesc {
            kind: op.kind(),
            dtype: op.dtype(),
            op: op.reduce_op().copied(),
            root: op.root(),
            peer: op.peer(),
            send,
            recv,
            counts,
            recv_counts,
        }
    }

    /// Bytes per element (0 for a barrier).
    pub(crate) fn elem(&self) -> usize {
        self.dtype.map_or(0, |t| t.size())
    }
}

/// One operation of one rank, queued for its stream.
pub(crate) struct Job {
    pub comm: Arc<CommShared>,
    pub rank: u32,
    pub desc: OpDesc,
    /// The collective sequence number, or the p2p sequence number of its (src, dst) pair.
    pub seq: u64,
    /// The 0-based index of the op on this rank (for the fault plan's messages).
    pub index: u64,
    /// A fault the stream applies when it reaches the op.
    pub fault: Option<FaultKind>,
}
