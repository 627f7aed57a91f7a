//! A work's flight-recorder entry, recorded off the hot path: the issuing thread keeps what
//! the entry needs (a few words, no allocation), and the watchdog turns it into the ring's
//! record on its next pass, before it looks at the work, so dumps (also written by the
//! watchdog) see every operation in issue order.

use super::recorder::Recorder;
use oxccl_core::trace::{profiling_name, TensorMeta, TraceRecord};
use oxccl_core::{DataType, OpKind};

/// What a single operation's entry needs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PendingTrace {
    pub pg_id: u64,
    pub kind: OpKind,
    pub dtype: DataType,
    pub numel: (usize, usize),
    /// This process's global rank, and the peer's, for "nccl:send 1->0".
    pub rank: u32,
    pub peer: Option<u32>,
    pub seq: u64,
    pub p2p: bool,
    pub op_id: u64,
    pub created_ns: u64,
    pub timeout_ms: u64,
    pub timing: bool,
}

impl PendingTrace {
    fn record(&self) -> TraceRecord {
        let t = |n: usize| vec![TensorMeta::new(&[n as u64], self.dtype)];
        TraceRecord {
            pg_id: self.pg_id,
            collective_seq: if self.p2p { 0 } else { self.seq },
            p2p_seq: if self.p2p { self.seq } else { 0 },
            op_id: self.op_id,
            profiling_name: profiling_name(self.kind, self.rank, self.peer),
            inputs: t(self.numel.0),
            outputs: t(self.numel.1),
            time_created_ns: self.created_ns,
            timeout_ms: self.timeout_ms,
            is_p2p: self.p2p,
            timing: self.timing,
        }
    }
}

/// Where a work's entry is. The tag first (`repr(u8)`): the watchdog reads it of every work,
/// with the work's other first bytes.
#[derive(Debug)]
#[repr(u8)]
pub(crate) enum TraceSlot {
    /// Not recorded (the recorder is off).
    Off,
    /// To be recorded from these facts.
    Pending(PendingTrace),
    /// To be recorded as built (a coalesced block, whose sizes are a list).
    Built(Box<TraceRecord>),
    /// Recorded with this id.
    Recorded(u64),
}

impl TraceSlot {
    /// The entry's id if already recorded (records nothing).
    pub fn recorded(&self) -> Option<u64> {
        match *self {
            TraceSlot::Recorded(id) => Some(id),
            _ => None,
        }
    }

    /// When the operation was issued, if the entry to record says (its clock read is then the
    /// work's too: one per operation).
    pub fn created_ns(&self) -> Option<u64> {
        match self {
            TraceSlot::Pending(p) => Some(p.created_ns),
            TraceSlot::Built(r) => Some(r.time_created_ns),
            TraceSlot::Off | TraceSlot::Recorded(_) => None,
        }
    }

    /// Records the entry from its facts (a copy: the slot is left as it is) and returns its
    /// id: the watchdog's call, which keeps the id itself, so that it writes nothing into the
    /// work. An entry already recorded gives its id.
    pub fn record_copy(&self, recorder: &Recorder) -> Option<u64> {
        match self {
            TraceSlot::Off => None,
            TraceSlot::Recorded(id) => Some(*id),
            TraceSlot::Pending(p) => recorder.record(p.record()),
            TraceSlot::Built(r) => recorder.record((**r).clone()),
        }
    }

    /// Records a pending entry into `recorder` (once) and returns its id.
    pub fn settle(&mut self, recorder: &Recorder) -> Option<u64> {
        let id = match std::mem::replace(self, TraceSlot::Off) {
            TraceSlot::Off => None,
            TraceSlot::Recorded(id) => Some(id),
            TraceSlot::Pending(p) => recorder.record(p.record()),
            TraceSlot::Built(r) => recorder.record(*r),
        };
        if let Some(id) = id {
            *self = TraceSlot::Recorded(id);
        }
        id
    }
}
