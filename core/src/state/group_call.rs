//! Groups and coalescing blocks: nesting depth, the pinned communicator, the queued operations,
//! the mixing rules, and recovery when an operation inside fails.
//!
//! Every [`GroupState::start`] stands for one backend `group_start` and every successful
//! [`GroupState::end`] for one `group_end`, so the depth here is always the number of
//! `group_end` calls the backend still owes. The caller records an operation with
//! [`GroupState::enqueue`] *before* issuing it; when issuing fails, [`GroupState::fail`] closes
//! everything and says how many `group_end` calls to make (PyTorch leaves the block open in
//! that case and every later call fails; oxccl recovers).

use crate::comm_state::CommState;
use crate::dtype::DataType;
use crate::error::Error;
use crate::op::{CommOp, OpKind};
use crate::reduce::{ReduceOp, Scalar};
use crate::text::text;
use core::fmt;

/// Default number of operations one block can queue.
pub const GROUP_CAPACITY: usize = 256;

/// Deepest nesting accepted: far beyond real use, it bounds a runaway loop of starts.
pub const MAX_GROUP_DEPTH: u32 = 1024;

/// What kind of block the outermost start opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GroupKind {
    /// An NCCL group (`ncclGroupStart`/`End`): operations may span communicators.
    Group,
    /// PyTorch's `start_coalescing`/`end_coalescing`: the first operation pins a communicator,
    /// collectives and point-to-point may mix on it, and the block ends as one work.
    Coalescing,
    /// PyTorch's coalescing manager: operations are recorded, not issued, and flushed at the end
    /// as one fused call; so all are all_reduce, all_gather or reduce_scatter, of one kind, one
    /// element type and one reduction.
    Fused,
}

impl GroupKind {
    /// Lower-case name.
    pub const fn name(self) -> &'static str {
        match self {
            GroupKind::Group => "group",
            GroupKind::Coalescing => "coalescing block",
            GroupKind::Fused => "fused coalescing block",
        }
    }

    /// The call that opens this kind of block, as PyTorch users know it.
    pub const fn start_call(self) -> &'static str {
        match self {
            GroupKind::Group => "group_start",
            GroupKind::Coalescing | GroupKind::Fused => "start_coalescing",
        }
    }

    /// The call that closes this kind of block.
    pub const fn end_call(self) -> &'static str {
        match self {
            GroupKind::Group => "group_end",
            GroupKind::Coalescing | GroupKind::Fused => "end_coalescing",
        }
    }

    /// Whether the block pins one communicator.
    pub const fn pins_comm(self) -> bool {
        !matches!(self, GroupKind::Group)
    }
}

impl fmt::Display for GroupKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a block remembers of one operation: enough for the mixing rules, the work's
/// `NumelIn`/`NumelOut` and the flight recorder, without its buffers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OpSummary {
    /// The operation.
    pub kind: OpKind,
    /// Element type (`None` for a barrier).
    pub dtype: Option<DataType>,
    /// Elements read by this rank.
    pub numel_in: usize,
    /// Elements written by this rank.
    pub numel_out: usize,
    /// The reduction, for reducing operations.
    pub reduce: Option<ReduceOp>,
    /// Root of a rooted collective.
    pub root: Option<u32>,
    /// Peer of a send or recv.
    pub peer: Option<u32>,
}

impl OpSummary {
    /// The summary of `op`.
    pub fn of(op: &CommOp<'_>) -> OpSummary {
        OpSummary {
            kind: op.kind(),
            dtype: op.dtype(),
            numel_in: op.numel_in(),
            numel_out: op.numel_out(),
            reduce: op.reduce_op().copied(),
            root: op.root(),
            peer: op.peer(),
        }
    }

    /// The reduction's name ("sum", "premul_sum"), if any.
    pub fn reduce_name(&self) -> Option<&'static str> {
        self.reduce.as_ref().map(ReduceOp::name)
    }
}

/// One queued operation and the communicator it runs on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Queued {
    /// The communicator's key (the caller's choice: an address, a uid).
    pub comm: u64,
    /// The operation.
    pub op: OpSummary,
}

/// How [`GroupState::end`] left things.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// An inner end: the backend makes its `group_end`; the block stays open at `depth`.
    Nested {
        /// Depth left.
        depth: u32,
    },
    /// The outermost end with nothing queued: the backend makes its `group_end`, and there is
    /// no work to create and nothing to flush.
    Empty {
        /// The kind of block closed.
        kind: GroupKind,
    },
    /// The outermost end of a block with operations: the backend makes its `group_end` (after
    /// the fused call, for [`GroupKind::Fused`]) and creates one work for `ops` operations,
    /// readable with [`GroupState::queued`] until the next block opens.
    Flushed {
        /// The kind of block closed.
        kind: GroupKind,
        /// The first communicator used (the pinned one, for coalescing kinds).
        comm: u64,
        /// Whether operations ran on more than one communicator (only a
        /// [`GroupKind::Group`] allows it).
        spans_comms: bool,
        /// How many operations were queued.
        ops: usize,
    },
}

/// What [`GroupState::fail`] did: the state is closed again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recovery {
    /// How many `group_end` calls the backend must still make (the depth that was open).
    pub group_ends: u32,
    /// The kind of block that was open, if any.
    pub kind: Option<GroupKind>,
    /// How many queued operations were dropped.
    pub dropped: usize,
}

/// A refused group transition. Converts into [`Error`] (see the `From` impl for the mapping).
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
pub enum GroupError {
    /// An end with no block open.
    #[error("{} called before {}: no {} is open", .kind.end_call(), .kind.start_call(), .kind)]
    EndWithoutStart {
        /// The kind the end was for.
        kind: GroupKind,
    },
    /// An end of another kind than the block open at this depth.
    #[error("{} called to close a {open}", .ended.end_call())]
    KindMismatch {
        /// The kind open at this depth.
        open: GroupKind,
        /// The kind the end was for.
        ended: GroupKind,
    },
    /// A coalescing block may only be the outermost block.
    #[error("a {inner} cannot be opened inside a {outer}")]
    Nested {
        /// The kind already open.
        outer: GroupKind,
        /// The kind that was asked for.
        inner: GroupKind,
    },
    /// Nesting beyond [`MAX_GROUP_DEPTH`].
    #[error("groups nested deeper than {max}")]
    TooDeep {
        /// The limit.
        max: u32,
    },
    /// An operation was queued with no block open.
    #[error("{kind} queued with no group or coalescing block open")]
    NotOpen {
        /// The operation.
        kind: OpKind,
    },
    /// A coalescing block got an operation on another communicator than the one it pinned.
    #[error("a coalescing block runs on one communicator: pinned {pinned:#x}, got {got:#x}")]
    CommMismatch {
        /// The pinned communicator.
        pinned: u64,
        /// The communicator of the refused operation.
        got: u64,
    },
    /// The block already holds as many operations as it can.
    #[error("a block holds at most {capacity} operations")]
    QueueFull {
        /// The capacity.
        capacity: usize,
    },
    /// A fused block only takes all_reduce, all_gather and reduce_scatter.
    #[error(
        "{kind} cannot be fused: a fused block takes all_reduce, all_gather or reduce_scatter"
    )]
    NotFusable {
        /// The refused operation.
        kind: OpKind,
    },
    /// A fused block got a second kind of operation.
    #[error("a fused block cannot mix {first} with {got}")]
    MixedKinds {
        /// The kind of the first operation.
        first: OpKind,
        /// The kind of the refused one.
        got: OpKind,
    },
    /// A fused block got a second reduction (or a premul-sum with another factor).
    #[error("a fused block cannot mix reductions: {first} then {got}")]
    MixedReduceOps {
        /// The first operation's reduction.
        first: &'static str,
        /// The refused operation's reduction.
        got: &'static str,
    },
    /// A fused block got a second element type: tensors with different dtypes.
    #[error("a fused block cannot mix tensors with different dtypes: {first} then {got}")]
    MixedDtypes {
        /// The first operation's type.
        first: DataType,
        /// The refused operation's type.
        got: DataType,
    },
}

impl From<GroupError> for Error {
    /// Misuse of the block structure (end without start, wrong kind, nesting) is
    /// [`Error::InvalidState`] with the communicator `Ready` (the block, not the communicator,
    /// is in the wrong state); refused operations are [`Error::InvalidArgument`] naming `comm`,
    /// `op` or `dtype`.
    fn from(e: GroupError) -> Error {
        let state = |attempted| Error::InvalidState {
            state: CommState::Ready,
            attempted,
            reason: text(format_args!("{e}")),
        };
        let arg = |arg| Error::InvalidArgument {
            arg,
            expected: text(format_args!("{e}")),
        };
        match e {
            GroupError::EndWithoutStart { kind } | GroupError::KindMismatch { ended: kind, .. } => {
                state(kind.end_call())
            }
            GroupError::Nested { inner, .. } => state(inner.start_call()),
            GroupError::TooDeep { .. } => state("group_start"),
            GroupError::NotOpen { .. } => state("queue an operation"),
            GroupError::CommMismatch { .. } => arg("comm"),
            GroupError::MixedDtypes { .. } => arg("dtype"),
            GroupError::QueueFull { .. }
            | GroupError::NotFusable { .. }
            | GroupError::MixedKinds { .. }
            | GroupError::MixedReduceOps { .. } => arg("op"),
        }
    }
}

/// The group state of one thread (NCCL's group depth is per thread): closed, or a block open
/// at some depth with its queued operations. `N` bounds the operations of one block.
#[derive(Debug, Clone)]
pub struct GroupState<const N: usize = GROUP_CAPACITY> {
    depth: u32,
    kind: Option<GroupKind>,
    first_comm: Option<u64>,
    spans_comms: bool,
    queued: heapless::Vec<Queued, N>,
}

impl<const N: usize> Default for GroupState<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> GroupState<N> {
    /// Closed, nothing queued.
    pub const fn new() -> Self {
        GroupState {
            depth: 0,
            kind: None,
            first_comm: None,
            spans_comms: false,
            queued: heapless::Vec::new(),
        }
    }

    /// How many starts are not yet ended (0 when closed).
    pub fn depth(&self) -> u32 {
        self.depth
    }

    /// Whether a block is open.
    pub fn is_open(&self) -> bool {
        self.depth > 0
    }

    /// The kind of the outermost open block.
    pub fn kind(&self) -> Option<GroupKind> {
        self.kind
    }

    /// The communicator pinned by an open coalescing block (the first one used in a group).
    pub fn comm(&self) -> Option<u64> {
        self.first_comm
    }

    /// The operations of the open block, or of the block last closed until the next opens.
    pub fn queued(&self) -> &[Queued] {
        &self.queued
    }

    /// Opens a block (outermost) or nests one more level. Only a [`GroupKind::Group`] nests
    /// inside an open block: that is what an operation made of grouped calls does.
    pub fn start(&mut self, kind: GroupKind) -> Result<u32, GroupError> {
        match self.kind {
            Some(outer) if self.depth > 0 => {
                if kind != GroupKind::Group {
                    return Err(GroupError::Nested { outer, inner: kind });
                }
            }
            _ => {
                // A new outermost block: forget the last block's operations.
                self.kind = Some(kind);
                self.first_comm = None;
                self.spans_comms = false;
                self.queued.clear();
            }
        }
        let depth = self
            .depth
            .checked_add(1)
            .filter(|d| *d <= MAX_GROUP_DEPTH)
            .ok_or(GroupError::TooDeep {
                max: MAX_GROUP_DEPTH,
            })?;
        self.depth = depth;
        Ok(depth)
    }

    /// Records `op` on communicator `comm`, to be issued right after (or, in a fused block,
    /// at the end). Refused operations leave the state unchanged.
    pub fn enqueue(&mut self, comm: u64, op: OpSummary) -> Result<(), GroupError> {
        let kind = match self.kind {
            Some(k) if self.depth > 0 => k,
            _ => return Err(GroupError::NotOpen { kind: op.kind }),
        };
        if let Some(pinned) = self.first_comm {
            if kind.pins_comm() && pinned != comm {
                return Err(GroupError::CommMismatch { pinned, got: comm });
            }
        }
        if kind == GroupKind::Fused {
            fusable_after(self.queued.first().map(|q| &q.op), &op)?;
        }
        self.queued
            .push(Queued { comm, op })
            .map_err(|_| GroupError::QueueFull { capacity: N })?;
        match self.first_comm {
            None => self.first_comm = Some(comm),
            Some(c) if c != comm => self.spans_comms = true,
            Some(_) => {}
        }
        Ok(())
    }

    /// Closes one level. At depth 1 (the outermost) the kind must be the one opened; deeper,
    /// it must be [`GroupKind::Group`].
    pub fn end(&mut self, kind: GroupKind) -> Result<Ended, GroupError> {
        let open = match self.kind {
            Some(k) if self.depth > 0 => k,
            _ => return Err(GroupError::EndWithoutStart { kind }),
        };
        let at_this_depth = if self.depth > 1 {
            GroupKind::Group
        } else {
            open
        };
        if kind != at_this_depth {
            return Err(GroupError::KindMismatch {
                open: at_this_depth,
                ended: kind,
            });
        }
        self.depth = self.depth.saturating_sub(1); // > 0, checked above
        if self.depth > 0 {
            return Ok(Ended::Nested { depth: self.depth });
        }
        self.kind = None;
        Ok(match self.first_comm {
            None => Ended::Empty { kind: open },
            Some(comm) => Ended::Flushed {
                kind: open,
                comm,
                spans_comms: self.spans_comms,
                ops: self.queued.len(),
            },
        })
    }

    /// An operation inside failed (or the caller gives up on the block): back to closed with
    /// nothing queued. Never fails; when closed already there is nothing to end.
    pub fn fail(&mut self) -> Recovery {
        let r = Recovery {
            group_ends: self.depth,
            kind: if self.depth > 0 { self.kind } else { None },
            dropped: if self.depth > 0 { self.queued.len() } else { 0 },
        };
        *self = Self::new();
        r
    }
}

/// Whether `next` may join a fused block whose first operation is `first`.
fn fusable_after(first: Option<&OpSummary>, next: &OpSummary) -> Result<(), GroupError> {
    if !matches!(
        next.kind,
        OpKind::AllReduce | OpKind::AllGather | OpKind::ReduceScatter
    ) {
        return Err(GroupError::NotFusable { kind: next.kind });
    }
    let Some(first) = first else { return Ok(()) };
    if first.kind != next.kind {
        return Err(GroupError::MixedKinds {
            first: first.kind,
            got: next.kind,
        });
    }
    if let (Some(a), Some(b)) = (first.dtype, next.dtype) {
        if a != b {
            return Err(GroupError::MixedDtypes { first: a, got: b });
        }
    }
    match (&first.reduce, &next.reduce) {
        (Some(a), Some(b)) if !same_reduction(a, b) => Err(GroupError::MixedReduceOps {
            first: a.name(),
            got: b.name(),
        }),
        _ => Ok(()),
    }
}

/// Reductions are the same when one fused call can apply both: same operator and, for
/// premul-sum, the same factor bit for bit (a NaN factor equals itself here).
fn same_reduction(a: &ReduceOp, b: &ReduceOp) -> bool {
    match (a, b) {
        (ReduceOp::PreMulSum(x), ReduceOp::PreMulSum(y)) => match (x, y) {
            (Scalar::Host(p), Scalar::Host(q)) => {
                p.dtype() == q.dtype() && p.to_ne_bytes() == q.to_ne_bytes()
            }
            (Scalar::Device { addr: p }, Scalar::Device { addr: q }) => p == q,
            _ => false,
        },
        _ => a.name() == b.name(),
    }
}

#[cfg(test)]
mod tests;
