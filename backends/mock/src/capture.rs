//! What a stream records while it captures a graph, and the rules a capturing stream keeps:
//! submitted work is recorded instead of queued, and the calls CUDA forbids during a capture
//! are refused and invalidate it (see `graph` for the capture and its launches).

use crate::job::Job;
use crate::op_desc::OpDesc;
use crate::shared::CommShared;
use crate::sync::lock;
use oxccl_core::{Error, Result};
use std::sync::{Arc, Mutex};

/// One recorded operation of one rank: what to submit again at each launch.
#[derive(Clone)]
pub(crate) struct Template {
    pub comm: Arc<CommShared>,
    pub rank: u32,
    pub desc: OpDesc,
}

/// What a stream records while it captures.
#[derive(Default)]
pub(crate) enum Recording {
    /// Not capturing.
    #[default]
    Off,
    /// Capturing: the batches submitted so far, and the first forbidden call, if any.
    On {
        batches: Vec<Vec<Template>>,
        invalid: Option<Box<Error>>,
    },
}

/// Records `jobs` when the stream of `rec` captures (`None`: nothing left to submit); gives them back
/// otherwise.
pub(crate) fn intercept(rec: &Mutex<Recording>, jobs: Vec<Job>) -> Option<Vec<Job>> {
    let mut rec = lock(rec);
    match &mut *rec {
        Recording::Off => Some(jobs),
        Recording::On { batches, .. } => {
            batches.push(
                jobs.into_iter()
                    .map(|j| Template {
                        comm: j.comm,
                        rank: j.rank,
                        desc: j.desc,
                    })
                    .collect(),
            );
            None
        }
    }
}

/// `Ok` when the stream of `rec` is not capturing; otherwise the capture is invalidated (its first
/// forbidden call is kept) and the refusal of `what` returned.
pub(crate) fn refuse_while_capturing(rec: &Mutex<Recording>, what: &str) -> Result<()> {
    let mut rec = lock(rec);
    match &mut *rec {
        Recording::Off => Ok(()),
        Recording::On { invalid, .. } => {
            let e = oxccl_core::traits::forbidden(what);
            invalid.get_or_insert_with(|| Box::new(e.clone()));
            Err(e)
        }
    }
}

/// Whether the stream of `rec` captures now.
pub(crate) fn capturing(rec: &Mutex<Recording>) -> bool {
    matches!(*lock(rec), Recording::On { .. })
}
