//! Device addresses of the parts of a buffer laid out by rank.

use oxccl_core::DataType;

/// Byte offset of element `i` of `dt` (lengths were checked, so this cannot overflow).
pub(super) fn at(addr: usize, i: usize, dt: DataType) -> usize {
    addr + i * dt.size()
}
