//! A work's flight-recorder entry, recorded off the hot path: the issuing thread keeps what
//! the entry needs (a few words, no allocation), and the watchdog turns it into the ring's
//! record on its next pass, before it looks at the work, so dumps (also written by the
//! watchdog) see every operation in issue order.

use super::shared::Recorder;
use oxccl_core::state::work::WorkInfo;
use oxccl_core::{DataType, OpKind};
use oxccl_rules::recorder::{write_profiling_name, TensorMeta, TraceRecord};

/// What a single operation's entry needs that its work does not say (its work and its group
/// give the rest: [`TraceContext`]): a few words, kept by the work until recorded.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PendingTrace {
    /// The operation as the entry names it.
    pub kind: OpKind,
    pub dtype: DataType,
    /// The peer's global rank, for "nccl:send 1->0".
    pub peer: Option<u32>,
    pub op_id: u64,
}

/// What an entry takes from its work and its group.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TraceContext {
    pub pg_id: u64,
    /// This process's global rank.
    pub rank: u32,
    pub info: WorkInfo,
    /// When the work was issued (process clock, ns).
    pub created_ns: u64,
}

impl PendingTrace {
    /// Writes the entry into `r`, every field, keeping the allocations of its name and sizes
    /// (the record of the ring's entry it replaces: recording allocates nothing then).
    fn fill(&self, c: &TraceContext, r: &mut TraceRecord) {
        let p2p = matches!(c.info.kind, OpKind::Send | OpKind::Recv);
        r.pg_id = c.pg_id;
        r.collective_seq = if p2p { 0 } else { c.info.seq };
        r.p2p_seq = if p2p { c.info.seq } else { 0 };
        r.op_id = self.op_id;
        write_profiling_name(&mut r.profiling_name, self.kind, c.rank, self.peer);
        flat(&mut r.inputs, c.info.numel_in, self.dtype);
        flat(&mut r.outputs, c.info.numel_out, self.dtype);
        r.time_created_ns = c.created_ns;
        r.timeout_ms = c.info.timeout_ms;
        r.is_p2p = p2p;
        r.timing = c.info.timing;
    }

    #[cfg(test)]
    fn record(&self, c: &TraceContext) -> TraceRecord {
        let p2p = matches!(c.info.kind, OpKind::Send | OpKind::Recv);
        let t = |n: usize| vec![TensorMeta::new(&[n as u64], self.dtype)];
        TraceRecord {
            pg_id: c.pg_id,
            collective_seq: if p2p { 0 } else { c.info.seq },
            p2p_seq: if p2p { c.info.seq } else { 0 },
            op_id: self.op_id,
            profiling_name: oxccl_rules::recorder::profiling_name(self.kind, c.rank, self.peer),
            inputs: t(c.info.numel_in),
            outputs: t(c.info.numel_out),
            time_created_ns: c.created_ns,
            timeout_ms: c.info.timeout_ms,
            is_p2p: p2p,
            timing: c.info.timing,
        }
    }
}

/// `tensors` made one flat tensor of `n` elements of `dtype`, in the allocations it has.
fn flat(tensors: &mut Vec<TensorMeta>, n: usize, dtype: DataType) {
    tensors.truncate(1);
    match tensors.first_mut() {
        Some(t) => {
            t.sizes.clear();
            t.sizes.push(n as u64);
            t.dtype = dtype;
        }
        None => tensors.push(TensorMeta::new(&[n as u64], dtype)),
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

    /// When the operation was issued, if the entry to record says (a built one: its clock
    /// read is then the work's too, one per operation).
    pub fn created_ns(&self) -> Option<u64> {
        match self {
            TraceSlot::Built(r) => Some(r.time_created_ns),
            TraceSlot::Off | TraceSlot::Pending(_) | TraceSlot::Recorded(_) => None,
        }
    }

    /// Records the entry from its facts (a copy: the slot is left as it is) and returns its
    /// id: the watchdog's call, which keeps the id itself, so that it writes nothing into the
    /// work. An entry already recorded gives its id.
    pub fn record_copy(&self, recorder: &Recorder, c: &TraceContext) -> Option<u64> {
        match self {
            TraceSlot::Off => None,
            TraceSlot::Recorded(id) => Some(*id),
            TraceSlot::Pending(p) => recorder.record_with(|r| p.fill(c, r)),
            TraceSlot::Built(r) => recorder.record((**r).clone()),
        }
    }

    /// Records a pending entry into `recorder` (once) and returns its id.
    pub fn settle(&mut self, recorder: &Recorder, c: &TraceContext) -> Option<u64> {
        let id = match std::mem::replace(self, TraceSlot::Off) {
            TraceSlot::Off => None,
            TraceSlot::Recorded(id) => Some(id),
            TraceSlot::Pending(p) => recorder.record_with(|r| p.fill(c, r)),
            TraceSlot::Built(r) => recorder.record(*r),
        };
        if let Some(id) = id {
            *self = TraceSlot::Recorded(id);
        }
        id
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxccl_rules::recorder::{coalesced_name, profiling_name, TraceState};

    fn pending(
        kind: OpKind,
        peer: Option<u32>,
        seq: u64,
        numel: (usize, usize),
    ) -> (PendingTrace, TraceContext) {
        let p = PendingTrace {
            kind,
            dtype: DataType::Float16,
            peer,
            op_id: seq + 10,
        };
        let c = TraceContext {
            pg_id: 3,
            rank: 1,
            info: WorkInfo {
                seq,
                kind,
                coalesced: false,
                numel_in: numel.0,
                numel_out: numel.1,
                timeout_ms: 600_000,
                timing: seq.is_multiple_of(2),
            },
            created_ns: 1000 + seq,
        };
        (p, c)
    }

    #[test]
    fn entries_written_in_place_equal_entries_built_anew() {
        let recorder = Recorder::new(2);
        // Two entries whose records the next ones reuse: longer names, more tensors, other
        // states.
        let big = TraceRecord {
            pg_id: 9,
            collective_seq: 7,
            p2p_seq: 0,
            op_id: 70,
            profiling_name: coalesced_name(&[OpKind::AllReduce, OpKind::Broadcast]),
            inputs: vec![TensorMeta::new(&[2, 3, 4], DataType::Int64); 3],
            outputs: Vec::new(),
            time_created_ns: 5,
            timeout_ms: 1,
            is_p2p: false,
            timing: true,
        };
        for _ in 0..2 {
            let id = recorder.record(big.clone());
            recorder.complete(id, 99, Some(4));
        }
        let cases = [
            pending(OpKind::AllReduce, None, 1, (8, 8)),
            pending(OpKind::Send, Some(0), 2, (5, 0)),
            pending(OpKind::Recv, Some(2), 3, (0, 6)),
            pending(OpKind::AllGather, None, 4, (3, 6)),
            pending(OpKind::Barrier, None, 5, (0, 0)),
        ];
        for (p, c) in cases {
            let mut slot = TraceSlot::Pending(p);
            let id = slot.settle(&recorder, &c).expect("recorded");
            let ring = recorder.lock();
            let e = ring.get(id).expect("in the ring");
            assert_eq!(e.record, p.record(&c), "{:?}", p.kind);
            assert_eq!(
                e.record.profiling_name,
                profiling_name(p.kind, c.rank, p.peer)
            );
            assert_eq!(e.state, TraceState::Scheduled);
            assert_eq!(
                (e.time_discovered_completed_ns, e.duration_ns, e.retired),
                (None, None, false)
            );
        }
    }
}
