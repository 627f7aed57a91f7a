//! What a rank of a split across processes is told about its child.

use super::proc_id::ProcId;

/// Where one rank finds its child after a split across processes: the child's id (hosted by
/// the process of the child's rank 0), and the rank's rank in it and its size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
// Made by the transport (Linux only).
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) struct ChildSpec {
    pub id: ProcId,
    pub rank: u32,
    pub size: u32,
}
