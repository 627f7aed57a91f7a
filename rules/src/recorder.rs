//! The flight recorder: a ring of the last operations of every process group, with their sizes,
//! states and times, dumped when something hangs (PyTorch's trace buffer, dump format "2.10").
//!
//! Its capacity is chosen at run time (0 turns it off); when full, the oldest entry is
//! overwritten. Ids are handed out from 0 in record order, so an id tells whether its entry is
//! still held without a search. Serialization belongs to the std crate.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use oxccl_core::dtype::DataType;
use oxccl_core::op::OpKind;

/// The version of the dump format these entries describe.
pub const TRACE_FORMAT_VERSION: &str = "2.10";

/// What the events of an entry's work showed last. Ordered: a state only moves forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TraceState {
    /// Issued; not seen started (without timing, never seen started).
    Scheduled,
    /// Its start event completed.
    Started,
    /// Its end event completed.
    Completed,
}

impl TraceState {
    /// The name in dumps.
    pub const fn name(self) -> &'static str {
        match self {
            TraceState::Scheduled => "scheduled",
            TraceState::Started => "started",
            TraceState::Completed => "completed",
        }
    }
}

impl fmt::Display for TraceState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Shape and element type of one input or output tensor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorMeta {
    /// Its sizes, outermost first (`[3, 4]`); a flat buffer is `[len]`.
    pub sizes: Vec<u64>,
    /// Its element type.
    pub dtype: DataType,
}

impl TensorMeta {
    /// A tensor of `sizes` and `dtype`.
    pub fn new(sizes: &[u64], dtype: DataType) -> TensorMeta {
        TensorMeta {
            sizes: sizes.to_vec(),
            dtype,
        }
    }
}

/// A process group as dumps describe it (PyTorch's `pg_config`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgConfig {
    /// The group's uid (0 for the default group).
    pub id: u64,
    /// Its name.
    pub name: String,
    /// Its description ("default_pg", "undefined", …).
    pub desc: String,
    /// Its global ranks.
    pub ranks: Vec<u32>,
}

/// What the caller knows of an operation when it issues it (`Default`: every field empty or
/// zero, for [`FlightRecorder::record_with`] to fill).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TraceRecord {
    /// The process group's uid.
    pub pg_id: u64,
    /// The group's collective sequence number (0 for point-to-point).
    pub collective_seq: u64,
    /// The group's point-to-point sequence number (0 for collectives).
    pub p2p_seq: u64,
    /// The group's operation id (every operation, both kinds).
    pub op_id: u64,
    /// "nccl:all_reduce", "nccl:send 1->0": see [`profiling_name`] and [`coalesced_name`].
    pub profiling_name: String,
    /// Input tensors.
    pub inputs: Vec<TensorMeta>,
    /// Output tensors.
    pub outputs: Vec<TensorMeta>,
    /// When it was issued, in nanoseconds.
    pub time_created_ns: u64,
    /// Its timeout in milliseconds.
    pub timeout_ms: u64,
    /// Whether it is point-to-point.
    pub is_p2p: bool,
    /// Whether timing was on (start events recorded): only then are durations kept.
    pub timing: bool,
}

/// One entry of the ring.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceEntry {
    /// The record id (from 0, in record order, across all groups).
    pub id: u64,
    /// What was recorded.
    pub record: TraceRecord,
    /// What its events showed last.
    pub state: TraceState,
    /// When its start was first seen.
    pub time_discovered_started_ns: Option<u64>,
    /// When its completion was first seen.
    pub time_discovered_completed_ns: Option<u64>,
    /// How long it ran (timing only).
    pub duration_ns: Option<u64>,
    /// Whether its work has left the watchdog's queue: the entry no longer changes state.
    pub retired: bool,
}

impl TraceEntry {
    /// A new entry `id` of `record`, scheduled.
    fn scheduled(id: u64, record: TraceRecord) -> TraceEntry {
        TraceEntry {
            id,
            record,
            state: TraceState::Scheduled,
            time_discovered_started_ns: None,
            time_discovered_completed_ns: None,
            duration_ns: None,
            retired: false,
        }
    }
}

/// The profiling name of one operation issued by `rank`: "nccl:all_reduce",
/// "nccl:send 1->0" (rank 1 sends to 0), "nccl:recv 0<-1" (rank 0 receives from 1).
pub fn profiling_name(kind: OpKind, rank: u32, peer: Option<u32>) -> String {
    let mut name = String::new();
    write_profiling_name(&mut name, kind, rank, peer);
    name
}

/// [`profiling_name`] written into `out` (cleared first), keeping its allocation.
pub fn write_profiling_name(out: &mut String, kind: OpKind, rank: u32, peer: Option<u32>) {
    use core::fmt::Write;
    out.clear();
    // Writing into a `String` cannot fail.
    let _ = match (kind, peer) {
        (OpKind::Send, Some(p)) => write!(out, "nccl:send {rank}->{p}"),
        (OpKind::Recv, Some(p)) => write!(out, "nccl:recv {rank}<-{p}"),
        _ => write!(out, "nccl:{kind}"),
    };
}

/// The profiling name of a coalesced block: "nccl:all_reduce_coalesced" when every operation
/// is one kind, "nccl:coalesced" when they mix (or there are none).
pub fn coalesced_name(kinds: &[OpKind]) -> String {
    match kinds.split_first() {
        Some((first, rest)) if rest.iter().all(|k| k == first) => format!("nccl:{first}_coalesced"),
        _ => String::from("nccl:coalesced"),
    }
}

/// The ring of entries, and the configuration of the groups they belong to.
#[derive(Debug, Clone, Default)]
pub struct FlightRecorder {
    capacity: usize,
    // Slot `id % capacity` holds the entry with that id once the ring has wrapped.
    entries: Vec<TraceEntry>,
    next_id: u64,
    pgs: Vec<PgConfig>,
}

impl FlightRecorder {
    /// A ring of `capacity` entries; 0 records nothing. Memory grows with use, not up front.
    pub fn new(capacity: usize) -> FlightRecorder {
        FlightRecorder {
            capacity,
            entries: Vec::new(),
            next_id: 0,
            pgs: Vec::new(),
        }
    }

    /// How many entries it keeps.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Whether it records at all.
    pub fn is_enabled(&self) -> bool {
        self.capacity > 0
    }

    /// How many entries it holds now.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Adds a group's configuration, or replaces the one with the same id.
    pub fn add_pg(&mut self, pg: PgConfig) {
        match self.pgs.iter_mut().find(|p| p.id == pg.id) {
            Some(p) => *p = pg,
            None => self.pgs.push(pg),
        }
    }

    /// The groups' configurations, in the order added.
    pub fn pg_configs(&self) -> &[PgConfig] {
        &self.pgs
    }

    /// Records an operation as scheduled; its id, or `None` when the recorder is off (or, after
    /// 2^64 records, out of ids).
    pub fn record(&mut self, record: TraceRecord) -> Option<u64> {
        self.record_with(|r| *r = record)
    }

    /// Records what `fill` writes into a record, as [`FlightRecorder::record`]: once the ring
    /// is full, into the record of the entry it replaces, so that a steady flow of entries
    /// allocates nothing (its strings and vectors keep their capacity). `fill` sets every
    /// field.
    pub fn record_with(&mut self, fill: impl FnOnce(&mut TraceRecord)) -> Option<u64> {
        if self.capacity == 0 {
            return None;
        }
        let id = self.next_id;
        self.next_id = id.checked_add(1)?;
        if self.entries.len() < self.capacity {
            let mut record = TraceRecord::default();
            fill(&mut record);
            self.entries.push(TraceEntry::scheduled(id, record));
        } else if let Some(slot) = self.slot(id).and_then(|s| self.entries.get_mut(s)) {
            let record = core::mem::take(&mut slot.record);
            *slot = TraceEntry::scheduled(id, record);
            fill(&mut slot.record);
        }
        Some(id)
    }

    /// The entry with `id`, while the ring still holds it.
    pub fn get(&self, id: u64) -> Option<&TraceEntry> {
        self.slot(id)
            .and_then(|s| self.entries.get(s))
            .filter(|e| e.id == id)
    }

    /// Moves an entry forward to `state` seen at `now_ns` (the first time each of started and
    /// completed is seen is kept). `false` when the entry is gone or retired; a state behind
    /// the known one changes nothing.
    pub fn update_state(&mut self, id: u64, state: TraceState, now_ns: u64) -> bool {
        let Some(e) = self.get_mut(id) else {
            return false;
        };
        if e.retired {
            return false;
        }
        if state > e.state {
            e.state = state;
            match state {
                TraceState::Started => e.time_discovered_started_ns = Some(now_ns),
                TraceState::Completed => {
                    e.time_discovered_completed_ns = Some(now_ns);
                    // With timing the start event comes before the end event: a completion
                    // seen first is also the first sight of the start (as c10d's).
                    if e.record.timing && e.time_discovered_started_ns.is_none() {
                        e.time_discovered_started_ns = Some(now_ns);
                    }
                }
                TraceState::Scheduled => {}
            }
        }
        true
    }

    /// Records the measured duration of an entry recorded with timing. `false` when the entry
    /// is gone or was recorded without timing.
    pub fn set_duration(&mut self, id: u64, duration_ns: u64) -> bool {
        match self.get_mut(id) {
            Some(e) if e.record.timing => {
                e.duration_ns = Some(duration_ns);
                true
            }
            _ => false,
        }
    }

    /// Marks an entry's work as gone from the watchdog's queue. Idempotent; `false` when the
    /// entry is gone.
    pub fn retire(&mut self, id: u64) -> bool {
        match self.get_mut(id) {
            Some(e) => {
                e.retired = true;
                true
            }
            None => false,
        }
    }

    /// The entries, oldest first.
    pub fn entries(&self) -> impl Iterator<Item = &TraceEntry> {
        let start = if self.entries.len() < self.capacity {
            0
        } else {
            self.slot(self.next_id).unwrap_or(0)
        };
        let (newer, older) = self.entries.split_at(start.min(self.entries.len()));
        older.iter().chain(newer)
    }

    /// A copy of the entries, oldest first; with `only_active`, those not yet seen completed
    /// (as PyTorch's `onlyActive`).
    pub fn dump(&self, only_active: bool) -> Vec<TraceEntry> {
        self.entries()
            .filter(|e| !only_active || e.state != TraceState::Completed)
            .cloned()
            .collect()
    }

    /// The slot of `id` if the ring may still hold it (recorded, and not overwritten since).
    fn slot(&self, id: u64) -> Option<usize> {
        let cap = u64::try_from(self.capacity).ok().filter(|c| *c > 0)?;
        // `next_id` itself is asked by `entries` for the oldest slot; later ids never exist.
        if id > self.next_id || self.next_id - id > cap {
            return None;
        }
        usize::try_from(id % cap).ok()
    }

    fn get_mut(&mut self, id: u64) -> Option<&mut TraceEntry> {
        let s = self.slot(id)?;
        self.entries.get_mut(s).filter(|e| e.id == id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    const MS: u64 = 1_000_000;

    fn all_reduce(pg: u64, seq: u64, t: u64, timing: bool) -> TraceRecord {
        TraceRecord {
            pg_id: pg,
            collective_seq: seq,
            p2p_seq: 0,
            op_id: seq,
            profiling_name: profiling_name(OpKind::AllReduce, 0, None),
            inputs: vec![TensorMeta::new(&[3, 4], DataType::Float32)],
            outputs: vec![TensorMeta::new(&[3, 4], DataType::Float32)],
            time_created_ns: t,
            timeout_ms: 600_000,
            is_p2p: false,
            timing,
        }
    }

    #[test]
    fn capacity_zero_records_nothing() {
        let mut r = FlightRecorder::new(0);
        assert!(!r.is_enabled());
        assert_eq!(r.record(all_reduce(0, 1, 0, false)), None);
        assert!(r.is_empty());
        assert!(r.dump(false).is_empty());
        assert!(!r.update_state(0, TraceState::Completed, 1));
        assert!(!r.retire(0));
        assert_eq!(r.get(0), None);
    }

    // Seed 28: buffer 10, 12 ops → 10 entries, last seq − first seq = 9; after draining, the
    // last entry is retired and completed.
    #[test]
    fn full_ring_keeps_the_newest() {
        let mut r = FlightRecorder::new(10);
        let mut ids = Vec::new();
        for seq in 1..=12 {
            ids.push(r.record(all_reduce(0, seq, seq * MS, false)).unwrap());
        }
        assert_eq!(ids, (0..12).collect::<Vec<_>>());
        let d = r.dump(false);
        assert_eq!(d.len(), 10);
        let seqs: Vec<u64> = d.iter().map(|e| e.record.collective_seq).collect();
        assert_eq!(seqs, (3..=12).collect::<Vec<_>>());
        assert_eq!(seqs[9] - seqs[0], 9);
        // Overwritten ids are gone, held ones answer.
        assert_eq!(r.get(1), None);
        assert!(!r.update_state(1, TraceState::Completed, 0));
        assert_eq!(r.get(2).map(|e| e.record.collective_seq), Some(3));
        assert_eq!(r.get(12), None);
        // Drain: complete and retire everything held.
        for id in 2..12 {
            assert!(r.update_state(id, TraceState::Completed, 20 * MS));
            assert!(r.retire(id));
        }
        let last = r.dump(false).pop().unwrap();
        assert!(last.retired);
        assert_eq!(last.state, TraceState::Completed);
        assert_eq!(last.time_discovered_completed_ns, Some(20 * MS));
    }

    #[test]
    fn records_filled_in_place_match_records_moved_in() {
        // The same 12 records into two rings of 5, one by value, one filled in place (into
        // the replaced entries' records once full, each left completed and retired first).
        let (mut moved, mut filled) = (FlightRecorder::new(5), FlightRecorder::new(5));
        for seq in 1..=12 {
            let rec = all_reduce(seq % 3, seq, seq * MS, seq % 2 == 0);
            let a = moved.record(rec.clone());
            let b = filled.record_with(|r| {
                assert!(
                    seq <= 5 || r.inputs.len() == 1,
                    "a replaced record, as it was"
                );
                *r = rec.clone();
            });
            assert_eq!(a, b);
            let id = b.unwrap();
            for ring in [&mut moved, &mut filled] {
                ring.update_state(id, TraceState::Completed, seq * MS + 1);
                ring.retire(id);
            }
        }
        assert_eq!(moved.dump(false), filled.dump(false));
        let mut off = FlightRecorder::new(0);
        assert_eq!(off.record_with(|_| panic!("nothing to fill")), None);
        // A new entry is scheduled, whatever the replaced one was.
        let id = filled
            .record_with(|r| *r = all_reduce(0, 13, 13 * MS, false))
            .unwrap();
        let e = filled.get(id).unwrap();
        assert_eq!(
            (e.state, e.retired, e.duration_ns),
            (TraceState::Scheduled, false, None)
        );
    }

    // Seed 28: two all_reduces of a (3, 4) float32 tensor; duration only with timing.
    #[test]
    fn second_all_reduce_entry() {
        for timing in [false, true] {
            let mut r = FlightRecorder::new(10);
            for seq in 1..=2 {
                let id = r.record(all_reduce(0, seq, seq * MS, timing)).unwrap();
                if timing {
                    r.update_state(id, TraceState::Started, seq * MS + 1);
                }
                r.update_state(id, TraceState::Completed, seq * MS + 5);
                assert_eq!(r.set_duration(id, 4), timing);
                r.retire(id);
            }
            let e = r.dump(false).pop().unwrap();
            assert_eq!(e.id, 1);
            assert_eq!(e.record.collective_seq, 2);
            assert_eq!(e.record.profiling_name, "nccl:all_reduce");
            assert_eq!(
                e.record.inputs,
                vec![TensorMeta::new(&[3, 4], DataType::Float32)]
            );
            assert_eq!(e.record.outputs[0].dtype.name(), DataType::Float32.name());
            assert_eq!(e.record.timeout_ms, 600_000);
            assert_eq!(e.state.name(), "completed");
            assert_eq!(e.duration_ns.is_some(), timing);
            assert_eq!(e.time_discovered_started_ns.is_some(), timing);
            assert_eq!(e.time_discovered_completed_ns, Some(2 * MS + 5));
        }
    }

    // Seed 29: an unmatched second op reads started with timing, scheduled without; only-active
    // dumps keep the in-flight entries.
    #[test]
    fn states_and_only_active() {
        for timing in [false, true] {
            let mut r = FlightRecorder::new(10);
            let a = r.record(all_reduce(0, 1, 0, timing)).unwrap();
            r.update_state(a, TraceState::Completed, 1);
            let b = r.record(all_reduce(0, 2, 2, timing)).unwrap();
            if timing {
                r.update_state(b, TraceState::Started, 3);
            }
            let d = r.dump(false);
            assert_eq!(
                d[1].state,
                if timing {
                    TraceState::Started
                } else {
                    TraceState::Scheduled
                }
            );
            let active = r.dump(true);
            assert_eq!(active.len(), 1);
            assert_eq!(active[0].id, b);
        }
    }

    #[test]
    fn states_only_move_forward_and_retired_entries_freeze() {
        let mut r = FlightRecorder::new(2);
        let id = r.record(all_reduce(0, 1, 0, true)).unwrap();
        assert!(r.update_state(id, TraceState::Started, 5));
        assert!(r.update_state(id, TraceState::Started, 9));
        assert!(r.update_state(id, TraceState::Scheduled, 9));
        let e = r.get(id).unwrap();
        assert_eq!(
            (e.state, e.time_discovered_started_ns),
            (TraceState::Started, Some(5))
        );
        assert!(r.retire(id));
        assert!(r.retire(id));
        assert!(!r.update_state(id, TraceState::Completed, 10));
        assert_eq!(r.get(id).unwrap().state, TraceState::Started);
        // Completion seen without a seen start leaves the start unknown without timing; with
        // timing the start was seen then too.
        let id = r.record(all_reduce(0, 2, 0, false)).unwrap();
        assert!(r.update_state(id, TraceState::Completed, 7));
        assert_eq!(r.get(id).unwrap().time_discovered_started_ns, None);
        let id = r.record(all_reduce(0, 3, 0, true)).unwrap();
        assert!(r.update_state(id, TraceState::Completed, 8));
        assert_eq!(r.get(id).unwrap().time_discovered_started_ns, Some(8));
    }

    // Seed 29: p2p names with p2p seq and op id from 1.
    #[test]
    fn p2p_names_and_seqs() {
        assert_eq!(profiling_name(OpKind::Send, 1, Some(0)), "nccl:send 1->0");
        assert_eq!(profiling_name(OpKind::Recv, 0, Some(1)), "nccl:recv 0<-1");
        let mut r = FlightRecorder::new(4);
        let rec = TraceRecord {
            p2p_seq: 1,
            collective_seq: 0,
            op_id: 1,
            is_p2p: true,
            profiling_name: profiling_name(OpKind::Send, 1, Some(0)),
            ..all_reduce(0, 0, 0, false)
        };
        let id = r.record(rec).unwrap();
        let e = r.get(id).unwrap();
        assert_eq!(
            (e.record.p2p_seq, e.record.op_id, e.record.is_p2p),
            (1, 1, true)
        );
    }

    // Seed 29: a coalesced block is one entry with all its sizes.
    #[test]
    fn coalesced_block_is_one_entry() {
        assert_eq!(
            coalesced_name(&[OpKind::ReduceScatter, OpKind::ReduceScatter]),
            "nccl:reduce_scatter_coalesced"
        );
        assert_eq!(
            coalesced_name(&[OpKind::Send, OpKind::Recv]),
            "nccl:coalesced"
        );
        assert_eq!(coalesced_name(&[]), "nccl:coalesced");
        let mut r = FlightRecorder::new(4);
        let rec = TraceRecord {
            profiling_name: coalesced_name(&[OpKind::AllReduce; 3]),
            inputs: (1..=3)
                .map(|n| TensorMeta::new(&[n], DataType::Float16))
                .collect(),
            outputs: (1..=3)
                .map(|n| TensorMeta::new(&[n], DataType::Float16))
                .collect(),
            ..all_reduce(0, 1, 0, false)
        };
        r.record(rec).unwrap();
        let d = r.dump(false);
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].record.profiling_name, "nccl:all_reduce_coalesced");
        let sizes: Vec<&[u64]> = d[0]
            .record
            .inputs
            .iter()
            .map(|t| t.sizes.as_slice())
            .collect();
        assert_eq!(sizes, vec![&[1u64][..], &[2], &[3]]);
        assert_eq!(d[0].record.outputs.len(), 3);
    }

    #[test]
    fn entries_across_groups_in_record_order() {
        let mut r = FlightRecorder::new(3);
        for i in 0..7u64 {
            r.record(all_reduce(i % 2, i, i, false)).unwrap();
        }
        let ids: Vec<u64> = r.entries().map(|e| e.id).collect();
        assert_eq!(ids, vec![4, 5, 6]);
        let pgs: Vec<u64> = r.entries().map(|e| e.record.pg_id).collect();
        assert_eq!(pgs, vec![0, 1, 0]);
    }

    #[test]
    fn pg_configs_replace_by_id() {
        let mut r = FlightRecorder::new(1);
        let pg = |id, desc: &str| PgConfig {
            id,
            name: format!("{id}"),
            desc: desc.into(),
            ranks: vec![0, 1],
        };
        r.add_pg(pg(0, "default_pg"));
        r.add_pg(pg(1, "undefined"));
        r.add_pg(pg(0, "test_purpose"));
        let descs: Vec<&str> = r.pg_configs().iter().map(|p| p.desc.as_str()).collect();
        assert_eq!(descs, vec!["test_purpose", "undefined"]);
        assert_eq!(TRACE_FORMAT_VERSION, "2.10");
    }
}
