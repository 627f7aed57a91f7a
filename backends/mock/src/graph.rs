//! Graph capture on mock streams, with CUDA's rules, so that capture is testable without a GPU.
//!
//! While a [`MockStream`] captures, the operations submitted to it (one op, or its share of a
//! group) are recorded instead of queued; [`MockGraph::replay`] submits them again, in order,
//! each time. Every launch renumbers the recorded operations (collective and p2p sequence
//! numbers, the fault plan's op index) as if they were issued at that moment, which is how a
//! real graph's kernels meet their peers' in launch order.
//!
//! The calls CUDA forbids on a capturing stream are refused here too, and they invalidate the
//! capture (its end then returns [`CaptureError::Invalidated`]): synchronize, a wait on an event
//! recorded outside the capture, a host callback (the mock cannot replay a one-shot closure).
//! Events recorded during a capture are "captured": querying or synchronizing them is refused
//! at any time, as CUDA's are while the capture lasts.

use crate::capture::{capturing, Recording, Template};
use crate::exec;
use crate::fault::FaultKind;
use crate::job::Job;
use crate::shared::RankState;
use crate::stream::MockStream;
use crate::sync::lock;
use oxccl_core::text::text_str;
use oxccl_core::{text, CaptureError, Error, OpKind, Result};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// The next sequence number of an operation of `kind` (with `peer` for a send or recv) on
/// `rs`: per communicator for collectives, per (direction, peer) for p2p. Used at issue and
/// at each launch of a graph.
pub(crate) fn next_seq(rs: &RankState, kind: OpKind, peer: Option<u32>) -> u64 {
    match (kind, peer) {
        (OpKind::Send, Some(p)) | (OpKind::Recv, Some(p)) => {
            let mut seqs = lock(&rs.p2p_seq);
            let v = if kind == OpKind::Send {
                &mut seqs.0
            } else {
                &mut seqs.1
            };
            let s = v.entry(p).or_insert(0);
            let this = *s;
            // 2^64 messages on one pair cannot happen; wrapping keeps it panic-free anyway.
            *s = s.wrapping_add(1);
            this
        }
        _ => rs.coll_seq.fetch_add(1, Ordering::Relaxed),
    }
}

/// The recorded work of a capture on a [`MockStream`]: launch it on any mock stream, as many
/// times as wanted. Dropping it frees the recording; launches already made still run.
#[derive(Clone)]
pub struct MockGraph {
    batches: Arc<Vec<Vec<Template>>>,
}

impl std::fmt::Debug for MockGraph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockGraph")
            .field("batches", &self.batches.len())
            .field("ops", &self.ops())
            .finish()
    }
}

impl MockGraph {
    /// Operations recorded (each launch issues them all).
    pub fn ops(&self) -> usize {
        self.batches.iter().map(Vec::len).sum()
    }

    /// One recorded operation as a job numbered now, after the checks `issue` makes: a
    /// communicator that is no longer ready refuses, and the fault plan's `Fail` fails it.
    fn renumber(t: &Template) -> Result<Job> {
        let rs = t.comm.rank(t.rank);
        lock(&rs.life).cycle.ensure_ready("launch a graph")?;
        let index = rs.ops.fetch_add(1, Ordering::Relaxed);
        let fault = t.comm.plan.fault_for(t.rank, index);
        if let Some(FaultKind::Fail(code)) = fault {
            let e = Error::Backend {
                code,
                text: text_str(crate::messages::code_text(code)),
                last: text!(
                    "{} (op {index}, in a graph launch) on rank {} failed by the fault plan",
                    t.desc.kind,
                    t.rank
                ),
            };
            t.comm.fail(t.rank, e.clone());
            return Err(e);
        }
        Ok(Job {
            comm: t.comm.clone(),
            rank: t.rank,
            desc: t.desc.clone(),
            seq: next_seq(rs, t.desc.kind, t.desc.peer),
            index,
            fault,
        })
    }
}

impl oxccl_core::Capture for MockStream {
    type Graph = MockGraph;

    fn begin_capture(&self) -> Result<()> {
        let mut rec = lock(&self.shared().rec);
        if let Recording::On { .. } = *rec {
            return Err(CaptureError::AlreadyCapturing.error_str(
                "begin_capture on a mock stream that is capturing: captures do not nest",
            ));
        }
        *rec = Recording::On {
            batches: Vec::new(),
            invalid: None,
        };
        Ok(())
    }

    fn end_capture(&self) -> Result<MockGraph> {
        let rec = std::mem::take(&mut *lock(&self.shared().rec));
        match rec {
            Recording::Off => Err(CaptureError::NotCapturing
                .error_str("end_capture on a mock stream that is not capturing")),
            Recording::On {
                invalid: Some(first),
                ..
            } => Err(CaptureError::Invalidated.error(format_args!(
                "the capture saw a forbidden call, so no graph was made: {first}"
            ))),
            Recording::On { batches, .. } => Ok(MockGraph {
                batches: Arc::new(batches),
            }),
        }
    }

    fn is_capturing(&self) -> bool {
        capturing(&self.shared().rec)
    }
}

impl oxccl_core::Graph for MockGraph {
    type Stream = MockStream;

    /// Submits every recorded operation again, renumbered, in order. A communicator that
    /// failed or was aborted since refuses (as `issue` would) and the rest of the launch is
    /// not submitted.
    unsafe fn replay(&self, stream: &MockStream) -> Result<()> {
        if capturing(&stream.shared().rec) {
            return Err(oxccl_core::traits::forbidden("launching a graph"));
        }
        for batch in self.batches.iter() {
            let jobs = batch
                .iter()
                .map(MockGraph::renumber)
                .collect::<Result<_>>()?;
            exec::submit(stream.shared(), jobs)?;
        }
        Ok(())
    }
}
