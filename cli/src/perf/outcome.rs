//! What one run of the sweep produced, on NCCL or on the mock world.

use super::drive::Sample;
use serde_json::Value;

/// What one run produced: where it ran, and the merged samples (on the rank that reports).
pub struct Outcome {
    /// The first line: backend, ranks, and why this backend.
    pub head: Value,
    /// The merged samples, `None` on ranks other than 0 of a multi-process job.
    pub merged: Option<Vec<Sample>>,
    /// Ranks.
    pub n: u32,
}
