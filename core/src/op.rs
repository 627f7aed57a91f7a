//! One communication operation, described as data: what the checks validate, what a group
//! queues, what the flight recorder records and what a backend issues.
//!
//! Operations are built in one place, [`build`](crate::build): constructors from buffers on
//! [`CommOp`], and checked builders from NCCL's counts.

use crate::buf::{RawBuf, RawBufMut};
use crate::dtype::DataType;
use crate::reduce::ReduceOp;
use core::fmt;

/// A collective or point-to-point operation with its buffers. Counts come from the buffer
/// lengths (in elements of `dtype`); [`crate::check::op`] states the rules each one obeys.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CommOp<'a> {
    /// Reduce `send` across ranks into `recv` on every rank (same lengths; may be in place).
    AllReduce {
        /// Input.
        send: RawBuf,
        /// Output, as long as `send`.
        recv: RawBufMut,
        /// Element type.
        dtype: DataType,
        /// Reduction.
        op: ReduceOp,
    },
    /// Copy `send` of `root` into `recv` of every rank (`send` is read on the root only).
    Broadcast {
        /// Input (root only; pass `recv` as read for in place).
        send: RawBuf,
        /// Output on every rank.
        recv: RawBufMut,
        /// Element type.
        dtype: DataType,
        /// Rank whose data is sent.
        root: u32,
    },
    /// Reduce `send` across ranks into `recv` of `root`.
    Reduce {
        /// Input on every rank.
        send: RawBuf,
        /// Output (root only; may be empty elsewhere).
        recv: RawBufMut,
        /// Element type.
        dtype: DataType,
        /// Reduction.
        op: ReduceOp,
        /// Rank that receives the result.
        root: u32,
    },
    /// Concatenate every rank's `send` into `recv` (length `send.len × size`), by rank.
    AllGather {
        /// This rank's part.
        send: RawBuf,
        /// The whole, `size` parts.
        recv: RawBufMut,
        /// Element type.
        dtype: DataType,
    },
    /// Reduce `send` (length `recv.len × size`) across ranks; rank r keeps part r.
    ReduceScatter {
        /// The whole input, `size` parts.
        send: RawBuf,
        /// This rank's part of the result.
        recv: RawBufMut,
        /// Element type.
        dtype: DataType,
        /// Reduction.
        op: ReduceOp,
    },
    /// Part p of `send` goes to rank p; part q of `recv` comes from rank q (equal parts).
    AllToAll {
        /// `size` equal parts to send.
        send: RawBuf,
        /// `size` equal parts received.
        recv: RawBufMut,
        /// Element type.
        dtype: DataType,
    },
    /// All-to-all with uneven, contiguous parts: `send_counts[p]` elements to rank p,
    /// `recv_counts[q]` from rank q.
    AllToAllV {
        /// Parts to send, laid out by destination rank.
        send: RawBuf,
        /// Parts received, laid out by source rank.
        recv: RawBufMut,
        /// Element type.
        dtype: DataType,
        /// Elements sent to each rank (length `size`, summing to `send.len`).
        send_counts: &'a [usize],
        /// Elements received from each rank (length `size`, summing to `recv.len`).
        recv_counts: &'a [usize],
    },
    /// Every rank's `send` is concatenated into `recv` of `root`.
    Gather {
        /// This rank's part.
        send: RawBuf,
        /// `size` parts on the root; empty elsewhere.
        recv: RawBufMut,
        /// Element type.
        dtype: DataType,
        /// Rank that gathers.
        root: u32,
    },
    /// Part r of `send` on `root` goes to `recv` of rank r.
    Scatter {
        /// `size` parts on the root; empty elsewhere.
        send: RawBuf,
        /// This rank's part.
        recv: RawBufMut,
        /// Element type.
        dtype: DataType,
        /// Rank that scatters.
        root: u32,
    },
    /// All-gather of uneven parts: rank r contributes `counts[r]` elements.
    AllGatherV {
        /// This rank's part (`counts[rank]` elements).
        send: RawBuf,
        /// Every part, by rank (sum of `counts`).
        recv: RawBufMut,
        /// Element type.
        dtype: DataType,
        /// Part length of each rank.
        counts: &'a [usize],
    },
    /// Reduce-scatter of uneven parts: rank r keeps `counts[r]` elements of the result.
    ReduceScatterV {
        /// The whole input (sum of `counts`).
        send: RawBuf,
        /// This rank's part (`counts[rank]` elements).
        recv: RawBufMut,
        /// Element type.
        dtype: DataType,
        /// Reduction.
        op: ReduceOp,
        /// Part length of each rank.
        counts: &'a [usize],
    },
    /// Send `buf` to `peer`.
    Send {
        /// Data to send.
        buf: RawBuf,
        /// Element type.
        dtype: DataType,
        /// Destination rank.
        peer: u32,
    },
    /// Receive into `buf` from `peer`.
    Recv {
        /// Where to receive.
        buf: RawBufMut,
        /// Element type.
        dtype: DataType,
        /// Source rank.
        peer: u32,
    },
    /// Every rank waits for every other (a one-element all-reduce on backend scratch memory).
    Barrier,
}

/// The kind of a [`CommOp`], without its buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// [`CommOp::AllReduce`].
    AllReduce,
    /// [`CommOp::Broadcast`].
    Broadcast,
    /// [`CommOp::Reduce`].
    Reduce,
    /// [`CommOp::AllGather`].
    AllGather,
    /// [`CommOp::ReduceScatter`].
    ReduceScatter,
    /// [`CommOp::AllToAll`].
    AllToAll,
    /// [`CommOp::AllToAllV`].
    AllToAllV,
    /// [`CommOp::Gather`].
    Gather,
    /// [`CommOp::Scatter`].
    Scatter,
    /// [`CommOp::AllGatherV`].
    AllGatherV,
    /// [`CommOp::ReduceScatterV`].
    ReduceScatterV,
    /// [`CommOp::Send`].
    Send,
    /// [`CommOp::Recv`].
    Recv,
    /// [`CommOp::Barrier`].
    Barrier,
}

impl OpKind {
    /// Every kind, in declaration order (a stable index for wire formats and fuzz inputs).
    pub const ALL: [OpKind; 14] = [
        OpKind::AllReduce,
        OpKind::Broadcast,
        OpKind::Reduce,
        OpKind::AllGather,
        OpKind::ReduceScatter,
        OpKind::AllToAll,
        OpKind::AllToAllV,
        OpKind::Gather,
        OpKind::Scatter,
        OpKind::AllGatherV,
        OpKind::ReduceScatterV,
        OpKind::Send,
        OpKind::Recv,
        OpKind::Barrier,
    ];

    /// The snake_case name used in traces and messages ("all_reduce").
    pub const fn name(self) -> &'static str {
        match self {
            OpKind::AllReduce => "all_reduce",
            OpKind::Broadcast => "broadcast",
            OpKind::Reduce => "reduce",
            OpKind::AllGather => "all_gather",
            OpKind::ReduceScatter => "reduce_scatter",
            OpKind::AllToAll => "all_to_all",
            OpKind::AllToAllV => "all_to_all_v",
            OpKind::Gather => "gather",
            OpKind::Scatter => "scatter",
            OpKind::AllGatherV => "all_gather_v",
            OpKind::ReduceScatterV => "reduce_scatter_v",
            OpKind::Send => "send",
            OpKind::Recv => "recv",
            OpKind::Barrier => "barrier",
        }
    }

    /// Whether this is point-to-point (send or recv) rather than a collective.
    pub const fn is_p2p(self) -> bool {
        matches!(self, OpKind::Send | OpKind::Recv)
    }

    /// Whether this combines the elements of ranks with a reduction (all_reduce, reduce,
    /// reduce_scatter, reduce_scatter_v: the kinds that take a [`ReduceOp`]). Every other kind
    /// only moves elements, so their bytes arrive unchanged whatever type they are read as (a
    /// barrier's one-element all-reduce runs on backend scratch, not on a caller's type).
    pub const fn reduces(self) -> bool {
        matches!(
            self,
            OpKind::AllReduce | OpKind::Reduce | OpKind::ReduceScatter | OpKind::ReduceScatterV
        )
    }
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl CommOp<'_> {
    /// The buffers the operation reads and writes, [`RawBuf::EMPTY`] / [`RawBufMut::EMPTY`]
    /// where it has none (a send's buffer is its input, a receive's its output). Roots'
    /// buffers are listed on every rank: which rank touches which is the caller's rule.
    pub const fn buffers(&self) -> (RawBuf, RawBufMut) {
        match *self {
            CommOp::AllReduce { send, recv, .. }
            | CommOp::Broadcast { send, recv, .. }
            | CommOp::Reduce { send, recv, .. }
            | CommOp::AllGather { send, recv, .. }
            | CommOp::ReduceScatter { send, recv, .. }
            | CommOp::AllToAll { send, recv, .. }
            | CommOp::AllToAllV { send, recv, .. }
            | CommOp::Gather { send, recv, .. }
            | CommOp::Scatter { send, recv, .. }
            | CommOp::AllGatherV { send, recv, .. }
            | CommOp::ReduceScatterV { send, recv, .. } => (send, recv),
            CommOp::Send { buf, .. } => (buf, RawBufMut::EMPTY),
            CommOp::Recv { buf, .. } => (RawBuf::EMPTY, buf),
            CommOp::Barrier => (RawBuf::EMPTY, RawBufMut::EMPTY),
        }
    }

    /// The (address, bytes) of its input and of its output ([`CommOp::buffers`] in bytes of
    /// its element type; 0 bytes where it has none).
    pub fn byte_spans(&self) -> [(usize, usize); 2] {
        let size = self.dtype().map_or(0, DataType::size);
        let (send, recv) = self.buffers();
        [
            (send.addr, send.len.saturating_mul(size)),
            (recv.addr, recv.len.saturating_mul(size)),
        ]
    }

    /// What kind of operation this is.
    pub const fn kind(&self) -> OpKind {
        match self {
            CommOp::AllReduce { .. } => OpKind::AllReduce,
            CommOp::Broadcast { .. } => OpKind::Broadcast,
            CommOp::Reduce { .. } => OpKind::Reduce,
            CommOp::AllGather { .. } => OpKind::AllGather,
            CommOp::ReduceScatter { .. } => OpKind::ReduceScatter,
            CommOp::AllToAll { .. } => OpKind::AllToAll,
            CommOp::AllToAllV { .. } => OpKind::AllToAllV,
            CommOp::Gather { .. } => OpKind::Gather,
            CommOp::Scatter { .. } => OpKind::Scatter,
            CommOp::AllGatherV { .. } => OpKind::AllGatherV,
            CommOp::ReduceScatterV { .. } => OpKind::ReduceScatterV,
            CommOp::Send { .. } => OpKind::Send,
            CommOp::Recv { .. } => OpKind::Recv,
            CommOp::Barrier => OpKind::Barrier,
        }
    }

    /// The element type (`None` for a barrier).
    pub const fn dtype(&self) -> Option<DataType> {
        match self {
            CommOp::AllReduce { dtype, .. }
            | CommOp::Broadcast { dtype, .. }
            | CommOp::Reduce { dtype, .. }
            | CommOp::AllGather { dtype, .. }
            | CommOp::ReduceScatter { dtype, .. }
            | CommOp::AllToAll { dtype, .. }
            | CommOp::AllToAllV { dtype, .. }
            | CommOp::Gather { dtype, .. }
            | CommOp::Scatter { dtype, .. }
            | CommOp::AllGatherV { dtype, .. }
            | CommOp::ReduceScatterV { dtype, .. }
            | CommOp::Send { dtype, .. }
            | CommOp::Recv { dtype, .. } => Some(*dtype),
            CommOp::Barrier => None,
        }
    }

    /// The same operation on the same buffers with its elements read as `dtype` (a barrier
    /// stays itself). Lengths are counts of elements, so this describes the same bytes only when
    /// `dtype` has the size of the operation's own type (see [`crate::check::wire_op`]).
    pub const fn with_dtype(self, dtype: DataType) -> Self {
        let mut op = self;
        match &mut op {
            CommOp::AllReduce { dtype: d, .. }
            | CommOp::Broadcast { dtype: d, .. }
            | CommOp::Reduce { dtype: d, .. }
            | CommOp::AllGather { dtype: d, .. }
            | CommOp::ReduceScatter { dtype: d, .. }
            | CommOp::AllToAll { dtype: d, .. }
            | CommOp::AllToAllV { dtype: d, .. }
            | CommOp::Gather { dtype: d, .. }
            | CommOp::Scatter { dtype: d, .. }
            | CommOp::AllGatherV { dtype: d, .. }
            | CommOp::ReduceScatterV { dtype: d, .. }
            | CommOp::Send { dtype: d, .. }
            | CommOp::Recv { dtype: d, .. } => *d = dtype,
            CommOp::Barrier => {}
        }
        op
    }

    /// The reduction, for reducing operations.
    pub const fn reduce_op(&self) -> Option<&ReduceOp> {
        match self {
            CommOp::AllReduce { op, .. }
            | CommOp::Reduce { op, .. }
            | CommOp::ReduceScatter { op, .. }
            | CommOp::ReduceScatterV { op, .. } => Some(op),
            _ => None,
        }
    }

    /// The root of a rooted collective.
    pub const fn root(&self) -> Option<u32> {
        match self {
            CommOp::Broadcast { root, .. }
            | CommOp::Reduce { root, .. }
            | CommOp::Gather { root, .. }
            | CommOp::Scatter { root, .. } => Some(*root),
            _ => None,
        }
    }

    /// The peer of a send or recv.
    pub const fn peer(&self) -> Option<u32> {
        match self {
            CommOp::Send { peer, .. } | CommOp::Recv { peer, .. } => Some(*peer),
            _ => None,
        }
    }

    /// Elements read by this rank (PyTorch's `NumelIn`).
    pub const fn numel_in(&self) -> usize {
        match self {
            CommOp::AllReduce { send, .. }
            | CommOp::Broadcast { send, .. }
            | CommOp::Reduce { send, .. }
            | CommOp::AllGather { send, .. }
            | CommOp::ReduceScatter { send, .. }
            | CommOp::AllToAll { send, .. }
            | CommOp::AllToAllV { send, .. }
            | CommOp::Gather { send, .. }
            | CommOp::Scatter { send, .. }
            | CommOp::AllGatherV { send, .. }
            | CommOp::ReduceScatterV { send, .. } => send.len,
            CommOp::Send { buf, .. } => buf.len,
            CommOp::Recv { .. } => 0,
            CommOp::Barrier => 1,
        }
    }

    /// Elements written by this rank (PyTorch's `NumelOut`).
    pub const fn numel_out(&self) -> usize {
        match self {
            CommOp::AllReduce { recv, .. }
            | CommOp::Broadcast { recv, .. }
            | CommOp::Reduce { recv, .. }
            | CommOp::AllGather { recv, .. }
            | CommOp::ReduceScatter { recv, .. }
            | CommOp::AllToAll { recv, .. }
            | CommOp::AllToAllV { recv, .. }
            | CommOp::Gather { recv, .. }
            | CommOp::Scatter { recv, .. }
            | CommOp::AllGatherV { recv, .. }
            | CommOp::ReduceScatterV { recv, .. } => recv.len,
            CommOp::Recv { buf, .. } => buf.len,
            CommOp::Send { .. } => 0,
            CommOp::Barrier => 1,
        }
    }
}
