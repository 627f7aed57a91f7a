//! The ring on its own: a stream whose progress the test sets, a communicator whose state it
//! sets, no watchdog thread (the tests make its passes).

use super::*;
use crate::recorder::Recorder;
use crate::store::MemStore;
use crate::watchdog::group_watch::WatchConfig;
use oxccl_core::Progress;
use oxccl_core::{Error, OpKind, Result};
use oxccl_rules::env::ErrorHandling;
use oxccl_rules::recorder::{TraceRecord, TraceState};

/// An end reached once the stream's progress gets to its mark; queries are counted.
struct Mark {
    progress: Arc<AtomicU64>,
    queries: Arc<AtomicU64>,
    at: u64,
}

impl Event for Mark {
    fn query(&self) -> Result<bool> {
        self.queries.fetch_add(1, Ordering::SeqCst);
        Ok(self.progress.load(Ordering::SeqCst) >= self.at)
    }
    fn synchronize(&self) -> Result<()> {
        Ok(())
    }
    fn elapsed_ms(&self, _: &Self) -> Result<f32> {
        Ok(0.0)
    }
}

#[derive(Clone)]
struct Abort(Arc<Mutex<CommState>>);

impl CommAbort for Abort {
    fn abort(&self, _: &str) {
        *self.0.lock().unwrap() = CommState::Aborted;
    }
    fn state(&self) -> CommState {
        *self.0.lock().unwrap()
    }
    fn poll(&self) -> Result<Progress> {
        match self.state() {
            CommState::Aborted => Err(Error::Aborted {
                reason: oxccl_core::text!("aborted by the test"),
            }),
            _ => Ok(Progress::Done),
        }
    }
}

const MS: u64 = 1_000_000;

struct World {
    ring: WorkRing<Mark, Abort>,
    progress: Arc<AtomicU64>,
    queries: Arc<AtomicU64>,
    state: Arc<Mutex<CommState>>,
    recorder: Recorder,
}

fn world() -> World {
    let recorder = Recorder::new(10_000);
    let watch = GroupWatch::new(WatchConfig {
        uid: 7,
        desc: "test".into(),
        global_rank: 0,
        mode: ErrorHandling::NoHandling,
        dump_on_timeout: false,
        recorder: recorder.clone(),
        store: Arc::new(MemStore::new()),
        wait_timeout_dump: std::time::Duration::from_secs(1),
        desync: None,
    });
    let state = Arc::new(Mutex::new(CommState::Ready));
    let home = Arc::new(WorkHome::new(watch, Some(Abort(state.clone())), None));
    World {
        ring: WorkRing::new(home),
        progress: Arc::new(AtomicU64::new(0)),
        queries: Arc::new(AtomicU64::new(0)),
        state,
        recorder,
    }
}

impl World {
    /// Places a 1 ms-timeout all_reduce issued at `created_ns`, ending at the stream's
    /// progress `at`.
    fn write(&self, seq: u64, created_ns: u64, timeout_ms: u64) -> u64 {
        let info = WorkInfo {
            seq,
            kind: OpKind::AllReduce,
            coalesced: false,
            numel_in: 2,
            numel_out: 2,
            timeout_ms,
            timing: false,
        };
        let trace = TraceSlot::Built(Box::new(TraceRecord {
            pg_id: 7,
            collective_seq: seq,
            p2p_seq: 0,
            op_id: seq,
            profiling_name: "nccl:all_reduce".into(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            time_created_ns: created_ns,
            timeout_ms,
            is_p2p: false,
            timing: false,
        }));
        let end = Mark {
            progress: self.progress.clone(),
            queries: self.queries.clone(),
            at: seq,
        };
        self.ring.write(info, created_ns, end, trace)
    }

    fn pass(&self, now: u64) -> Vec<(Arc<dyn Watched>, Option<u64>)> {
        let mut out = Vec::new();
        self.ring.pass(now, &mut out);
        out
    }

    fn states(&self) -> Vec<TraceState> {
        self.recorder.lock().entries().map(|e| e.state).collect()
    }
}

#[test]
fn the_ring_grows_past_its_slots_and_keeps_every_work() {
    let w = world();
    let n = FIRST_SLOTS as u64 * 4 + 3;
    for seq in 1..=n {
        assert_eq!(w.write(seq, seq, 60_000), seq);
    }
    // Nothing ended: every work is still held, none lost to a reused slot.
    assert!(w.pass(n).is_empty());
    assert_eq!(w.ring.home.done_upto(), 0);
    assert_eq!(w.ring.read().live, n as usize);
    assert_eq!(w.ring.poll(1, 1, n, None), Ok(false));
    w.progress.store(n - 1, Ordering::SeqCst);
    w.pass(n);
    assert_eq!(w.ring.home.done_upto(), n - 1);
    assert_eq!(w.ring.poll(n - 1, n - 1, n, None), Ok(true));
    assert_eq!(w.ring.poll(n, n, n, None), Ok(false));
    w.progress.store(n, Ordering::SeqCst);
    w.pass(n);
    assert!(w.ring.idle());
    let states = w.states();
    assert_eq!(states.len(), n as usize);
    assert!(
        states.iter().all(|s| *s == TraceState::Completed),
        "{states:?}"
    );
}

#[test]
fn the_newest_end_vouches_for_older_ones_and_the_scan_stops_at_a_running_one() {
    let w = world();
    for seq in 1..=10 {
        w.write(seq, seq, 60_000);
    }
    w.progress.store(6, Ordering::SeqCst);
    w.pass(100);
    assert_eq!(w.ring.home.done_upto(), 6);
    assert_eq!(w.ring.read().live, 4);
    assert_eq!(w.ring.poll(3, 3, 100, None), Ok(true));
    assert_eq!(w.ring.poll(7, 7, 100, None), Ok(false));
    let states = w.states();
    assert_eq!(states[..6], [TraceState::Completed; 6]);
    assert_eq!(states[6..], [TraceState::Scheduled; 4]);
    // Slots of done works are written again (the ring does not grow): 500 more in 256.
    w.progress.store(10, Ordering::SeqCst);
    for seq in 11..=510 {
        w.write(seq, seq, 60_000);
        w.progress.store(seq, Ordering::SeqCst);
        if seq % 100 == 0 {
            w.pass(1000);
        }
    }
    // SAFETY: no other thread holds the ring: the watch was dropped above.
    assert_eq!(unsafe { (&*w.ring.slots.get()).len() }, FIRST_SLOTS);
}

#[test]
fn works_past_their_deadline_are_handed_out_and_time_out_alone() {
    let w = world();
    w.write(1, 0, 1);
    w.write(2, 0, 1);
    w.write(3, 5 * MS, 60_000);
    let out = w.pass(3 * MS);
    // The two past their 1 ms leave the ring with their recorder entries; the third stays.
    assert_eq!(out.len(), 2);
    assert!(out.iter().all(|(_, id)| id.is_some()));
    assert_eq!(w.ring.read().live, 1);
    for place in [1, 2] {
        let err = w.ring.poll(place, 0, 3 * MS, None).unwrap_err();
        assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
        assert!(w.ring.handed_out(place).is_some());
    }
    // The stream passing them later does not undo their failure.
    w.progress.store(3, Ordering::SeqCst);
    w.pass(4 * MS);
    assert_eq!(w.ring.home.done_upto(), 3);
    assert!(w.ring.poll(1, 0, 4 * MS, None).is_err());
    assert_eq!(w.ring.poll(3, 5 * MS, 4 * MS, None), Ok(true));
}

#[test]
fn a_failed_communicator_hands_out_every_running_work() {
    let w = world();
    for seq in 1..=5 {
        w.write(seq, seq, 60_000);
    }
    w.progress.store(2, Ordering::SeqCst);
    *w.state.lock().unwrap() = CommState::Aborted;
    let out = w.pass(100);
    // Nothing is marked done on a failed communicator: all five are looked at alone.
    assert_eq!(w.ring.home.done_upto(), 0);
    assert_eq!(out.len(), 5);
    assert_eq!(w.ring.read().live, 0);
    for place in 3..=5 {
        assert!(w.ring.poll(place, place, 100, None).is_err());
    }
}

#[test]
fn a_callers_look_records_nothing_and_its_wait_limit_hands_the_work_out() {
    let w = world();
    for seq in 1..=3 {
        w.write(seq, 0, 60_000);
    }
    assert_eq!(w.ring.poll(2, 0, MS, None), Ok(false));
    w.progress.store(1, Ordering::SeqCst);
    assert_eq!(w.ring.poll(1, 0, MS, None), Ok(true));
    // Recording is the watchdog's (issue order across groups), and so is marking done.
    assert!(w.states().is_empty());
    assert_eq!(w.ring.home.done_upto(), 0);
    // A wait of 1 ms, 5 ms after the issue: work 2 times out, and its wait aborts.
    let err = w.ring.poll(2, 0, 5 * MS, Some(1)).unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
    assert_eq!(*w.state.lock().unwrap(), CommState::Aborted);
    // The watchdog's next pass records all three, the one handed out with its own facts.
    let out = w.pass(6 * MS);
    assert_eq!(w.states().len(), 3);
    assert!(out.iter().any(|(t, id)| t.info().seq == 2 && id.is_some()));
}

#[test]
fn a_slot_is_two_cache_lines() {
    // An end event as large as NCCL's (32 bytes, no spare bit pattern for `Option`).
    assert_eq!(
        std::mem::size_of::<UnsafeCell<Option<Slot<[u64; 4]>>>>(),
        128
    );
}

#[test]
fn a_look_asks_a_few_end_events_however_many_works_are_in_flight() {
    let w = world();
    for seq in 1..=1000 {
        w.write(seq, seq, 60_000);
    }
    w.progress.store(637, Ordering::SeqCst);
    w.queries.store(0, Ordering::SeqCst);
    w.pass(2000);
    assert_eq!(w.ring.home.done_upto(), 637);
    // The newest two, then galloping back and bisecting: about 2 log2(1000) + 1.
    let asked = w.queries.load(Ordering::SeqCst);
    assert!(asked <= 21, "{asked} queries");
}

#[test]
fn what_a_push_touches_lies_on_one_cache_line() {
    use std::mem::offset_of;
    type R = WorkRing<[u64; 4], Abort>;
    for at in [
        offset_of!(R, published),
        offset_of!(R, queued),
        offset_of!(R, room),
        offset_of!(R, home),
        offset_of!(R, slots),
        offset_of!(R, enrolled),
    ] {
        assert!(at < 64, "{at}");
    }
    // The readers' side (which they write) starts a line of its own.
    assert_eq!(offset_of!(R, readers), 64);
    assert_eq!(std::mem::align_of::<R>(), 64);
}
