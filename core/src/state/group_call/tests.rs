//! Tests of every transition and every refused transition of the group state machine.
use super::*;
use crate::buf::{RawBuf, RawBufMut};
use crate::reduce::HostScalar;

type G = GroupState<4>;

fn ar(dtype: DataType, op: ReduceOp) -> OpSummary {
    OpSummary::of(&CommOp::AllReduce {
        send: RawBuf::new(1, 8),
        recv: RawBufMut::new(2, 8),
        dtype,
        op,
    })
}

fn sum() -> OpSummary {
    ar(DataType::Float32, ReduceOp::Sum)
}

fn send(peer: u32) -> OpSummary {
    OpSummary::of(&CommOp::Send {
        buf: RawBuf::new(1, 3),
        dtype: DataType::Int8,
        peer,
    })
}

fn all_gather() -> OpSummary {
    OpSummary::of(&CommOp::AllGather {
        send: RawBuf::new(1, 2),
        recv: RawBufMut::new(2, 4),
        dtype: DataType::Float32,
    })
}

const KINDS: [GroupKind; 3] = [GroupKind::Group, GroupKind::Coalescing, GroupKind::Fused];

#[test]
fn summary_keeps_what_the_rules_need() {
    let s = send(3);
    assert_eq!(
        (s.kind, s.numel_in, s.numel_out, s.peer, s.root),
        (OpKind::Send, 3, 0, Some(3), None)
    );
    assert_eq!(sum().reduce_name(), Some("sum"));
    assert_eq!(s.reduce_name(), None);
}

#[test]
fn start_end_each_kind_empty_block_is_nothing_to_do() {
    for k in KINDS {
        let mut g = G::new();
        assert_eq!(g.start(k), Ok(1));
        assert!(g.is_open());
        assert_eq!(g.kind(), Some(k));
        assert_eq!(g.end(k), Ok(Ended::Empty { kind: k }));
        assert!(!g.is_open());
        assert_eq!(g.kind(), None);
        assert_eq!(g.comm(), None);
    }
}

#[test]
fn end_without_start_is_refused_with_pytorch_words() {
    for k in KINDS {
        let mut g = G::new();
        assert_eq!(g.end(k), Err(GroupError::EndWithoutStart { kind: k }));
        assert_eq!(g.depth(), 0);
    }
    let e = GroupError::EndWithoutStart {
        kind: GroupKind::Coalescing,
    };
    let mut s = heapless::String::<128>::new();
    core::fmt::write(&mut s, format_args!("{e}")).unwrap();
    assert!(
        s.starts_with("end_coalescing called before start_coalescing"),
        "{s}"
    );
    // Also after a block closed: the second end has nothing to close.
    let mut g = G::new();
    g.start(GroupKind::Coalescing).unwrap();
    g.end(GroupKind::Coalescing).unwrap();
    assert_eq!(
        g.end(GroupKind::Coalescing),
        Err(GroupError::EndWithoutStart {
            kind: GroupKind::Coalescing
        })
    );
}

#[test]
fn groups_nest_in_every_kind_and_end_in_order() {
    for k in KINDS {
        let mut g = G::new();
        g.start(k).unwrap();
        assert_eq!(g.start(GroupKind::Group), Ok(2));
        assert_eq!(g.start(GroupKind::Group), Ok(3));
        assert_eq!(g.end(GroupKind::Group), Ok(Ended::Nested { depth: 2 }));
        assert_eq!(g.end(GroupKind::Group), Ok(Ended::Nested { depth: 1 }));
        assert_eq!(g.kind(), Some(k));
        assert_eq!(g.end(k), Ok(Ended::Empty { kind: k }));
    }
}

#[test]
fn coalescing_cannot_nest() {
    for outer in KINDS {
        for inner in [GroupKind::Coalescing, GroupKind::Fused] {
            let mut g = G::new();
            g.start(outer).unwrap();
            assert_eq!(g.start(inner), Err(GroupError::Nested { outer, inner }));
            assert_eq!((g.depth(), g.kind()), (1, Some(outer)));
        }
    }
}

#[test]
fn end_of_the_wrong_kind_is_refused() {
    let mut g = G::new();
    g.start(GroupKind::Coalescing).unwrap();
    assert_eq!(
        g.end(GroupKind::Group),
        Err(GroupError::KindMismatch {
            open: GroupKind::Coalescing,
            ended: GroupKind::Group
        })
    );
    g.start(GroupKind::Group).unwrap();
    assert_eq!(
        g.end(GroupKind::Coalescing),
        Err(GroupError::KindMismatch {
            open: GroupKind::Group,
            ended: GroupKind::Coalescing
        })
    );
    assert_eq!(g.depth(), 2);
}

#[test]
fn depth_is_bounded() {
    let mut g = G::new();
    for d in 1..=MAX_GROUP_DEPTH {
        assert_eq!(g.start(GroupKind::Group), Ok(d));
    }
    assert_eq!(
        g.start(GroupKind::Group),
        Err(GroupError::TooDeep {
            max: MAX_GROUP_DEPTH
        })
    );
    assert_eq!(g.fail().group_ends, MAX_GROUP_DEPTH);
}

#[test]
fn op_outside_a_block_is_refused() {
    let mut g = G::new();
    assert_eq!(
        g.enqueue(1, sum()),
        Err(GroupError::NotOpen {
            kind: OpKind::AllReduce
        })
    );
    assert!(g.queued().is_empty());
}

#[test]
fn group_spans_comms() {
    let mut g = G::new();
    g.start(GroupKind::Group).unwrap();
    g.enqueue(7, sum()).unwrap();
    g.enqueue(8, send(1)).unwrap();
    assert_eq!(g.comm(), Some(7));
    assert_eq!(
        g.end(GroupKind::Group),
        Ok(Ended::Flushed {
            kind: GroupKind::Group,
            comm: 7,
            spans_comms: true,
            ops: 2
        })
    );
    assert_eq!(g.queued().len(), 2);
    assert_eq!(
        g.queued()[1],
        Queued {
            comm: 8,
            op: send(1)
        }
    );
}

#[test]
fn coalescing_pins_the_first_comm_and_mixes_kinds() {
    let mut g = G::new();
    g.start(GroupKind::Coalescing).unwrap();
    g.enqueue(7, sum()).unwrap();
    g.enqueue(7, send(1)).unwrap();
    g.enqueue(7, ar(DataType::Int8, ReduceOp::Max)).unwrap();
    assert_eq!(
        g.enqueue(9, sum()),
        Err(GroupError::CommMismatch { pinned: 7, got: 9 })
    );
    assert_eq!(g.queued().len(), 3);
    assert_eq!(
        g.end(GroupKind::Coalescing),
        Ok(Ended::Flushed {
            kind: GroupKind::Coalescing,
            comm: 7,
            spans_comms: false,
            ops: 3
        })
    );
}

#[test]
fn a_new_block_forgets_the_last() {
    let mut g = G::new();
    g.start(GroupKind::Coalescing).unwrap();
    g.enqueue(7, sum()).unwrap();
    g.end(GroupKind::Coalescing).unwrap();
    assert_eq!(g.queued().len(), 1);
    g.start(GroupKind::Coalescing).unwrap();
    assert!(g.queued().is_empty());
    g.enqueue(9, sum()).unwrap();
    assert_eq!(g.comm(), Some(9));
}

#[test]
fn queue_overflow_is_a_typed_error() {
    let mut g = G::new();
    g.start(GroupKind::Group).unwrap();
    for _ in 0..4 {
        g.enqueue(1, sum()).unwrap();
    }
    assert_eq!(
        g.enqueue(1, sum()),
        Err(GroupError::QueueFull { capacity: 4 })
    );
    assert_eq!(g.queued().len(), 4);
}

#[test]
fn fused_takes_one_kind_one_dtype_one_reduction() {
    let mut g = G::new();
    g.start(GroupKind::Fused).unwrap();
    assert_eq!(
        g.enqueue(1, send(0)),
        Err(GroupError::NotFusable { kind: OpKind::Send })
    );
    g.enqueue(1, sum()).unwrap();
    g.enqueue(1, sum()).unwrap();
    assert_eq!(
        g.enqueue(1, all_gather()),
        Err(GroupError::MixedKinds {
            first: OpKind::AllReduce,
            got: OpKind::AllGather
        })
    );
    assert_eq!(
        g.enqueue(1, ar(DataType::Float32, ReduceOp::Max)),
        Err(GroupError::MixedReduceOps {
            first: "sum",
            got: "max"
        })
    );
    assert_eq!(
        g.enqueue(1, ar(DataType::Float16, ReduceOp::Sum)),
        Err(GroupError::MixedDtypes {
            first: DataType::Float32,
            got: DataType::Float16
        })
    );
    assert_eq!(
        g.enqueue(2, sum()),
        Err(GroupError::CommMismatch { pinned: 1, got: 2 })
    );
    assert_eq!(g.queued().len(), 2);
    assert!(matches!(
        g.end(GroupKind::Fused),
        Ok(Ended::Flushed { ops: 2, .. })
    ));
}

#[test]
fn fused_premul_sum_needs_the_same_factor() {
    let pm = |v: f32| {
        ar(
            DataType::Float32,
            ReduceOp::PreMulSum(Scalar::Host(HostScalar::F32(v))),
        )
    };
    let mut g = G::new();
    g.start(GroupKind::Fused).unwrap();
    g.enqueue(1, pm(f32::NAN)).unwrap();
    g.enqueue(1, pm(f32::NAN)).unwrap();
    assert_eq!(
        g.enqueue(1, pm(2.0)),
        Err(GroupError::MixedReduceOps {
            first: "premul_sum",
            got: "premul_sum"
        })
    );
    let dev = |addr| {
        ar(
            DataType::Float32,
            ReduceOp::PreMulSum(Scalar::Device { addr }),
        )
    };
    let mut g = G::new();
    g.start(GroupKind::Fused).unwrap();
    g.enqueue(1, dev(16)).unwrap();
    g.enqueue(1, dev(16)).unwrap();
    assert!(g.enqueue(1, dev(32)).is_err());
    assert!(g.enqueue(1, pm(1.0)).is_err());
}

#[test]
fn fail_recovers_to_closed_with_the_group_ends_owed() {
    for k in KINDS {
        let mut g = G::new();
        g.start(k).unwrap();
        g.start(GroupKind::Group).unwrap();
        g.enqueue(3, sum()).unwrap();
        assert_eq!(
            g.fail(),
            Recovery {
                group_ends: 2,
                kind: Some(k),
                dropped: 1
            }
        );
        assert_eq!((g.depth(), g.kind(), g.comm()), (0, None, None));
        assert!(g.queued().is_empty());
        // Usable again at once.
        assert_eq!(g.start(GroupKind::Coalescing), Ok(1));
        assert_eq!(g.fail().group_ends, 1);
    }
}

#[test]
fn fail_when_closed_owes_nothing() {
    let mut g = G::new();
    assert_eq!(
        g.fail(),
        Recovery {
            group_ends: 0,
            kind: None,
            dropped: 0
        }
    );
    // After a closed block, the kept queue is not "dropped" work.
    g.start(GroupKind::Group).unwrap();
    g.enqueue(1, sum()).unwrap();
    g.end(GroupKind::Group).unwrap();
    assert_eq!(
        g.fail(),
        Recovery {
            group_ends: 0,
            kind: None,
            dropped: 0
        }
    );
}

#[test]
fn errors_map_to_the_crate_error() {
    let e: Error = GroupError::EndWithoutStart {
        kind: GroupKind::Coalescing,
    }
    .into();
    assert!(matches!(
        e,
        Error::InvalidState {
            attempted: "end_coalescing",
            state: CommState::Ready,
            ..
        }
    ));
    let e: Error = GroupError::CommMismatch { pinned: 1, got: 2 }.into();
    assert!(matches!(e, Error::InvalidArgument { arg: "comm", .. }));
    let e: Error = GroupError::MixedDtypes {
        first: DataType::Int8,
        got: DataType::Uint8,
    }
    .into();
    assert!(matches!(e, Error::InvalidArgument { arg: "dtype", .. }));
    let e: Error = GroupError::QueueFull { capacity: 1 }.into();
    assert!(matches!(e, Error::InvalidArgument { arg: "op", .. }));
    let e: Error = GroupError::Nested {
        outer: GroupKind::Group,
        inner: GroupKind::Fused,
    }
    .into();
    assert!(matches!(
        e,
        Error::InvalidState {
            attempted: "start_coalescing",
            ..
        }
    ));
    assert!(!e.is_fatal());
}
