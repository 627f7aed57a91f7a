//! Whether a nonblocking call has finished: what polls of a communicator and of its abort
//! handle answer.

/// Whether a nonblocking call has finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// Finished successfully.
    Done,
    /// Still running (NCCL's `ncclInProgress`): poll again.
    InProgress,
}
