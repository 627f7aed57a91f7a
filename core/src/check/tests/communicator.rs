//! The communicator's own numbers, and no panic on any input.

use super::*;

#[test]
fn communicator_numbers() {
    let f = fs();
    refused(op(&CommOp::Barrier, &ctx(0, 0, &f)), "size");
    refused(op(&CommOp::Barrier, &ctx(3, 3, &f)), "rank");
    refused(op(&CommOp::Barrier, &ctx(0, u32::MAX, &f)), "size");
    assert!(op(&CommOp::Barrier, &ctx(0, 1, &f)).is_ok());
    // the bounds themselves
    let top = i32::MAX as u32;
    assert!(ctx(top - 1, top, &f).validate().is_ok());
    refused(ctx(0, top + 1, &f).validate(), "size");
    refused(ctx(top, top, &f).validate(), "rank");
    assert!(ctx(2, 3, &f).validate().is_ok());
}

#[test]
fn every_check_validates_the_communicator_when_called_directly() {
    // Called without `op`, a size of 0 divided by zero in all_to_all and a rank past the end
    // indexed the counts of the v-variants out of bounds: each check now refuses them itself.
    let f = fs();
    let dt = DataType::Int8;
    let sum = ReduceOp::Sum;
    let counts: &[usize] = &[1, 1, 1];
    for (c, arg) in [
        (ctx(0, 0, &f), "size"),
        (ctx(3, 3, &f), "rank"),
        (ctx(u32::MAX, 3, &f), "rank"),
        (ctx(0, i32::MAX as u32 + 1, &f), "size"),
    ] {
        let c = &c;
        refused(all_reduce(c, s(A, 3), r(B, 3), dt, &sum), arg);
        refused(broadcast(c, s(A, 3), r(B, 3), dt, 0), arg);
        refused(reduce(c, s(A, 3), r(B, 3), dt, &sum, 0), arg);
        refused(all_gather(c, s(A, 1 << 40), r(B, 3 << 40), dt), arg);
        refused(
            reduce_scatter(c, s(A, 3 << 40), r(B, 1 << 40), dt, &sum),
            arg,
        );
        refused(all_to_all(c, s(A, 3), r(B, 3), dt), arg);
        refused(all_to_all_v(c, s(A, 3), r(B, 3), dt, counts, counts), arg);
        refused(gather(c, s(A, 1), r(B, 3), dt, 0), arg);
        refused(scatter(c, s(A, 3), r(B, 1), dt, 0), arg);
        refused(all_gather_v(c, s(A, 1), r(B, 3), dt, counts), arg);
        refused(reduce_scatter_v(c, s(A, 3), r(B, 1), dt, &sum, counts), arg);
        refused(send(c, s(A, 3), dt, 0), arg);
        refused(recv(c, r(B, 3), dt, 0), arg);
    }
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

#[test]
fn a_shrink_leaves_out_other_ranks_each_once() {
    let f = fs();
    let c = ctx(1, 4, &f);
    refused(shrink(&c, &[]), "exclude");
    assert!(shrink(&c, &[0, 3]).is_ok());
    assert!(shrink(&c, &[3, 2, 0]).is_ok());
    refused(shrink(&c, &[4]), "exclude");
    refused(shrink(&c, &[0, 0]), "exclude");
    // The caller itself: the ranks that stay are the ones that call.
    refused(shrink(&c, &[1]), "exclude");
    refused(shrink(&c, &[0, 2, 3, 1]), "exclude");
}
