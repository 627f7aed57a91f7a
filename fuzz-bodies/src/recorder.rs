//! Random record / update / retire / dump sequences on a small flight-recorder ring: never
//! panics, holds at most its capacity, dumps the newest entries oldest first with consecutive ids.

use arbitrary::{Arbitrary, Unstructured};
use oxccl_rules::recorder::{FlightRecorder, TraceRecord, TraceState};

#[derive(Debug, Arbitrary)]
enum Step {
    Record { pg: u8, timing: bool },
    Update { back: u8, state: u8, now: u64 },
    Duration { back: u8, ns: u64 },
    Retire { back: u8 },
    Dump { only_active: bool },
}

/// One fuzz input: any bytes.
pub fn fuzz(data: &[u8]) {
    let Ok(input) = <(u8, Vec<Step>)>::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let capacity = usize::from(input.0 % 8);
    let mut r = FlightRecorder::new(capacity);
    let mut recorded: u64 = 0;
    for step in input.1 {
        // Ids are addressed back from the newest so most of them exist, some are overwritten
        // and some never were.
        let id_back = |back: u8| recorded.wrapping_sub(u64::from(back));
        match step {
            Step::Record { pg, timing } => {
                let rec = TraceRecord {
                    pg_id: u64::from(pg),
                    collective_seq: recorded + 1,
                    p2p_seq: 0,
                    op_id: recorded + 1,
                    profiling_name: String::from("nccl:all_reduce"),
                    inputs: Vec::new(),
                    outputs: Vec::new(),
                    time_created_ns: recorded,
                    timeout_ms: 1,
                    is_p2p: false,
                    timing,
                };
                let id = r.record(rec);
                if capacity == 0 {
                    assert_eq!(id, None);
                } else {
                    assert_eq!(id, Some(recorded));
                    recorded += 1;
                }
            }
            Step::Update { back, state, now } => {
                let state = [
                    TraceState::Scheduled,
                    TraceState::Started,
                    TraceState::Completed,
                ]
                .get(usize::from(state % 3))
                .copied()
                .unwrap_or(TraceState::Scheduled);
                let id = id_back(back);
                let before = r.get(id).map(|e| e.state);
                let held = r.update_state(id, state, now);
                assert!(!held || before.is_some());
                if let (Some(b), Some(e)) = (before, r.get(id)) {
                    assert!(e.state >= b, "state went back");
                }
            }
            Step::Duration { back, ns } => {
                let id = id_back(back);
                let timing = r.get(id).map(|e| e.record.timing);
                assert_eq!(r.set_duration(id, ns), timing == Some(true));
            }
            Step::Retire { back } => {
                let id = id_back(back);
                let held = r.get(id).is_some();
                assert_eq!(r.retire(id), held);
                assert!(!held || r.get(id).is_some_and(|e| e.retired));
            }
            Step::Dump { only_active } => {
                let d = r.dump(only_active);
                assert!(d
                    .iter()
                    .all(|e| !only_active || e.state != TraceState::Completed));
                assert!(d.windows(2).all(|w| w[0].id < w[1].id));
            }
        }
        assert!(r.len() <= capacity);
        let all = r.dump(false);
        assert_eq!(all.len() as u64, recorded.min(capacity as u64));
        assert!(
            all.windows(2).all(|w| w[1].id == w[0].id + 1),
            "not consecutive, oldest first"
        );
        if let Some(last) = all.last() {
            assert_eq!(last.id + 1, recorded);
        }
    }
}
