use super::super::parse::parse_dump;
use super::*;
use crate::recorder::{dump_json, DumpMeta};
use oxccl_core::op::OpKind;
use oxccl_core::DataType;
use oxccl_rules::recorder::{
    profiling_name, FlightRecorder, PgConfig, TensorMeta, TraceRecord, TraceState,
};

use DataType::{Float16 as F16, Float32 as F32};
use TraceState::{Completed as Done, Scheduled as Sched, Started};

/// One op as a rank issued it: kind, (peer for p2p), sizes, dtype, last state.
struct Op(OpKind, Option<u32>, &'static [u64], DataType, TraceState);

fn coll(kind: OpKind, sizes: &'static [u64], dtype: DataType, state: TraceState) -> Op {
    Op(kind, None, sizes, dtype, state)
}

fn ar(state: TraceState) -> Op {
    coll(OpKind::AllReduce, &[3, 4], F32, state)
}

/// The ring of `rank` after issuing `ops` on the default group, as the process group fills
/// it: collective and p2p seqs from 1, op id for every op, completed ops retired.
fn ring(rank: u32, world: u32, ops: &[Op]) -> FlightRecorder {
    let mut r = FlightRecorder::new(2000);
    r.add_pg(PgConfig {
        id: 0,
        name: "0".into(),
        desc: "default_pg".into(),
        ranks: (0..world).collect(),
    });
    let (mut cseq, mut pseq) = (0, 0);
    for (i, Op(kind, peer, sizes, dtype, state)) in ops.iter().enumerate() {
        let p2p = kind.is_p2p();
        if p2p {
            pseq += 1;
        } else {
            cseq += 1;
        }
        let t = TensorMeta::new(sizes, *dtype);
        let id = r
            .record(TraceRecord {
                pg_id: 0,
                collective_seq: if p2p { 0 } else { cseq },
                p2p_seq: if p2p { pseq } else { 0 },
                op_id: i as u64 + 1,
                profiling_name: profiling_name(*kind, rank, *peer),
                inputs: vec![t.clone()],
                outputs: vec![t],
                time_created_ns: i as u64 * 1000,
                timeout_ms: 1000,
                is_p2p: p2p,
                timing: true,
            })
            .unwrap();
        if *state >= Started {
            r.update_state(id, Started, i as u64 * 1000 + 1);
        }
        if *state == Done {
            r.update_state(id, Done, i as u64 * 1000 + 2);
            r.retire(id);
        }
    }
    r
}

/// What `oxccl trace` reads back from that rank's JSON dump.
fn dump(rank: u32, world: u32, ops: &[Op]) -> RankDump {
    let json = dump_json(&DumpMeta::new(rank, world), &ring(rank, world, ops), false);
    parse_dump(&json, None).unwrap()
}

// Seeds 29 and 30: rank 0 stuck on its second all_reduce (started with timing, scheduled
// without); its healthy peer completed the first and never issued the second.
#[test]
fn rank_stuck_on_its_second_op_names_the_peer_that_never_issued_it() {
    for second in [Started, Sched] {
        let a = analyze(&[dump(0, 2, &[ar(Done), ar(second)]), dump(1, 2, &[ar(Done)])]);
        assert_eq!(a.world_size, Some(2));
        assert_eq!((a.dumped.clone(), a.missing.clone()), (vec![0, 1], vec![]));
        let g = &a.groups[0];
        assert_eq!((g.pg.as_str(), g.desc.as_str()), ("0", "default_pg"));
        assert_eq!(g.hang_seq, Some(2));
        let stopped = g.statuses[0].stopped_at.as_ref().unwrap();
        assert_eq!(
            (stopped.seq, stopped.op.as_str(), stopped.state.as_str()),
            (2, "nccl:all_reduce", second.name())
        );
        assert_eq!(stopped.input_sizes, vec![vec![3, 4]]);
        assert_eq!(g.statuses[1].stopped_at, None);
        assert_eq!(g.statuses[1].last_completed, Some(1));
        assert!(g.mismatches.is_empty());
        assert_eq!(
            a.culprits,
            vec![Culprit {
                rank: 1,
                pg: "0".into(),
                reason: Reason::NeverIssued {
                    seq: 2,
                    op: "nccl:all_reduce".into(),
                    last_enqueued: Some(1)
                }
            }]
        );
        assert!(a.hang_found());
    }
}

// Seed 30 as it really ends: the healthy peer exits without a dump.
#[test]
fn a_rank_that_never_dumped_is_named() {
    let a = analyze(&[dump(0, 2, &[ar(Done), ar(Started)])]);
    assert_eq!(a.missing, vec![1]);
    assert_eq!(
        a.culprits,
        vec![Culprit {
            rank: 1,
            pg: "0".into(),
            reason: Reason::NoDump
        }]
    );
}

#[test]
fn sizes_and_dtypes_that_differ_at_one_seq_are_mismatches() {
    let ok = || dump(0, 4, &[ar(Done), ar(Started)]);
    let ranks = [
        ok(),
        dump(1, 4, &[ar(Done), ar(Started)]),
        dump(
            2,
            4,
            &[ar(Done), coll(OpKind::AllReduce, &[3, 4], F16, Started)],
        ),
        dump(
            3,
            4,
            &[ar(Done), coll(OpKind::AllReduce, &[3, 5], F32, Started)],
        ),
    ];
    let a = analyze(&ranks);
    let g = &a.groups[0];
    let found: Vec<(u64, u32, MismatchKind, bool)> = g
        .mismatches
        .iter()
        .map(|m| (m.seq, m.rank, m.kind, m.ambiguous))
        .collect();
    assert_eq!(
        found,
        vec![
            (2, 2, MismatchKind::Dtype, false),
            (2, 3, MismatchKind::Size, false)
        ]
    );
    assert_eq!(g.mismatches[0].found.input_dtypes, vec!["Half"]);
    assert_eq!(g.mismatches[0].expected.input_dtypes, vec!["Float"]);
    assert_eq!(g.mismatches[1].found.input_sizes, vec![vec![3, 5]]);
    let culprits: Vec<(u32, &Reason)> = a.culprits.iter().map(|c| (c.rank, &c.reason)).collect();
    assert_eq!(
        culprits,
        vec![
            (
                2,
                &Reason::Mismatch {
                    seq: 2,
                    kind: MismatchKind::Dtype
                }
            ),
            (
                3,
                &Reason::Mismatch {
                    seq: 2,
                    kind: MismatchKind::Size
                }
            ),
        ]
    );
}

#[test]
fn another_op_at_the_same_seq_and_ties() {
    let bc = coll(OpKind::Broadcast, &[3, 4], F32, Started);
    let a = analyze(&[
        dump(0, 3, &[ar(Done), ar(Started)]),
        dump(1, 3, &[ar(Done), bc]),
        dump(2, 3, &[ar(Done), ar(Started)]),
    ]);
    assert_eq!(a.groups[0].mismatches.len(), 1);
    let m = &a.groups[0].mismatches[0];
    assert_eq!((m.rank, m.kind, m.ambiguous), (1, MismatchKind::Op, false));
    assert_eq!(m.found.op, "nccl:broadcast");
    // Two ranks that disagree: no majority, the lowest rank's side is expected.
    let bc = coll(OpKind::Broadcast, &[3, 4], F32, Started);
    let a = analyze(&[
        dump(0, 2, &[ar(Done), ar(Started)]),
        dump(1, 2, &[ar(Done), bc]),
    ]);
    let m = &a.groups[0].mismatches[0];
    assert_eq!((m.rank, m.ambiguous), (1, true));
}

#[test]
fn uneven_ops_may_differ_in_size() {
    let mk = |sizes: &'static [u64]| coll(OpKind::AllToAllV, sizes, F32, Done);
    let a = analyze(&[dump(0, 2, &[mk(&[4])]), dump(1, 2, &[mk(&[6])])]);
    assert!(a.groups[0].mismatches.is_empty());
    assert!(!a.hang_found());
    assert!(a.culprits.is_empty());
}

#[test]
fn all_stopped_at_the_same_op_is_a_hang_without_culprit() {
    let a = analyze(&[
        dump(0, 2, &[ar(Done), ar(Started)]),
        dump(1, 2, &[ar(Done), ar(Started)]),
    ]);
    assert!(a.hang_found());
    assert!(a.culprits.is_empty());
    assert_eq!(a.groups[0].hang_seq, Some(2));
}

#[test]
fn p2p_stops_name_the_peer_that_never_posted() {
    let send = || Op(OpKind::Send, Some(0), &[4], F32, Started);
    let a = analyze(&[dump(0, 2, &[ar(Done)]), dump(1, 2, &[ar(Done), send()])]);
    let st = &a.groups[0].statuses[1];
    let at = st.stopped_at.as_ref().unwrap();
    assert_eq!(
        (at.is_p2p, at.seq, at.op.as_str()),
        (true, 1, "nccl:send 1->0")
    );
    // No collective stopped: no collective hang point; rank 0 never posted the receive.
    assert_eq!(a.groups[0].hang_seq, None);
    assert!(a.hang_found());
    assert_eq!(
        a.culprits,
        vec![Culprit {
            rank: 0,
            pg: "0".into(),
            reason: Reason::PeerNeverPosted {
                waiting: 1,
                op: "nccl:send 1->0".into()
            }
        }]
    );
    // With the receive pending on rank 0 (both wait: a transport fault), nobody is blamed.
    let recv = Op(OpKind::Recv, Some(1), &[4], F32, Started);
    let a = analyze(&[
        dump(0, 2, &[ar(Done), recv]),
        dump(1, 2, &[ar(Done), send()]),
    ]);
    assert!(a.hang_found());
    assert!(a.culprits.is_empty());
    assert_eq!(p2p_parts("nccl:recv 0<-1"), Some(("recv", 0, 1)));
    assert_eq!(p2p_parts("nccl:all_reduce"), None);
    assert_eq!(p2p_parts("nccl:send x->1"), None);
}

#[test]
fn no_dumps_no_findings() {
    let a = analyze(&[]);
    assert_eq!(
        (a.world_size, a.dumped.len(), a.groups.len(), a.hang_found()),
        (None, 0, 0, false)
    );
}
