//! Tests of each rule of each check, with the exact error variant.

use super::*;
use crate::version::Version;
use crate::{Missing, RawBuf, RawBufMut};

fn fs() -> FeatureSet {
    FeatureSet::for_version(Version::new(2, 28, 3))
}

fn ctx(rank: u32, size: u32, f: &FeatureSet) -> CheckCtx<'_> {
    CheckCtx {
        rank,
        size,
        features: f,
    }
}

const A: usize = 0x10000;
const B: usize = 0x90000;

fn arg_of(r: Result<()>) -> &'static str {
    match r {
        Err(Error::InvalidArgument { arg, .. }) => arg,
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

#[test]
fn all_reduce_rules() {
    let f = fs();
    let c = ctx(0, 2, &f);
    let dt = DataType::Float32;
    assert!(all_reduce(
        &c,
        RawBuf::new(A, 4),
        RawBufMut::new(B, 4),
        dt,
        &ReduceOp::Sum
    )
    .is_ok());
    assert!(all_reduce(
        &c,
        RawBuf::new(A, 4),
        RawBufMut::new(A, 4),
        dt,
        &ReduceOp::Sum
    )
    .is_ok());
    assert_eq!(
        arg_of(all_reduce(
            &c,
            RawBuf::new(A, 4),
            RawBufMut::new(B, 5),
            dt,
            &ReduceOp::Sum
        )),
        "recv"
    );
    assert_eq!(
        arg_of(all_reduce(
            &c,
            RawBuf::new(A, 4),
            RawBufMut::new(A + 4, 4),
            dt,
            &ReduceOp::Sum
        )),
        "recv"
    );
    assert_eq!(
        arg_of(all_reduce(
            &c,
            RawBuf::new(0, 4),
            RawBufMut::new(B, 4),
            dt,
            &ReduceOp::Sum
        )),
        "send"
    );
    assert!(all_reduce(
        &c,
        RawBuf::new(0, 0),
        RawBufMut::new(0, 0),
        dt,
        &ReduceOp::Sum
    )
    .is_ok());
    assert_eq!(
        arg_of(all_reduce(
            &c,
            RawBuf::new(A + 1, 4),
            RawBufMut::new(B, 4),
            dt,
            &ReduceOp::Sum
        )),
        "send"
    );
}

#[test]
fn reduce_op_rules() {
    let f = fs();
    let c = ctx(0, 2, &f);
    let pm = ReduceOp::PreMulSum(Scalar::Host(crate::HostScalar::F64(0.5)));
    assert_eq!(arg_of(reduce_op(&c, DataType::Float32, &pm)), "scalar");
    assert!(reduce_op(&c, DataType::Float64, &pm).is_ok());
    assert_eq!(arg_of(reduce_op(&c, DataType::Int32, &pm)), "op");
    let dev = ReduceOp::PreMulSum(Scalar::Device { addr: 0 });
    assert_eq!(arg_of(reduce_op(&c, DataType::Float32, &dev)), "scalar");
    let old = FeatureSet::for_version(Version::new(2, 9, 6));
    let c_old = ctx(0, 2, &old);
    assert!(matches!(
        reduce_op(&c_old, DataType::Float32, &ReduceOp::Avg),
        Err(Error::Unsupported {
            feature: Feature::Avg,
            missing: Missing::TooOld { .. }
        })
    ));
    assert!(matches!(
        dtype(
            &ctx(0, 2, &FeatureSet::for_version(Version::new(2, 19, 3))),
            DataType::Float8E4M3
        ),
        Err(Error::Unsupported {
            feature: Feature::Float8,
            ..
        })
    ));
}

#[test]
fn rooted_ops_reject_roots_out_of_range() {
    let f = fs();
    let c = ctx(1, 4, &f);
    let dt = DataType::Int8;
    for root in [4u32, 5, u32::MAX] {
        assert_eq!(
            arg_of(broadcast(
                &c,
                RawBuf::new(A, 1),
                RawBufMut::new(B, 1),
                dt,
                root
            )),
            "root"
        );
        assert_eq!(
            arg_of(reduce(
                &c,
                RawBuf::new(A, 1),
                RawBufMut::new(B, 1),
                dt,
                &ReduceOp::Max,
                root
            )),
            "root"
        );
        assert_eq!(
            arg_of(gather(&c, RawBuf::new(A, 1), RawBufMut::EMPTY, dt, root)),
            "root"
        );
        assert_eq!(
            arg_of(scatter(&c, RawBuf::EMPTY, RawBufMut::new(B, 1), dt, root)),
            "root"
        );
        assert_eq!(arg_of(send(&c, RawBuf::new(A, 1), dt, root)), "peer");
        assert_eq!(arg_of(recv(&c, RawBufMut::new(A, 1), dt, root)), "peer");
    }
}

#[test]
fn gather_scatter_root_and_non_root_buffers() {
    let f = fs();
    let dt = DataType::Float64;
    let root = ctx(0, 3, &f);
    let other = ctx(2, 3, &f);
    assert!(gather(&root, RawBuf::new(A, 2), RawBufMut::new(B, 6), dt, 0).is_ok());
    assert_eq!(
        arg_of(gather(
            &root,
            RawBuf::new(A, 2),
            RawBufMut::new(B, 5),
            dt,
            0
        )),
        "recv"
    );
    assert!(gather(&other, RawBuf::new(A, 2), RawBufMut::EMPTY, dt, 0).is_ok());
    assert_eq!(
        arg_of(gather(
            &other,
            RawBuf::new(A, 2),
            RawBufMut::new(B, 6),
            dt,
            0
        )),
        "recv"
    );
    assert!(scatter(&root, RawBuf::new(A, 6), RawBufMut::new(B, 2), dt, 0).is_ok());
    assert_eq!(
        arg_of(scatter(
            &other,
            RawBuf::new(A, 6),
            RawBufMut::new(B, 2),
            dt,
            0
        )),
        "send"
    );
}

#[test]
fn gathers_and_scatters_multiply_by_world_size() {
    let f = fs();
    let c = ctx(1, 4, &f);
    let dt = DataType::Float16;
    assert!(all_gather(&c, RawBuf::new(A, 3), RawBufMut::new(B, 12), dt).is_ok());
    assert_eq!(
        arg_of(all_gather(&c, RawBuf::new(A, 3), RawBufMut::new(B, 11), dt)),
        "recv"
    );
    // in place: send is part `rank` of recv
    assert!(all_gather(&c, RawBuf::new(B + 6, 3), RawBufMut::new(B, 12), dt).is_ok());
    assert_eq!(
        arg_of(all_gather(&c, RawBuf::new(B, 3), RawBufMut::new(B, 12), dt)),
        "recv"
    );
    assert!(reduce_scatter(
        &c,
        RawBuf::new(A, 12),
        RawBufMut::new(B, 3),
        dt,
        &ReduceOp::Sum
    )
    .is_ok());
    assert!(reduce_scatter(
        &c,
        RawBuf::new(A, 12),
        RawBufMut::new(A + 6, 3),
        dt,
        &ReduceOp::Sum
    )
    .is_ok());
    assert_eq!(
        arg_of(reduce_scatter(
            &c,
            RawBuf::new(A, 11),
            RawBufMut::new(B, 3),
            dt,
            &ReduceOp::Sum
        )),
        "send"
    );
    assert_eq!(
        arg_of(all_gather(
            &c,
            RawBuf::new(A, usize::MAX),
            RawBufMut::new(B, 1),
            DataType::Int8
        )),
        "send"
    );
}

#[test]
fn all_to_all_rules() {
    let f = fs();
    let c = ctx(0, 3, &f);
    let dt = DataType::Int32;
    assert!(all_to_all(&c, RawBuf::new(A, 6), RawBufMut::new(B, 6), dt).is_ok());
    assert_eq!(
        arg_of(all_to_all(&c, RawBuf::new(A, 7), RawBufMut::new(B, 7), dt)),
        "send"
    );
    assert_eq!(
        arg_of(all_to_all(&c, RawBuf::new(A, 6), RawBufMut::new(B, 3), dt)),
        "recv"
    );
    assert_eq!(
        arg_of(all_to_all(&c, RawBuf::new(A, 6), RawBufMut::new(A, 6), dt)),
        "recv"
    );
    assert!(all_to_all_v(
        &c,
        RawBuf::new(A, 6),
        RawBufMut::new(B, 4),
        dt,
        &[1, 2, 3],
        &[0, 4, 0]
    )
    .is_ok());
    assert_eq!(
        arg_of(all_to_all_v(
            &c,
            RawBuf::new(A, 6),
            RawBufMut::new(B, 4),
            dt,
            &[1, 2],
            &[0, 4, 0]
        )),
        "send_counts"
    );
    assert_eq!(
        arg_of(all_to_all_v(
            &c,
            RawBuf::new(A, 6),
            RawBufMut::new(B, 4),
            dt,
            &[1, 2, 2],
            &[0, 4, 0]
        )),
        "send_counts"
    );
    assert_eq!(
        arg_of(all_to_all_v(
            &c,
            RawBuf::new(A, 6),
            RawBufMut::new(B, 4),
            dt,
            &[1, 2, 3],
            &[1, 4, 0]
        )),
        "recv_counts"
    );
    assert_eq!(
        arg_of(all_to_all_v(
            &c,
            RawBuf::new(A, 6),
            RawBufMut::new(B, 4),
            dt,
            &[usize::MAX, 2, 3],
            &[0, 4, 0]
        )),
        "send_counts"
    );
}

#[test]
fn v_variants() {
    let f = fs();
    let c = ctx(1, 3, &f);
    let dt = DataType::Uint64;
    assert!(all_gather_v(&c, RawBuf::new(A, 2), RawBufMut::new(B, 6), dt, &[1, 2, 3]).is_ok());
    assert_eq!(
        arg_of(all_gather_v(
            &c,
            RawBuf::new(A, 1),
            RawBufMut::new(B, 6),
            dt,
            &[1, 2, 3]
        )),
        "send"
    );
    assert_eq!(
        arg_of(all_gather_v(
            &c,
            RawBuf::new(A, 2),
            RawBufMut::new(B, 5),
            dt,
            &[1, 2, 3]
        )),
        "recv"
    );
    assert_eq!(
        arg_of(all_gather_v(
            &c,
            RawBuf::new(A, 2),
            RawBufMut::new(B, 6),
            dt,
            &[]
        )),
        "counts"
    );
    assert!(reduce_scatter_v(
        &c,
        RawBuf::new(A, 6),
        RawBufMut::new(B, 2),
        dt,
        &ReduceOp::Min,
        &[1, 2, 3]
    )
    .is_ok());
    assert_eq!(
        arg_of(reduce_scatter_v(
            &c,
            RawBuf::new(A, 6),
            RawBufMut::new(B, 3),
            dt,
            &ReduceOp::Min,
            &[1, 2, 3]
        )),
        "recv"
    );
}

#[test]
fn broadcast_and_reduce_buffers() {
    let f = fs();
    let root = ctx(0, 2, &f);
    let other = ctx(1, 2, &f);
    let dt = DataType::Uint8;
    assert!(broadcast(&root, RawBuf::new(A, 5), RawBufMut::new(A, 5), dt, 0).is_ok());
    assert_eq!(
        arg_of(broadcast(
            &root,
            RawBuf::new(A, 4),
            RawBufMut::new(B, 5),
            dt,
            0
        )),
        "send"
    );
    assert!(broadcast(&other, RawBuf::EMPTY, RawBufMut::new(B, 5), dt, 0).is_ok());
    assert!(reduce(
        &other,
        RawBuf::new(A, 5),
        RawBufMut::EMPTY,
        dt,
        &ReduceOp::Sum,
        0
    )
    .is_ok());
    assert_eq!(
        arg_of(reduce(
            &root,
            RawBuf::new(A, 5),
            RawBufMut::EMPTY,
            dt,
            &ReduceOp::Sum,
            0
        )),
        "recv"
    );
}

#[test]
fn communicator_numbers() {
    let f = fs();
    assert_eq!(arg_of(op(&CommOp::Barrier, &ctx(0, 0, &f))), "size");
    assert_eq!(arg_of(op(&CommOp::Barrier, &ctx(3, 3, &f))), "rank");
    assert_eq!(arg_of(op(&CommOp::Barrier, &ctx(0, u32::MAX, &f))), "size");
    assert!(op(&CommOp::Barrier, &ctx(0, 1, &f)).is_ok());
}

#[test]
fn extreme_values_never_panic() {
    let f = fs();
    let extremes = [
        0usize,
        1,
        7,
        isize::MAX as usize,
        usize::MAX - 1,
        usize::MAX,
    ];
    for &rank in &[0u32, 1, u32::MAX] {
        for &size in &[0u32, 1, 2, u32::MAX] {
            let c = ctx(rank, size, &f);
            for &a in &extremes {
                for &l in &extremes {
                    for dt in DataType::ALL {
                        let s = RawBuf::new(a, l);
                        let r = RawBufMut::new(a, l);
                        let counts = [l, l];
                        let ops = [
                            CommOp::AllReduce {
                                send: s,
                                recv: r,
                                dtype: dt,
                                op: ReduceOp::Avg,
                            },
                            CommOp::Broadcast {
                                send: s,
                                recv: r,
                                dtype: dt,
                                root: rank,
                            },
                            CommOp::Reduce {
                                send: s,
                                recv: r,
                                dtype: dt,
                                op: ReduceOp::Prod,
                                root: 0,
                            },
                            CommOp::AllGather {
                                send: s,
                                recv: r,
                                dtype: dt,
                            },
                            CommOp::ReduceScatter {
                                send: s,
                                recv: r,
                                dtype: dt,
                                op: ReduceOp::Sum,
                            },
                            CommOp::AllToAll {
                                send: s,
                                recv: r,
                                dtype: dt,
                            },
                            CommOp::AllToAllV {
                                send: s,
                                recv: r,
                                dtype: dt,
                                send_counts: &counts,
                                recv_counts: &counts,
                            },
                            CommOp::Gather {
                                send: s,
                                recv: r,
                                dtype: dt,
                                root: 0,
                            },
                            CommOp::Scatter {
                                send: s,
                                recv: r,
                                dtype: dt,
                                root: 0,
                            },
                            CommOp::AllGatherV {
                                send: s,
                                recv: r,
                                dtype: dt,
                                counts: &counts,
                            },
                            CommOp::ReduceScatterV {
                                send: s,
                                recv: r,
                                dtype: dt,
                                op: ReduceOp::Max,
                                counts: &counts,
                            },
                            CommOp::Send {
                                buf: s,
                                dtype: dt,
                                peer: rank,
                            },
                            CommOp::Recv {
                                buf: r,
                                dtype: dt,
                                peer: size,
                            },
                        ];
                        for o in &ops {
                            let _ = super::op(o, &c);
                        }
                    }
                }
            }
        }
    }
}
