//! An operation's description as owned data: what every rank's share of a collective or a
//! p2p is matched and run by, wherever the job that carries it goes.

use oxccl_core::{CommOp, DataType, OpKind, RawBuf, RawBufMut, ReduceOp};

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
