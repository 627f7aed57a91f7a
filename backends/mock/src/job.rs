//! An issued operation as owned data, ready to travel to a stream thread.

use crate::fault::FaultKind;
use crate::op_desc::OpDesc;
use crate::shared::CommShared;
use std::sync::Arc;

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
