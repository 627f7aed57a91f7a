//! What an operation is, as the process group's issue path, its tune table and its errors
//! see it.

use oxccl_core::{DataType, OpKind};

/// What an operation is, for its work, its trace entry and its errors.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OpFacts {
    pub kind: OpKind,
    pub dtype: DataType,
    /// Elements read and written on this rank.
    pub numel: (usize, usize),
    /// The group rank of the peer of a send or recv.
    pub peer: Option<u32>,
}
